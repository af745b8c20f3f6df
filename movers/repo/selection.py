"""Which backups a restore of an application (or of some of its PVCs) uses.

Volumes are found by the namespace and PVC recorded in their manifests (``volume.namespace`` /
``volume.pvc``), or, for manifests without them, by a volume id of the form ``<namespace>/<pvc>`` (what
the backup flow writes). ``backup`` is one of:

* ``"latest"``: with PVCs named, the newest backup *run* (``tags[RUN_TAG]``) that has a backup of every
  one of them, so the volumes come from one consistent group snapshot; with none named, the run of the
  namespace's newest backup and every volume it has. When the newest backups carry no run tag
  (repositories written before tags, or by hand), each PVC's own latest backup is used instead and
  ``Selection.how`` says so;
* a run id (the value of ``RUN_TAG``): that run's backup of each requested PVC;
* a backup id (``YYYYMMDDTHHMMSSffffffZ-xxxxxx``): exactly one PVC must be requested, or the id must be
  unique among the namespace's volumes.

Anything missing raises ``NotFoundError`` naming what is missing. Manifests are read newest first and the
walk stops at the first complete run, so a recent run costs a few manifest reads per volume; only a volume
that is not in the chosen run (e.g. a PVC the app no longer has) is read to its oldest backup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from movers.errors import NotFoundError, UsageError
from movers.repo.manifest import RUN_TAG, Manifest
from movers.repo.repository import BackupRef, Repository

BACKUP_ID = re.compile(r"\d{8}T\d{12}Z-[0-9a-f]{6}")


@dataclass(frozen=True)
class Selected:
    pvc: str
    manifest: Manifest


@dataclass(frozen=True)
class Selection:
    volumes: list[Selected]  # sorted by PVC name
    how: str  # one line: which run / backup and why
    run: str | None  # the run id when every volume comes from one tagged run


def namespace_volumes(repo: Repository, namespace: str) -> dict[str, list[BackupRef]]:
    """PVC name -> its backups (oldest first) for the volumes recorded in ``namespace``.

    Volume ids ``<namespace>/<pvc>`` are taken at their word; other ids (e.g. with a cluster prefix) are
    matched by the namespace and PVC of their latest manifest.
    """
    refs: dict[str, list[BackupRef]] = {}
    for ref in repo.list_backups():
        refs.setdefault(ref.volume, []).append(ref)
    out: dict[str, list[BackupRef]] = {}
    for volume, backups in sorted(refs.items()):
        ns, _, pvc = volume.rpartition("/")
        if ns != namespace or not pvc:
            latest = repo.read_manifest(volume, backups[-1].backup_id).volume
            if latest.namespace != namespace or not latest.pvc:
                continue
            pvc = latest.pvc
        if pvc in out:
            raise UsageError(f"PVC {namespace}/{pvc} has backups under two volume ids: {out[pvc][0].volume}, {volume}")
        out[pvc] = backups
    return out


def select(repo: Repository, namespace: str, pvcs: Sequence[str] | None, backup: str = "latest") -> Selection:
    """The backups to restore (see the module doc); ``pvcs`` None: every volume of the chosen run."""
    if pvcs is not None and len(set(pvcs)) != len(pvcs):
        raise UsageError(f"a PVC is named twice in {list(pvcs)}")
    if pvcs is not None and not pvcs:
        raise UsageError("no PVC to restore (pvcs is empty; None means every volume of the backup)")
    volumes = namespace_volumes(repo, namespace)
    if not volumes:
        raise NotFoundError(f"no backups of namespace {namespace} in {repo.describe()}")
    missing = sorted(set(pvcs or ()) - set(volumes))
    if missing:
        raise NotFoundError(f"no backups of PVC(s) {', '.join(missing)} in namespace {namespace}"
                            f" (backed up: {', '.join(sorted(volumes))})")  # fmt: skip
    if BACKUP_ID.fullmatch(backup or ""):
        return _by_backup_id(repo, namespace, volumes, pvcs, backup)
    if backup in (None, "", "latest"):
        return _latest(repo, namespace, volumes, pvcs)
    return _by_run(repo, namespace, volumes, pvcs, backup)


def _by_backup_id(repo, namespace, volumes, pvcs, backup_id) -> Selection:
    candidates = pvcs or sorted(pvc for pvc, refs in volumes.items() if any(r.backup_id == backup_id for r in refs))
    if len(candidates) != 1:
        what = "no volume of" if not candidates else f"{len(candidates)} volumes of"
        raise (NotFoundError if not candidates else UsageError)(
            f"backup id {backup_id} names one volume's backup: {what} {namespace} match"
            + ("" if not candidates else "; name one PVC")
        )
    pvc = candidates[0]
    ref = next((r for r in volumes[pvc] if r.backup_id == backup_id), None)
    if ref is None:
        raise NotFoundError(f"PVC {namespace}/{pvc} has no backup {backup_id}")
    manifest = repo.read_manifest(ref.volume, backup_id)
    return Selection([Selected(pvc, manifest)], f"backup {backup_id} of {namespace}/{pvc}", manifest.tags.get(RUN_TAG))


def _by_run(repo, namespace, volumes, pvcs, run) -> Selection:
    found: dict[str, Manifest] = {}
    for pvc in pvcs or sorted(volumes):
        for ref in reversed(volumes[pvc]):
            manifest = repo.read_manifest(ref.volume, ref.backup_id)
            if manifest.tags.get(RUN_TAG) == run:
                found[pvc] = manifest
                break
    if not found:
        raise NotFoundError(f"no backup of namespace {namespace} belongs to run {run!r}"
                            " (a run id, a backup id or latest)")  # fmt: skip
    missing = sorted(set(pvcs or ()) - set(found))
    if missing:
        raise NotFoundError(f"run {run} has no backup of PVC(s) {', '.join(missing)} in namespace {namespace}")
    return Selection([Selected(p, m) for p, m in sorted(found.items())], f"run {run}", run)


def _latest(repo, namespace, volumes, pvcs) -> Selection:
    if pvcs is None:  # the newest run; its volumes are the app
        heads = {p: repo.read_manifest(refs[-1].volume, refs[-1].backup_id) for p, refs in volumes.items()}
        newest = max(heads.values(), key=lambda m: m.backup_id)
        run = newest.tags.get(RUN_TAG)
        if run is not None:
            chosen = _by_run(repo, namespace, volumes, None, run)
            return Selection(chosen.volumes, f"run {run} (the latest)", run)
        return Selection([Selected(p, m) for p, m in sorted(heads.items())],
                         "each PVC's latest backup (the newest backup carries no run tag)", None)  # fmt: skip
    runs: dict[str, dict[str, Manifest]] = {}
    heads = {}
    for layer in range(max(len(volumes[p]) for p in pvcs)):  # the newest backup of each PVC, then the one before...
        for pvc in pvcs:
            refs = volumes[pvc]
            if layer < len(refs):
                manifest = repo.read_manifest(refs[-1 - layer].volume, refs[-1 - layer].backup_id)
                heads.setdefault(pvc, manifest)
                if manifest.tags.get(RUN_TAG) is not None:
                    runs.setdefault(manifest.tags[RUN_TAG], {}).setdefault(pvc, manifest)
        if layer == 0 and any(RUN_TAG not in m.tags for m in heads.values()):
            break
        complete = [(run, got) for run, got in runs.items() if len(got) == len(pvcs)]
        if complete:
            run, got = max(complete, key=lambda rg: max(m.backup_id for m in rg[1].values()))
            return Selection([Selected(p, m) for p, m in sorted(got.items())], f"run {run} (the latest)", run)
    untagged = any(RUN_TAG not in m.tags for m in heads.values())
    why = "the newest backups carry no run tag" if untagged else "no run has a backup of every PVC named"
    return Selection([Selected(p, heads[p]) for p in sorted(pvcs)], f"each PVC's latest backup ({why})", None)
