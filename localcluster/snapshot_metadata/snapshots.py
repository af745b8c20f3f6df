"""Snapshots the local SnapshotMetadata server can describe, and the catalog it finds them in.

A ``Snapshot`` has the identity the sidecar resolves (``namespace``/``name`` of the VolumeSnapshot, ``handle``
= ``VolumeSnapshotContent.status.snapshotHandle``, ``volume_id`` of its source volume), a ``capacity`` in bytes,
a mutable ``ready`` flag, and two block queries the server turns into tuples. Both yield ``(first_block,
block_count)`` runs in units of the ``block_size`` asked for, strictly ascending, maximal (adjacent runs merged),
starting at block ``start_block`` and never past ``ceil(capacity / block_size)`` blocks:

- ``allocated_runs(block_size, start_block)``: blocks that are not all zero (the hostpath driver's rule);
- ``changed_runs(base, block_size, start_block)``: blocks whose bytes differ from ``base`` (past the end of
  either snapshot counts as zeros), so a block overwritten with zeros is a change.

``ImageSnapshot(path, ...)`` reads a regular image file: holes found with SEEK_DATA are skipped without reading,
data is read in 1 MiB pieces and only pieces that are non-zero (or differ from the base) are split into blocks.
``SyntheticSnapshot(capacity, pattern)`` has no data: block ``i`` is allocated, and changed against any synthetic
base, iff ``i % pattern == 0``, so a benchmark can stream millions of blocks without any I/O.

``SnapshotCatalog`` is the lookup the server needs: ``by_name(namespace, name)`` for the VolumeSnapshot an RPC
names and ``by_handle(handle)`` for the delta's base; both raise ``SnapshotNotFound`` and must be thread-safe.
A not-ready snapshot is still returned (the server answers UNAVAILABLE). ``by_name`` may raise
``SnapshotRefused(code, message)`` for a ready snapshot the sidecar refuses (the server answers with that gRPC
status code name and message, e.g. UNAVAILABLE "no default VolumeSnapshotClass is set for the CSI driver ...").
``InMemoryCatalog`` is the simple one.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
import uuid
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

Run = tuple[int, int]  # (first_block, block_count)
PIECE = 1 << 20
DEFAULT_VOLUME = "vol-1"


class SnapshotNotFound(LookupError):
    """No snapshot with that namespace/name or handle."""


class SnapshotRefused(SnapshotNotFound):
    """The sidecar refuses the target snapshot: ``code`` is a ``grpc.StatusCode`` name (``UNAVAILABLE`` ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@functools.lru_cache(maxsize=16)
def _zeros(n: int) -> bytes:
    return bytes(n)


def merge_runs(runs: Iterable[Run]) -> Iterator[Run]:
    """Merge adjacent ascending runs into maximal ones."""
    first = count = None
    for f, c in runs:
        if first is not None and f == first + count:
            count += c
            continue
        if first is not None:
            yield first, count
        first, count = f, c
    if first is not None:
        yield first, count


def _differing_blocks(a: bytes, b: bytes | None, first_block: int, bs: int) -> Iterator[Run]:
    """Blocks of piece ``a`` (starting at ``first_block``) that differ from ``b``, or are non-zero if b is None."""
    if a == (b if b is not None else _zeros(len(a))):
        return
    for i in range(0, len(a), bs):
        block = a[i : i + bs]
        if block != (b[i : i + bs] if b is not None else _zeros(len(block))):
            yield first_block + i // bs, 1


def _piece(bs: int) -> int:
    return max(PIECE // bs, 1) * bs


class Snapshot:
    """A snapshot of a block volume; subclasses provide ``allocated_runs`` and ``read``.

    ``cache_key``: hashable and not None only when the block queries always give the same answer (the server may
    then replay encoded responses).
    """

    cache_key: Hashable | None = None

    def __init__(
        self,
        *,
        capacity: int,
        namespace: str,
        name: str,
        handle: str | None = None,
        volume_id: str = DEFAULT_VOLUME,
        ready: bool = True,
    ):
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self.namespace = namespace
        self.name = name
        self.handle = handle or f"snap-{uuid.uuid4()}"
        self.volume_id = volume_id
        self.ready = ready

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.namespace}/{self.name}, handle={self.handle!r}, "
            f"volume={self.volume_id!r}, capacity={self.capacity}, ready={self.ready})"
        )

    def blocks(self, block_size: int) -> int:
        return -(-self.capacity // block_size)

    def allocated_runs(self, block_size: int, start_block: int = 0) -> Iterator[Run]:
        raise NotImplementedError

    def read(self, offset: int, length: int) -> bytes:
        """Bytes [offset, offset+length) clipped to capacity; zeros where the snapshot has no data."""
        raise NotImplementedError

    def changed_runs(self, base: Snapshot, block_size: int, start_block: int = 0) -> Iterator[Run]:
        """Generic delta through ``read()`` of both snapshots (subclasses have faster paths)."""
        return merge_runs(self._read_diff(base, block_size, start_block))

    def _read_diff(self, base: Snapshot, bs: int, start_block: int) -> Iterator[Run]:
        pos, step = start_block * bs, _piece(bs)
        while pos < self.capacity:
            n = min(step, self.capacity - pos)
            a = self.read(pos, n).ljust(n, b"\0")
            yield from _differing_blocks(a, base.read(pos, n).ljust(n, b"\0"), pos // bs, bs)
            pos += n


def _seek(fd: int, pos: int, whence: int, size: int) -> int | None:
    """lseek SEEK_DATA/SEEK_HOLE; None past the last data; a filesystem without it is all data."""
    try:
        return os.lseek(fd, pos, whence)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        if pos >= size:
            return None
        return pos if whence == os.SEEK_DATA else size


def _pread(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    return data if len(data) == n else data.ljust(n, b"\0")


class ImageSnapshot(Snapshot):
    """A snapshot backed by a (sparse) regular image file; ``capacity`` defaults to the file size."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        namespace: str = "default",
        name: str | None = None,
        handle: str | None = None,
        volume_id: str = DEFAULT_VOLUME,
        capacity: int | None = None,
        ready: bool = True,
    ):
        self.path = Path(path)
        st = os.stat(self.path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{self.path} is not a regular file")
        super().__init__(
            capacity=st.st_size if capacity is None else capacity,
            namespace=namespace,
            name=name or self.path.stem,
            handle=handle,
            volume_id=volume_id,
            ready=ready,
        )

    def read(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self.capacity - offset))
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return _pread(fd, length, offset)
        finally:
            os.close(fd)

    def allocated_runs(self, block_size: int, start_block: int = 0) -> Iterator[Run]:
        return merge_runs(self._scan(None, block_size, start_block))

    def changed_runs(self, base: Snapshot, block_size: int, start_block: int = 0) -> Iterator[Run]:
        if not isinstance(base, ImageSnapshot):
            return super().changed_runs(base, block_size, start_block)
        return merge_runs(self._scan(base, block_size, start_block))

    def _scan(self, base: ImageSnapshot | None, bs: int, start_block: int) -> Iterator[Run]:
        """Runs of blocks that are non-zero (no base) or differ from ``base``, skipping holes of both files."""
        fds = [os.open(self.path, os.O_RDONLY)]
        try:
            if base is not None:
                fds.append(os.open(base.path, os.O_RDONLY))
            sizes = [os.fstat(fd).st_size for fd in fds]
            pos, step, end = start_block * bs, _piece(bs), self.capacity
            while pos < end:
                found = [_seek(fd, pos, os.SEEK_DATA, size) for fd, size in zip(fds, sizes, strict=True)]
                starts = [d for d in found if d is not None]
                if not starts or min(starts) >= end:
                    return  # only holes (zeros in both files) from here on
                pos = max(pos, min(starts) - min(starts) % bs)
                n = min(step, end - pos)
                a = _pread(fds[0], n, pos)
                yield from _differing_blocks(a, _pread(fds[1], n, pos) if base else None, pos // bs, bs)
                pos += n
        finally:
            for fd in fds:
                os.close(fd)


class SyntheticSnapshot(Snapshot):
    """No data: block ``i`` is allocated (and changed against a synthetic base) iff ``i % pattern < run``."""

    def __init__(
        self,
        capacity: int,
        pattern: int = 1,
        *,
        run: int = 1,
        namespace: str = "default",
        name: str = "synthetic",
        handle: str | None = None,
        volume_id: str = DEFAULT_VOLUME,
        ready: bool = True,
    ):
        if pattern < 1 or not 1 <= run <= pattern:
            raise ValueError("need pattern >= 1 and 1 <= run <= pattern (run blocks out of every pattern)")
        super().__init__(
            capacity=capacity, namespace=namespace, name=name, handle=handle, volume_id=volume_id, ready=ready
        )
        self.pattern = pattern
        self.run = run
        self.cache_key = ("synthetic", capacity, pattern, run)

    def allocated_runs(self, block_size: int, start_block: int = 0) -> Iterator[Run]:
        n = self.blocks(block_size)
        k, r = self.pattern, self.run
        if r == k:
            if start_block < n:
                yield start_block, n - start_block
            return
        first = start_block // k * k
        if start_block - first < r:  # resuming inside a run
            yield start_block, min(first + r, n) - start_block
            first += k
        else:
            first += k
        for i in range(first, n, k):
            yield i, min(r, n - i)

    def changed_runs(self, base: Snapshot, block_size: int, start_block: int = 0) -> Iterator[Run]:
        if not isinstance(base, SyntheticSnapshot):
            raise TypeError("a synthetic snapshot has no data to compare with a non-synthetic base")
        return self.allocated_runs(block_size, start_block)

    def read(self, offset: int, length: int) -> bytes:
        raise NotImplementedError("a synthetic snapshot has no data")


class SnapshotCatalog(Protocol):
    """Where the server finds snapshots (thread-safe). Raise SnapshotNotFound; return not-ready ones too."""

    def by_name(self, namespace: str, name: str) -> Snapshot:
        """The snapshot of VolumeSnapshot ``namespace/name`` (the RPC's snapshot_name / target_snapshot_name)."""
        ...

    def by_handle(self, handle: str) -> Snapshot:
        """The snapshot with CSI handle ``handle`` (the delta's base_snapshot_id)."""
        ...


class InMemoryCatalog:
    """A dict-backed SnapshotCatalog; ``add`` replaces a snapshot with the same namespace/name."""

    def __init__(self, snapshots: Iterable[Snapshot] = ()):
        self._lock = threading.Lock()
        self._by_name: dict[tuple[str, str], Snapshot] = {}
        self._by_handle: dict[str, Snapshot] = {}
        for snap in snapshots:
            self.add(snap)

    def add(self, snapshot: Snapshot) -> Snapshot:
        with self._lock:
            old = self._by_name.get((snapshot.namespace, snapshot.name))
            if old is not None:
                self._by_handle.pop(old.handle, None)
            self._by_name[snapshot.namespace, snapshot.name] = snapshot
            self._by_handle[snapshot.handle] = snapshot
        return snapshot

    def remove(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._by_name.pop((snapshot.namespace, snapshot.name), None)
            self._by_handle.pop(snapshot.handle, None)

    def by_name(self, namespace: str, name: str) -> Snapshot:
        with self._lock:
            snap = self._by_name.get((namespace, name))
        if snap is None:
            raise SnapshotNotFound(f"VolumeSnapshot {namespace}/{name} not found")
        return snap

    def by_handle(self, handle: str) -> Snapshot:
        with self._lock:
            snap = self._by_handle.get(handle)
        if snap is None:
            raise SnapshotNotFound(f"snapshot handle {handle!r} not found")
        return snap
