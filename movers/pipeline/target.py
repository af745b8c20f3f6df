"""Writing restored chunks onto the target: few large writes, with the writeback started as they go.

A chain of incrementals with scattered small changes leaves maps of many small entries, each from another chunk
than its neighbours (the base chunk's surviving pieces between the changes, the changes from gathered chunks).
Written with one ``pwrite`` each, a restore spends its time in system calls and in waiting for the interpreter
lock after each. ``TargetWriter`` instead copies runs of adjacent small entries into a buffer as their chunks
arrive and writes each run with one ``pwrite`` once it is complete; larger entries are written straight from
their chunk.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from movers import device
from movers.pipeline.stats import RestoreStats
from movers.repo import volmap

MiB = 1 << 20
SMALL_ENTRY = 64 * 1024  # entries shorter than this are copied into a run and written with it
RUN_MAX = 1 * MiB  # the most bytes of volume one run spans
SLAB = 4 * MiB  # runs are assembled in buffers of this size, kept for reuse until the restore ends
PAGE_SLABS = 16  # the most slabs one page takes (its entries beyond them are written alone)
WRITEBACK_EVERY = 32 * MiB  # start the target's writeback after this many bytes written


def small_runs(entries: Iterable[volmap.Entry], run_max: int = RUN_MAX) -> Iterator[tuple[int, int, list[int]]]:
    """``(start, end, volume offsets of its entries)`` of each run of at least two adjacent entries shorter than
    ``SMALL_ENTRY``, a run spanning at most ``run_max`` bytes; in volume order."""
    start = end = -1
    offsets: list[int] = []
    for voff, length, _cid, _coff in entries:
        if length < SMALL_ENTRY and voff == end and voff + length - start <= run_max:
            end = voff + length
            offsets.append(voff)
            continue
        if len(offsets) > 1:
            yield start, end, offsets
        start, end, offsets = (voff, voff + length, [voff]) if length < SMALL_ENTRY else (-1, -1, [])
    if len(offsets) > 1:
        yield start, end, offsets


class _Page:
    """The runs of one page and the slabs they are assembled in (taken when the page's first chunk arrives)."""

    __slots__ = ("runs", "slabs", "runs_left")

    def __init__(self) -> None:
        self.runs: list[_Run] = []  # until the slabs are taken
        self.slabs: list[bytearray] = []
        self.runs_left = 0


class _Run:
    """Adjacent small entries, assembled at ``at`` in slab ``slab`` of their page and written with one ``pwrite``."""

    __slots__ = ("offset", "end", "slab", "at", "left", "page", "buf")

    def __init__(self, offset: int, end: int, slab: int, at: int, left: int, page: _Page) -> None:
        self.offset = offset
        self.end = end
        self.slab = slab
        self.at = at
        self.left = left  # entries not yet copied in
        self.page = page
        self.buf: memoryview | None = None  # its bytes of the slab, once taken


class TargetWriter:
    """Writes the entries of restored chunks onto the target ``fd``, from any thread.

    ``add_page`` (before any chunk of a page is written) finds the page's runs (``small_runs``) and places them in
    ``slab``-byte slabs, at most ``page_slabs`` of them; ``write`` (for each chunk) copies its entries that belong to
    a run into the run's slab, writes a run once all its entries are in, and writes every other entry straight from
    the chunk. A page's slabs are taken when its first chunk arrives and kept for the next pages when its last run
    is written. Writeback to the device is started every ``WRITEBACK_EVERY`` bytes, so the final ``sync`` does not
    wait for all of it. Every entry of a page passed to ``add_page`` must be written exactly once.
    """

    def __init__(self, fd: int, stats: RestoreStats, *, slab: int = SLAB, page_slabs: int = PAGE_SLABS) -> None:
        self.fd = fd
        self.stats = stats
        self.slab = slab
        self.page_slabs = page_slabs
        self._lock = threading.Lock()
        self._runs: dict[int, _Run] = {}  # volume offset of an entry not yet written -> the run it is in
        self._spare: list[bytearray] = []  # slabs of finished pages, for the next ones
        self._unflushed = 0

    @property
    def most_held(self) -> int:
        """The most bytes one page's slabs take (what ``add_page`` returns at most)."""
        return self.page_slabs * self.slab

    def add_page(self, entries: Iterable[volmap.Entry]) -> int:
        """Prepare the runs of a page's entries; return the bytes of their slabs, held from the page's first
        ``write`` until its last."""
        page = _Page()
        by_offset: dict[int, _Run] = {}
        slab, at = 0, 0
        for start, end, offsets in small_runs(entries, min(RUN_MAX, self.slab)):
            if at + end - start > self.slab:
                if slab + 1 == self.page_slabs:
                    break
                slab, at = slab + 1, 0
            run = _Run(start, end, slab, at, len(offsets), page)
            page.runs.append(run)
            by_offset.update(dict.fromkeys(offsets, run))
            at += end - start
        if not page.runs:
            return 0
        page.runs_left = len(page.runs)
        with self._lock:
            self._runs.update(by_offset)
        return (slab + 1) * self.slab

    def write(self, raw: bytes | memoryview, uses: Sequence[volmap.Entry]) -> None:
        """Write the entries ``uses`` of chunk ``raw``: alone, or into their run (writing the run once complete)."""
        view = memoryview(raw)
        with self._lock:
            runs = [self._runs.pop(use[0], None) for use in uses]
        copies = Counter(runs)
        copies.pop(None, None)
        if copies:
            with self._lock:
                for run in copies:
                    if run.buf is None:
                        self._give_slabs(run.page)
        written = 0
        for (voff, length, _cid, coff), run in zip(uses, runs, strict=True):
            if run is None:
                device.pwrite_all(self.fd, view[coff : coff + length], voff)
                written += length
            else:
                at = voff - run.offset
                run.buf[at : at + length] = view[coff : coff + length]
        complete = []
        with self._lock:
            for run, n in copies.items():
                run.left -= n
                if not run.left:
                    complete.append(run)
        for run in complete:
            device.pwrite_all(self.fd, run.buf, run.offset)
            written += run.end - run.offset
            run.buf.release()
        with self._lock:
            for run in complete:
                page = run.page
                page.runs_left -= 1
                if not page.runs_left:
                    self._spare.extend(page.slabs)
                    page.slabs = []
            self.stats.written_bytes += written
            self._unflushed += written
            kick = self._unflushed >= WRITEBACK_EVERY
            if kick:
                self._unflushed = 0
        if kick:
            device.start_writeback(self.fd)

    def _give_slabs(self, page: _Page) -> None:
        """Take the page's slabs (kept ones first, new ones for the rest) and point each of its runs at its bytes."""
        n = max(run.slab for run in page.runs) + 1
        page.slabs = self._spare[:n]
        del self._spare[:n]
        page.slabs += [bytearray(self.slab) for _ in range(n - len(page.slabs))]
        for run in page.runs:
            run.buf = memoryview(page.slabs[run.slab])[run.at : run.at + run.end - run.offset]
        page.runs = []
