"""Which backups a restore of an application (or of some of its PVCs) uses.

Volumes are found by the namespace and PVC recorded in their manifests (``volume.namespace`` /
``volume.pvc``), or, for manifests without them, by a volume id of the form ``<namespace>/<pvc>`` (what
the backup flow writes). ``backup`` is one of:

* ``"latest"``: with PVCs named, the newest backup *run* (``tags[RUN_TAG]``) that has a backup of every
  one of them, so the volumes come from one consistent group snapshot; with none named, the newest
  *complete* run of the namespace and every volume it has. When the newest backups carry no run tag
  (repositories written before tags, or by hand), each PVC's own latest backup is used instead and
  ``Selection.how`` says so;
* a run id (the value of ``RUN_TAG``): that run's backup of each requested PVC;
* a backup id (``YYYYMMDDTHHMMSSffffffZ-xxxxxx``): exactly one PVC must be requested, or the id must be
  unique among the namespace's volumes.

Complete runs: every manifest of an application run records the run's PVCs (``Manifest.run_pvcs``). A run
is complete when each of them has a committed backup in it, partial when a mover failed and one has none
(``RunStatus``). A whole-application selection (no PVCs named) never picks a partial run silently: "latest"
skips to the newest complete run (``how`` names the newer partial one), and a partial run, chosen by its id
or as "latest" when no complete run exists, needs ``allow_partial=True``, else ``UsageError`` names the
missing PVCs and how to allow it. Runs without a member list (backed up before runs recorded one) count as
complete, with a note (``Selection.notes``).

Anything missing raises ``NotFoundError`` naming what is missing. Manifests are read newest first: when the
newest backups of every volume belong to one complete run, that is one manifest read per volume; otherwise
(a partial newest run, or PVCs named) the walk goes deeper, at worst to every manifest of the namespace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from movers.errors import NotFoundError, UsageError
from movers.repo.manifest import APP_TAG, RUN_TAG, Manifest
from movers.repo.repository import BackupRef, Repository

BACKUP_ID = re.compile(r"\d{8}T\d{12}Z-[0-9a-f]{6}")


@dataclass(frozen=True)
class Selected:
    pvc: str
    manifest: Manifest

    def to_dict(self) -> dict:
        """What a restore needs of the backup, as recorded: ``{pvc, volume, backup_id, capacity_bytes,
        storage_class, volume_mode, fs_type, node_affinity, labels, app, created, snapshot}`` (``snapshot``: the
        kept VolumeSnapshot's ``{volume_snapshot, namespace, snapshot_handle}``)."""
        m, v = self.manifest, self.manifest.volume
        return {
            "pvc": self.pvc,
            "volume": v.id,
            "backup_id": m.backup_id,
            "capacity_bytes": m.capacity_bytes,
            "storage_class": v.storage_class,
            "volume_mode": v.volume_mode,
            "fs_type": v.fs_type,
            "node_affinity": v.node_affinity,
            "labels": v.labels,
            "app": m.tags.get(APP_TAG),
            "created": m.created,
            "snapshot": {
                "volume_snapshot": m.snapshot.volume_snapshot,
                "namespace": m.snapshot.namespace,
                "snapshot_handle": m.snapshot.snapshot_handle,
            },
        }


@dataclass(frozen=True)
class Selection:
    volumes: list[Selected]  # sorted by PVC name
    how: str  # one line: which run / backup and why
    run: str | None  # the run id when every volume comes from one tagged run
    missing: tuple[str, ...] = ()  # members of that run without a backup in it (a partial run)
    notes: tuple[str, ...] = ()  # caveats for the logs (a run without a member list, a newer partial run)

    @property
    def complete(self) -> bool:
        """Every recorded member of the run has a backup in it (True for runs without a member list)."""
        return not self.missing

    def to_dict(self) -> dict:
        """``{how, run, app, missing, notes, volumes}``: ``app`` when every volume's backup names the same one,
        ``volumes`` as ``Selected.to_dict``."""
        volumes = [s.to_dict() for s in self.volumes]
        apps = {v["app"] for v in volumes if v["app"]}
        return {
            "how": self.how,
            "run": self.run,
            "app": apps.pop() if len(apps) == 1 else None,
            "missing": list(self.missing),
            "notes": list(self.notes),
            "volumes": volumes,
        }


@dataclass(frozen=True)
class RunStatus:
    """One application run as the repository has it: the PVCs backed up in it and its recorded members."""

    run: str
    newest: str  # the newest backup id of the run (runs sort by it)
    pvcs: tuple[str, ...]  # PVCs with a committed backup in the run
    members: tuple[str, ...] | None = None  # every PVC of the run, as recorded (None: not recorded)
    app: str | None = None
    namespace: str | None = None

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.members or ()) - set(self.pvcs)))

    @property
    def complete(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        if self.members is None:
            return f"run {self.run} ({len(self.pvcs)} volume(s); no member list recorded: counted as complete)"
        if self.missing:
            return f"run {self.run} is partial: no backup of PVC(s) {', '.join(self.missing)}"
        return f"run {self.run} (complete: {', '.join(self.pvcs)})"

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "app": self.app,
            "namespace": self.namespace,
            "newest_backup": self.newest,
            "pvcs": list(self.pvcs),
            "members": list(self.members) if self.members is not None else None,
            "missing": list(self.missing),
            "complete": self.complete,
        }


def run_status(run: str, manifests: Mapping[str, Manifest]) -> RunStatus:
    """The status of ``run`` from its manifests by PVC (the members are the union of what they record)."""
    recorded = [m.run_pvcs for m in manifests.values() if m.run_pvcs is not None]
    members = tuple(sorted(set().union(*recorded))) if recorded else None
    any_manifest = next(iter(manifests.values()), None)
    return RunStatus(
        run,
        max(m.backup_id for m in manifests.values()),
        tuple(sorted(manifests)),
        members,
        any_manifest.tags.get(APP_TAG) if any_manifest else None,
        any_manifest.volume.namespace if any_manifest else None,
    )


def runs_of(manifests: Iterable[Manifest]) -> list[RunStatus]:
    """Every tagged run among ``manifests`` (any namespaces), newest first; a volume's PVC is its recorded
    ``volume.pvc``, else the last part of its id. For listings: a run counts as partial only when none of
    the given manifests is the missing member's backup in it."""
    by_run: dict[tuple[str | None, str], dict[str, Manifest]] = {}
    for m in manifests:
        run = m.tags.get(RUN_TAG)
        if run is None:
            continue
        pvc = m.volume.pvc or m.volume.id.rpartition("/")[2]
        got = by_run.setdefault((m.volume.namespace, run), {})
        if pvc not in got or got[pvc].backup_id < m.backup_id:
            got[pvc] = m
    return sorted((run_status(run, got) for (_, run), got in by_run.items()), key=lambda r: r.newest, reverse=True)


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


def select(
    repo: Repository, namespace: str, pvcs: Sequence[str] | None, backup: str = "latest", allow_partial: bool = False
) -> Selection:
    """The backups to restore (see the module doc); ``pvcs`` None: every volume of the chosen run.
    ``allow_partial``: a whole-application restore may take a partial run (its missing PVCs are in
    ``Selection.missing``)."""
    if pvcs is not None and len(set(pvcs)) != len(pvcs):
        raise UsageError(f"a PVC is named twice in {list(pvcs)}")
    if pvcs is not None and not pvcs:
        raise UsageError("no PVC to restore (pvcs is empty; None means every volume of the backup)")
    volumes = namespace_volumes(repo, namespace)
    if not volumes:
        raise NotFoundError(f"no backups of namespace {namespace} in {repo.describe()}")
    missing = sorted(set(pvcs or ()) - set(volumes))
    if missing:
        raise NotFoundError(
            f"no backups of PVC(s) {', '.join(missing)} in namespace {namespace}"
            f" (backed up: {', '.join(sorted(volumes))})"
        )
    if BACKUP_ID.fullmatch(backup or ""):
        return _by_backup_id(repo, namespace, volumes, pvcs, backup)
    if backup in (None, "", "latest"):
        return _latest(repo, namespace, volumes, pvcs, allow_partial)
    chosen = _by_run(repo, namespace, volumes, pvcs, backup)
    if pvcs is None:
        _check_partial(chosen, namespace, allow_partial, f"run {backup}")
    return chosen


def _check_partial(sel: Selection, namespace: str, allow_partial: bool, what: str) -> None:
    if sel.missing and not allow_partial:
        raise UsageError(
            f"{what} of namespace {namespace} is partial: it has no backup of PVC(s) {', '.join(sel.missing)}"
            " (its mover failed); restoring it would leave them out. Pass allow_partial=True (restore-app:"
            " allow_partial) to restore the volumes it has, or name the PVCs to restore"
        )


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
        raise NotFoundError(
            f"no backup of namespace {namespace} belongs to run {run!r} (a run id, a backup id or latest)"
        )
    missing = sorted(set(pvcs or ()) - set(found))
    if missing:
        raise NotFoundError(f"run {run} has no backup of PVC(s) {', '.join(missing)} in namespace {namespace}")
    return _of_run(run_status(run, found), found, f"run {run}")


def _of_run(status: RunStatus, found: Mapping[str, Manifest], how: str, notes: Sequence[str] = ()) -> Selection:
    notes = list(notes)
    if status.members is None:
        notes.append(
            f"run {status.run} records no member list (backed up before runs recorded their PVCs):"
            f" counted as complete with the {len(found)} volume(s) it has"
        )
    elif status.missing:
        notes.append(status.describe())
    return Selection([Selected(p, m) for p, m in sorted(found.items())], how, status.run, status.missing, tuple(notes))


def _latest(repo, namespace, volumes, pvcs, allow_partial: bool = False) -> Selection:
    if pvcs is None:  # the newest complete run; its volumes are the app
        return _latest_app(repo, namespace, volumes, allow_partial)
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


def _latest_app(repo, namespace, volumes, allow_partial: bool) -> Selection:
    """The newest complete run of the namespace (see the module doc)."""
    heads = {p: repo.read_manifest(refs[-1].volume, refs[-1].backup_id) for p, refs in volumes.items()}
    newest = max(heads.values(), key=lambda m: m.backup_id)
    run = newest.tags.get(RUN_TAG)
    if run is None:
        return Selection(
            [Selected(p, m) for p, m in sorted(heads.items())],
            "each PVC's latest backup (the newest backup carries no run tag)",
            None,
        )
    in_heads = {p: m for p, m in heads.items() if m.tags.get(RUN_TAG) == run}
    status = run_status(run, in_heads)
    if status.members is None:  # a run from before member lists: complete by definition, as before
        chosen = _by_run(repo, namespace, volumes, None, run)
        return Selection(chosen.volumes, f"run {run} (the latest)", run, (), chosen.notes)
    if status.complete:  # the usual case: one manifest read per volume
        return _of_run(status, in_heads, f"run {run} (the latest)")
    # the newest run looks partial from the newest backups: every run of the namespace, from all manifests
    runs: dict[str, dict[str, Manifest]] = {}
    for pvc, refs in volumes.items():
        for ref in reversed(refs):
            m = heads[pvc] if ref.backup_id == heads[pvc].backup_id else repo.read_manifest(ref.volume, ref.backup_id)
            if m.tags.get(RUN_TAG) is not None:
                runs.setdefault(m.tags[RUN_TAG], {}).setdefault(pvc, m)
    ordered = sorted((run_status(r, got) for r, got in runs.items()), key=lambda s: s.newest, reverse=True)
    partial = []
    for status in ordered:
        if status.complete:
            notes = [f"newer {s.describe()}" for s in partial]
            how = f"run {status.run} (the latest complete run" + ("; a newer run is partial)" if partial else ")")
            return _of_run(status, runs[status.run], how, notes)
        partial.append(status)
    chosen = _of_run(ordered[0], runs[ordered[0].run], f"run {ordered[0].run} (the latest, partial)")
    _check_partial(chosen, namespace, allow_partial, f"the latest run {ordered[0].run} (no run is complete)")
    return chosen
