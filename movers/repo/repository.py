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
from movers.repo.contenthash import ContentHash
from movers.repo.index import (
    ChunkIndex,
    ChunkLocation,
    encode_index,
    encode_sharded_index,
    read_index_objects,
)
from movers.repo.manifest import BACKUP_PREFIX, Manifest, volume_from_key, volume_prefix
from movers.repo.pack import PackEntry
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
        # What every reader and writer of volume data hashes with (the one place that chooses it).
        self.content_hash: ContentHash = config.content_hash
        self._index: ChunkIndex | None = None
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

    def index(self) -> ChunkIndex:
        """The chunk index: all index objects plus the trailers of packs none of them lists.

        Packs found only by their trailer (left by an interrupted backup, or a backup still
        running) are remembered in ``unindexed_packs`` so the next backup indexes them. Index
        entries of packs that are gone from ``packs/`` are left out; a chunk that is also in a
        pack the newest prune state lists resolves to its other copy (the listed one may be
        deleted after the grace). Safe beside a prune: index objects it compacts away while they are
        read are listed again (``read_index_objects``), packs it deletes meanwhile are left out. Cached.
        """
        if self._index is None:
            self._index, self.unindexed_packs = self._load_index(frozenset(), frozenset(garbage_keys(self.store)))
        return self._index

    def backup_index(self, garbage: Collection[str]) -> tuple[ChunkIndex, dict[bytes, list[PackEntry]]]:
        """A fresh chunk index for a backup to dedup against, and its packs no index object lists.

        Packs whose key is in ``garbage`` (the newest prune state's keys, read *before* this
        call: ``movers.repo.prunestate.garbage_keys``) are left out, so a backup never newly
        references a pack a prune may delete. Not cached: restores need every pack.
        """
        return self._load_index(frozenset(garbage), frozenset())

    def _load_index(
        self, exclude: frozenset[str], last: frozenset[str]
    ) -> tuple[ChunkIndex, dict[bytes, list[PackEntry]]]:
        # Index objects first, then packs/: a pack an index lists but the later listing lacks is gone.
        listed = self.read_index_objects()[1]
        present = {pack.pack_id_from_key(key): key for key in self.store.list(pack.PACK_PREFIX)}
        unindexed: dict[bytes, list[PackEntry]] = {}
        for pack_id, key in list(present.items()):
            if pack_id in listed or key in exclude:
                continue
            try:
                unindexed[pack_id] = self.read_pack_trailer(key)
            except ObjectNotFound:  # deleted by a prune since we listed packs/: it is gone, nothing uses it
                del present[pack_id]
            except IntegrityError as err:
                log.warning("ignoring unreadable unindexed pack %s: %s", key, err)
        if unindexed:
            log.info("recovered %d pack(s) not yet indexed", len(unindexed))
        idx = ChunkIndex()
        usable = [
            (pid, entries)
            for pid, entries in (*listed.items(), *unindexed.items())
            if pid in present and present[pid] not in exclude
        ]
        for pid, entries in sorted(usable, key=lambda item: present[item[0]] in last):  # stable: listed ones last
            idx.add_pack(pid, entries)
        return idx, unindexed

    def read_index_objects(self) -> tuple[list[str], dict[bytes, list[PackEntry]]]:
        """The keys of the index objects, and pack id -> entries from them (``movers.repo.index.read_index_objects``:
        objects a concurrent prune compacts away are listed again)."""
        return read_index_objects(self.store)

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
