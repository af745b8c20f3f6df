"""The CSI-like driver's storage operations (what CreateVolume, CreateSnapshot ... do), over ``VolumeStore``.

``CsiPlugin(store, driver)``: every call is idempotent for the same request (handles come from
``names.handle_for``, an existing result is kept), as CSI requires of retried calls.

- ``create_volume(name, size, mode, snapshot=None)``: a sparse image of ``size`` bytes (rounded up to 4 KiB, as
  many drivers round to their allocation unit), or a copy of a snapshot grown to ``size``. A new Filesystem-mode
  volume is formatted with ``mkfs.ext4`` when the machine has it (``fs_formatted`` tells); without it the image
  stays zeroed and whoever mounts it formats it (the documented fallback). A volume restored from a snapshot
  keeps the snapshot's bytes (no mkfs, no filesystem resize).
- ``create_snapshot(volume, name)`` / ``create_group_snapshot(volumes, name)``: point-in-time copies; every
  member of a group is copied under one lock that also excludes single snapshots, so the group is taken at one
  instant with respect to everything this driver does, and all members get one creation time.
- ``delete_volume`` / ``delete_snapshot``: remove the files (and detach a loop device left attached).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from localcluster.controllers.names import handle_for
from localcluster.storage import StorageError, VolumeStore

log = logging.getLogger(__name__)
ALIGN = 4096


@dataclass(frozen=True)
class SnapshotInfo:
    volume_handle: str
    snapshot_handle: str
    size: int
    creation_ns: int


def mkfs_available() -> bool:
    return shutil.which("mkfs.ext4") is not None


class CsiPlugin:
    def __init__(self, store: VolumeStore, driver: str, *, mkfs: bool | None = None) -> None:
        self.store = store
        self.driver = driver
        self.mkfs = mkfs_available() if mkfs is None else mkfs
        self.lock = threading.Lock()  # snapshots (single and group) are taken under it
        self.fs_formatted: set[str] = set()

    # ---- volumes -------------------------------------------------------------------------------------

    def volume_handle(self, name: str) -> str:
        return handle_for(self.driver, "volume", name)

    def create_volume(self, name: str, size: int, mode: str, snapshot: str | None = None) -> tuple[str, int]:
        """(volume handle, capacity in bytes) of a new volume for request ``name``."""
        handle = self.volume_handle(name)
        size = -(-max(size, ALIGN) // ALIGN) * ALIGN
        path = self.store.volume_path(handle)
        if path.exists():
            return handle, path.stat().st_size
        try:
            self.store.create_volume(handle, size, from_snapshot=snapshot)
            if mode == "Filesystem" and snapshot is None and self.mkfs:
                self._mkfs(handle)
        except BaseException:
            self.store.delete_volume(handle)
            raise
        return handle, self.store.volume_size(handle)

    def _mkfs(self, handle: str) -> None:
        path = self.store.volume_path(handle)
        proc = subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                               "-L", handle[:16], str(path)], capture_output=True, text=True)  # fmt: skip
        if proc.returncode != 0:
            raise StorageError(f"mkfs.ext4 on volume {handle} failed: {proc.stderr.strip()}")
        self.fs_formatted.add(handle)

    def delete_volume(self, handle: str) -> None:
        self.store.delete_volume(handle)

    def volume_exists(self, handle: str) -> bool:
        return self.store.volume_path(handle).exists()

    # ---- snapshots -----------------------------------------------------------------------------------

    def snapshot_handle(self, name: str) -> str:
        return handle_for(self.driver, "snapshot", name)

    def create_snapshot(self, volume_handle: str, name: str) -> SnapshotInfo:
        handle = self.snapshot_handle(name)
        with self.lock:
            return self._snapshot(volume_handle, handle, time.time_ns())

    def create_group_snapshot(self, volume_handles: Sequence[str], name: str) -> tuple[str, list[SnapshotInfo]]:
        """(group handle, one snapshot per volume, in the order given), all at one instant."""
        group = handle_for(self.driver, "group", name)
        with self.lock:
            now = time.time_ns()
            infos = [self._snapshot(v, self.snapshot_handle(f"{name}/{v}"), now) for v in volume_handles]
        return group, infos

    def _snapshot(self, volume_handle: str, handle: str, creation_ns: int) -> SnapshotInfo:
        path = self.store.snapshot_path(handle)
        if path.exists():  # a retried call: the file's mtime kept the creation time
            return SnapshotInfo(volume_handle, handle, path.stat().st_size, path.stat().st_mtime_ns)
        self.store.create_snapshot(volume_handle, handle)
        os.utime(path, ns=(creation_ns, creation_ns))
        return SnapshotInfo(volume_handle, handle, path.stat().st_size, creation_ns)

    def snapshot_size(self, handle: str) -> int | None:
        info = self.snapshot_info(handle)
        return None if info is None else info[0]

    def snapshot_info(self, handle: str) -> tuple[int, int] | None:
        """(size, creation time in unix ns) of an existing snapshot, else None (GetSnapshot / ListSnapshots)."""
        try:
            st = self.store.snapshot_path(handle).stat()
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns

    def delete_snapshot(self, handle: str) -> None:
        self.store.delete_snapshot(handle)
