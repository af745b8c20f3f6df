"""A backup repository on a Store: open/init, the chunk index, backups and their maps.

Object keys::

    config                          repository config (movers.repo.config), written by init
    packs/<id[:2]>/<id>             pack objects (movers.repo.pack)
    index/<id>                      index objects (movers.repo.index)
    maps/<id[:2]>/<id>              map pages and directories (movers.repo.volmap)
    backups/<volume>/<backup id>    manifests (movers.repo.manifest), the commit points
    keys/<slot id>                  key slots of an encrypted repository (movers.repo.keys)

Every object is immutable and, except manifests and the config, content-addressed:
``put_once`` never rewrites an existing key, so object-locked buckets work.

An encrypted repository (``RepoConfig.encrypted``) is opened with credentials (``movers.repo.keys``):
``store`` is then a ``SealedStore`` that seals every object, packs seal their chunks
(``new_pack``, ``decode_chunk``, ``read_pack_trailer``), chunk ids are keyed, and a volume's manifests are
under ``backups/<keyed name of the volume>/`` (``volume_prefix``): no volume id appears in a key or, in the
clear, in an object.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Collection, Container, Iterator
from dataclasses import dataclass
from typing import Protocol

from movers.errors import (
    IncompatibleError,
    IntegrityError,
    NotFoundError,
    ObjectNotFound,
    RepositoryKeyError,
    UsageError,
)
from movers.repo import contenthash, keys, pack, remap, volmap
from movers.repo.chunks import decode_chunk
from movers.repo.config import CONFIG_KEY, RepoConfig
from movers.repo.contenthash import ContentHash
from movers.repo.crypto import PackSeal, RepoKeys
from movers.repo.index import (
    FIRST,
    INDEX_PREFIX,
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
from movers.repo.sealed import SealedStore
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

    def __init__(
        self, store: Store, config: RepoConfig, repo_keys: RepoKeys | None = None, opened_by: str | None = None
    ) -> None:
        if config.encrypted != (repo_keys is not None):
            raise ValueError("an encrypted repository needs its keys, an unencrypted one has none")
        self.store: Store = SealedStore(store, repo_keys) if repo_keys else store
        self.config = config
        self.keys = repo_keys
        self.opened_by = opened_by  # the key slot that opened an encrypted repository
        # What every reader and writer of volume data hashes with (the one place that chooses it).
        self.content_hash: ContentHash = contenthash.of_features(
            config.mandatory_features, repo_keys.chunk_ids if repo_keys else None
        )
        self._index: TableIndex | None = None
        self.unindexed_packs: dict[bytes, list[PackEntry]] = {}
        self._volume_names: dict[str, str] = {}  # volume id -> its key segment, as learned by listing
        # a volume's key prefix -> {manifest key: its newest remap key}, as the last listing of the prefix found them
        self._remaps: dict[str, dict[str, str]] = {}

    @classmethod
    def init(
        cls,
        store: Store,
        config: RepoConfig | None = None,
        credentials: keys.Credentials | None = None,
        kdf_cost: int = keys.DEFAULT_KDF_COST,
    ) -> Repository:
        """Create a repository. An encrypted ``config`` needs ``credentials`` with one secret: its first key slot
        (``kdf_cost``: log2 of scrypt's N for a passphrase), made and checked to open before anything is written;
        an unencrypted one takes none (``UsageError``)."""
        config = config or RepoConfig()
        if config.encrypted and credentials is None:
            raise UsageError(f"a new encrypted repository needs a key: {keys.HOW_TO_GIVE}")
        if config.encrypted and len(credentials.secrets) != 1:
            raise UsageError(
                f"a new repository's first key slot takes one key, not {credentials.sources}:"
                " add the others with: cbt-mover key add"
            )
        if not config.encrypted and credentials is not None:
            raise UsageError(f"a key was given ({credentials.sources}) for an unencrypted repository")
        if store.exists(CONFIG_KEY):
            return cls._complete_init(store, config, credentials, kdf_cost)
        if credentials is None:
            if not store.create(CONFIG_KEY, config.encode()):  # create-only: of two inits racing, one wins
                raise UsageError(f"{store.describe()} is already a cbt-mover repository")
            return cls(store, config)
        # The first key slot is wrapped, checked and written before the config: a key that cannot open writes
        # nothing, and an init killed in between leaves no repository (a slot no config names), never a
        # config without a key slot.
        master = os.urandom(32)
        slot_id = keys.first_slot_id(config.repo_id)
        slot, slot_data = keys.new_slot(config.repo_id, master, credentials.secrets[0], kdf_cost, slot_id)
        keys.write_slot(store, slot, slot_data)
        if not store.create(CONFIG_KEY, config.encode()):  # another init won: our slot opens nothing of it
            store.delete(keys.SLOT_PREFIX + slot)
            raise UsageError(f"{store.describe()} is already a cbt-mover repository")
        return cls(store, config, RepoKeys(master, config.repo_id), slot)

    @classmethod
    def _complete_init(
        cls, store: Store, config: RepoConfig, credentials: keys.Credentials | None, kdf_cost: int
    ) -> Repository:
        """``init`` where a config exists: complete an init that was killed after writing an encrypted config and
        before its first key slot (as versions before the slot came first did), else refuse (``UsageError``).
        Completing gives that config a first key slot with a new master key: nothing was ever sealed with the
        lost one, since nothing could open the repository. Only a repository with no key slot and no object
        besides the config is completed; the slot's key is the config's ``first_slot_id``, so of two inits
        completing it at once one wins."""
        existing = RepoConfig.decode(store.get(CONFIG_KEY))
        where = store.describe()
        if not (existing.encrypted and config.encrypted and credentials is not None) or any(
            next(iter(store.list(prefix)), None)
            for prefix in (keys.SLOT_PREFIX, BACKUP_PREFIX, pack.PACK_PREFIX, INDEX_PREFIX, volmap.MAP_PREFIX)
        ):
            raise UsageError(f"{where} is already a cbt-mover repository")
        master = os.urandom(32)
        slot_id = keys.first_slot_id(existing.repo_id)
        slot, data = keys.new_slot(existing.repo_id, master, credentials.secrets[0], kdf_cost, slot_id)
        if not store.create(keys.SLOT_PREFIX + slot, data):
            raise UsageError(f"{where} is already a cbt-mover repository (another init completed it just now)")
        if store.get(keys.SLOT_PREFIX + slot) != data:
            raise IntegrityError(f"the new key slot {keys.SLOT_PREFIX}{slot} reads back changed after writing it")
        log.warning("%s: completed an init that was interrupted before its first key slot", where)
        return cls(store, existing, RepoKeys(master, existing.repo_id), slot)

    @classmethod
    def open(cls, store: Store, credentials: keys.Credentials | None = None) -> Repository:
        """Open the repository in ``store``; an encrypted one with ``credentials`` (``movers.repo.keys.unlock``:
        ``RepositoryKeyError``, exit code 6, without them or when no key slot opens with them). Credentials given
        for an unencrypted repository are refused (``UsageError``): a key meant for it may mean its config was
        replaced to make writers store plaintext."""
        try:
            data = store.get(CONFIG_KEY)
        except ObjectNotFound:
            raise NotFoundError(
                f"no cbt-mover repository at {store.describe()} (create one with: cbt-mover init)"
            ) from None
        config = RepoConfig.decode(data)
        if not config.encrypted:
            if credentials is not None:
                raise UsageError(
                    f"{store.describe()} is not encrypted, but a key was given ({credentials.sources}):"
                    " give none to use it (a key was meant for an encrypted repository: is this the right one?)"
                )
            return cls(store, config)
        if credentials is None:
            raise RepositoryKeyError(f"{store.describe()} is encrypted: {keys.HOW_TO_GIVE}")
        master, slot = keys.unlock(store, config.repo_id, credentials, store.describe())
        return cls(store, config, RepoKeys(master, config.repo_id), slot)

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

    # -- packs ---------------------------------------------------------------------------

    def pack_seal(self, pack_id: bytes) -> PackSeal | None:
        """What seals pack ``pack_id``'s chunks and trailer (None: an unencrypted repository)."""
        return self.keys.pack_seal(pack_id) if self.keys else None

    def new_pack(self, pack_id: bytes | None = None) -> pack.PackBuilder:
        """A builder of a new pack (``pack_id``: its random id, which a version 2 pack has; sealed when the
        repository is encrypted)."""
        return pack.PackBuilder(pack_id, self.pack_seal(pack_id) if pack_id is not None else None)

    def open_chunk(self, pack_id: bytes, chunk_id: bytes, stored: bytes | memoryview) -> bytes | memoryview:
        """A chunk's stored bytes as read from pack ``pack_id``, unsealed (as they are: unencrypted repository)."""
        seal = self.pack_seal(pack_id)
        return seal.open_chunk(chunk_id, stored) if seal else stored

    def decode_chunk(
        self, pack_id: bytes, stored: bytes | memoryview, flags: int, raw_len: int, chunk_id: bytes
    ) -> bytes:
        """The raw bytes of a chunk read from pack ``pack_id``, opened and verified (``IntegrityError``)."""
        return decode_chunk(self.open_chunk(pack_id, chunk_id, stored), flags, raw_len, chunk_id, self.content_hash)

    def parse_pack_trailer(self, pack_id: bytes, trailer: bytes) -> list[PackEntry]:
        """The entries of pack ``pack_id``'s trailer bytes."""
        return pack.parse_trailer(trailer, self.pack_seal(pack_id))

    def read_pack_trailer(self, key: str) -> list[PackEntry]:
        size = self.store.size(key)
        if size < pack.FOOTER_LEN + len(pack.HEADER):
            raise IntegrityError(f"pack {key} is truncated")
        offset, length = pack.trailer_location(self.store.get_range(key, size - pack.FOOTER_LEN, pack.FOOTER_LEN), size)
        return self.parse_pack_trailer(pack.pack_id_from_key(key), self.store.get_range(key, offset, length))

    def check_pack_framing(self, key: str) -> list[PackEntry]:
        """Check pack ``key``'s header, footer and trailer (``pack.read_framing``); its entries. ``IntegrityError``
        when damaged, ``ObjectNotFound`` when it is not there."""
        size = self.store.size(key)
        return pack.read_framing(
            lambda offset, length: self.store.get_range(key, offset, length),
            size,
            self.pack_seal(pack.pack_id_from_key(key)),
        )

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

    def volume_prefix(self, volume: str) -> str:
        """The key prefix of ``volume``'s manifests: ``backups/<quoted id>/``, or in an encrypted repository
        ``backups/<keyed name>/`` (``RepoKeys.volume_name``)."""
        if self.keys is None:
            return volume_prefix(volume)
        if not volume:
            raise UsageError("volume id must not be empty")
        return f"{BACKUP_PREFIX}{self._volume_names.get(volume) or self.keys.volume_name(volume)}/"

    def manifest_key(self, manifest: Manifest) -> str:
        """Where ``manifest`` is (to be) stored."""
        return self.volume_prefix(manifest.volume.id) + manifest.backup_id

    def list_backups(self, volume: str | None = None) -> list[BackupRef]:
        """Committed backups (those with a manifest), oldest first per volume.

        In an encrypted repository the keys do not say whose backups they are: each volume's newest readable
        manifest does (one GET per volume). A volume none of whose manifests opens is listed as
        ``(unreadable <key segment>)``; reading its manifests raises the ``IntegrityError`` that names them.
        The listing's remaps (``movers.repo.remap``) are kept for ``read_manifest``.
        """
        if volume is not None:
            prefix = self.volume_prefix(volume)
            keys_found = self._listed(prefix)
            return [BackupRef(volume, k.rsplit("/", 1)[-1], k) for k in keys_found]
        keys_found = self._listed(BACKUP_PREFIX)
        if self.keys is None:
            return [BackupRef(volume_from_key(k), k.rsplit("/", 1)[-1], k) for k in keys_found]
        by_segment: dict[str, list[str]] = {}
        for key in keys_found:
            by_segment.setdefault(key[len(BACKUP_PREFIX) :].split("/", 1)[0], []).append(key)
        refs = []
        for segment, seg_keys in by_segment.items():
            name = self._volume_named(segment, seg_keys)
            refs.extend(BackupRef(name, k.rsplit("/", 1)[-1], k) for k in seg_keys)
        return sorted(refs, key=lambda ref: (ref.volume, ref.backup_id))

    def _listed(self, prefix: str) -> list[str]:
        """The manifest keys under ``prefix`` (``backups/`` or one volume's), noting the listing's remaps."""
        keys_found = list(self.store.list(prefix))
        volumes = {prefix} if prefix != BACKUP_PREFIX else {_volume_prefix_of(k) for k in keys_found}
        for volume in volumes:
            self._remaps[volume] = {}
        for manifest_key, remap_key in remap.newest_of_each(keys_found).items():
            self._remaps.setdefault(_volume_prefix_of(manifest_key), {})[manifest_key] = remap_key
        return [k for k in keys_found if not remap.is_remap_key(k)]

    def _volume_named(self, segment: str, seg_keys: list[str]) -> str:
        """The volume id whose manifests are under ``backups/<segment>/`` (encrypted repositories)."""
        for volume, known in self._volume_names.items():
            if known == segment:
                return volume
        for key in reversed(seg_keys):
            try:
                volume = Manifest.decode(self.store.get(key), key).volume.id
            except (ObjectNotFound, IntegrityError, IncompatibleError) as err:
                log.debug("cannot name volume of %s: %s", key, err)
                continue
            if self.keys is not None and self.keys.volume_name(volume) == segment:
                break
        else:
            volume = f"(unreadable {segment})"
        self._volume_names[volume] = segment
        return volume

    def volumes(self) -> list[str]:
        return sorted({ref.volume for ref in self.list_backups()})

    def read_manifest(self, volume: str, backup_id: str) -> Manifest:
        """The manifest of one backup, with the map of its newest remap when a consolidation rewrote it
        (``movers.repo.remap``; ``Manifest.remapped`` names it)."""
        key = self.volume_prefix(volume) + backup_id
        try:
            manifest = Manifest.decode(self.store.get(key), key)
        except ObjectNotFound:
            raise NotFoundError(f"backup {backup_id} of volume {volume} not found in {self.describe()}") from None
        remap_key = self._remap_keys(key).get(key)
        if remap_key is None:
            return manifest
        newest = remap.Remap.decode(self.store.get(remap_key), remap_key)
        if not newest.applies_to(manifest):
            raise IntegrityError(f"remap {remap_key} is not of backup {key}")
        return dataclasses.replace(manifest, map=newest.map, remapped=remap_key)

    def _remap_keys(self, manifest_key: str) -> dict[str, str]:
        """The newest remap key of each backup of the volume whose manifest is at ``manifest_key``: from the last
        listing of the volume's backups, else one listing now."""
        prefix = _volume_prefix_of(manifest_key)
        if prefix not in self._remaps:
            self._listed(prefix)
        return self._remaps[prefix]

    def write_remap(self, manifest: Manifest, new: remap.Remap) -> str:
        """Commit a consolidation of ``manifest`` (``movers.repo.remap``); the remap's key."""
        manifest_key = self.manifest_key(manifest)
        key = remap.write(self.store, manifest_key, new)
        self._remaps.setdefault(_volume_prefix_of(manifest_key), {})[manifest_key] = key
        return key

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

    def iter_located_map(
        self, manifest: Manifest, pages: Container[int] | None = None
    ) -> Iterator[tuple[int, list[volmap.Entry], Locator]]:
        """Yield ``(page index, entries, where their chunks are)`` for every page of a backup (``pages``: only
        those page indexes; no other page is read), in volume order.

        A located page (format version 2) says where its chunks are; for a version 1 page the chunk
        index is loaded (once) and used instead.
        """
        for page_index, (page_id, _count) in enumerate(self.page_slots(manifest)):
            if pages is not None and page_index not in pages:
                continue
            entries, _digests, locations = self.read_located_page(page_id)
            yield page_index, entries, self.index() if locations is None else locations

    def _get_map_object(self, object_id: bytes) -> bytes:
        key = volmap.map_key(object_id)
        try:
            return self.store.get(key)
        except ObjectNotFound:
            raise IntegrityError(f"map object {key} is missing from the repository") from None


def _volume_prefix_of(key: str) -> str:
    """The volume's key prefix (``backups/<segment>/``) of a manifest or remap key under it."""
    return key.rsplit("/", 1)[0] + "/"
