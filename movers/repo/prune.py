"""Prune: delete packs and map objects that no backup references any more, and compact the index.

Mark, then sweep (no locks; safe to run while backups run, see "Grace" below):

1. **Mark.** Read every manifest, its map directories and its pages, and collect the ids of
   all referenced chunks, pages and directories. A page shared by several backups is read
   once. Memory: one ``bytes`` id per distinct referenced chunk (~100 bytes each: ~25 MiB per
   TiB of unique data at 4 MiB chunks) and per map object, plus the pack entries read from the
   index objects (~200 bytes per stored chunk, the same bound as ``ChunkIndex``). Pages are
   read one at a time.
2. **Classify packs.** A pack with at least one referenced chunk is kept (its unreferenced
   chunks are reported as ``dead_bytes``: repacking partly used packs is out of scope). A pack
   with no referenced chunk, and a map object nobody references, is *unreferenced*.
3. **Grace.** An unreferenced object is deleted only when it has been seen unreferenced for
   at least ``grace_s`` (default 24 h). The age is kept in **prune state objects**
   (``prune/<time>-<hash>``, JSON ``{object key: first time seen unreferenced}``): each prune
   writes a new one with the objects it found unreferenced and did not delete, carrying over
   the first-seen times of the newest previous state (an object absent from it starts at
   ``now``). The age is thus "unreferenced continuously for ``grace_s`` as observed by prune",
   not the object's upload time. Why this and not the store's mtime:

   * it protects what a running backup needs *beyond its own new packs*: an incremental
     shares the pages and chunks of its parent, and a backup dedups against any chunk in the
     index. If a forget removes the only manifest referencing such old objects while a backup
     runs, their upload time is long past the grace and an mtime rule would delete them under
     the running backup; here their clock only starts at the first prune that sees them
     unreferenced;
   * the new packs of a running backup (uploaded before its manifest exists) are unreferenced
     and new to the state, so they get ``now`` and survive for ``grace_s``;
   * it needs no change to the Store protocol (every store, object-locked buckets included)
     and compares times from one clock (prune's), not S3 server time against the host's.

   The cost: an unreferenced object is deleted by the first prune at least ``grace_s`` after
   the first prune that saw it (``grace_s=0`` deletes at once). ``grace_s`` must exceed the
   longest backup. Residual race (documented, needs the backup to re-check its reused packs
   before committing): a backup that dedups against a chunk that has been garbage for longer
   than ``grace_s`` while a prune deletes that pack.
4. **Index rewrite, then deletes.** Write ONE new index object listing every surviving pack
   (from the old index objects and from the trailers of packs no index lists), then delete the
   old index objects, then the unreferenced packs, then map objects, then old prune states.
   Crash safety, step by step:

   * crash before or during the new index write: nothing was deleted; the old index objects
     are intact (a partial put is invisible: stores' puts are atomic);
   * crash after the new index, before or during the old index deletes: readers take the union
     of all index objects; every listed pack still exists (no pack was deleted yet), so the
     repository reads as before, only with duplicate entries (first location wins, both are
     right);
   * crash during the pack deletes: the surviving index objects list only surviving packs, so
     no backup can dedup against a deleted pack; packs not yet deleted are recovered from their
     trailers as unindexed packs and deleted by the next prune (their first-seen time is in the
     new state, written first);
   * deleting packs *before* dropping them from the index would be wrong: a crash in between
     leaves index entries pointing at missing packs, and the next backup would reference a
     chunk that does not exist.

   Index objects and packs written after prune listed them are never touched (prune deletes
   only keys it listed), so a concurrent backup's index and packs survive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from movers.errors import IntegrityError, NotFoundError, ObjectNotFound
from movers.repo import pack, volmap
from movers.repo.index import INDEX_PREFIX, decode_index, encode_index
from movers.repo.pack import PackEntry
from movers.repo.repository import Repository

log = logging.getLogger(__name__)

STATE_PREFIX = "prune/"
STATE_FORMAT = "cbt-mover-prune-state"


@dataclass
class PruneReport:
    dry_run: bool
    backups_marked: int = 0
    chunks_referenced: int = 0
    packs_total: int = 0
    packs_deleted: int = 0
    bytes_deleted: int = 0
    packs_kept: int = 0
    kept_chunk_bytes: int = 0  # stored chunk bytes in kept packs
    packs_partly_used: int = 0
    dead_bytes: int = 0  # unreferenced chunk bytes inside kept (partly used) packs: needs repacking
    packs_in_grace: int = 0  # unreferenced, kept until unreferenced for grace_s
    bytes_in_grace: int = 0
    map_objects_deleted: int = 0
    map_objects_in_grace: int = 0
    index_objects_written: int = 0
    index_objects_deleted: int = 0
    unreadable_packs: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _ts(now: datetime | float | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return (now if now.tzinfo else now.replace(tzinfo=UTC)).timestamp()
    return float(now)


def _read_state(repo: Repository) -> tuple[list[str], dict[str, float]]:
    """All prune state keys (oldest first) and the first-seen times of the newest readable one."""
    keys = list(repo.store.list(STATE_PREFIX))
    for key in reversed(keys):
        try:
            doc = json.loads(repo.store.get(key))
            if doc.get("format") != STATE_FORMAT:
                raise ValueError("unknown format")
            return keys, {k: float(v) for k, v in doc["first_unreferenced"].items()}
        except ObjectNotFound:
            continue
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            log.warning("ignoring unreadable prune state %s: %s", key, err)
    return keys, {}


def _state_object(now: float, first_seen: dict[str, float]) -> tuple[str, bytes]:
    data = json.dumps(
        {"format": STATE_FORMAT, "version": 1, "written": now, "first_unreferenced": first_seen}, sort_keys=True
    ).encode()
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{STATE_PREFIX}{stamp}-{hashlib.sha256(data).hexdigest()[:16]}", data


def _mark(repo: Repository, report: PruneReport) -> tuple[set[bytes], set[bytes]]:
    """Referenced chunk ids and map object ids (pages and directories) of all manifests."""
    chunks: set[bytes] = set()
    maps: set[bytes] = set()
    for ref in repo.list_backups():
        try:
            manifest = repo.read_manifest(ref.volume, ref.backup_id)
        except NotFoundError:  # forgotten while we listed: references nothing any more
            continue
        for dir_hex in manifest.map.dirs:
            if dir_hex is not None:
                maps.add(bytes.fromhex(dir_hex))
        for page_id, _count in repo.page_slots(manifest):
            if page_id == volmap.NO_PAGE or page_id in maps:
                continue
            maps.add(page_id)
            for _voff, _len, cid, _coff in repo.read_page(page_id):
                chunks.add(cid)
        report.backups_marked += 1
    return chunks, maps


def prune(
    repo: Repository, grace_s: float = 86400, dry_run: bool = False, now: datetime | float | None = None
) -> PruneReport:
    """Delete what no backup references (after ``grace_s``) and rewrite the index; see the module doc.

    Raises (and deletes nothing) when a manifest or map object cannot be read: a prune that
    cannot see every reference must not sweep. ``dry_run`` reads everything and writes nothing.
    """
    started = time.monotonic()
    now_ts = _ts(now)
    report = PruneReport(dry_run=dry_run)
    store = repo.store
    state_keys, first_seen = _read_state(repo)

    # Listing order matters: index objects before packs, so every pack an index we read lists
    # was uploaded before we list packs/ (a pack missing from that listing was deleted).
    index_keys = list(store.list(INDEX_PREFIX))
    entries_of: dict[bytes, list[PackEntry]] = {}
    for key in index_keys:
        for pack_id, entries in decode_index(store.get(key), key):
            entries_of.setdefault(pack_id, entries)
    pack_keys = list(store.list(pack.PACK_PREFIX))
    map_keys = list(store.list(volmap.MAP_PREFIX))
    present: dict[bytes, str] = {pack.pack_id_from_key(k): k for k in pack_keys}
    unindexed = [pid for pid in present if pid not in entries_of]
    for pid in unindexed:
        try:
            entries_of[pid] = repo.read_pack_trailer(present[pid])
        except (IntegrityError, ObjectNotFound) as err:
            log.warning("keeping unreadable pack %s: %s", present[pid], err)
            report.unreadable_packs.append(present[pid])
    stale_index = any(pid not in present for pid in entries_of)

    chunks, maps = _mark(repo, report)
    report.chunks_referenced = len(chunks)

    new_state: dict[str, float] = {}

    def expired(key: str) -> bool:
        seen = first_seen.get(key, now_ts)
        if now_ts - seen >= grace_s:
            return True
        new_state[key] = seen
        return False

    doomed_packs: list[str] = []
    surviving: dict[bytes, list[PackEntry]] = {}
    for pid, key in present.items():
        report.packs_total += 1
        if key in report.unreadable_packs:
            continue
        entries = entries_of[pid]
        live = [e for e in entries if e.chunk_id in chunks]
        if live:
            surviving[pid] = entries
            report.packs_kept += 1
            report.kept_chunk_bytes += sum(e.stored_len for e in entries)
            dead = sum(e.stored_len for e in entries) - sum(e.stored_len for e in live)
            if dead:
                report.packs_partly_used += 1
                report.dead_bytes += dead
        elif expired(key):
            doomed_packs.append(key)
            report.packs_deleted += 1
            report.bytes_deleted += store.size(key)
        else:
            surviving[pid] = entries
            report.packs_in_grace += 1
            report.bytes_in_grace += store.size(key)

    doomed_maps: list[str] = []
    for key in map_keys:
        try:
            oid = bytes.fromhex(key.rsplit("/", 1)[-1])
        except ValueError:
            continue  # not ours: leave it alone
        if oid in maps:
            continue
        if expired(key):
            doomed_maps.append(key)
        else:
            report.map_objects_in_grace += 1
    report.map_objects_deleted = len(doomed_maps)

    rewrite = bool(doomed_packs) or len(index_keys) > 1 or bool(unindexed) or stale_index
    if rewrite:
        report.index_objects_written = int(bool(surviving))
        report.index_objects_deleted = len(index_keys)
    if dry_run:
        report.duration_s = round(time.monotonic() - started, 3)
        return report

    # 1. the new state first: the first-seen times of what we keep must survive any crash below
    state_key = None
    if new_state or state_keys:
        state_key, data = _state_object(now_ts, new_state)
        store.put(state_key, data)
    # 2. one new index of the surviving packs, 3. then the old index objects
    if rewrite:
        new_key = None
        if surviving:
            new_key, data = encode_index(sorted(surviving.items()))
            repo.put_once(new_key, data)
        report.index_objects_deleted = 0
        for key in index_keys:
            if key != new_key:
                store.delete(key)
                report.index_objects_deleted += 1
        if new_key in index_keys:
            report.index_objects_written = 0
    # 4. packs no index lists any more, 5. map objects, 6. older prune states
    for key in doomed_packs:
        store.delete(key)
    for key in doomed_maps:
        store.delete(key)
    for key in state_keys:
        if key != state_key:
            store.delete(key)
    repo._index = None  # the cached chunk index may list deleted packs
    repo.unindexed_packs.clear()
    report.duration_s = round(time.monotonic() - started, 3)
    log.info(
        "prune: deleted %d pack(s) (%d bytes), %d map object(s); %d pack(s) in grace",
        report.packs_deleted, report.bytes_deleted, report.map_objects_deleted, report.packs_in_grace,
    )  # fmt: skip
    return report
