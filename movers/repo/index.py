"""Index objects: which chunks live in which pack, so a reader need not open every pack.

An index object (key ``index/<sha256 of its bytes>``) is written by each backup before its
manifest and lists the packs that backup wrote (or recovered from a crashed run)::

    b"CBTIDX\\x01" + zstd( repeated: '<32sI' (pack id, n) then n x '<32sQIIB' entries )

``read_pack_table`` reads the index objects into a ``movers.repo.packtable.PackTable`` (compact: about 65
bytes per entry); ``TableIndex`` resolves chunk ids over one. ``ChunkIndex`` maps chunk ids to locations in
a dict (for the few packs a backup adds).
"""

from __future__ import annotations

import hashlib
import io
import struct
import threading
from array import array
from collections.abc import Container, Iterable, Iterator
from typing import NamedTuple

import zstandard

from movers.errors import IntegrityError, ObjectNotFound, TransientStoreError
from movers.repo.ids import sorted_by_id
from movers.repo.pack import ENTRY, PackEntry, encode_entries
from movers.repo.packtable import PackTable
from movers.repo.store.base import Store

MAGIC = b"CBTIDX\x01"
INDEX_PREFIX = "index/"
_PACK = struct.Struct("<32sI")


class ChunkLocation(NamedTuple):
    pack_id: bytes
    offset: int
    stored_len: int
    raw_len: int
    flags: int


def encode_index(packs: Iterable[tuple[bytes, list[PackEntry]]]) -> tuple[str, bytes]:
    """Return ``(key, bytes)`` of an index object listing ``packs``."""
    return encode_index_records((pack_id, len(entries), encode_entries(entries)) for pack_id, entries in packs)


def encode_index_records(packs: Iterable[tuple[bytes, int, bytes]], size: int | None = None) -> tuple[str, bytes]:
    """``(key, bytes)`` of an index object listing ``(pack id, n, n ENTRY records)``. With ``size`` (the bytes
    the listing takes before compression: ``listing_size``) it is compressed as it comes, so the listing is
    never whole in memory (the bytes may differ from a one-shot compression's; both decode the same)."""
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    if size is None:
        body = b"".join(_PACK.pack(pack_id, n) + records for pack_id, n, records in packs)
        data = MAGIC + compressor.compress(body)
    else:
        stream, out = compressor.compressobj(size=size), io.BytesIO()
        out.write(MAGIC)
        for pack_id, n, records in packs:
            out.write(stream.compress(_PACK.pack(pack_id, n) + records))
        out.write(stream.flush())
        data = out.getvalue()  # shares the buffer: the object is in memory once
    return f"{INDEX_PREFIX}{hashlib.sha256(data).hexdigest()}", data


def listing_size(packs: int, entries: int) -> int:
    """The bytes an index object listing ``packs`` packs with ``entries`` entries in all takes before compression."""
    return packs * _PACK.size + entries * ENTRY.size


def shard_prefix(shard: int) -> str:
    """The key prefix of the index objects of one shard (chunk ids starting with byte ``shard``)."""
    return f"{INDEX_PREFIX}{shard:02x}/"


def encode_sharded_index(packs: Iterable[tuple[bytes, list[PackEntry]]]) -> list[tuple[str, bytes]]:
    """``(key, bytes)`` of one index object per shard that ``packs`` have chunks in (see ``shard_prefix``)."""
    by_shard: dict[int, dict[bytes, list[PackEntry]]] = {}
    for pack_id, entries in packs:
        for e in entries:
            by_shard.setdefault(e.chunk_id[0], {}).setdefault(pack_id, []).append(e)
    out = []
    for shard, shard_packs in sorted(by_shard.items()):
        key, data = encode_index(sorted(shard_packs.items()))
        out.append((shard_prefix(shard) + key.rsplit("/", 1)[-1], data))
    return out


def table_index_objects(table: PackTable, packs: Iterable[int], sharded: bool) -> Iterator[tuple[str, bytes]]:
    """``(key, bytes)`` of the index objects listing packs ``packs`` of ``table`` (finished): one per shard
    (``encode_sharded_index``; packs in ascending id order), each compressed as it is listed and yielded before
    the next is made (4 bytes per entry meanwhile), or one object. When each pack's entries are consecutive
    records (a version 1 index) that object lists the packs whose records come last first and frees the table
    as it goes (``PackTable.drain``: the table is empty afterwards), so table and object never add up;
    otherwise packs in ascending id order."""
    if not sharded and table.order is None:  # from the end of the table, freeing it: it and the object never add up
        packs = array("I", packs)
        size = listing_size(len(packs), sum(table.count(p) for p in packs))
        listing = ((table.pack_id(p), len(records) // ENTRY.size, records) for p, records in table.drain(packs))
        yield encode_index_records(listing, size)
        return
    ordered = sorted_by_id(table.packs, packs)
    if not sharded:
        size = listing_size(len(ordered), sum(table.count(p) for p in ordered))
        yield encode_index_records(((table.pack_id(p), table.count(p), table.records(p)) for p in ordered), size)
        return
    shards = [array("I") for _ in range(256)]
    rec, width = table.rec, ENTRY.size
    for p in ordered:
        for n in table.entries_of(p):
            shards[rec[n * width]].append(n)
    del ordered
    for shard in range(256):
        numbers, shards[shard] = shards[shard], None
        if not numbers:
            continue
        runs = []  # (pack, first, end) in numbers: the packs in order, each once
        for at, n in enumerate(numbers):
            p = table.pack_of[n]
            if runs and runs[-1][0] == p:
                runs[-1][2] = at + 1
            else:
                runs.append([p, at, at + 1])
        listing = (
            (table.pack_id(p), end - first, b"".join(rec[n * width : (n + 1) * width] for n in numbers[first:end]))
            for p, first, end in runs
        )
        key, data = encode_index_records(listing, listing_size(len(runs), len(numbers)))
        yield shard_prefix(shard) + key.rsplit("/", 1)[-1], data


def decode_index(data: bytes, key: str = "index") -> Iterator[tuple[bytes, list[PackEntry]]]:
    """Yield ``(pack id, entries)`` from an index object."""
    if not data.startswith(MAGIC):
        raise IntegrityError(f"{key} is not an index object of a known version")
    try:
        raw = zstandard.ZstdDecompressor().decompress(data[len(MAGIC) :])
    except zstandard.ZstdError as err:
        raise IntegrityError(f"{key} does not decompress: {err}") from None
    pos = 0
    try:
        while pos < len(raw):
            pack_id, n = _PACK.unpack_from(raw, pos)
            pos += _PACK.size
            entries = [PackEntry(*ENTRY.unpack_from(raw, pos + i * ENTRY.size)) for i in range(n)]
            pos += n * ENTRY.size
            yield pack_id, entries
    except struct.error:
        raise IntegrityError(f"{key} is truncated") from None


def read_pack_table(store: Store, prefix: str = INDEX_PREFIX, relists: int = 5) -> tuple[list[str], PackTable]:
    """The keys of the index objects under ``prefix``, and a ``PackTable`` (not finished) of what they list.

    Each object is read in ranges and decoded as it comes, so only its records stay in memory. An index object
    that vanishes between the listing and its read was compacted by a prune, which writes its new index *before*
    deleting the old ones: so ``prefix`` is listed again and read again (at most ``relists`` listings; then
    ``TransientStoreError``, exit 5). Damaged objects raise ``IntegrityError``.
    """
    for _ in range(relists):
        keys = list(store.list(prefix))
        table = PackTable()
        try:
            for key in keys:
                _read_into(table, store, key)
        except ObjectNotFound:
            continue  # compacted meanwhile: the listing again has the new index
        return keys, table
    raise TransientStoreError(
        f"index objects under {prefix} of {store.describe()} kept vanishing while being read"
        " (prunes compacting the index); retry"
    )


_FIRST_RANGE = 1 << 20  # bytes of an index object read first (most are smaller)
_RANGE = 8 << 20  # bytes read at a time after that


def _object_parts(store: Store, key: str) -> Iterator[bytes]:
    """The bytes of object ``key``, a range at a time (the last part is shorter than asked, maybe empty)."""
    offset, length = 0, _FIRST_RANGE
    while True:
        part = store.get_range(key, offset, length)
        yield part
        if len(part) < length:
            return
        offset, length = offset + len(part), _RANGE


def _read_into(table: PackTable, store: Store, key: str) -> None:
    """Add what index object ``key`` lists to ``table``, decoding it as its parts come."""
    stream = zstandard.ZstdDecompressor().decompressobj()
    head = bytearray()
    pending = bytearray()  # decompressed, not yet added to the table
    p, left = -1, 0  # the pack being listed, and how many of its entries are still to come
    for part in _object_parts(store, key):
        if len(head) < len(MAGIC):
            need = len(MAGIC) - len(head)
            head += part[:need]
            part = part[need:]
            if len(head) == len(MAGIC) and head != MAGIC:
                break
        if not part:
            continue
        if stream.eof:
            break  # bytes after the frame: ignored, as a one-shot decompression ignores them
        try:
            pending += stream.decompress(part)
        except zstandard.ZstdError as err:
            raise IntegrityError(f"{key} does not decompress: {err}") from None
        at = 0
        while True:
            if left:
                take = min(left, (len(pending) - at) // ENTRY.size)
                if not take:
                    break
                table.add_records(p, pending[at : at + take * ENTRY.size])
                at += take * ENTRY.size
                left -= take
            elif len(pending) - at >= _PACK.size:
                pack_id, left = _PACK.unpack_from(pending, at)
                p = table.pack_number(pack_id)
                at += _PACK.size
            else:
                break
        del pending[:at]
    if head != MAGIC:
        raise IntegrityError(f"{key} is not an index object of a known version")
    if not stream.eof:
        raise IntegrityError(f"{key} does not decompress: the frame is truncated")
    if left or pending:
        raise IntegrityError(f"{key} is truncated")


FIRST, LAST = 1, 2  # TableIndex: a usable pack; one whose chunks resolve to other copies first


class TableIndex:
    """``in`` and ``get`` over the packs of a finished ``PackTable`` marked usable (``usable[pack number]``:
    ``FIRST``, or ``LAST`` for packs whose chunks resolve to another copy first); among copies of a chunk the
    pack seen first wins, in it the first entry. ``add_pack`` adds packs after (each chunk keeps the location
    it has). Thread-safe: the table is only read."""

    def __init__(self, table: PackTable, usable: bytearray) -> None:
        self.table, self.usable = table, usable
        self.added = ChunkIndex()  # packs added after

    def get(self, cid: bytes) -> ChunkLocation | None:
        table, usable = self.table, self.usable
        copies = [n for n in table.find(cid) if usable[table.pack_of[n]]]
        if not copies:
            return self.added.get(cid)
        if len(copies) > 1:  # the first pack, the first entry in it
            copies.sort(key=lambda n: (usable[table.pack_of[n]], table.pack_of[n], table.fields(n)[1]))
        _cid, offset, stored_len, raw_len, flags = table.fields(copies[0])
        return ChunkLocation(table.pack_id(table.pack_of[copies[0]]), offset, stored_len, raw_len, flags)

    def __contains__(self, cid: bytes) -> bool:
        return self.get(cid) is not None

    def add_pack(self, pack_id: bytes, entries: Iterable[PackEntry]) -> None:
        self.added.add_pack(pack_id, entries)

    @property
    def packs(self) -> Container[bytes]:
        """The ids of the packs it resolves chunks to."""
        return _TablePacks(self)


class _TablePacks:
    def __init__(self, index: TableIndex) -> None:
        self.index = index

    def __contains__(self, pack_id: bytes) -> bool:
        p = self.index.table.packs.index(pack_id)
        return (p >= 0 and bool(self.index.usable[p])) or pack_id in self.index.added.packs


class EitherIndex:
    """``in`` and ``get`` over two indexes, the first one first (read-only; as thread-safe as both)."""

    def __init__(self, first, second) -> None:
        self.first, self.second = first, second

    def __contains__(self, cid: bytes) -> bool:
        return cid in self.first or cid in self.second

    def get(self, cid: bytes) -> ChunkLocation | None:
        found = self.first.get(cid)
        return found if found is not None else self.second.get(cid)


class ChunkIndex:
    """Thread-safe map chunk id -> location; the first location recorded for an id wins."""

    def __init__(self) -> None:
        self._chunks: dict[bytes, ChunkLocation] = {}
        self.packs: set[bytes] = set()
        self._lock = threading.Lock()

    def add_pack(self, pack_id: bytes, entries: Iterable[PackEntry]) -> None:
        with self._lock:
            self.packs.add(pack_id)
            chunks = self._chunks
            for e in entries:
                if e.chunk_id not in chunks:
                    chunks[e.chunk_id] = ChunkLocation(pack_id, e.offset, e.stored_len, e.raw_len, e.flags)

    def __contains__(self, cid: bytes) -> bool:
        return cid in self._chunks

    def get(self, cid: bytes) -> ChunkLocation | None:
        return self._chunks.get(cid)

    def __len__(self) -> int:
        return len(self._chunks)
