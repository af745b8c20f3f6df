"""The packs of a repository and their entries, in compact memory: what prune and verify hold per stored chunk.

A ``PackTable`` is the union of what index objects (``movers.repo.index.read_pack_table``) and pack trailers
list: every pack (an ``IdSet`` of pack ids, numbered in the order first seen) and every entry as the 49-byte
record the index format stores (``movers.repo.pack.ENTRY``), in one buffer. After ``finish`` a pack's entries
are sorted by offset, an offset listed twice for a pack keeps its first listing (an interrupted compaction, or
a sharded index, lists a pack in several objects), and ``find(chunk id)`` finds every entry of a chunk id.

Memory per entry: 49 bytes of record, 4 for its pack number, about 8 of hash (``movers.repo.ids``: slots, tags,
a byte saying whether the id has copies), and 4 more when some pack's entries do not come as one run sorted by
offset (a sharded index: version 2), plus up to an eighth of the buffers while they grow. Per pack: its id in
the ``IdSet`` (40-48 bytes) and 8 bytes of arrays (12 while filling).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise

from movers.repo.ids import IdHash, IdSet
from movers.repo.pack import ENTRY, PackEntry, encode_entries, pack_key

RECORD = ENTRY.size
_OFFSET = struct.Struct("<32xQ9x")  # the offset field of a record
_STORED = struct.Struct("<40xI5x")  # the stored length field of a record
_KEY = struct.Struct("<32s17x")  # the chunk id of a record


def _ascending(offsets: Iterable[tuple[int]]) -> bool:
    return all(a < b for a, b in pairwise(offsets))


class PackTable:
    """Packs and their entries (see the module doc). Fill with ``add_records`` / ``add_pack`` /
    ``pack_number``, then ``finish`` once before reading entries."""

    def __init__(self) -> None:
        self.packs = IdSet()
        self.rec = bytearray()  # ENTRY records, in the order added
        self.pack_of = array("I")  # record number -> pack number
        self._start = array("I")  # pack number -> its first record (of ``order`` after a regroup)
        self._count = array("I")  # pack number -> its entry count
        self._end = array("I")  # pack number -> 1 + its last record so far (while filling)
        self._regroup = False
        self.order: array | None = None  # None: a pack's entries are consecutive records
        self.chunks: IdHash | None = None  # chunk id -> record numbers (after finish)

    # -- filling -------------------------------------------------------------------------------

    def pack_number(self, pack_id: bytes) -> int:
        """The number of ``pack_id``, added (with no entries) if new."""
        p = self.packs.add(pack_id)
        if p == len(self._start):
            self._start.append(0)
            self._count.append(0)
            self._end.append(0)
        return p

    def add_records(self, p: int, records: bytes | bytearray | memoryview) -> None:
        """Append ``ENTRY`` records of pack ``p`` (a listing of it, or the next part of one)."""
        n, rest = divmod(len(records), RECORD)
        if rest:
            raise ValueError("records must be whole ENTRY records")
        if not n:
            return
        at = len(self.pack_of)
        if not self._count[p]:
            self._start[p] = at
        elif self._end[p] != at:
            self._regroup = True  # listed in pieces: its entries are not consecutive records
        self.rec += records
        self.pack_of.extend(array("I", [p]) * n)
        self._count[p] += n
        self._end[p] = at + n

    def add_pack(self, pack_id: bytes, entries: Iterable[PackEntry]) -> int:
        """Add a pack and its entries (a trailer's); return its number."""
        p = self.pack_number(pack_id)
        self.add_records(p, encode_entries(entries))
        return p

    def finish(self) -> None:
        """Group each pack's entries sorted by offset (first listing of an offset wins), build the chunk hash."""
        if self.chunks is not None:
            return
        if not self._regroup:
            with memoryview(self.rec) as view:
                runs = zip(self._start, self._count, strict=True)
                ranges = (view[a * RECORD : (a + n) * RECORD] for a, n in runs)
                self._regroup = any(not _ascending(_OFFSET.iter_unpack(records)) for records in ranges)
        if self._regroup:
            self._group()
        del self._end
        self.chunks = chunks = IdHash(self.rec, RECORD, sum(self._count))
        if self.order is None:
            for n, (key,) in enumerate(_KEY.iter_unpack(self.rec)):
                chunks.insert(n, key)
        else:
            for p in range(len(self._start)):
                for n in self.entries_of(p):
                    chunks.insert(n)

    def _group(self) -> None:
        """``order``: the records of each pack together, sorted by offset, offsets listed twice dropped."""
        starts, at = array("I"), 0
        for n in self._count:
            starts.append(at)
            at += n
        order = array("I", bytes(4 * at))
        cursor = array("I", starts)
        for n, p in enumerate(self.pack_of):
            order[cursor[p]] = n
            cursor[p] += 1
        del cursor
        rec = self.rec
        for p, (a, n) in enumerate(zip(starts, self._count, strict=True)):
            numbers = order[a : a + n]
            if _ascending(_OFFSET.unpack_from(rec, m * RECORD) for m in numbers):
                continue
            by_offset: dict[int, int] = {}
            for m in numbers:  # in the order listed: the first listing of an offset wins
                by_offset.setdefault(_OFFSET.unpack_from(rec, m * RECORD)[0], m)
            kept = [by_offset[off] for off in sorted(by_offset)]
            order[a : a + len(kept)] = array("I", kept)
            self._count[p] = len(kept)
        self._start, self.order = starts, order

    # -- reading (after finish) ----------------------------------------------------------------

    def __len__(self) -> int:
        """Packs."""
        return len(self._start)

    def entries_of(self, p: int) -> Iterable[int]:
        """The record numbers of pack ``p``'s entries, by offset."""
        a, n = self._start[p], self._count[p]
        return range(a, a + n) if self.order is None else self.order[a : a + n]

    def count(self, p: int) -> int:
        return self._count[p]

    def pack_id(self, p: int) -> bytes:
        return self.packs.id(p)

    def chunk_id(self, n: int) -> bytes:
        return bytes(self.rec[n * RECORD : n * RECORD + 32])

    def fields(self, n: int) -> tuple[bytes, int, int, int, int]:
        """Record ``n`` as ``(chunk id, offset, stored length, raw length, flags)``."""
        return ENTRY.unpack_from(self.rec, n * RECORD)

    def stored_lengths(self, p: int) -> Iterator[int]:
        """The stored lengths of pack ``p``'s entries, by offset."""
        if self.order is None:
            a, n = self._start[p], self._count[p]
            with memoryview(self.rec) as view:
                for (length,) in _STORED.iter_unpack(view[a * RECORD : (a + n) * RECORD]):
                    yield length
        else:
            for m in self.entries_of(p):
                yield _STORED.unpack_from(self.rec, m * RECORD)[0]

    def records(self, p: int) -> bytes:
        """Pack ``p``'s entries as ``ENTRY`` records, by offset."""
        if self.order is None:
            a, n = self._start[p], self._count[p]
            return bytes(self.rec[a * RECORD : (a + n) * RECORD])
        return b"".join(self.rec[m * RECORD : (m + 1) * RECORD] for m in self.entries_of(p))

    def entries(self, p: int) -> list[PackEntry]:
        """Pack ``p``'s entries, by offset."""
        return [PackEntry(*ENTRY.unpack_from(self.rec, m * RECORD)) for m in self.entries_of(p)]

    def find(self, chunk_id: bytes) -> list[int]:
        """The record numbers of every entry of ``chunk_id`` (any pack), ascending."""
        return self.chunks.find(chunk_id)

    def drain(self, packs: Iterable[int]) -> Iterator[tuple[int, bytes]]:
        """``(pack number, its records)`` of ``packs``, the packs with the last records first, each pack's records
        freed as it is yielded (the buffer shrinks from its end): the table is empty afterwards. Only when a pack's
        entries are consecutive records (``order`` is None)."""
        if self.order is not None:
            raise ValueError("drain needs consecutive records")
        wanted = bytearray(len(self._start))
        for p in packs:
            wanted[p] = 1
        self.chunks = None  # lookups would read freed records
        for p in sorted(range(len(self._start)), key=self._start.__getitem__, reverse=True):
            a, n = self._start[p], self._count[p]
            records = bytes(self.rec[a * RECORD : (a + n) * RECORD]) if n else b""
            if n:
                del self.rec[a * RECORD :]
            if wanted[p]:
                yield p, records

    def drop_lookups(self, keep_pack_of: bool = False) -> None:
        """Free what only lookups use: the chunk hash (``find`` stops working) and ``pack_of`` (unless kept)."""
        self.chunks = None
        if not keep_pack_of:
            self.pack_of = array("I")


@dataclass
class StoredPacks:
    """What a reader of the whole chunk index sees (``Repository.stored_packs``): the index objects' and trailers'
    ``table`` (finished) and what listing ``packs/`` found. Memory: the table, plus ~10 bytes per pack."""

    table: PackTable
    index_keys: list[str]  # the index objects read
    indexed: int  # pack numbers below this are the index objects' packs
    listed: array = field(default_factory=lambda: array("I"))  # pack numbers in the order packs/ listed them
    present: bytearray = field(default_factory=bytearray)  # pack number -> 1: listed (and not found gone since)
    unindexed: array = field(default_factory=lambda: array("I"))  # listed packs no index lists (trailers)
    unreadable: dict[int, str] = field(default_factory=dict)  # pack number -> why its trailer cannot be read
    odd_keys: dict[int, str] = field(default_factory=dict)  # pack number -> its key, when not pack_key(id)

    def key(self, p: int) -> str:
        return self.odd_keys.get(p) or pack_key(self.table.pack_id(p))

    def readable(self) -> Iterator[int]:
        """The present packs whose entries are known, in listing order."""
        present, unreadable = self.present, self.unreadable
        return (p for p in self.listed if present[p] and p not in unreadable)
