"""A restore in place by CBT: whether a volume can take it (``CbtChooser``), and the snapshot of the live claim it
needs (``live_snapshot``).

Path (a) of a restore in place (``movers.restore.plan.in_place_target``): the driver tells what differs. It is
taken when

* the backup's VolumeSnapshot (or group member) still holds the handle the backup recorded (the test a CBT base
  passes, ``movers.backup.bases.SnapshotCheck``): the storage snapshot the delta is computed from exists;
* its content is of the claim's CSI driver and, where the content names it, of the claim's very volume
  (``spec.source.volumeHandle``; a delta between two volumes means nothing, and a driver need not refuse it);
* the driver has a SnapshotMetadataService (``movers.cbt.discovery``), as a backup plans CBT
  (``movers.backup.preflight.driver_cbt``); a v1alpha1 one (sidecar v0.x) names the base by VolumeSnapshot, which
  must then be in the claim's namespace;
* a VolumeSnapshotClass for the snapshot of the live claim: the backup's snapshot's class, else the driver's one
  default class (``movers.backup.preflight.snapshot_class_for``, as a backup's per-claim snapshots take theirs).

Then the writer (``movers.restore.writers.write_volume``) snapshots the live claim (``live_snapshot``: labelled
with the run's labels, component ``snapshot``, so that a crashed run's leftover is found by
``cbt-mover.io/run=<run id>``), waits until it is ready, and its pod asks GetMetadataDelta(base = the backup's
handle, target = that snapshot) itself, as a backup's mover does (``movers.restore.volume``): only those ranges are
read, fetched and written. The snapshot is deleted afterwards in every outcome. Otherwise (or when the live
snapshot fails, or the service refuses the delta) the writer compares the device with the map's digests (path
(b)), and the reason is reported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from movers.backup.bases import SnapshotCheck
from movers.errors import MoverError, NotFoundError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import retained
from movers.kube.snapshots import wait_snapshot_ready
from movers.repo.manifest import SnapshotIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CbtPath:
    """How a volume is restored in place by CBT: the backup's snapshot (CSI handle ``base_handle``; its
    VolumeSnapshot ``base_snapshot``, named to a v1alpha1 service instead, else None), the driver's service
    ``audience`` (the writer's projected token) and the ``snapshot_class`` of the live claim's snapshot."""

    base_handle: str
    audience: str
    snapshot_class: str
    base_snapshot: str | None = None


@dataclass(frozen=True)
class Chosen:
    """``cbt`` when the volume is restored in place by CBT, else None; ``reason`` says why (or why not)."""

    cbt: CbtPath | None
    reason: str


COMPARE = "the claim's own volume compared with the backup, only what differs written"


class CbtChooser:
    """Chooses path (a) or (b) for each in-place volume (see the module doc); reads each driver's service and the
    VolumeSnapshotClasses once. ``check``: the plan's ``SnapshotCheck`` (each namespace's snapshots listed once)."""

    def __init__(self, api, check: SnapshotCheck) -> None:
        self.api, self.check = api, check
        self._services: dict[str, Any] = {}
        self._classes: list[dict] | None = None

    def choose(self, namespace: str, recorded: Mapping[str, Any], pv: Mapping[str, Any] | None) -> Chosen:
        """Path (a) for the claim of ``namespace`` bound to ``pv``, whose backup recorded the snapshot
        ``recorded`` (``{volume_snapshot, namespace, snapshot_handle}``), or (b) and why."""
        snapshot = SnapshotIdentity(**recorded)
        why, content = self.check.content(snapshot)
        if content is None:
            return _compare(why or "the backup's snapshot cannot be checked")
        where = f"VolumeSnapshot {snapshot.namespace}/{snapshot.volume_snapshot}"
        csi = ((pv or {}).get("spec") or {}).get("csi") or {}
        spec = content.get("spec") or {}
        driver, source = spec.get("driver"), (spec.get("source") or {}).get("volumeHandle")
        if driver != csi.get("driver"):
            return _compare(f"{where} is of CSI driver {driver}, the claim's volume of {csi.get('driver')}")
        if source and source != csi.get("volumeHandle"):
            return _compare(f"{where} is of volume {source}, not of the claim's ({csi.get('volumeHandle')})")
        service = self._service(driver)
        if service is None:
            return _compare(f"CSI driver {driver} has no SnapshotMetadataService")
        base_snapshot = None
        if service.legacy:
            if snapshot.namespace != namespace:
                return _compare(
                    f"the v1alpha1 SnapshotMetadataService of {driver} names the base by VolumeSnapshot, and {where}"
                    f" is not in {namespace}"
                )
            base_snapshot = snapshot.volume_snapshot
        snapshot_class, problem = self._snapshot_class(driver, spec.get("volumeSnapshotClassName"))
        if snapshot_class is None:
            return _compare(f"no VolumeSnapshotClass for a snapshot of the live claim: {problem}")
        return Chosen(
            CbtPath(str(snapshot.snapshot_handle), service.audience, snapshot_class, base_snapshot),
            f"{where} still holds the backup's snapshot and CSI driver {driver} serves CBT: the ranges"
            " GetMetadataDelta reports between it and a snapshot of the live claim rewritten",
        )

    def _service(self, driver: str):
        from movers.cbt.discovery import snapshot_metadata_service
        from movers.errors import CbtUnavailableError

        if driver not in self._services:
            try:
                self._services[driver] = snapshot_metadata_service(self.api, driver)
            except (CbtUnavailableError, NotFoundError):
                self._services[driver] = None
        return self._services[driver]

    def _snapshot_class(self, driver: str, backup_class: str | None) -> tuple[str | None, str | None]:
        from movers.backup.preflight import snapshot_class_for

        if self._classes is None:
            self._classes = k.list_objects(self.api, "VolumeSnapshotClass", None)
        return snapshot_class_for(self._classes, driver, backup_class)


def _compare(why: str) -> Chosen:
    return Chosen(None, f"{why}: {COMPARE}")


@dataclass(frozen=True)
class Live:
    """The snapshot of the live claim: its ``name`` when it is ready, else None and ``why`` not."""

    name: str | None
    why: str | None = None


@contextmanager
def live_snapshot(
    api, namespace: str, name: str, pvc: str, snapshot_class: str, labels: Mapping[str, str], timeout: float
) -> Iterator[Live]:
    """A VolumeSnapshot ``name`` of claim ``namespace/pvc`` in ``snapshot_class``, labelled ``labels`` (the run's),
    waited for until ready within ``timeout`` s (an earlier attempt's of that name deleted first); yields it, or
    why it could not be taken (``Live.name`` None: the caller compares instead). Deleted when the block ends, in
    every outcome, with its content and storage snapshot even of a Retain class (``retained.delete``); a deletion
    that fails is logged and left to the run's clean-up (``finish.discard_run``), which finds it by its run label."""
    _delete(api, namespace, name, timeout)
    try:
        k.create(api, m.volume_snapshot(name, namespace, pvc, snapshot_class, labels))
        wait_snapshot_ready(api, "VolumeSnapshot", namespace, name, timeout)
        live = Live(name)
    except MoverError as err:
        why = " ".join(str(err).split())
        log.warning("snapshot %s/%s of the live claim %s failed: %s", namespace, name, pvc, why)
        live = Live(None, f"the snapshot of the live claim failed ({why})")
    try:
        yield live
    finally:
        try:
            _delete(api, namespace, name, timeout)
        except MoverError as err:
            log.error(
                "the snapshot %s/%s of the live claim could not be deleted (%s); the run's clean-up",
                namespace,
                name,
                err,
            )


def _delete(api, namespace: str, name: str, timeout: float) -> None:
    if k.find(api, "VolumeSnapshot", namespace, name) is None:
        return
    retained.delete(api, namespace, "VolumeSnapshot", name, timeout=timeout)
    k.wait_gone(api, "VolumeSnapshot", namespace, name, timeout)
