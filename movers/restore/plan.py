"""A restore's plan: check the targets before anything is created (``plan_targets``: first the run's own
permissions, ``required_permissions`` through SelfSubjectAccessReviews, then the objects), and what each volume
becomes (``Target``: its final claim, the Block claim its writer fills, its class, mode and fsType). Everything a
run creates carries its run label, the ``app.kubernetes.io/*`` labels (part-of: the backed-up application when
the run recorded it) and ``cbt-mover.io/pvc=<label_value(pvc)>`` (``labels_of``), so
``movers.restore.finish.discard_run`` finds it.

The order of a restore keeps data safe: every check here runs before anything is created; every volume is
written and read back into a *new* Block claim (``movers.restore.writers.write_volume``) before any existing
claim is touched; only then does ``movers.restore.finish.finish_volume`` give the volume its final claim (the
original name, the recorded volume mode and fsType) and mark it restored (``manifests.RESTORED_FROM``).

``overwrite``: an existing claim of a target's name is replaced only after the new volume is complete
and verified; a claim that a running pod uses is refused up front. The old claim's volume then follows
its own reclaim policy (Delete: it is gone). Without ``overwrite`` an existing claim is refused.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from movers.backup.bases import SnapshotCheck
from movers.errors import UsageError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import workloads
from movers.kube.access import Check, denied
from movers.kube.volumes import default_storage_class
from movers.restore import quiesce
from movers.restore.live import COMPARE, CbtChooser, CbtPath
from movers.restore.live import Chosen as CbtChosen
from movers.restore.source import Chosen, Source, snapshot_source

PVC_LABEL = m.PVC_LABEL
DEFAULT_FS_TYPE = "ext4"  # external-provisioner's default for Filesystem volumes
FS_TYPE_PARAMETERS = ("csi.storage.k8s.io/fstype", "fstype")  # StorageClass parameters (keys case-insensitive)


class RestoreRefused(UsageError):
    """The restore cannot start as asked; the message lists every reason. Nothing was created."""


class PermissionsMissing(k.ForbiddenError):
    """The run's identity lacks permissions the restore needs (exit code 6); nothing was created."""


@dataclass(frozen=True)
class Target:
    pvc: str  # the claim the application uses afterwards (the original name)
    volume: str  # the repository's volume id
    backup_id: str
    capacity_bytes: int
    storage_class: str  # what the new claim asks for (given, recorded, or the cluster default)
    volume_mode: str  # the final claim's mode: Block, or Filesystem when the volume is handed over
    write_claim: str  # the Block claim the writer pod writes: ``pvc`` itself, or a temporary claim
    replace: bool  # an existing claim ``pvc`` is replaced once the data is written
    notes: tuple[str, ...] = ()  # fallbacks taken (no recorded class, ...), for the logs
    fs_type: str | None = None  # the Filesystem hand-over's fsType (recorded, else the class's); None: Block
    node_affinity: dict[str, Any] | None = None  # the source PV's required NodeSelector, as recorded
    app: str | None = None  # the backed-up application (the run's cbt-mover.io/app tag), for part-of
    labels: dict[str, str] | None = None  # the source claim's labels, as recorded: the restored claim's
    snapshot: str | None = None  # the kept VolumeSnapshot the write claim is provisioned from (None: the repository)
    snapshot_content: str | None = None  # its content (annotated to allow a Block claim from a Filesystem source)
    source_reason: str | None = None  # why the data comes from the snapshot, or from the repository
    in_place: bool = False  # written onto the existing claim ``pvc`` itself, only what differs
    cbt: CbtPath | None = None  # in place: CBT names what differs (``movers.restore.live``); None: compared

    @property
    def source(self) -> str:
        """``in place`` (the existing claim compared and rewritten where it differs), ``snapshot`` (provisioned from
        the kept snapshot, then compared) or ``repository`` (written whole into a new claim)."""
        if self.in_place:
            return "in place"
        return "repository" if self.snapshot is None else "snapshot"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Target:
        cbt = doc.get("cbt")
        cbt = CbtPath(**cbt) if isinstance(cbt, Mapping) else cbt
        return cls(**{**doc, "notes": tuple(doc.get("notes") or ()), "cbt": cbt})


def bounded_name(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its beginning and ``-`` + 8 hex digits of
    its SHA-256: names cut to fit stay distinct (``text`` is a valid name but for its length)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9].rstrip('-.')}-{digest}"


def labels_of(run_id: str, pvc: str, app: str | None = None) -> dict[str, str]:
    """A restore run's labels for the objects of one PVC (``app``: the restored application, part-of);
    the PVC label is ``manifests.label_value(pvc)`` (a claim name may be longer than a label value)."""
    return m.run_labels(run_id, app=app, **{PVC_LABEL: m.label_value(pvc)})


def write_claim_name(pvc: str, run_id: str) -> str:
    """The temporary Block claim a writer fills before the hand-over: ``<pvc>-<run id>``, a valid claim name
    distinct from ``pvc`` whatever its length."""
    return bounded_name(f"{pvc}-{run_id}", 253)


def required_permissions(namespace: str, options: RestoreOptions) -> list[Check]:
    """Every call a restore into ``namespace`` with ``options`` makes with the run's identity (plan, write,
    hand-over, clean-up), as ``access.Check``s for the preflight; a ``source`` other than the repository reads the
    kept snapshots and annotates their contents; ``in_place`` checks the backups' snapshots and the drivers' CBT
    services, and snapshots the live claims (``movers.restore.live``: create, wait, delete with a Retain
    content); ``scale_down`` reads, annotates and scales the workloads (``movers.kube.workloads.permissions``)."""
    ns, service_account, repo_secret = namespace, options.service_account, options.repo_secret
    source, in_place, scale_down = options.source, options.in_place, options.scale_down
    checks = [
        Check("get", "", "namespaces", name=ns),
        Check("get", "", "serviceaccounts", namespace=ns, name=service_account),
        Check("get", "", "secrets", namespace=ns, name=repo_secret),
    ]
    checks += [Check(verb, "storage.k8s.io", "storageclasses") for verb in ("get", "list")]
    checks += [
        Check(verb, "", "persistentvolumeclaims", namespace=ns) for verb in ("get", "list", "create", "patch", "delete")
    ]
    checks += [Check(verb, "", "pods", namespace=ns) for verb in ("get", "list", "watch", "create", "delete")]
    checks += [Check("get", "", "pods", "log", namespace=ns), Check("list", "", "events", namespace=ns)]
    checks += [Check(verb, "", "persistentvolumes") for verb in ("get", "list", "create", "patch", "delete")]
    if source != "repository":
        checks += [Check("list", "snapshot.storage.k8s.io", "volumesnapshots", namespace=ns)]
        checks += [Check(verb, "snapshot.storage.k8s.io", "volumesnapshotcontents") for verb in ("get", "patch")]
    if in_place:
        snap = "snapshot.storage.k8s.io"
        checks += [Check(verb, snap, "volumesnapshots", namespace=ns) for verb in ("get", "list", "create", "delete")]
        checks += [Check(verb, snap, "volumesnapshotcontents") for verb in ("get", "patch", "delete")]
        checks += [
            Check("list", snap, "volumesnapshotclasses"),
            Check("get", "cbt.storage.k8s.io", "snapshotmetadataservices"),
        ]
    if scale_down:
        checks += workloads.permissions(ns)
    return checks


def check_permissions(api, namespace: str, options: RestoreOptions) -> None:
    """``PermissionsMissing`` (one line naming every refused call) unless the identity of ``api`` may make
    every call of ``required_permissions``."""
    refused = denied(api, required_permissions(namespace, options))
    if refused:
        raise PermissionsMissing(
            f"cannot restore into {namespace}: this identity lacks {len(refused)}"
            f" permission(s) the restore needs (nothing was created): {'; '.join(refused)}",
            403,
        )


def handover_fs_type(recorded: str | None, storage_class: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """The fsType a Filesystem hand-over gives the volume, and a note when it was not recorded: the
    recorded one; else the class's ``csi.storage.k8s.io/fstype`` (or the deprecated ``fstype``); else ext4."""
    if recorded:
        return recorded, None
    name = ((storage_class or {}).get("metadata") or {}).get("name")
    params = {str(key).lower(): value for key, value in ((storage_class or {}).get("parameters") or {}).items()}
    for key in FS_TYPE_PARAMETERS:
        if params.get(key):
            return params[key], f"no fsType recorded: handing over as {params[key]} (StorageClass {name}'s {key})"
    return DEFAULT_FS_TYPE, f"no fsType recorded and StorageClass {name} names none: handing over as ext4"


@dataclass(frozen=True)
class RestoreOptions:
    """How the targets are made (``plan_targets``): the claims' ``storage_class`` (None: the
    recorded one), ``overwrite`` of existing claims, ``hand_over`` to a Filesystem claim (None: as recorded), the
    repository Secret and the writers' ServiceAccount that must exist in the target namespace, and where the data
    comes from (``source``: ``movers.restore.source``); ``in_place``: onto the existing claims themselves
    (``in_place_target``), whose users' workloads are scaled down and back with ``scale_down``
    (``movers.restore.quiesce``)."""

    storage_class: str | None
    overwrite: bool
    hand_over: bool | None
    repo_secret: str
    service_account: str
    source: Source = "auto"
    in_place: bool = False
    scale_down: bool = False


def plan_targets(
    api, namespace: str, volumes: Sequence[Mapping[str, Any]], run_id: str, options: RestoreOptions
) -> list[Target]:
    """Check that ``volumes`` (``pvc``, ``volume``, ``backup_id``, ``capacity_bytes``, ``storage_class``,
    ``volume_mode``, optionally ``fs_type``, ``node_affinity`` and ``app`` as recorded) can be restored
    into ``namespace``; the targets, or ``PermissionsMissing`` (the identity may not make every call the
    restore makes), or ``RestoreRefused`` listing every problem (missing namespace, ServiceAccount, Secret
    or StorageClass, an existing claim without ``options.overwrite`` or one a pod uses, a hand-over of a recorded
    Block volume).

    ``options.hand_over`` None: Filesystem when the recorded mode is Filesystem, else Block (also when no mode
    was recorded). ``options.storage_class`` overrides the recorded class; without either, the cluster default.
    A Filesystem target's fsType: ``handover_fs_type``.
    """
    storage_class, overwrite, hand_over = options.storage_class, options.overwrite, options.hand_over
    repo_secret, service_account = options.repo_secret, options.service_account
    check_permissions(api, namespace, options)
    problems: list[str] = []
    if k.find(api, "Namespace", None, namespace) is None:
        raise RestoreRefused(
            f"namespace {namespace} does not exist: create it, with ServiceAccount"
            f" {service_account} and the repository Secret {repo_secret}"
        )
    for kind, name in (("ServiceAccount", service_account), ("Secret", repo_secret)):
        if k.find(api, kind, namespace, name) is None:
            problems.append(f"{kind} {namespace}/{name} does not exist (the writer pods need it)")
    default_class = None if options.in_place else default_storage_class(api)
    snapshots = SnapshotCheck(api)  # lists the namespace's VolumeSnapshots once
    chooser = CbtChooser(api, snapshots) if options.in_place else None
    classes: dict[str, dict[str, Any] | None] = {}
    targets = []
    for vol in volumes:
        if options.in_place:
            targets.append(in_place_target(api, namespace, vol, problems, chooser, options.scale_down))
            continue
        pvc, notes = vol["pvc"], []
        sc = storage_class or vol.get("storage_class") or default_class
        if not (storage_class or vol.get("storage_class")):
            notes.append(f"no storage class recorded: using the cluster default {default_class}")
        if sc is not None and sc not in classes:
            classes[sc] = k.find(api, "StorageClass", None, sc)
        if sc is None:
            problems.append(f"{pvc}: no storage class recorded and the cluster has no default: pass storage_class")
        elif classes[sc] is None:
            problems.append(f"{pvc}: StorageClass {sc} does not exist in this cluster: pass storage_class")
        recorded = vol.get("volume_mode")
        if recorded is None:
            notes.append("no volume mode recorded: restoring as Block")
        if hand_over and recorded == "Block":
            problems.append(f"{pvc}: recorded as a Block volume, it cannot be handed to a Filesystem claim")
        mode = "Filesystem" if (hand_over if hand_over is not None else recorded == "Filesystem") else "Block"
        fs_type = None
        if mode == "Filesystem":
            fs_type, note = handover_fs_type(vol.get("fs_type"), classes.get(sc) if sc else None)
            notes += [note] if note else []
        existing = k.find(api, "PersistentVolumeClaim", namespace, pvc)
        if existing is not None and not overwrite:
            problems.append(f"PersistentVolumeClaim {namespace}/{pvc} exists: pass overwrite to replace it")
        elif existing is not None:
            users = workloads.claim_users(api, namespace, [pvc])
            problems += quiesce.refusals(users, pvc, namespace, options.scale_down, "overwriting it")
        direct = existing is None and mode == "Block"
        write_claim = pvc if direct else write_claim_name(pvc, run_id)
        chosen = Chosen(None, None, "asked for: source repository")
        if options.source != "repository" and sc is not None and classes.get(sc) is not None:
            chosen = snapshot_source(snapshots, namespace, vol.get("snapshot") or {}, classes[sc])
            if options.source == "snapshot" and chosen.snapshot is None:
                problems.append(f"{pvc}: cannot restore from the kept snapshot: {chosen.reason}")
        targets.append(
            Target(
                pvc,
                vol["volume"],
                vol["backup_id"],
                int(vol["capacity_bytes"]),
                sc or "",
                mode,
                write_claim,
                existing is not None,
                tuple(notes),
                fs_type,
                copy.deepcopy(vol.get("node_affinity")) or None,
                vol.get("app"),
                dict(vol.get("labels") or {}) or None,
                chosen.snapshot,
                chosen.content,
                chosen.reason,
            )
        )
    if problems:
        raise RestoreRefused(f"cannot restore into {namespace}: " + "; ".join(problems))
    return targets


def in_place_target(
    api,
    namespace: str,
    vol: Mapping[str, Any],
    problems: list[str],
    chooser: CbtChooser | None = None,
    scale_down: bool = False,
) -> Target:
    """The target of a restore onto the existing claim ``vol["pvc"]`` itself (``RestoreOptions.in_place``): its
    writer rewrites only what differs, so the PV stays the same and the next backup stays a CBT delta from the last
    base. What differs: by CBT between the backup's snapshot and a snapshot of the live claim when ``chooser``
    finds that possible (``movers.restore.live``: ``Target.cbt``), else by comparing the claim's volume with the
    backup by the digests the map records; ``source_reason`` says which and why. Appends to ``problems`` why it
    cannot: no such claim, not bound, a Filesystem claim (a writer reaches only a Block device of it; restore it as
    a new claim instead), or running pods use it (named with their workloads: stop them first, or pass
    ``scale_down``; with it, pods no Deployment or StatefulSet runs: ``quiesce.refusals``)."""
    pvc = vol["pvc"]
    claim = k.find(api, "PersistentVolumeClaim", namespace, pvc)
    spec = (claim or {}).get("spec") or {}
    if claim is None:
        problems.append(f"{pvc}: no PersistentVolumeClaim {namespace}/{pvc} to restore in place")
    elif ((claim.get("status") or {}).get("phase")) != "Bound":
        problems.append(f"{pvc}: PersistentVolumeClaim {namespace}/{pvc} is not bound: nothing to restore in place")
    elif spec.get("volumeMode") != "Block":
        problems.append(
            f"{pvc}: PersistentVolumeClaim {namespace}/{pvc} is a Filesystem claim: a restore in place writes its"
            " volume as a block device, which only a Block claim gives; restore it as a new claim instead"
        )
    else:
        problems += quiesce.refusals(workloads.claim_users(api, namespace, [pvc]), pvc, namespace, scale_down)
    chosen = CbtChosen(None, COMPARE)
    if chooser is not None and spec.get("volumeMode") == "Block" and spec.get("volumeName"):
        pv = k.find(api, "PersistentVolume", None, spec["volumeName"])
        chosen = chooser.choose(namespace, vol.get("snapshot") or {}, pv)
    return Target(
        pvc,
        vol["volume"],
        vol["backup_id"],
        int(vol["capacity_bytes"]),
        spec.get("storageClassName") or "",
        "Block",
        pvc,
        False,
        app=vol.get("app"),
        labels=dict(vol.get("labels") or {}) or None,
        source_reason=chosen.reason,
        in_place=True,
        cbt=chosen.cbt,
    )
