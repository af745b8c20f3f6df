"""Read-back verification: after a restore, compare what the device holds with the backup.

Restore already verifies every chunk it fetches; this catches what happens after: writes the device
dropped or misplaced, a wrong or too small target, stale data in ranges that should read as zeros. It
reads the whole device once (``capacity`` bytes, after asking the kernel to drop its cached pages so
the bytes come from the device) and checks:

* every map entry that is a whole chunk: the repository's content hash of the device bytes is the chunk id
  (no fetch);
* every entry that is part of a chunk (an incremental clipped it): the 64 KiB blocks it touches match
  the page's block digests (``movers.repo.digests``) when all of them are known, otherwise the device
  bytes equal that part of the chunk, fetched again (and verified) from the repository;
* every byte no entry covers is zero.

Cost: one sequential read of the device plus the hashing (about the restore's own write time on a
local disk), plus re-fetching the chunks used in part whose blocks have no known digest (blocks a CBT
incremental wrote only in part).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from itertools import repeat

from movers import device
from movers.errors import IntegrityError
from movers.pipeline.reader import MapReader
from movers.pipeline.restore import holes
from movers.pipeline.stats import ProgressFn
from movers.pipeline.zeros import is_zero
from movers.repo import digests as dg
from movers.repo import volmap
from movers.repo.contenthash import ContentHash
from movers.repo.manifest import Manifest
from movers.repo.repository import Repository

_ZERO_READ = 64 << 10  # is_zero compares against a cached 64 KiB of zeros at this size


@dataclass
class ReadbackStats:
    checked_bytes: int = 0  # data bytes compared with the backup
    zero_bytes: int = 0  # hole bytes checked to be zeros
    refetched_bytes: int = 0  # stored bytes fetched again for chunks used in part
    duration_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def verify_device(
    repo: Repository, manifest: Manifest, target: str, *, workers: int = 4, progress: ProgressFn | None = None
) -> ReadbackStats:
    """Check that ``target`` holds backup ``manifest`` (see the module doc); ``IntegrityError`` names the
    first differing volume offset."""
    started = time.monotonic()
    stats = ReadbackStats()
    capacity, page_size = manifest.capacity_bytes, manifest.map.page_size
    index = repo.index()
    content_hash = repo.content_hash
    lock = threading.Lock()
    fd = device.open_device(target)
    try:
        size = device.device_size(fd)
        if size < capacity:
            raise IntegrityError(f"{target} has {size} bytes, less than the backup's {capacity}")
        _drop_cache(fd)
        partial: set[bytes] = set()  # chunks to fetch again
        whole: set[bytes] = set()
        by_digest: set[int] = set()  # volume offsets of the partial entries checked by block digests

        def check_whole(entry: volmap.Entry) -> None:
            voff, length, cid, _coff = entry
            if content_hash.chunk_id(device.pread_exact(fd, length, voff)) != cid:
                raise _differs(target, manifest, voff, length)
            with lock:
                stats.checked_bytes += length

        with ThreadPoolExecutor(max(1, workers), thread_name_prefix="readback") as pool:
            for page_index, (page_id, _n) in enumerate(repo.page_slots(manifest)):
                entries, digests = repo.read_page_with_digests(page_id)
                start = page_index * page_size
                for off, length in holes(entries, start, min(start + page_size, capacity)):
                    _check_zeros(fd, off, length, target, manifest)
                    stats.zero_bytes += length
                todo, blocks = [], {}
                for entry in entries:
                    loc = index.get(entry[2])
                    if entry[3] == 0 and loc is not None and entry[1] == loc.raw_len:
                        todo.append(entry)
                        whole.add(entry[2])
                    elif (known := _known_blocks(entry, start, digests)) is not None:
                        blocks.update(known)
                        by_digest.add(entry[0])
                        stats.checked_bytes += entry[1]
                    else:
                        partial.add(entry[2])
                for _ in pool.map(check_whole, todo):
                    pass
                for _ in pool.map(
                    _check_block,
                    repeat(fd),
                    blocks.items(),
                    repeat(capacity),
                    repeat(target),
                    repeat(manifest),
                    repeat(content_hash),
                ):
                    pass
                if progress:
                    progress(min(start + page_size, capacity), capacity)
        if partial:
            reader = MapReader(repo, workers=workers)

            def sink(raw: bytes, uses: list[volmap.Entry]) -> None:
                for voff, length, _cid, coff in uses:
                    if (coff == 0 and length == len(raw)) or voff in by_digest:
                        continue  # checked in the first pass
                    if device.pread_exact(fd, length, voff) != raw[coff : coff + length]:
                        raise _differs(target, manifest, voff, length)
                    with lock:
                        stats.checked_bytes += length

            reader.run(manifest, sink, skip=whole - partial)
            stats.refetched_bytes = reader.fetched_bytes
    finally:
        os.close(fd)
    stats.duration_s = round(time.monotonic() - started, 3)
    return stats


def _known_blocks(entry: volmap.Entry, page_start: int, digests: bytes) -> dict[int, bytes] | None:
    """Block index -> digest for every 64 KiB block ``entry`` touches, or None if one is not known."""
    out = {}
    for block in dg.blocks_touching(entry[0], entry[0] + entry[1]):
        digest = dg.recorded(digests, page_start, block)
        if digest is None:
            return None
        out[block] = digest
    return out


def _check_block(
    fd: int, item: tuple[int, bytes], capacity: int, target: str, manifest: Manifest, content_hash: ContentHash
) -> None:
    block, digest = item
    start, end = dg.block_span(block, capacity)
    if content_hash.block_digest(device.pread_exact(fd, end - start, start)) != digest:
        raise _differs(target, manifest, start, end - start)


def _drop_cache(fd: int) -> None:
    """Ask the kernel to drop cached pages of ``fd`` (after restore's fsync they are clean), best effort."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass


def _check_zeros(fd: int, offset: int, length: int, target: str, manifest: Manifest) -> None:
    end = offset + length
    while offset < end:
        n = min(_ZERO_READ, end - offset)
        if not device.is_hole(fd, offset, n) and not is_zero(device.pread_exact(fd, n, offset), 0, n):
            raise _differs(target, manifest, offset, n, "should read as zeros")
        offset += n


def _differs(target: str, manifest: Manifest, offset: int, length: int, what: str = "differs from the backup"):
    return IntegrityError(
        f"read-back of {target}: {length} bytes at volume offset {offset} {what}"
        f" (volume {manifest.volume.id} backup {manifest.backup_id})"
    )
