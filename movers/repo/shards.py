"""The chunk index read in part: the shards a backup's chunks fall in, loaded when first needed.

A located repository (format version 2) keeps its chunk index cut into 256 shards by the first
byte of the chunk id (``movers.repo.index.shard_prefix``); prune compacts each shard and backups
without a parent add their chunks shard by shard. A backup without a parent asks this index whether
a chunk is already stored; the first question about a shard lists and reads that shard's objects,
so a small backup reads a few shards of a large repository, never all of it (each a ``TableIndex``: about 65
bytes per chunk). Packs the prune state
the backup read lists are left out (as ``Repository.backup_index`` does for version 1).
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from movers.repo import pack as packfmt
from movers.repo.index import FIRST, ChunkLocation, TableIndex, read_pack_table, shard_prefix
from movers.repo.store.base import Store


class ShardedIndex:
    """``cid in index`` and ``index.get(cid)`` over the shards, each loaded once. Thread-safe."""

    def __init__(self, store: Store, garbage: Collection[str]) -> None:
        self.store = store
        self.garbage = frozenset(garbage)
        self._shards: dict[int, TableIndex] = {}
        self._lock = threading.Lock()

    def __contains__(self, cid: bytes) -> bool:
        return cid in self._shard(cid[0])

    def get(self, cid: bytes) -> ChunkLocation | None:
        return self._shard(cid[0]).get(cid)

    def _shard(self, shard: int) -> TableIndex:
        loaded = self._shards.get(shard)
        if loaded is not None:
            return loaded
        with self._lock:
            if shard not in self._shards:
                self._shards[shard] = self._load(shard)
            return self._shards[shard]

    def _load(self, shard: int) -> TableIndex:
        _keys, table = read_pack_table(self.store, shard_prefix(shard))
        table.finish()
        usable = bytearray(
            FIRST if packfmt.pack_key(table.pack_id(p)) not in self.garbage else 0 for p in range(len(table))
        )
        return TableIndex(table, usable)
