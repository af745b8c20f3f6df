"""A CSI-like driver's storage operations (what CreateVolume, CreateSnapshot ... do), over ``VolumeStore``.

``CsiPlugin(store, spec, restore_size=True, group_capability=None)`` (``spec``: a ``localcluster.drivers.DriverSpec``;
``group_capability`` defaults to ``spec.groups``). Every call is idempotent for the same request (handles come
from ``names.handle_for`` and include the driver name, so two drivers share one store), as CSI requires of
retried calls. Refusals raise ``CsiError`` whose text is what a sidecar prints for a gRPC error
(``rpc error: code = <Code> desc = <message>``).

- ``create_volume(name, size, mode, snapshot=None)``: a sparse image of ``size`` bytes (rounded up to 4 KiB, as
  many drivers round to their allocation unit), or a copy of a snapshot grown to ``size``; a snapshot larger than
  ``size`` is InvalidArgument (the hostpath driver's message). Nothing is formatted here: a Filesystem volume is
  formatted by the node at its first mount, by the PV's ``spec.csi.fsType``, as with real CSI drivers.
- ``create_snapshot(volume, name)`` / ``create_group_snapshot(volumes, name)``: point-in-time copies; every
  member of a group is copied under one lock that also excludes single snapshots, so the group is taken at one
  instant with respect to everything this driver does, and all members get one creation time. A driver without
  the GroupController capability answers Unimplemented (``unknown service csi.v1.GroupController``).
- ``reported_size(size)``: the size_bytes the driver reports for a snapshot (0 = unknown when
  ``restore_size=False``, as drivers that leave restoreSize out do); ``snapshot_info`` is GetSnapshot.
- ``delete_volume`` / ``delete_snapshot``: remove the files (and detach a loop device left attached).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from localcluster.controllers.names import handle_for
from localcluster.drivers import DriverSpec
from localcluster.storage import VolumeStore

log = logging.getLogger(__name__)
ALIGN = 4096


class CsiError(Exception):
    """A CSI call failed with a gRPC status code (``InvalidArgument``, ``Unimplemented`` ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"rpc error: code = {code} desc = {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SnapshotInfo:
    volume_handle: str
    snapshot_handle: str
    size: int  # as the driver reports it (0: unknown)
    creation_ns: int


class CsiPlugin:
    def __init__(
        self, store: VolumeStore, spec: DriverSpec, *, restore_size: bool = True, group_capability: bool | None = None
    ) -> None:
        self.store = store
        self.spec = spec
        self.driver = spec.name
        self.restore_size = restore_size
        self.group_capability = spec.groups if group_capability is None else group_capability
        self.lock = threading.Lock()  # snapshots (single and group) are taken under it

    # ---- volumes -------------------------------------------------------------------------------------

    def volume_handle(self, name: str) -> str:
        return handle_for(self.driver, "volume", name)

    def create_volume(self, name: str, size: int, mode: str, snapshot: str | None = None) -> tuple[str, int]:
        """(volume handle, capacity in bytes) of a new volume for request ``name``."""
        handle = self.volume_handle(name)
        path = self.store.volume_path(handle)
        if path.exists():
            return handle, path.stat().st_size
        if snapshot is not None:
            have = self.snapshot_size(snapshot)
            if have is not None and have > size:
                raise CsiError(
                    "InvalidArgument", f"snapshot {snapshot} size {have} is greater than requested volume size {size}"
                )
        size = -(-max(size, ALIGN) // ALIGN) * ALIGN
        try:
            self.store.create_volume(handle, size, from_snapshot=snapshot)
        except BaseException:
            self.store.delete_volume(handle)
            raise
        return handle, self.store.volume_size(handle)

    def delete_volume(self, handle: str) -> None:
        self.store.delete_volume(handle)

    def volume_exists(self, handle: str) -> bool:
        return self.store.volume_path(handle).exists()

    # ---- snapshots -----------------------------------------------------------------------------------

    def snapshot_handle(self, name: str) -> str:
        return handle_for(self.driver, "snapshot", name)

    def reported_size(self, size: int) -> int:
        return size if self.restore_size else 0

    def create_snapshot(self, volume_handle: str, name: str) -> SnapshotInfo:
        handle = self.snapshot_handle(name)
        with self.lock:
            return self._snapshot(volume_handle, handle, time.time_ns())

    def create_group_snapshot(self, volume_handles: Sequence[str], name: str) -> tuple[str, list[SnapshotInfo]]:
        """(group handle, one snapshot per volume, in the order given), all at one instant."""
        if not self.group_capability:
            raise CsiError("Unimplemented", "unknown service csi.v1.GroupController")
        group = handle_for(self.driver, "group", name)
        with self.lock:
            now = time.time_ns()
            infos = [self._snapshot(v, self.snapshot_handle(f"{name}/{v}"), now) for v in volume_handles]
        return group, infos

    def _snapshot(self, volume_handle: str, handle: str, creation_ns: int) -> SnapshotInfo:
        path = self.store.snapshot_path(handle)
        if path.exists():  # a retried call: the file's mtime kept the creation time
            return SnapshotInfo(volume_handle, handle, self.reported_size(path.stat().st_size), path.stat().st_mtime_ns)
        self.store.create_snapshot(volume_handle, handle)
        os.utime(path, ns=(creation_ns, creation_ns))
        return SnapshotInfo(volume_handle, handle, self.reported_size(path.stat().st_size), creation_ns)

    def snapshot_size(self, handle: str) -> int | None:
        """The snapshot's real size in the storage, None when it does not exist."""
        try:
            return self.store.snapshot_path(handle).stat().st_size
        except FileNotFoundError:
            return None

    def snapshot_info(self, handle: str) -> tuple[int, int] | None:
        """(reported size, creation time in unix ns) of an existing snapshot, else None (GetSnapshot)."""
        try:
            st = self.store.snapshot_path(handle).stat()
        except FileNotFoundError:
            return None
        return self.reported_size(st.st_size), st.st_mtime_ns

    def delete_snapshot(self, handle: str) -> None:
        self.store.delete_snapshot(handle)
