"""Restore: write one backup's map onto a device or image file, verifying every chunk.

Restore reads exactly one manifest and its map (never a chain of parents). Holes are left
alone on a target known to read as zeros (a new or empty image file, or when the caller
says so) and zeroed otherwise.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable

from movers import device
from movers.errors import UsageError
from movers.pipeline.reader import READ_AHEAD, MapReader
from movers.pipeline.stats import ProgressFn, RestoreStats
from movers.pipeline.target import TargetWriter
from movers.repo import volmap
from movers.repo.manifest import Manifest
from movers.repo.repository import Repository


def _open_target(path: str, capacity: int) -> tuple[int, bool]:
    """Open the target for writing; return ``(fd, known to read as zeros)``.

    A missing path becomes a new sparse image file; a regular file is resized to the
    capacity; a block device must be at least the capacity.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is None or (stat.S_ISREG(st.st_mode) and st.st_size == 0):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as err:
            raise UsageError(f"cannot create restore target {path}: {err.strerror}") from None
        device.resize(fd, capacity)
        return fd, True
    fd = device.open_device(path, write=True)
    if device.is_block_device(fd):
        size = device.device_size(fd)
        if size < capacity:
            os.close(fd)
            raise UsageError(f"target device {path} has {size} bytes, smaller than the backup ({capacity} bytes)")
    else:  # a regular file: open_device refuses anything else
        device.resize(fd, capacity)
    return fd, False


def holes(entries: Iterable[volmap.Entry], start: int, end: int) -> list[tuple[int, int]]:
    """The ``(offset, length)`` ranges of ``[start, end)`` that no entry covers."""
    out = []
    pos = start
    for voff, length, _cid, _coff in entries:
        if voff > pos:
            out.append((pos, voff - pos))
        pos = max(pos, voff + length)
    if pos < end:
        out.append((pos, end - pos))
    return out


def run_restore(
    repo: Repository,
    manifest: Manifest,
    target: str,
    *,
    assume_zeroed: bool = False,
    workers: int = 4,
    progress: ProgressFn | None = None,
) -> RestoreStats:
    """Write backup ``manifest`` to ``target`` and fsync it. Raises ``IntegrityError`` on
    any damaged chunk (naming its volume offset); the target is then incomplete."""
    started = time.monotonic()
    capacity = manifest.capacity_bytes
    stats = RestoreStats(capacity_bytes=capacity)
    fd, zeroed = _open_target(target, capacity)
    zeroed = zeroed or assume_zeroed
    page_size = manifest.map.page_size
    writer = TargetWriter(fd, stats)

    def on_page(page_index: int, entries: list[volmap.Entry]) -> int:
        start = page_index * page_size
        for off, length in holes(entries, start, min(start + page_size, capacity)):
            stats.hole_bytes += length
            if not zeroed:
                device.zero_range(fd, off, length)
                stats.zeroed_bytes += length
        if progress:
            progress(stats.written_bytes + stats.hole_bytes, capacity)
        return writer.add_page(entries)

    try:
        # as far ahead as any reader, plus room for one page's slabs (so the next page starts while one finishes)
        reader = MapReader(repo, workers=workers, max_inflight=READ_AHEAD + writer.most_held)
        reader.run(manifest, writer.write, on_page)
        device.sync(fd)
    finally:
        os.close(fd)
    stats.fetched_bytes = reader.fetched_bytes
    stats.chunks_verified = reader.chunks_verified
    stats.duration_s = round(time.monotonic() - started, 3)
    if progress:
        progress(capacity, capacity)
    return stats
