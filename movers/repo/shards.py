"""The chunk index read in part: the shards a backup's chunks fall in, loaded when first needed.

A located repository (format version 2) keeps its chunk index cut into 256 shards by the first
byte of the chunk id (``movers.repo.index.shard_prefix``); prune compacts each shard and backups
without a parent add their chunks shard by shard. A backup without a parent asks this index whether
a chunk is already stored; the first question about a shard lists and reads that shard's objects,
so a small backup reads a few shards of a large repository, never all of it. Packs the prune state
the backup read lists are left out (as ``Repository.backup_index`` does for version 1).
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from movers.errors import ObjectNotFound
from movers.repo import pack as packfmt
from movers.repo.index import ChunkLocation, decode_index, shard_prefix
from movers.repo.store.base import Store

_ROUNDS = 3  # listings of a shard whose objects a concurrent prune keeps compacting (then: fewer dedup hits)


class ShardedIndex:
    """``cid in index`` and ``index.get(cid)`` over the shards, each loaded once. Thread-safe."""

    def __init__(self, store: Store, garbage: Collection[str]) -> None:
        self.store = store
        self.garbage = frozenset(garbage)
        self._shards: dict[int, dict[bytes, ChunkLocation]] = {}
        self._lock = threading.Lock()
        self.objects_read = 0

    def __contains__(self, cid: bytes) -> bool:
        return cid in self._shard(cid[0])

    def get(self, cid: bytes) -> ChunkLocation | None:
        return self._shard(cid[0]).get(cid)

    def __len__(self) -> int:
        return sum(len(shard) for shard in self._shards.values())

    def _shard(self, shard: int) -> dict[bytes, ChunkLocation]:
        loaded = self._shards.get(shard)
        if loaded is not None:
            return loaded
        with self._lock:
            if shard not in self._shards:
                self._shards[shard] = self._load(shard)
            return self._shards[shard]

    def _load(self, shard: int) -> dict[bytes, ChunkLocation]:
        chunks: dict[bytes, ChunkLocation] = {}
        done: set[str] = set()
        for _round in range(_ROUNDS):
            vanished = False
            for key in self.store.list(shard_prefix(shard)):
                if key in done:
                    continue
                try:
                    data = self.store.get(key)
                except ObjectNotFound:  # a prune compacted it after writing the new object: list again
                    vanished = True
                    continue
                done.add(key)
                self.objects_read += 1
                for pack_id, entries in decode_index(data, key):
                    if packfmt.pack_key(pack_id) in self.garbage:
                        continue
                    for e in entries:
                        location = ChunkLocation(pack_id, e.offset, e.stored_len, e.raw_len, e.flags)
                        chunks.setdefault(e.chunk_id, location)
            if not vanished:
                break
        return chunks
