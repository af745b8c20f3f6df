"""Index objects: which chunks live in which pack, so a reader need not open every pack.

An index object (key ``index/<sha256 of its bytes>``) is written by each backup before its
manifest and lists the packs that backup wrote (or recovered from a crashed run)::

    b"CBTIDX\\x01" + zstd( repeated: '<32sI' (pack id, n) then n x '<32sQIIB' entries )

``ChunkIndex`` is the in-memory union of all index objects plus the trailers of packs that no
index mentions yet.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import zstandard

from movers.errors import IntegrityError, ObjectNotFound, TransientStoreError
from movers.repo.pack import PackEntry
from movers.repo.store.base import Store

MAGIC = b"CBTIDX\x01"
INDEX_PREFIX = "index/"
_PACK = struct.Struct("<32sI")
_ENTRY = struct.Struct("<32sQIIB")


class ChunkLocation(NamedTuple):
    pack_id: bytes
    offset: int
    stored_len: int
    raw_len: int
    flags: int


def encode_index(packs: Iterable[tuple[bytes, list[PackEntry]]]) -> tuple[str, bytes]:
    """Return ``(key, bytes)`` of an index object listing ``packs``."""
    parts = []
    for pack_id, entries in packs:
        parts.append(_PACK.pack(pack_id, len(entries)))
        parts.extend(_ENTRY.pack(e.chunk_id, e.offset, e.stored_len, e.raw_len, e.flags) for e in entries)
    data = MAGIC + zstandard.ZstdCompressor(level=3, write_checksum=True).compress(b"".join(parts))
    return f"{INDEX_PREFIX}{hashlib.sha256(data).hexdigest()}", data


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
            entries = [PackEntry(*_ENTRY.unpack_from(raw, pos + i * _ENTRY.size)) for i in range(n)]
            pos += n * _ENTRY.size
            yield pack_id, entries
    except struct.error:
        raise IntegrityError(f"{key} is truncated") from None


def merge_packs(objects: Iterable[Iterable[tuple[bytes, list[PackEntry]]]]) -> dict[bytes, list[PackEntry]]:
    """Every pack the decoded index ``objects`` list, with the union of their entries for it (a sharded index
    lists a pack in several objects; an interrupted compaction leaves two objects listing the same entries)."""
    merged: dict[bytes, dict[int, PackEntry]] = {}
    for listing in objects:
        for pack_id, entries in listing:
            known = merged.setdefault(pack_id, {})
            for e in entries:
                known.setdefault(e.offset, e)
    return {pack_id: sorted(entries.values(), key=lambda e: e.offset) for pack_id, entries in merged.items()}


def read_index_objects(
    store: Store, prefix: str = INDEX_PREFIX, relists: int = 5
) -> tuple[list[str], dict[bytes, list[PackEntry]]]:
    """The keys of the index objects under ``prefix``, and pack id -> entries from them (``merge_packs``).

    An index object that vanishes between the listing and its read was compacted by a prune, which writes its
    new index *before* deleting the old ones: so ``prefix`` is listed again and the objects not read yet are
    read (at most ``relists`` listings; then ``TransientStoreError``, exit 5).
    """
    decoded: dict[str, list[tuple[bytes, list[PackEntry]]]] = {}
    for _ in range(relists):
        keys = list(store.list(prefix))
        still = set(keys)
        decoded = {key: packs for key, packs in decoded.items() if key in still}
        try:
            for key in keys:
                if key not in decoded:
                    decoded[key] = list(decode_index(store.get(key), key))
        except ObjectNotFound:
            continue  # compacted meanwhile: the listing again has the new index
        return keys, merge_packs(decoded[key] for key in keys)
    raise TransientStoreError(
        f"index objects under {prefix} of {store.describe()} kept vanishing while being read"
        " (prunes compacting the index); retry"
    )


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
