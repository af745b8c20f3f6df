"""A backup repository on a Store: open/init, the chunk index, backups and their maps.

Object keys::

    config                          repository config (movers.repo.config), written by init
    packs/<id[:2]>/<id>             pack objects (movers.repo.pack)
    index/<id>                      index objects (movers.repo.index)
    maps/<id[:2]>/<id>              map pages and directories (movers.repo.volmap)
    backups/<volume>/<backup id>    manifests (movers.repo.manifest), the commit points

Every object is immutable and, except manifests and the config, content-addressed:
``put_once`` never rewrites an existing key, so object-locked buckets work.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Protocol

from movers.errors import IntegrityError, NotFoundError, ObjectNotFound, UsageError
from movers.repo import pack, volmap
from movers.repo.config import CONFIG_KEY, RepoConfig
from movers.repo.index import (
    FIRST,
    LAST,
    ChunkLocation,
    TableIndex,
    encode_index,
    encode_sharded_index,
    read_pack_table,
)
from movers.repo.manifest import BACKUP_PREFIX, Manifest, volume_from_key, volume_prefix
from movers.repo.pack import PackEntry
from movers.repo.packtable import StoredPacks
from movers.repo.prunestate import garbage_keys
from movers.repo.store.base import Store

log = logging.getLogger(__name__)


class Locator(Protocol):
    """Where chunks are stored: a located page's table or the chunk index."""

    def get(self, cid: bytes, /) -> ChunkLocation | None: ...


@dataclass(frozen=True)
class BackupRef:
    volume: str
    backup_id: str
    key: str


class Repository:
    """Reads and writes one repository. Safe to share between threads for reads."""

    def __init__(self, store: Store, config: RepoConfig) -> None:
        self.store = store
        self.config = config
        self._index: TableIndex | None = None
        self.unindexed_packs: dict[bytes, list[PackEntry]] = {}

    @classmethod
    def init(cls, store: Store, config: RepoConfig | None = None) -> Repository:
        config = config or RepoConfig()
        if not store.put_new(CONFIG_KEY, config.encode()):  # atomic: of two inits racing, one wins
            raise UsageError(f"{store.describe()} is already a cbt-mover repository")
        return cls(store, config)

    @classmethod
    def open(cls, store: Store) -> Repository:
        try:
            data = store.get(CONFIG_KEY)
        except ObjectNotFound:
            raise NotFoundError(
                f"no cbt-mover repository at {store.describe()} (create one with: cbt-mover init)"
            ) from None
        return cls(store, RepoConfig.decode(data))

    def describe(self) -> str:
        return self.store.describe()

    # -- objects -------------------------------------------------------------------------

    def put_once(self, key: str, data: bytes) -> int:
        """Write an immutable object unless its key exists (one conditional write, ``Store.put_new``, no
        HEAD first); return the bytes uploaded (0 if the key existed)."""
        return len(data) if self.store.put_new(key, data) else 0

    # -- chunk index -----------------------------------------------------------------------

    def index(self) -> TableIndex:
        """The chunk index: all index objects plus the trailers of packs none of them lists.

        Packs found only by their trailer (left by an interrupted backup, or a backup still
        running) are remembered in ``unindexed_packs`` so the next backup indexes them. Index
        entries of packs that are gone from ``packs/`` are left out; a chunk that is also in a
        pack the newest prune state lists resolves to its other copy (the listed one may be
        deleted after the grace). Safe beside a prune: index objects it compacts away while they are
        read are listed again (``stored_packs``), packs it deletes meanwhile are left out. Cached. Memory: about
        65 bytes per stored chunk (``movers.repo.packtable``).
        """
        if self._index is None:
            self._index, self.unindexed_packs = self._load_index(frozenset(), frozenset(garbage_keys(self.store)))
        return self._index

    def backup_index(self, garbage: Collection[str]) -> tuple[TableIndex, dict[bytes, list[PackEntry]]]:
        """A fresh chunk index for a backup to dedup against, and its packs no index object lists.

        Packs whose key is in ``garbage`` (the newest prune state's keys, read *before* this
        call: ``movers.repo.prunestate.garbage_keys``) are left out, so a backup never newly
        references a pack a prune may delete. Not cached: restores need every pack.
        """
        return self._load_index(frozenset(garbage), frozenset())

    def _load_index(
        self, exclude: frozenset[str], last: frozenset[str]
    ) -> tuple[TableIndex, dict[bytes, list[PackEntry]]]:
        packs = self.stored_packs(skip_trailers=exclude)
        table = packs.table
        for p, err in packs.unreadable.items():
            log.warning("ignoring unreadable unindexed pack %s: %s", packs.key(p), err)
        unindexed = {
            table.pack_id(p): table.entries(p)
            for p in packs.unindexed
            if packs.present[p] and p not in packs.unreadable and packs.key(p) not in exclude
        }
        if unindexed:
            log.info("recovered %d pack(s) not yet indexed", len(unindexed))
        usable = bytearray(len(table))
        for p in packs.readable():
            key = packs.key(p)
            if key not in exclude:
                usable[p] = LAST if key in last else FIRST
        return TableIndex(table, usable), unindexed

    def stored_packs(self, skip_trailers: Collection[str] = frozenset()) -> StoredPacks:
        """The chunk index as read in full: the index objects, then a listing of ``packs/`` (so a pack an index
        lists that the listing lacks is gone), then the trailers of listed packs no index lists, except those in
        ``skip_trailers`` (keys). A pack deleted before its trailer is read is not present; one whose trailer is
        damaged is ``unreadable``. Safe beside a prune: index objects it compacts away while they are read are
        listed again (``movers.repo.index.read_pack_table``)."""
        index_keys, table = read_pack_table(self.store)
        packs = StoredPacks(table, index_keys, len(table))
        present = packs.present
        for key in self.store.list(pack.PACK_PREFIX):
            p = table.pack_number(pack.pack_id_from_key(key))
            if p >= len(present):
                present.extend(bytes(p + 1 - len(present)))
            if key != pack.pack_key(table.pack_id(p)):
                packs.odd_keys[p] = key
            if not present[p]:
                present[p] = 1
                packs.listed.append(p)
                if p >= packs.indexed:
                    packs.unindexed.append(p)
        present.extend(bytes(len(table) - len(present)))
        for p in packs.unindexed:
            key = packs.key(p)
            if key in skip_trailers:
                continue
            try:
                table.add_pack(table.pack_id(p), self.read_pack_trailer(key))
            except ObjectNotFound:  # deleted by a prune since we listed packs/: it is gone, nothing uses it
                present[p] = 0
            except IntegrityError as err:
                packs.unreadable[p] = str(err)
        table.finish()
        return packs

    def drop_cached_index(self) -> None:
        """Forget the cached chunk index (after packs were deleted); the next ``index()`` reloads it."""
        self._index = None
        self.unindexed_packs = {}

    def read_pack_trailer(self, key: str) -> list[PackEntry]:
        size = self.store.size(key)
        if size < pack.FOOTER_LEN + len(pack.HEADER):
            raise IntegrityError(f"pack {key} is truncated")
        offset, length = pack.trailer_location(self.store.get_range(key, size - pack.FOOTER_LEN, pack.FOOTER_LEN), size)
        return pack.parse_trailer(self.store.get_range(key, offset, length))

    def indexed(self, packs: dict[bytes, list[PackEntry]]) -> None:
        """Record that an index object now lists ``packs`` (they are no longer unindexed)."""
        for pack_id, entries in packs.items():
            if self._index is not None:
                self._index.add_pack(pack_id, entries)
            self.unindexed_packs.pop(pack_id, None)

    def write_index(self, packs: dict[bytes, list[PackEntry]], sharded: bool = False) -> tuple[int, int]:
        """Write one index object for ``packs``, or one per shard (``movers.repo.shards``) when ``sharded``;
        returns ``(bytes, objects)`` written."""
        if not packs:
            return 0, 0
        objects = encode_sharded_index(packs.items()) if sharded else [encode_index(packs.items())]
        written = [self.put_once(key, data) for key, data in objects]
        return sum(written), sum(1 for n in written if n)

    # -- backups ---------------------------------------------------------------------------

    def list_backups(self, volume: str | None = None) -> list[BackupRef]:
        """Committed backups (those with a manifest), oldest first per volume."""
        prefix = volume_prefix(volume) if volume is not None else BACKUP_PREFIX
        refs = []
        for key in self.store.list(prefix):
            refs.append(BackupRef(volume_from_key(key), key.rsplit("/", 1)[-1], key))
        return refs

    def volumes(self) -> list[str]:
        return sorted({ref.volume for ref in self.list_backups()})

    def read_manifest(self, volume: str, backup_id: str) -> Manifest:
        key = volume_prefix(volume) + backup_id
        try:
            return Manifest.decode(self.store.get(key), key)
        except ObjectNotFound:
            raise NotFoundError(f"backup {backup_id} of volume {volume} not found in {self.describe()}") from None

    def latest(self, volume: str) -> Manifest | None:
        refs = self.list_backups(volume)
        return self.read_manifest(volume, refs[-1].backup_id) if refs else None

    def resolve(self, volume: str, backup: str | None) -> Manifest:
        """The manifest of ``backup`` ("latest" or None = the newest) of ``volume``."""
        if backup in (None, "latest"):
            manifest = self.latest(volume)
            if manifest is None:
                raise NotFoundError(f"volume {volume} has no backups in {self.describe()}")
            return manifest
        return self.read_manifest(volume, backup)

    # -- maps ------------------------------------------------------------------------------

    def page_slots(self, manifest: Manifest) -> list[tuple[bytes, int]]:
        """``(page id or NO_PAGE, entry count)`` for every page of a backup's map."""
        slots: list[tuple[bytes, int]] = []
        for dir_hex in manifest.map.dirs:
            if dir_hex is None:
                slots.extend([(volmap.NO_PAGE, 0)] * manifest.map.dir_fanout)
                continue
            dir_id = bytes.fromhex(dir_hex)
            slots.extend(volmap.decode_dir(self._get_map_object(dir_id), dir_id))
        n_pages = -(-manifest.capacity_bytes // manifest.map.page_size)
        return slots[:n_pages]

    def read_page(self, page_id: bytes) -> list[volmap.Entry]:
        return self.read_page_with_digests(page_id)[0]

    def read_page_with_digests(self, page_id: bytes) -> tuple[list[volmap.Entry], bytes]:
        """A page's entries and block digests (empty for a hole page or a page without them)."""
        return self.read_located_page(page_id)[:2]

    def read_located_page(self, page_id: bytes) -> tuple[list[volmap.Entry], bytes, dict[bytes, ChunkLocation] | None]:
        """A page's entries, block digests and chunk locations (None for a version 1 page; ``{}`` for a hole)."""
        if page_id == volmap.NO_PAGE:
            return [], b"", {}
        _start, _len, entries, digests, locations = volmap.decode_located_page(self._get_map_object(page_id), page_id)
        return entries, digests, locations

    def iter_map(self, manifest: Manifest) -> Iterator[tuple[int, list[volmap.Entry]]]:
        """Yield ``(page index, entries)`` for every page of a backup, in volume order."""
        for page_index, (page_id, _count) in enumerate(self.page_slots(manifest)):
            yield page_index, self.read_page(page_id)

    def iter_located_map(self, manifest: Manifest) -> Iterator[tuple[int, list[volmap.Entry], Locator]]:
        """Yield ``(page index, entries, where their chunks are)`` for every page of a backup, in volume order.

        A located page (format version 2) says where its chunks are; for a version 1 page the chunk
        index is loaded (once) and used instead.
        """
        for page_index, (page_id, _count) in enumerate(self.page_slots(manifest)):
            entries, _digests, locations = self.read_located_page(page_id)
            yield page_index, entries, self.index() if locations is None else locations

    def _get_map_object(self, object_id: bytes) -> bytes:
        key = volmap.map_key(object_id)
        try:
            return self.store.get(key)
        except ObjectNotFound:
            raise IntegrityError(f"map object {key} is missing from the repository") from None
