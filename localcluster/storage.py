"""The local cluster's block storage: what the CSI-like driver provisions and the kubelet attaches.

A volume is a sparse image file ``<root>/volumes/<volume handle>.img``; a snapshot is a sparse
copy ``<root>/snapshots/<snapshot handle>.img`` (reflink when the filesystem can, so it is
instant and shares blocks). The snapshot files are what the local SnapshotMetadata server
compares, exactly as the hostpath driver compares its snapshot files.

Pods get a volume as a block device: ``attach`` returns a loop device bound to the image when the
machine allows loop devices (root, /dev/loop-control), otherwise the image file path itself (the
documented fallback: the reader gets a regular file, which cbt-mover handles like a device).
``detach`` undoes it. Everything is safe to call from several threads.

``attach_fault(message, handles=None)`` is a test switch (a context manager): while it is on, attaching a
volume that is not attached yet (one of ``handles``, or any) fails with ``AttachError(message)``, as a storage
system that refuses ControllerPublishVolume (a fenced or lost disk, an array that is down); the kubelet reports
it as the attach-detach controller does (a FailedAttachVolume Warning on the pod) and keeps retrying. It injects
the storage fault only: everything around it behaves as usual.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path


class StorageError(Exception):
    """A volume or snapshot operation failed (missing handle, no space, loop setup failure)."""


class AttachError(StorageError):
    """The storage refused to attach a volume (``VolumeStore.attach_fault``): the driver's message."""


@dataclass(frozen=True)
class Attachment:
    handle: str
    path: str  # what a pod opens: /dev/loopN, or the image file in the fallback
    loop: bool


def loop_devices_available() -> bool:
    return os.geteuid() == 0 and os.path.exists("/dev/loop-control") and shutil.which("losetup") is not None


class VolumeStore:
    def __init__(self, root: str | os.PathLike, use_loop: bool | None = None) -> None:
        self.root = Path(root)
        (self.root / "volumes").mkdir(parents=True, exist_ok=True)
        (self.root / "snapshots").mkdir(parents=True, exist_ok=True)
        self.use_loop = loop_devices_available() if use_loop is None else use_loop
        self._lock = threading.Lock()
        self._attached: dict[str, Attachment] = {}
        self._attach_faults: list[tuple[str, frozenset[str] | None]] = []

    # -- volumes ---------------------------------------------------------------------------

    def volume_path(self, handle: str) -> Path:
        return self.root / "volumes" / f"{_safe(handle)}.img"

    def create_volume(self, handle: str, size: int, from_snapshot: str | None = None) -> Path:
        """A new zeroed (sparse) volume of ``size`` bytes, or a copy of a snapshot grown to ``size``."""
        path = self.volume_path(handle)
        if path.exists():
            raise StorageError(f"volume {handle} already exists")
        if from_snapshot is not None:
            _sparse_copy(self.snapshot_path(from_snapshot), path)
            if path.stat().st_size < size:
                os.truncate(path, size)
        else:
            with open(path, "wb") as f:
                f.truncate(size)
        return path

    def delete_volume(self, handle: str) -> None:
        self.detach(handle)
        self.volume_path(handle).unlink(missing_ok=True)

    def volume_size(self, handle: str) -> int:
        return self._existing(self.volume_path(handle), "volume", handle).stat().st_size

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_path(self, snap_handle: str) -> Path:
        return self.root / "snapshots" / f"{_safe(snap_handle)}.img"

    def create_snapshot(self, volume_handle: str, snap_handle: str) -> Path:
        """A point-in-time copy of a volume (flushes an attached loop device first)."""
        src = self._existing(self.volume_path(volume_handle), "volume", volume_handle)
        att = self._attached.get(volume_handle)
        if att is not None and att.loop:
            subprocess.run(["blockdev", "--flushbufs", att.path], check=False, capture_output=True)
        dst = self.snapshot_path(snap_handle)
        _sparse_copy(src, dst)
        return dst

    def delete_snapshot(self, snap_handle: str) -> None:
        self.snapshot_path(snap_handle).unlink(missing_ok=True)

    def snapshot_size(self, snap_handle: str) -> int:
        return self._existing(self.snapshot_path(snap_handle), "snapshot", snap_handle).stat().st_size

    # -- attach ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def attach_fault(self, message: str, handles: Collection[str] | None = None) -> Iterator[None]:
        """While on: a new attachment of a volume (of ``handles``, or any) fails with ``AttachError(message)``."""
        fault = (message, frozenset(handles) if handles is not None else None)
        with self._lock:
            self._attach_faults.append(fault)
        try:
            yield
        finally:
            with self._lock:
                self._attach_faults.remove(fault)

    def check_attach(self, handle: str) -> None:
        """Raise ``AttachError`` when an ``attach_fault`` covers ``handle``."""
        for message, handles in list(self._attach_faults):
            if handles is None or handle in handles:
                raise AttachError(message)

    def attach(self, handle: str) -> Attachment:
        """The device path a pod gets for volume ``handle`` (idempotent)."""
        with self._lock:
            if handle in self._attached:
                return self._attached[handle]
            self.check_attach(handle)
            image = self._existing(self.volume_path(handle), "volume", handle)
            if self.use_loop:
                proc = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise StorageError(f"losetup for volume {handle} failed: {proc.stderr.strip()}")
                att = Attachment(handle, proc.stdout.strip(), True)
            else:
                att = Attachment(handle, str(image), False)
            self._attached[handle] = att
            return att

    def detach(self, handle: str) -> None:
        with self._lock:
            att = self._attached.pop(handle, None)
        if att is not None and att.loop:
            subprocess.run(["losetup", "-d", att.path], check=False, capture_output=True)

    def detach_all(self) -> None:
        for handle in list(self._attached):
            self.detach(handle)

    def _existing(self, path: Path, what: str, handle: str) -> Path:
        if not path.exists():
            raise StorageError(f"{what} {handle} does not exist")
        return path


def _safe(handle: str) -> str:
    if not handle or "/" in handle or handle.startswith("."):
        raise StorageError(f"invalid handle {handle!r}")
    return handle


def _sparse_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_suffix(".tmp")
    proc = subprocess.run(
        ["cp", "--reflink=auto", "--sparse=always", str(src), str(tmp)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"copying {src.name} failed: {proc.stderr.strip()}")
    os.replace(tmp, dst)
