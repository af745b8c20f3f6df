"""The application's point in time: its claims' snapshots, cut under a freeze the policy bounds.

``take(api, namespace, request, hookset, logger)`` -> ``SnapshotSet``. ``request`` (``Request``; ``Request.of``
builds it) says the path the preflight chose (``movers.backup.preflight``): GROUP, one VolumeGroupSnapshot of the
claims the selector picks, in the preflight's class; PER_PVC, one VolumeSnapshot per claim in its driver's class.

The freeze (``movers.hooks.quiesced``: pre hooks, the cut, post hooks always) lasts until the snapshots are
*cut* (``status.creationTime``), readiness is awaited after the thaw. The cut is awaited until
``freeze_timeout`` after the freeze began, less the time the pre hooks took (the thaw is expected to take as
long; at most half the bound is set aside), so the application stays frozen about ``freeze_timeout`` at
most. When the group is not cut in time:

1. the application is thawed (the freeze ends), then the group is deleted and waited for until it is gone
   (the snapshot controller removes its content and members first);
2. ``on_timeout="fail"``: ``SnapshotSetError`` (one line, the controller's error if it gave one);
   ``"per-pvc"``: one VolumeSnapshot per claim under one new freeze with the same bound (not cut in time
   either: ``SnapshotSetError`` after the thaw). ``SnapshotSet.fallback`` says why, for the run's summary.

Per-claim snapshots not cut in time fail the same way (no further fallback). The snapshots are named
``names.derived_name(run_id, pvc)`` and labelled ``request.labels`` (the run's), so that the run's cleanup
finds whatever is left. ``member(api, namespace, snapshot)`` describes one member VolumeSnapshot as plain data.

``keep(api, namespace, app, kind, version, names, keep_retained)``: a successful run's snapshots become the next
delta's bases (run label off, ``KEPT_LABEL=<app>`` on) and the ones kept before for ``app`` are deleted, of either
kind (a run that fell back to per-claim snapshots replaces a kept group, and the reverse); the contents of a Retain
class go with them, or with ``keep_retained`` stay and are returned (``Retired``, ``movers.kube.retained``). A group
deleted because it was not cut in time goes with its Retain contents always. This is the one rule of which snapshots
outlive a run: only a run whose every member committed calls ``keep``; any other run's snapshots still carry its run
label and its cleanup deletes them, so the bases kept before stay. The next run's base choice does not restate the
rule: it reads which recorded snapshots exist (``movers.backup.bases``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from movers.backup.preflight import GROUP, PER_PVC
from movers.errors import EXIT_UNAVAILABLE, MoverError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import retained, snapshots
from movers.kube.names import derived_name
from movers.kube.snapshots import resolve_snapshot

if TYPE_CHECKING:
    from movers.policy.model import BackupPolicy

log = logging.getLogger(__name__)
KEPT_LABEL = "cbt-mover.io/kept-for"  # a kept base snapshot (its run label removed): value = the app's name


class SnapshotSetError(MoverError):
    """The snapshots were not cut within the freeze bound (and no fallback was allowed or possible): the
    storage did not deliver, exit code 5 like any storage that is unavailable."""

    exit_code = EXIT_UNAVAILABLE


@dataclass(frozen=True)
class Request:
    name: str  # the run id: the group's name and the prefix of per-claim snapshot names
    selector: dict[str, Any]  # the policy's PVC selector (the group's source)
    pvcs: dict[str, str]  # claim -> its CSI driver
    path: str  # GROUP or PER_PVC
    group_version: str | None
    group_class: str | None
    snapshot_classes: dict[str, str]  # driver -> VolumeSnapshotClass of per-claim snapshots
    fallback_problem: str | None  # why per-claim snapshots are impossible (None: they are possible)
    labels: dict[str, str]
    freeze_timeout: float = 20.0
    on_timeout: str = "per-pvc"  # or "fail"
    ready_timeout: float = 300.0  # per-claim snapshots to become ready after the thaw
    group_timeout: float = 300.0  # the group to become ready after the thaw; a failed group to be deleted

    @classmethod
    def of(cls, name: str, labels: Mapping[str, str], policy: BackupPolicy, plan: Mapping[str, Any]) -> Request:
        """The request of run ``name`` from the policy and the preflight's plan
        (``dataclasses.asdict(preflight.Preflight)``)."""
        group = policy.group_snapshot
        return cls(
            name=name,
            selector=dict(policy.pvc_selector),
            pvcs={s["pvc"]: s["driver"] for s in plan["sources"]},
            path=plan["path"],
            group_version=plan["group_version"],
            group_class=plan["group_class"],
            snapshot_classes=dict(plan["snapshot_classes"]),
            fallback_problem=plan["fallback_problem"],
            labels=dict(labels),
            freeze_timeout=group.freeze_timeout,
            on_timeout=group.on_timeout,
            ready_timeout=policy.timeouts.snapshot,
            group_timeout=group.timeout,
        )


@dataclass
class SnapshotSet:
    kind: str  # VolumeGroupSnapshot or VolumeSnapshot
    group: str | None  # the group's name (GROUP path)
    group_version: str | None
    snapshots: list[str]  # the member VolumeSnapshots
    path: str  # GROUP or PER_PVC: how the point in time was taken
    fallback: str | None = None  # why the group fell back to per-claim snapshots (None: it did not)
    freezes: list[float] = field(default_factory=list)  # each freeze window, seconds
    hooks: list[str] = field(default_factory=list)  # what each hook did


def member(api, namespace: str, snapshot: str) -> dict[str, Any]:
    """A member VolumeSnapshot as plain data: pvc, snapshot, content, handle, driver, restore_size and
    source_volume_mode (its content's ``spec.sourceVolumeMode``)."""
    ref = resolve_snapshot(api, namespace, snapshot)
    content = k.get(api, "VolumeSnapshotContent", None, ref.content)
    return {
        "pvc": ref.source_pvc,
        "snapshot": snapshot,
        "content": ref.content,
        "handle": ref.handle,
        "driver": ref.driver,
        "restore_size": ref.restore_size,
        "source_volume_mode": (content.get("spec") or {}).get("sourceVolumeMode"),
    }


def snapshot_name(request: Request, pvc: str) -> str:
    return derived_name(request.name, pvc)


def _not_cut(api, kind: str, namespace: str, name: str, version: str) -> str | None:
    """None when ``name`` is cut, else what its status says."""
    obj = k.get(api, kind, namespace, name, version)
    status = obj.get("status") or {}
    if status.get("creationTime") and (kind != "VolumeSnapshot" or status.get("boundVolumeSnapshotContentName")):
        return None
    error = (status.get("error") or {}).get("message")
    if error:
        return f"{kind} {name}: {error}"
    if not status:
        hint = (
            "is the snapshot-controller's CSIVolumeGroupSnapshot feature gate on?"
            if kind == "VolumeGroupSnapshot"
            else "is a snapshot-controller running?"
        )
        return f"{kind} {name} has no status: nothing processed it ({hint})"
    return f"{kind} {name} not cut yet"


@dataclass(frozen=True)
class _Cut:
    """The snapshots one freeze cuts: objects ``names`` of ``kind`` (VolumeSnapshot or VolumeGroupSnapshot),
    API ``version``."""

    kind: str
    names: list[str]
    version: str


def _wait_cut(api, namespace: str, cut: _Cut, deadline: float) -> str | None:
    """Poll until every one of ``cut.names`` is cut (None) or ``deadline`` passes (why not)."""
    while True:
        why = next((w for n in cut.names if (w := _not_cut(api, cut.kind, namespace, n, cut.version))), None)
        if why is None or time.monotonic() >= deadline:
            return why
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def _deadline(q, freeze_timeout: float) -> float:
    """``time.monotonic()`` deadline of the cut: the bound from the freeze's start, less the pre hooks' time."""
    pre = max(0.0, (q.frozen_at or q.freeze_start) - q.freeze_start)
    left = freeze_timeout - min(pre, freeze_timeout / 2) - (time.time() - q.freeze_start)
    return time.monotonic() + max(0.0, left)


def _frozen_cut(
    api, namespace: str, hookset, create, cut: _Cut, freeze_timeout: float, done: SnapshotSet
) -> str | None:
    """One freeze: ``create()`` then wait for ``cut`` to be cut; why not (None: cut). Thawed either way."""
    from movers.hooks import quiesced

    with quiesced(api, namespace, hookset) as q:
        deadline = _deadline(q, freeze_timeout)
        create()
        why = _wait_cut(api, namespace, cut, deadline)
    done.freezes.append(round(q.freeze_s or 0.0, 3))
    done.hooks += [r.describe() for r in q.pre_results + q.post_results]
    return why


def _per_claim(api, namespace: str, request: Request, hookset, done: SnapshotSet, logger) -> None:
    names = {pvc: snapshot_name(request, pvc) for pvc in sorted(request.pvcs)}

    def create() -> None:
        for pvc, snap in names.items():
            cls = request.snapshot_classes[request.pvcs[pvc]]
            k.create(api, m.volume_snapshot(snap, namespace, pvc, cls, request.labels))

    cut = _Cut("VolumeSnapshot", list(names.values()), "v1")
    why = _frozen_cut(api, namespace, hookset, create, cut, request.freeze_timeout, done)
    if why:
        raise SnapshotSetError(
            f"the per-claim VolumeSnapshots were not cut within group_snapshot.freeze_timeout"
            f" {request.freeze_timeout:g} s ({why}): the application was thawed"
        )
    for snap in names.values():
        snapshots.wait_snapshot_ready(api, "VolumeSnapshot", namespace, snap, request.ready_timeout)
    done.kind, done.snapshots = "VolumeSnapshot", list(names.values())
    logger.info("one VolumeSnapshot per claim cut: %s", ", ".join(names.values()))


def _remove_group(api, namespace: str, name: str, version: str, timeout: float) -> None:
    """Delete the group and wait until it and its content are gone."""
    group = k.find(api, "VolumeGroupSnapshot", namespace, name, version)
    content = ((group or {}).get("status") or {}).get("boundVolumeGroupSnapshotContentName")
    retained.delete(api, namespace, "VolumeGroupSnapshot", name, version, timeout=timeout)  # Retain contents too
    k.delete_and_wait(api, "VolumeGroupSnapshot", namespace, name, timeout, version)
    deadline = time.monotonic() + timeout
    while content and k.find(api, "VolumeGroupSnapshotContent", None, content, version) is not None:
        if time.monotonic() >= deadline:
            raise k.KubeError(f"VolumeGroupSnapshotContent {content} still present {timeout:g} s after its group")
        time.sleep(0.2)


def take(api, namespace: str, request: Request, hookset, logger: Any = None) -> SnapshotSet:
    """Cut the snapshot set under a bounded freeze (see the module doc)."""
    logger = logger or log
    done = SnapshotSet(kind="", group=None, group_version=request.group_version, snapshots=[], path=request.path)
    if request.path == PER_PVC:
        _per_claim(api, namespace, request, hookset, done, logger)
        return done
    if request.path != GROUP:
        raise ValueError(f"unknown snapshot path {request.path!r}")
    name, version = request.name, request.group_version

    def create() -> None:
        k.create(
            api,
            m.volume_group_snapshot(name, namespace, request.selector, request.group_class, version, request.labels),
        )

    cut = _Cut("VolumeGroupSnapshot", [name], version)
    why = _frozen_cut(api, namespace, hookset, create, cut, request.freeze_timeout, done)
    if why is None:
        vgs = snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", namespace, name, request.group_timeout, version)
        done.kind, done.group = "VolumeGroupSnapshot", name
        done.snapshots = [x.snapshot for x in snapshots.group_members(api, vgs)]
        return done
    reason = f"the VolumeGroupSnapshot was not cut within group_snapshot.freeze_timeout {request.freeze_timeout:g} s"
    reason += f" ({why})"
    logger.warning("%s: the application was thawed; deleting the group", reason)
    _remove_group(api, namespace, name, version, request.group_timeout)
    if request.on_timeout == "fail":
        raise SnapshotSetError(f"{reason}: the application was thawed and the group deleted (on_timeout: fail)")
    if request.fallback_problem:
        raise SnapshotSetError(f"{reason}, and one VolumeSnapshot per claim is impossible: {request.fallback_problem}")
    logger.warning("falling back to one VolumeSnapshot per claim under a new freeze (on_timeout: per-pvc)")
    done.path, done.fallback = PER_PVC, reason
    _per_claim(api, namespace, request, hookset, done, logger)
    return done


@dataclass(frozen=True)
class Retired:
    deleted: list[str]  # the bases kept before, deleted: ``kind/name``
    retained: list[retained.RetainedContent]  # their contents left behind (``keep_retained``)


def keep(
    api, namespace: str, app: str, kind: str, version: str | None, names: list[str], keep_retained: bool = False
) -> Retired:
    """Keep ``names`` (of ``kind``) as the next bases and delete the others kept for ``app`` (see the module doc)."""
    version = version or "v1"
    left: list[retained.RetainedContent] = []
    for name in names:
        k.patch_labels(api, kind, namespace, name, {m.RUN_LABEL: None, KEPT_LABEL: app}, version)
    gone = []
    for old_kind, old_version in (
        ("VolumeGroupSnapshot", k.served_group_snapshot_version(api)),
        ("VolumeSnapshot", "v1"),
    ):
        if old_version is None:
            continue
        for obj in k.list_objects(api, old_kind, namespace, f"{KEPT_LABEL}={app}", old_version):
            name = obj["metadata"]["name"]
            if old_kind == kind and name in names:
                continue
            left += retained.delete(api, namespace, old_kind, name, old_version, keep_retained)
            gone.append(f"{old_kind}/{name}")
    return Retired(gone, left)
