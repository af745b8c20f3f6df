"""Restore onto a device that holds another version of the volume, fetching and writing only what differs.

``restore_in_place(repo, manifest, target, extents=None, workers=..., progress=...) -> RestoreStats``:

1. **Checks, before anything is read or written** (``open_in_place``): the target exists, is an image file of
   exactly the backup's capacity or a block device of at least it (provisioners round sizes up; the bytes past
   the volume are left as they are, as a full restore leaves them), and is not in use: a block device is opened
   ``O_EXCL``, which Linux refuses while a filesystem is mounted on it (or another exclusive holder has it); an
   image file that backs a loop device is refused by name. Extents, when given, were checked against the volume
   by the caller (``movers.extents.validated``).
2. **Compare, without a fetch.** Without extents, the whole device is read once and every 64 KiB block is
   compared with the block digest the map page records (``movers.repo.digests``; a block whose digest is that of
   zeros is compared with zeros instead of hashed). A block whose digest is not known (a CBT backup read only
   part of it) is compared by the content hash of each whole chunk that covers it, and ranges no entry covers
   must read as zeros; what is left (part of a chunk without a digest) is taken as differing. With extents
   (ranges known to differ, as CBT between the backup's snapshot and the live volume reports them) nothing is
   compared here and nothing else of the device is read: the extents are the differing ranges.
3. **Fetch and write what differs.** Only the chunks whose map entries overlap a differing range are fetched
   (``MapReader``, given only the pages and entries the ranges touch: each chunk verified); the device bytes of
   the overlap are compared with the chunk's ``WRITE_BLOCK`` at a time and only the blocks that differ are
   written. A differing range that no entry covers is zeroed the same way.
4. fsync.

The target is then bit-exact with the backup: every byte either matched a digest or hash the backup recorded,
or was compared with (and where it differed, written from) a verified chunk, or was checked or written as zero.
A failure part way leaves the target partly restored; the error says so, as a full restore's does.

Counters (``RestoreStats``): ``compared_bytes`` (device bytes read to compare), ``fetched_bytes`` (stored bytes
read from the repository), ``written_bytes`` (data bytes written) and ``zeroed_bytes`` (zero bytes written).
"""

from __future__ import annotations

import bisect
import errno
import glob
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from movers import device
from movers.errors import UsageError
from movers.pipeline.reader import MapReader
from movers.pipeline.restore import holes
from movers.pipeline.stats import ProgressFn, RestoreStats
from movers.pipeline.zeros import is_zero
from movers.repo import digests as dg
from movers.repo import volmap
from movers.repo.manifest import Manifest
from movers.repo.repository import Locator, Repository

WRITE_BLOCK = 4096  # the unit compared and written in step 3: a page of the device's cache
READ_SPAN = 16 * dg.DIGEST_BLOCK  # one read of step 2 covers this many bytes (its blocks compared one by one)

Range = tuple[int, int]  # [start, end) of the volume
# step 2's work queued for one page: its spans' compares, the compare of its blocks without a digest, its end
_Page = tuple[list[Future[list[Range]]], Callable[[], list[Range]] | None, int]


class TargetBusy(UsageError):
    """The in-place target is in use (mounted, or held by another process); nothing was written."""


def open_in_place(path: str, capacity: int) -> int:
    """The target opened for an in-place restore (see the module doc, step 1); ``UsageError`` (``TargetBusy`` when
    it is in use) otherwise, with nothing written."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"in-place restore target {path} does not exist (it restores onto an existing one)") from None
    except OSError as err:
        raise UsageError(f"cannot use restore target {path}: {err.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        loops = _loop_devices_backed_by(path)
        if loops:
            raise TargetBusy(f"restore target {path} is in use: it backs {', '.join(loops)}")
        flags = 0
    elif stat.S_ISBLK(st.st_mode):
        flags = os.O_EXCL
    else:
        raise UsageError(f"restore target {path} is neither a block device nor a regular file")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | flags)
    except OSError as err:
        if err.errno == errno.EBUSY:
            raise TargetBusy(f"restore target {path} is in use (mounted, or held by another process)") from None
        raise UsageError(f"cannot open restore target {path}: {err.strerror}") from None
    size = device.device_size(fd)
    if size < capacity or (size != capacity and not flags):  # a block device may be larger: provisioners round up
        os.close(fd)
        raise UsageError(
            f"restore target {path} has {size} bytes, the backup's volume {capacity}: an in-place restore needs a"
            " device of the volume's size (a block device: at least)"
        )
    if device.is_read_only(fd):
        os.close(fd)
        raise device.ReadOnly(f"restore target {path} is a read-only block device")
    return fd


def _loop_devices_backed_by(path: str) -> list[str]:
    """The loop devices whose backing file is ``path`` (``/sys/block/loop*/loop/backing_file``)."""
    real = os.path.realpath(path)
    found = []
    for backing in sorted(glob.glob("/sys/block/loop*/loop/backing_file")):
        try:
            with open(backing, encoding="utf-8") as f:
                name = f.read().strip().removesuffix(" (deleted)")
        except OSError:
            continue
        if name and os.path.realpath(name) == real:
            found.append("/dev/" + backing.split("/")[3])
    return found


def merged(ranges: Iterable[Range]) -> list[Range]:
    """``ranges`` sorted, with overlapping and adjacent ones joined."""
    out: list[Range] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def overlap(ranges: Sequence[Range], start: int, end: int) -> list[Range]:
    """The parts of ``[start, end)`` inside the sorted, disjoint ``ranges``."""
    i = bisect.bisect_right(ranges, (start, float("inf"))) - 1
    i = max(i, 0)
    out = []
    while i < len(ranges) and ranges[i][0] < end:
        s, e = max(ranges[i][0], start), min(ranges[i][1], end)
        if s < e:
            out.append((s, e))
        i += 1
    return out


def pages_touching(ranges: Iterable[Range], page_size: int) -> set[int]:
    """The indexes of the map pages (``page_size`` bytes of volume each) that ``ranges`` touch."""
    return {p for s, e in ranges for p in range(s // page_size, (e - 1) // page_size + 1)}


class _InPlace:
    """One in-place restore's state: the device, the backup, the counters (see the module doc)."""

    def __init__(self, repo: Repository, manifest: Manifest, fd: int, workers: int) -> None:
        self.repo, self.manifest, self.fd, self.workers = repo, manifest, fd, max(1, workers)
        self.capacity = manifest.capacity_bytes
        self.stats = RestoreStats(capacity_bytes=self.capacity)
        self.lock = threading.Lock()
        self.done = 0  # bytes of the differing ranges settled (step 3's progress)
        self.sparse = stat.S_ISREG(os.fstat(fd).st_mode)  # an image file, whose holes the filesystem can name

    def read(self, start: int, end: int) -> bytes:
        data = device.pread_exact(self.fd, end - start, start)
        with self.lock:
            self.stats.compared_bytes += end - start
        return data

    # step 2 -------------------------------------------------------------------------------------------------

    def differing(self, progress: ProgressFn | None) -> list[Range]:
        """The ranges of the device that differ from the backup, or might (step 2). The next page's reads are
        queued before a page's results are collected, so the workers do not wait between pages."""
        found: list[Range] = []
        page_size = self.manifest.map.page_size
        queued: deque[_Page] = deque()
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="compare")
        try:
            for page_index, (page_id, _n) in enumerate(self.repo.page_slots(self.manifest)):
                start = page_index * page_size
                end = min(start + page_size, self.capacity)
                if start >= end:
                    break
                entries, digests, locations = self.repo.read_located_page(page_id)
                known, unknown = self._blocks(start, end, digests)
                spans = [(s, min(s + READ_SPAN, end)) for s in range(start, end, READ_SPAN)]
                futures = [pool.submit(self._by_digest, span, known) for span in spans]
                rest = None
                if unknown:
                    where = self.repo.index() if locations is None else locations
                    rest = partial(self._without_digest, pool, entries, where, start, end, merged(unknown))
                queued.append((futures, rest, end))
                while len(queued) > 1:
                    self._collect(queued.popleft(), found, progress)
            while queued:
                self._collect(queued.popleft(), found, progress)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return merged(found)

    def _collect(
        self,
        page: _Page,
        found: list[Range],
        progress: ProgressFn | None,
    ) -> None:
        """Add one page's differing ranges to ``found``: its blocks compared by digest, then those without one."""
        futures, rest, end = page
        for future in futures:
            found.extend(future.result())
        if rest is not None:
            found.extend(rest())
        if progress:
            progress(end, self.capacity)

    def _blocks(self, start: int, end: int, digests: bytes) -> tuple[dict[int, bytes], list[Range]]:
        """The page's blocks by whether the page records their digest: ``{block: digest}``, spans of the rest."""
        known: dict[int, bytes] = {}
        unknown: list[Range] = []
        for block in dg.blocks_touching(start, end):
            digest = dg.recorded(digests, start, block)
            if digest is not None:
                known[block] = digest
            else:
                unknown.append(dg.block_span(block, self.capacity))
        return known, unknown

    def _by_digest(self, span: Range, known: dict[int, bytes]) -> list[Range]:
        """The blocks of ``span`` whose recorded digest the device's bytes do not have."""
        blocks = [b for b in dg.blocks_touching(*span) if b in known]
        if not blocks:
            return []
        lo, hi = dg.block_span(blocks[0], self.capacity)[0], dg.block_span(blocks[-1], self.capacity)[1]
        hashes = self.repo.content_hash
        if self.sparse and device.is_hole(self.fd, lo, hi - lo):  # an image file's hole reads as zeros: no read
            with self.lock:
                self.stats.compared_bytes += hi - lo
            spans = [dg.block_span(block, self.capacity) for block in blocks]
            return [
                (s, e) for block, (s, e) in zip(blocks, spans, strict=True) if hashes.zero_digest(e - s) != known[block]
            ]
        raw = self.read(lo, hi)
        data = memoryview(raw)
        out = []
        for block in blocks:
            s, e = dg.block_span(block, self.capacity)
            if known[block] == hashes.zero_digest(e - s):  # zeros in the backup: a compare, not a hash, says so
                same = is_zero(raw, s - lo, e - lo)
            else:
                same = hashes.block_digest(data[s - lo : e - lo]) == known[block]
            if not same:
                out.append((s, e))
        return out

    def _without_digest(
        self,
        pool: ThreadPoolExecutor,
        entries: list[volmap.Entry],
        index: Locator,
        start: int,
        end: int,
        unknown: list[Range],
    ) -> list[Range]:
        """The parts of the ``unknown`` blocks that differ: whole chunks by their content hash, uncovered ranges by
        reading as zeros; parts of chunks are taken as differing (step 3 compares them with the chunk). ``index``:
        where the page's chunks are (a located page's own locations, else the repository's index)."""
        whole, out = [], []
        for entry in entries:
            voff, length, cid, coff = entry
            parts = overlap(unknown, voff, voff + length)
            if not parts:
                continue
            loc = index.get(cid)
            if coff == 0 and loc is not None and length == loc.raw_len:
                whole.append(entry)
            else:
                out.extend(parts)
        for entry, same in zip(whole, pool.map(self._same_chunk, whole), strict=True):
            if not same:
                out.append((entry[0], entry[0] + entry[1]))
        for hole_start, hole_len in holes(entries, start, end):
            for s, e in overlap(unknown, hole_start, hole_start + hole_len):
                if any(not is_zero(self.read(a, b), 0, b - a) for a, b in _pieces(s, e, READ_SPAN)):
                    out.append((s, e))
        return out

    def _same_chunk(self, entry: volmap.Entry) -> bool:
        voff, length, cid, _coff = entry
        return self.repo.content_hash.chunk_id(self.read(voff, voff + length)) == cid

    # step 3 -------------------------------------------------------------------------------------------------

    def rewrite(self, ranges: list[Range], progress: ProgressFn | None) -> None:
        """Fetch the chunks that overlap ``ranges`` and write the blocks of ``ranges`` that differ (step 3)."""
        if not ranges:
            return
        wanted: dict[int, list[Range]] = {}  # entry's volume offset -> the parts of it to compare
        pages: list[tuple[int, list[volmap.Entry], Locator]] = []  # the entries to fetch, page by page
        page_size = self.manifest.map.page_size
        todo = sum(e - s for s, e in ranges)
        for page_index, entries, where in self.repo.iter_located_map(self.manifest, pages_touching(ranges, page_size)):
            start = page_index * page_size
            end = min(start + page_size, self.capacity)
            used = []
            for entry in entries:
                parts = overlap(ranges, entry[0], entry[0] + entry[1])
                if parts:
                    wanted[entry[0]] = parts
                    used.append(entry)
            if used:
                pages.append((page_index, used, where))
            for hole_start, hole_len in holes(entries, start, end):
                for s, e in overlap(ranges, hole_start, hole_start + hole_len):
                    self._put(s, None, 0, e - s, todo, progress)

        def sink(raw: bytes, uses: list[volmap.Entry]) -> None:
            for voff, _length, _cid, coff in uses:
                for s, e in wanted.get(voff, ()):
                    self._put(s, raw, coff + s - voff, e - s, todo, progress)

        if pages:  # only these pages' chunks are fetched: with extents, the map is read where they are, not whole
            reader = MapReader(self.repo, workers=self.workers)
            reader.run(self.manifest, sink, pages=pages)
            self.stats.fetched_bytes = reader.fetched_bytes
            self.stats.chunks_verified = reader.chunks_verified

    def _put(self, start: int, raw: bytes | None, at: int, length: int, todo: int, progress: ProgressFn | None) -> None:
        """Make ``[start, start+length)`` of the device equal ``raw[at:at+length]`` (zeros when ``raw`` is None),
        writing only the ``WRITE_BLOCK``\\ s that differ."""
        for s, e in _pieces(start, start + length, READ_SPAN):
            have = self.read(s, e)
            want = bytes(e - s) if raw is None else raw[at + s - start : at + e - start]
            if have == want:
                continue
            for a, b in _differing_blocks(have, want, s):
                device.pwrite_all(self.fd, want[a - s : b - s], a)
                with self.lock:
                    if raw is None:
                        self.stats.zeroed_bytes += b - a
                    else:
                        self.stats.written_bytes += b - a
        if progress:
            with self.lock:
                self.done += length
                done = self.done
            progress(done, todo)


def _pieces(start: int, end: int, size: int) -> Iterable[Range]:
    return ((s, min(s + size, end)) for s in range(start, end, size))


def _differing_blocks(have: bytes, want: bytes | memoryview, offset: int) -> list[Range]:
    """The runs of ``WRITE_BLOCK``-aligned blocks (relative to the volume, starting at ``offset``) where ``have``
    and ``want`` differ, joined when adjacent."""
    runs: list[Range] = []
    first = offset - offset % WRITE_BLOCK
    for block in range(first, offset + len(have), WRITE_BLOCK):
        s, e = max(block, offset), min(block + WRITE_BLOCK, offset + len(have))
        if have[s - offset : e - offset] != want[s - offset : e - offset]:
            if runs and runs[-1][1] == s:
                runs[-1] = (runs[-1][0], e)
            else:
                runs.append((s, e))
    return runs


def restore_in_place(
    repo: Repository,
    manifest: Manifest,
    target: str,
    *,
    extents: Sequence[tuple[int, int]] | None = None,
    workers: int = 4,
    compare_progress: ProgressFn | None = None,
    write_progress: ProgressFn | None = None,
) -> RestoreStats:
    """Make ``target`` bit-exact with backup ``manifest``, fetching and writing only what differs (see the module
    doc); ``extents``: ``(offset, length)`` ranges known to differ (checked by the caller), then nothing else is
    read. ``UsageError`` before anything is written when the target cannot be restored in place."""
    started = time.monotonic()
    fd = open_in_place(target, manifest.capacity_bytes)
    try:
        run = _InPlace(repo, manifest, fd, workers)
        if extents is None:
            ranges = run.differing(compare_progress)
        else:
            ranges = merged((off, off + length) for off, length in extents)
        run.rewrite(ranges, write_progress)
        device.sync(fd)
    finally:
        os.close(fd)
    stats = run.stats
    stats.duration_s = round(time.monotonic() - started, 3)
    return stats
