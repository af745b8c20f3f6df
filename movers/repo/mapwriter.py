"""Writes the map of a new backup on top of its parent's, one page at a time.

Pages must be finished in ascending order. A page that is never finished keeps the parent's
page (shared by id), or is a hole page when there is no parent. Memory holds a few pages'
entries plus one slot per page.

Block digests (``movers.repo.digests``) of a finished page start from the *base*: the parent
page's digests, zeros for a hole page or a backup without parent, UNKNOWN for a parent page
without digests. Blocks a read touched become UNKNOWN, then the digests of blocks the backup
read whole are set. So a known digest always describes what the new map restores.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from movers.repo import digests as dg
from movers.repo import volmap
from movers.repo.manifest import MapRef
from movers.repo.repository import Repository

DigestUpdate = tuple[int, bytes]  # (absolute block index, digest)


_PUT_THREADS = 2


class MapWriter:
    def __init__(self, repo: Repository, capacity: int, parent_slots: Sequence[tuple[bytes, int]] | None) -> None:
        self.repo = repo
        self.capacity = capacity
        self.page_size = repo.config.page_size
        self.n_pages = max(1, -(-capacity // self.page_size))
        self.has_parent = parent_slots is not None
        slots = list(parent_slots or [])[: self.n_pages]
        slots += [(volmap.NO_PAGE, 0)] * (self.n_pages - len(slots))
        self.slots = slots
        self.parent_slots = list(slots)
        # A parent page reaching past a shrunken capacity must be rewritten (clipped).
        self._clip_last = self.has_parent and capacity % self.page_size != 0
        self.located = repo.config.located
        self._cache: OrderedDict[int, tuple[list[volmap.Entry], bytes, volmap.Locations]] = OrderedDict()
        self.bytes_written = 0
        self.objects_written = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future] = deque()

    def page_range(self, page_index: int) -> tuple[int, int]:
        start = page_index * self.page_size
        return start, min(start + self.page_size, self.capacity)

    def parent_page(self, page_index: int) -> tuple[list[volmap.Entry], bytes]:
        """The parent's entries and *base* digests for a page (see module doc). Cached."""
        return self._parent_page(page_index)[:2]

    def parent_locations(self, page_index: int) -> volmap.Locations:
        """Where the chunks of the parent's page are stored (empty for a version 1 page). Cached."""
        return self._parent_page(page_index)[2]

    def _parent_page(self, page_index: int) -> tuple[list[volmap.Entry], bytes, volmap.Locations]:
        if page_index in self._cache:
            self._cache.move_to_end(page_index)
            return self._cache[page_index]
        page_id = self.parent_slots[page_index][0]
        entries, digests, locations = self.repo.read_located_page(page_id)
        start, end = self.page_range(page_index)
        blocks = dg.blocks_touching(start, end)
        if page_id == volmap.NO_PAGE:
            digests = b"".join(
                self.repo.content_hash.zero_digest(e - s) for s, e in (dg.block_span(i, self.capacity) for i in blocks)
            )
        elif len(digests) != len(blocks) * dg.DIGEST_LEN:
            digests = dg.UNKNOWN * len(blocks)
        self._cache[page_index] = (entries, digests, locations or {})
        if len(self._cache) > 4:
            self._cache.popitem(last=False)
        return self._cache[page_index]

    def finish_page(
        self,
        page_index: int,
        covered: Sequence[volmap.Range],
        new: Sequence[volmap.Entry],
        updates: Iterable[DigestUpdate] = (),
        locations: volmap.Locations | None = None,
    ) -> None:
        """Overlay ``new`` (inside the ``covered`` ranges) on the parent's page.

        In a located repository ``locations`` says where the chunks of ``new`` are stored (the parent's
        page says it for the entries that survive)."""
        start, end = self.page_range(page_index)
        parent_entries, base, parent_locations = self._parent_page(page_index)
        entries = volmap.overlay(parent_entries, covered, new)
        if end - start < self.page_size:
            entries = _clip(entries, end)
        volmap.check_entries(entries, start, end)
        first = start // dg.DIGEST_BLOCK
        digests = bytearray(base)
        L = dg.DIGEST_LEN
        for cs, ce in covered:
            for i in dg.blocks_touching(cs, ce):
                digests[(i - first) * L : (i - first + 1) * L] = dg.UNKNOWN
        for i, d in updates:
            digests[(i - first) * L : (i - first + 1) * L] = d
        located = None
        if self.located:
            located = {**parent_locations, **(locations or {})}
        self._store_page(page_index, entries, bytes(digests), located)

    def _store_page(
        self, page_index: int, entries: list[volmap.Entry], digests: bytes, locations: volmap.Locations | None
    ) -> None:
        if not entries:
            self.slots[page_index] = (volmap.NO_PAGE, 0)
            return
        start, end = self.page_range(page_index)
        page_id, data = volmap.encode_page(start, end - start, entries, digests, locations)
        self._put(page_id, data)
        self.slots[page_index] = (page_id, len(entries))

    def _put(self, object_id: bytes, data: bytes) -> None:
        """Upload a page on the writer's own threads (the caller goes on with the next page); ``finish`` waits."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_PUT_THREADS, thread_name_prefix="map-put")
        while len(self._pending) >= 2 * _PUT_THREADS:
            self._count(self._pending.popleft().result())
        self._pending.append(self._pool.submit(self.repo.put_once, volmap.map_key(object_id), data))

    def _count(self, written: int) -> None:
        self.bytes_written += written
        self.objects_written += int(written > 0)

    def close(self) -> None:
        """Stop the upload threads (after ``finish``, or to abandon the map: pending uploads are cancelled)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def finish(self) -> MapRef:
        """Write the directories and return the map reference for the manifest (after every page is uploaded)."""
        last = self.n_pages - 1
        if self._clip_last and self.slots[last] == self.parent_slots[last]:
            self.finish_page(last, [], [])
        fanout = volmap.DIR_FANOUT
        dirs: list[str | None] = []
        for first in range(0, self.n_pages, fanout):
            group = self.slots[first : first + fanout]
            if all(pid == volmap.NO_PAGE for pid, _ in group):
                dirs.append(None)
                continue
            dir_id, data = volmap.encode_dir(group)
            self._put(dir_id, data)
            dirs.append(dir_id.hex())
        while self._pending:
            self._count(self._pending.popleft().result())
        return MapRef(self.page_size, fanout, dirs, sum(n for _, n in self.slots))


def _clip(entries: list[volmap.Entry], end: int) -> list[volmap.Entry]:
    out = []
    for voff, length, cid, coff in entries:
        if voff >= end:
            break
        out.append((voff, min(length, end - voff), cid, coff))
    return out
