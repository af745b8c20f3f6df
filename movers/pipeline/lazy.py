"""Random-access reads of a backed-up volume, fetched lazily from the repository.

A ``BackupReader`` serves ``read(offset, length)`` of one backup's volume without restoring it:

* the map pages the range touches are read when first needed (``Repository.read_located_page``; the newest
  ``PAGES_KEPT`` stay decoded), the entries covering the range found by bisection;
* the chunks those entries name are fetched by coalesced ranged GETs (``reader.plan_page``), decoded and verified
  (``MapReader.fetch_plan``: a damaged chunk raises ``DamagedData``, exit code 4, and is never served), then kept
  in a least-recently-used cache of at most ``cache_bytes`` of raw chunk bytes;
* each chunk is fetched once while it stays cached, and concurrent reads of one chunk wait for one fetch;
* once back-to-back reads (each starting where the previous one ended) have covered ``SEQUENTIAL_AFTER`` bytes
  (a sequential reader: a file copied, an image streamed), each also starts fetching the chunks of the bytes that
  follow in the background: as many as the run has read so far, at most ``read_ahead``;
* bytes no entry covers (holes) read as zeros, without a request.

Memory: the cache, the decoded pages and what reads in progress hold (a read returns its bytes; keep reads to a
few MiB). ``VolumeFile`` is a read-only file object over the volume or a slice of it (what the filesystem readers
and the FUSE view take). The reader holds threads: close it (or use it as a context manager).
"""

from __future__ import annotations

import io
import threading
from bisect import bisect_right
from collections import OrderedDict, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from movers.pipeline.reader import MapReader, ReadPlan, plan_page
from movers.repo import volmap
from movers.repo.manifest import Manifest
from movers.repo.repository import Locator, Repository

MiB = 1 << 20
DEFAULT_CACHE = 64 * MiB
DEFAULT_READ_AHEAD = 8 * MiB
SEQUENTIAL_AFTER = 256 * 1024  # back-to-back reads of this many bytes start the read-ahead (not a filesystem's
# metadata lookups: many small reads in a row, each its own)
PAGES_KEPT = 16  # decoded map pages kept: 64 MiB of volume each at the default page size


@dataclass(frozen=True)
class _Page:
    starts: list[int]  # the entries' volume offsets, for bisection
    entries: list[volmap.Entry]
    locator: Locator


class BackupReader:
    """Lazy random-access reads of backup ``manifest`` of ``repo`` (see the module doc). Thread-safe."""

    def __init__(
        self,
        repo: Repository,
        manifest: Manifest,
        *,
        workers: int = 4,
        cache_bytes: int = DEFAULT_CACHE,
        read_ahead: int = DEFAULT_READ_AHEAD,
    ) -> None:
        self.repo, self.manifest = repo, manifest
        self.size = manifest.capacity_bytes
        self.cache_bytes, self.read_ahead = cache_bytes, read_ahead
        self._page_size = manifest.map.page_size
        self._fetcher = MapReader(repo, workers=1)
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="lazy-fetch")
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="lazy-ahead")
        self._lock = threading.Lock()
        self._slots: list[bytes] | None = None
        self._pages: OrderedDict[int, _Page] = OrderedDict()
        self._cache: OrderedDict[bytes, bytes] = OrderedDict()
        self._cached = 0
        self._pending: dict[bytes, Future[bytes]] = {}
        self._sequential_at: int | None = None  # where the current run of back-to-back reads ends
        self._run = 0  # its bytes

    @property
    def fetched_bytes(self) -> int:
        """Stored bytes fetched from the repository so far (ranged GETs, gaps between chunks included)."""
        return self._fetcher.fetched_bytes

    @property
    def chunks_fetched(self) -> int:
        return self._fetcher.chunks_verified

    def file(self, start: int = 0, length: int | None = None) -> VolumeFile:
        """A file object over ``[start, start + length)`` of the volume (default: all of it)."""
        return VolumeFile(self, start, self.size - start if length is None else length)

    def read(self, offset: int, length: int) -> bytes:
        """The volume's bytes at ``[offset, offset + length)``, short only past the volume's end."""
        if offset < 0 or length < 0:
            raise ValueError(f"a read of {length} bytes at {offset}")
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        entries = self._entries(offset, end)
        chunks = {cid: fut.result() for cid, fut in self._claim(entries).items()}
        out = bytearray(end - offset)
        for voff, elen, cid, coff in entries:
            lo, hi = max(voff, offset), min(voff + elen, end)
            at = coff + lo - voff
            out[lo - offset : hi - offset] = chunks[cid][at : at + hi - lo]
        with self._lock:
            self._run = self._run + end - offset if self._sequential_at == offset else end - offset
            self._sequential_at = end
            window = min(self.read_ahead, self._run) if self._run >= SEQUENTIAL_AFTER else 0
        if window and end < self.size:
            self._ahead.submit(self._prefetch, end, min(end + window, self.size))
        return bytes(out)

    def close(self) -> None:
        self._ahead.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> BackupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the map ---------------------------------------------------------------------------------------------

    def _entries(self, start: int, end: int) -> list[volmap.Entry]:
        """The map entries overlapping ``[start, end)``, in volume order."""
        found: list[volmap.Entry] = []
        for index in range(start // self._page_size, (end - 1) // self._page_size + 1):
            page = self._page(index)
            at = max(0, bisect_right(page.starts, start) - 1)
            for entry in page.entries[at:]:
                if entry[0] >= end:
                    break
                if entry[0] + entry[1] > start:
                    found.append(entry)
        return found

    def _page(self, index: int) -> _Page:
        with self._lock:
            page = self._pages.get(index)
            if page is not None:
                self._pages.move_to_end(index)
                return page
            if self._slots is None:
                self._slots = [page_id for page_id, _count in self.repo.page_slots(self.manifest)]
            page_id = self._slots[index]
        entries, _digests, locations = self.repo.read_located_page(page_id)
        entries = sorted(entries)
        page = _Page([e[0] for e in entries], entries, self.repo.index() if locations is None else locations)
        with self._lock:
            self._pages[index] = page
            while len(self._pages) > PAGES_KEPT:
                self._pages.popitem(last=False)
        return page

    # -- chunks ----------------------------------------------------------------------------------------------

    def _claim(self, entries: list[volmap.Entry]) -> dict[bytes, Future[bytes]]:
        """A future of every chunk ``entries`` use: done for a cached chunk, shared with a fetch in flight, or a
        new fetch submitted now."""
        futures: dict[bytes, Future[bytes]] = {}
        todo: dict[int, list[volmap.Entry]] = defaultdict(list)  # page index -> entries of chunks to fetch
        with self._lock:
            for entry in entries:
                cid = entry[2]
                if cid in futures:
                    continue
                data = self._cache.get(cid)
                if data is not None:
                    self._cache.move_to_end(cid)
                    futures[cid] = done = Future()
                    done.set_result(data)
                elif cid in self._pending:
                    futures[cid] = self._pending[cid]
                else:
                    futures[cid] = self._pending[cid] = Future()
                    todo[entry[0] // self._page_size].append(entry)
        for index, page_entries in todo.items():
            try:
                plans = plan_page(page_entries, self._page(index).locator)
            except BaseException as err:  # a chunk in no pack (DamagedData): whoever waits for one meets it
                self._fail([e[2] for e in page_entries], err)
                raise
            for plan in plans:
                self._pool.submit(self._fetch, plan)
        return futures

    def _fail(self, cids: list[bytes], err: BaseException) -> None:
        with self._lock:
            failed = [self._pending.pop(cid, None) for cid in cids]
        for fut in failed:
            if fut is not None and not fut.done():
                fut.set_exception(err)

    def _fetch(self, plan: ReadPlan) -> None:
        try:
            self._fetcher.fetch_plan(self.manifest, plan, self._keep)
        except BaseException as err:
            self._fail([cid for cid, _loc, _uses in plan.chunks], err)

    def _keep(self, raw: bytes | memoryview, uses: list[volmap.Entry]) -> None:
        """A verified chunk: cached (evicting the least recently used beyond ``cache_bytes``) and handed to whoever
        waits for it."""
        cid, data = uses[0][2], bytes(raw)
        with self._lock:
            if cid not in self._cache:
                self._cache[cid] = data
                self._cached += len(data)
                while self._cached > self.cache_bytes and len(self._cache) > 1:
                    self._cached -= len(self._cache.popitem(last=False)[1])
            fut = self._pending.pop(cid, None)
        if fut is not None:
            fut.set_result(data)

    def _prefetch(self, start: int, end: int) -> None:
        """Start fetching the chunks of ``[start, end)`` (read-ahead: an error here is the later read's to meet)."""
        try:
            self._claim(self._entries(start, end))
        except Exception:  # noqa: BLE001 - the read that needs these bytes fetches them again and raises
            return


class VolumeFile(io.RawIOBase):
    """A read-only file object over ``[start, start + length)`` of a ``BackupReader``'s volume. Besides the io
    interface it has ``get_size()`` and ``get_offset()`` (what the libyal readers call). ``error``: the last error a
    read raised, for callers whose library turns it into its own (the libyal readers raise ``IOError``)."""

    def __init__(self, reader: BackupReader, start: int, length: int) -> None:
        super().__init__()
        if start < 0 or length < 0 or start + length > reader.size:
            raise ValueError(f"[{start}, {start + length}) is not inside the volume of {reader.size} bytes")
        self.reader, self.start, self.length = reader, start, length
        self.error: BaseException | None = None
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        remaining = max(0, self.length - self._pos)
        n = remaining if size is None or size < 0 else min(size, remaining)
        try:
            data = self.reader.read(self.start + self._pos, n)
        except BaseException as err:
            self.error = err
            raise
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:  # noqa: ANN001 - any writable buffer
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.length}[whence]
        if base + offset < 0:
            raise ValueError(f"a seek to {base + offset}")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def get_size(self) -> int:
        return self.length

    def get_offset(self) -> int:
        return self._pos
