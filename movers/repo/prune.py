"""Prune: delete packs and map objects that no backup references any more, and compact the index.

Mark, then sweep (safe to run while backups run, whatever the grace: see "Backups" and "Leases" below;
two prunes of one repository must not run at the same time: each holds the repository's prune lock,
``movers.repo.prunelock``, from before it reads anything until it is done; a dry run takes none):

1. **Mark.** Read every manifest, its map directories and its pages, and mark all referenced
   chunks, pages and directories (``movers.repo.references``: bits on the chunk index, see
   "Memory" below). A page shared by several backups is read once; pages are read one at a time.
2. **Classify packs: one copy of each chunk.** Every referenced chunk gets a *home*: the pack whose
   copy stays (``choose_homes``), chosen among the packs the previous state does not list (backups
   dedup against those, readers prefer them). A pack that is home to a chunk, or holds a referenced
   chunk no unlisted pack has, is kept; its other chunks (unreferenced, or copies whose home is
   elsewhere) are reported as ``dead_bytes``; in version 2 a pack at least ``repack.DEAD_FRACTION`` dead is
   repacked (``movers.repo.repack``: its live chunks copied to new packs, a forwarding object written, and
   the old pack is then unreferenced like any other; forwarding objects no page needs are freed likewise). A pack
   whose referenced chunks all live elsewhere is *a pack of duplicate copies* (two backups that
   re-uploaded the same listed chunks at once leave such packs); a pack with no referenced chunk,
   and a map object nobody references, is *unreferenced*. A chunk with a copy in only one such pack
   gets its home while marking (a bit); only chunks with copies in several go through the greedy cover.
3. **Grace.** An unreferenced object is deleted only when it has been seen unreferenced for
   at least ``grace_s`` (default 24 h). The age is kept in **prune state objects**
   (``prune/<time>-<hash>``, JSON ``{"first_unreferenced": {object key: first time seen
   unreferenced}, "deleting": [keys]}``): each prune writes a new one listing every
   unreferenced object it saw, those it keeps (with their first-seen time, carried over from
   the newest previous state) and those it is about to delete. An object the previous state
   does not list as kept starts its clock when the new state is written (not when prune
   started, so a backup that read the previous state cannot have started after the clock).
   The age is thus "unreferenced continuously for ``grace_s`` as observed by prune", not the
   object's upload time. Why this and not the store's mtime:

   * it protects what a running backup needs *beyond its own new packs*: an incremental
     shares the pages of its parent. If a forget removes the only manifest referencing such
     old objects while a backup runs, their upload time is long past the grace and an mtime
     rule would delete them under the running backup; here their clock only starts at the
     first prune that sees them unreferenced;
   * the new packs of a running backup (uploaded before its manifest exists) are unreferenced
     and new to the state, so they get ``now`` and survive for ``grace_s``;
   * it needs no change to the Store protocol (every store, object-locked buckets included)
     and compares times from one clock (prune's), not S3 server time against the host's.

   The cost: an unreferenced object is deleted by the first prune at least ``grace_s`` after
   the first prune that saw it (``grace_s=0``: by this prune). Running backups do not depend on
   the grace (4a below): it is an undo window for a forget.

   A pack of duplicate copies is listed the same way (``redundant`` in the state), but its clock
   starts when a prune first sees it *as duplicate copies* and it waits at least
   ``DUPLICATE_HOLD_S`` (a day) whatever the grace: a restore that loaded the chunk index before
   the state listed it, or before the copy that stays existed, may read its chunks there (restores
   hold no lease). Readers and backups that read a state listing it use the home copy.
4. **Backups never newly reference what a prune may delete.** A backup reads the newest state
   *before* it loads the chunk index (``read_state``, ``garbage_keys``) and treats every
   object listed there (kept in grace or being deleted) as absent: it does not dedup against
   chunks of those packs (it re-uploads them), does not re-index them, and never re-creates
   one of those keys byte for byte (a pack gets a padding chunk, a page an equivalent split
   entry, so the new object has another id). Why that closes the race of a backup deduping
   against long-dead data while a prune deletes it (with ``grace_s`` above the longest
   backup and one prune at a time):

   * an object listed in the state the backup read is never referenced by it;
   * any other object the backup uses existed referenced, or unlisted, when that state was
     written, so it can only be listed by a later state, written after the backup started:
     its clock starts after the backup started and no prune deletes it before the backup
     committed (after the commit its manifest references it);
   * an object a prune is deleting is in that prune's state (written before any delete), so
     a backup starting during the deletes, while old index objects still list the pack,
     sees it as absent too;
   * objects of a crashed prune's ``deleting`` list that still exist restart their clock at
     the next prune (an object re-created since must not inherit the old clock).

   The price: packs of a crashed backup that a prune has listed are not reused by the retry
   (re-uploaded; the orphans are deleted after the grace). Residual: a parent whose manifest
   is forgotten while its child backup runs (retention never forgets the newest backup of a
   volume, so only a concurrent newer backup of the same volume plus a forget can do it).
4a. **Leases.** After writing its state and before anything else, prune waits (at most
   ``backup_wait_s``) for the running backups (``movers.repo.leases``) that may use what it is
   about to delete: every one when a key is new to the garbage (``grace_s=0``), else those that
   did not read the previous state (a backup that did treats its keys as absent). Then it marks
   the manifests committed meanwhile and keeps what they reference. Backups still running after
   the wait: it deletes nothing this time (``packs_deferred``). A backup refuses to commit when
   it could not refresh its lease for so long that a prune may have stopped waiting for it.
5. **Index rewrite, then deletes.** Write the new state, then ONE new index object listing every
   surviving pack (from the old index objects and from the trailers of packs no index lists),
   then delete the old index objects, then the unreferenced packs, then map objects, then old
   prune states. Crash safety, step by step:

   * crash before or during the new index write: nothing was deleted; the old index objects
     are intact (a partial put is invisible: stores' puts are atomic);
   * crash after the new index, before or during the old index deletes: readers take the union
     of all index objects; every listed pack still exists (no pack was deleted yet), so the
     repository reads as before, only with duplicate entries (first location wins, both are
     right);
   * crash during the pack deletes: the surviving index objects list only surviving packs, so
     no backup can dedup against a deleted pack (readers also drop index entries of packs that
     are gone); packs not yet deleted are recovered from their trailers as unindexed packs and
     deleted by a later prune;
   * deleting packs *before* dropping them from the index would be wrong: a crash in between
     leaves index entries pointing at missing packs.

   Index objects and packs written after prune listed them are never touched (prune deletes
   only keys it listed), so a concurrent backup's index and packs survive.
6. **Expired leases.** Last, lease objects (backups' and prune locks') whose holder has not refreshed them
   for ``EXPIRED_AFTER_S`` (twice their TTL: it crashed, or its credentials cannot delete), and superseded
   sequences of any lease, are deleted (``leases_deleted``); a dry run counts them.
7. **Stale remaps.** Remaps (``movers.repo.remap``) of forgotten backups and remaps a newer one of the same backup
   superseded are deleted (``remaps_deleted``): marking read each backup through its newest remap, so the maps
   they name were not marked for them.

**Memory** (the contract; ``tests/functional/test_maintenance_memory.py`` holds prune to it,
``bench/maintenance_bench.py`` measures it): the chunk index is a ``movers.repo.packtable.PackTable``: per stored chunk
(an index entry: a chunk stored twice counts twice) its 49-byte index record, its pack number (4), hash slots (~8) and a
byte of marks, 4 more when entries must be regrouped by pack (a sharded index: version 2), up to an eighth more while
buffers grow: about 65 bytes (version 1) or 70 (version 2). Plus about 60 bytes per pack, 32-40 per map object listed or
referenced, and Python objects (a few hundred bytes each) for chunk ids with copies in several candidate packs (version
1) and for every key the prune state lists (its JSON is read and written whole). Listings stream, pages and index
objects are read a part at a time. Writing the new index adds the compressed object being written (~35 bytes per
surviving chunk): version 2 one shard at a time; version 1's single object is compressed from the end of the table,
which frees its records as it goes (``PackTable.drain``; the buffer shrinks once half of it is free), so a version 1
prune that rewrites the index peaks 15-25 bytes per chunk above its dry run. **Time**: linear in the index entries, the
packs, the map objects listed and read, and the manifests (hash lookups, no sorting of chunk ids).
"""

from __future__ import annotations

import heapq
import logging
import struct
import time
from array import array
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import chain

from movers.errors import UsageError
from movers.repo import remap, volmap
from movers.repo import repack as repacking
from movers.repo.forwarding import load_forwarding, old_pack_of
from movers.repo.ids import ID_LEN, IdSet
from movers.repo.index import encode_sharded_index, table_index_objects
from movers.repo.leases import (
    EXPIRED_AFTER_S,
    LEASE_PREFIX,
    TTL_S,
    live_leases,
    saw_state,
    sweep_expired,
    wait_for_leases,
)
from movers.repo.manifest import BACKUP_PREFIX
from movers.repo.pack import PackEntry
from movers.repo.packtable import StoredPacks
from movers.repo.prunelock import LOCK_PREFIX, PruneLock
from movers.repo.prunestate import STATE_PREFIX, PruneState, encode_state, read_state
from movers.repo.references import CANDIDATE, HOME, NAMED, NEW_NAMED, NEW_REF, NO_HOME, PINNED, REF, References
from movers.repo.repository import Repository
from movers.repo.store.base import TEMPORARY_MAX_AGE_S, TEMPORARY_MIN_AGE_S

_LEASES = (LEASE_PREFIX, LOCK_PREFIX)
_MAP_ID = struct.Struct(f"{ID_LEN}s")
DUPLICATE_HOLD_S = 86400.0  # a pack of duplicate copies is deleted at least this long after it was first listed

log = logging.getLogger(__name__)

__all__ = ["STATE_PREFIX", "PruneReport", "prune"]


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
    duplicate_packs_in_grace: int = 0  # of packs_in_grace: their referenced chunks all have a copy that stays
    duplicate_packs_deleted: int = 0  # of packs_deleted: the same
    map_objects_deleted: int = 0
    map_objects_in_grace: int = 0
    index_objects_written: int = 0
    index_objects_deleted: int = 0
    unreadable_packs: list[str] = field(default_factory=list)
    backups_waited_for: int = 0  # backups running when this prune was about to delete (it waited for them)
    packs_deferred: int = 0  # due for deletion, kept: a backup it waited for uses them, or still runs
    map_objects_deferred: int = 0
    leases_deleted: int = 0  # lease and prune lock objects of holders gone for 2x their TTL, or superseded
    remaps_deleted: int = 0  # remaps (``movers.repo.remap``) of forgotten backups, or superseded by a newer one
    packs_repacked: int = 0  # version 2: partly used packs whose live chunks were copied to new packs
    bytes_repacked: int = 0  # the stored bytes copied
    forwarding_objects_deleted: int = 0  # version 2: ``moved/`` objects of packs no page names any more
    forwarding_objects_in_grace: int = 0
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _clock(now: datetime | float | None) -> Callable[[], float]:
    """Prune's clock: the real time, or frozen at ``now`` (tests)."""
    if now is None:
        return time.time
    fixed = (now if now.tzinfo else now.replace(tzinfo=UTC)).timestamp() if isinstance(now, datetime) else float(now)
    return lambda: fixed


def _map_id(key: str) -> bytes:
    return bytes.fromhex(key.rsplit("/", 1)[-1])


def choose_homes(packs: dict[bytes, list[PackEntry]], chunks: Collection[bytes]) -> dict[bytes, bytes]:
    """Chunk id -> the pack whose copy stays, for every chunk of ``chunks`` with a copy in ``packs``.

    Few packs stay (a greedy cover): a pack holding the only copy of a chunk stays anyway, so a chunk with
    several copies goes to such a pack if one holds it; the other duplicated chunks go, pack by pack, to the
    pack holding the most bytes of them (ties: the smaller pack id). Deterministic. Prune decides the chunks with
    one copy as it marks (``movers.repo.references``) and passes the others to ``_cover``, as this does.
    """
    home: dict[bytes, bytes] = {}
    duplicated: set[bytes] = set()
    for pid in sorted(packs):
        for e in packs[pid]:
            if e.chunk_id in chunks and home.setdefault(e.chunk_id, pid) != pid:
                duplicated.add(e.chunk_id)
    if not duplicated:
        return home
    stays = {pid for cid, pid in home.items() if cid not in duplicated}
    holders: dict[bytes, list[bytes]] = {}
    size: dict[bytes, int] = {}
    held: dict[bytes, set[bytes]] = {}
    for pid in sorted(packs):
        for e in packs[pid]:
            if e.chunk_id in duplicated:
                holders.setdefault(e.chunk_id, []).append(pid)
                size[e.chunk_id] = e.stored_len
                held.setdefault(pid, set()).add(e.chunk_id)
    home.update(_cover(holders, size, stays, held))
    return home


def _cover(
    holders: dict[bytes, list[bytes]], size: dict[bytes, int], stays: set[bytes], held: dict[bytes, set[bytes]]
) -> dict[bytes, bytes]:
    """The homes of chunks with copies in several packs (``choose_homes``): ``holders[cid]``, the packs holding a
    copy in ascending id order (once per copy), ``size[cid]`` its stored length, ``stays`` the packs that stay
    anyway, ``held[pid]`` the chunks of ``holders`` a pack holds."""
    home: dict[bytes, bytes] = {}
    open_: set[bytes] = set()
    for cid, pids in holders.items():
        staying = [pid for pid in pids if pid in stays]
        if staying:
            home[cid] = min(staying)
        else:
            open_.add(cid)
    weight: dict[bytes, int] = {}
    for cid in open_:
        for pid in set(holders[cid]):
            weight[pid] = weight.get(pid, 0) + size[cid]
    heap = [(-w, pid) for pid, w in weight.items()]
    heapq.heapify(heap)
    while open_:
        neg, pid = heapq.heappop(heap)
        if -neg != weight[pid]:  # went down since pushed
            heapq.heappush(heap, (-weight[pid], pid))
            continue
        for cid in held[pid] & open_:
            home[cid] = pid
            open_.discard(cid)
            for other in set(holders[cid]):
                weight[other] -= size[cid]
    return home


def _split_homes(refs: References) -> None:
    """Version 1: mark ``HOME`` on the copy that stays of each chunk id with copies in several candidate packs
    (``refs.split``), as ``choose_homes`` would choose. Memory: Python objects for these ids and their packs."""
    if not refs.split:
        return
    table, entry = refs.table, refs.entry
    holders: dict[bytes, list[bytes]] = {}
    size: dict[bytes, int] = {}
    held: dict[bytes, set[bytes]] = {}
    copies_of: dict[bytes, list[int]] = {}
    for cid in refs.split:
        copies = [
            (table.pack_id(table.pack_of[n]), table.fields(n)[1], n)
            for n in table.find(cid)
            if refs.pack[table.pack_of[n]] & CANDIDATE
        ]
        copies.sort()
        holders[cid] = [pid for pid, _offset, _n in copies]
        size[cid] = table.fields(copies[-1][2])[2]
        copies_of[cid] = [n for _pid, _offset, n in copies]
        for pid in holders[cid]:
            held.setdefault(pid, set()).add(cid)
    stays = set()
    for pid in held:
        if any(entry[n] & HOME for n in table.entries_of(table.packs.index(pid))):
            stays.add(pid)
    for cid, pid in _cover(holders, size, stays, held).items():
        for n in copies_of[cid]:
            if table.pack_id(table.pack_of[n]) == pid:
                entry[n] |= HOME


def _sweep_temporaries(store, grace_s: float, lease_ttl_s: float) -> None:
    """Delete the temporary files (``file://`` stores: ``.tmp-*``) that killed writers left: those untouched for the
    grace (an hour at most), and never younger than ``TEMPORARY_MIN_AGE_S`` (a write renames its file moments after
    its last byte) or, while a backup runs, its lease's ``lease_ttl_s``: a backup that has not touched its file for
    that long cannot commit any more (``movers.repo.leases``), so deleting the file loses nothing."""
    sweep = getattr(store, "sweep_temporaries", None)
    if sweep is None:
        return
    floor = max(TEMPORARY_MIN_AGE_S, lease_ttl_s) if live_leases(store, lease_ttl_s) else TEMPORARY_MIN_AGE_S
    sweep(max(floor, min(grace_s, TEMPORARY_MAX_AGE_S)))


def _wait_for_backups(
    store, doomed: list[str], previous: PruneState, timeout_s: float, ttl_s: float, report: PruneReport
) -> bool:
    """Wait for the running backups that may use ``doomed`` keys (``movers.repo.leases``): all of them when a key
    is new to the garbage, else those that did not read the ``previous`` state. True when they ended in time."""
    running = live_leases(store, ttl_s)
    garbage = previous.garbage
    if any(key not in garbage for key in doomed):
        waiting = set(running)
    else:
        waiting = {key for key, doc in running.items() if not saw_state(doc, previous.key)}
    report.backups_waited_for = len(waiting)
    if not waiting:
        return True
    log.info("prune: waiting up to %.0f s for %d running backup(s) before deleting", timeout_s, len(waiting))
    pending = wait_for_leases(store, waiting, timeout_s, ttl_s)
    for doc in pending.values():
        log.warning("prune: still running after %.0f s: %s; deleting nothing this time", timeout_s, doc.get("what"))
    return not pending


def prune(  # noqa: PLR0913 engine core: the repository, then the settings of one prune (grace, dry run, clock, progress, waits, lease TTL, repack budget), each with its default; grouping them would only move the list
    repo: Repository,
    grace_s: float = 86400,
    dry_run: bool = False,
    now: datetime | float | None = None,
    progress: Callable[[int, int], None] | None = None,
    assume_forgotten: Collection[str] = (),
    backup_wait_s: float = 3600.0,
    lease_ttl_s: float = TTL_S,
    lock_wait_s: float = 0.0,
    repack_max_bytes: int = repacking.MAX_BYTES,
) -> PruneReport:
    """Delete what no backup references (after ``grace_s``) and rewrite the index; see the module doc.

    Raises (and deletes nothing) when a manifest or map object cannot be read: a prune that
    cannot see every reference must not sweep. ``dry_run`` reads everything and writes nothing.
    ``now`` freezes prune's clock (tests); ``progress(backups marked, backups)`` follows the mark.
    ``assume_forgotten`` (manifest keys, dry runs only) are treated as gone: what a forget's dry run
    plus this prune would free. ``backup_wait_s``: how long to wait for backups running when it is about to
    delete (``movers.repo.leases``); still running after that, it deletes nothing this time. ``lease_ttl_s``: a
    lease not refreshed for that long (real time) is a crashed backup's (tests of crashes set 0).
    ``repack_max_bytes``: at most this many live bytes are copied out of partly used packs (version 2,
    ``movers.repo.repack``; 0: no repacking).

    A prune that writes holds the repository's prune lock (``movers.repo.prunelock``) from before it reads
    anything to its end: ``PruneLockedError`` (exit code 5, nothing done) when another prune still holds it
    after ``lock_wait_s``. A dry run takes no lock (it writes nothing and reads safely beside a prune).
    """
    if assume_forgotten and not dry_run:
        raise UsageError("assume_forgotten is for dry runs: forget the backups, then prune")
    args = (
        repo,
        grace_s,
        dry_run,
        _clock(now),
        progress,
        assume_forgotten,
        backup_wait_s,
        lease_ttl_s,
        repack_max_bytes,
    )
    if dry_run:
        return _prune(*args, alive=lambda: None)
    with PruneLock(repo.store, wait_s=lock_wait_s) as lock:
        return _prune(*args, alive=lock.check)


def _list_maps(store) -> tuple[bytearray, list[str]]:
    """The ids of the objects ``maps/`` lists (32 bytes each), and the keys of those not named
    ``volmap.map_key(id)`` (kept as keys). Keys that do not end in a hex id are not ours: left out."""
    ids, odd = bytearray(), []
    for key in store.list(volmap.MAP_PREFIX):
        try:
            oid = _map_id(key)
        except ValueError:
            continue  # not ours: leave it alone
        if len(oid) == ID_LEN and volmap.map_key(oid) == key:
            ids += oid
        else:
            odd.append(key)
    return ids, odd


class _Present:
    """Which pack ids exist, for following forwarding: those ``packs/`` listed, and ``extra`` (what this prune
    wrote since)."""

    def __init__(self, packs: StoredPacks) -> None:
        self.packs = packs
        self.extra: set[bytes] = set()

    def __contains__(self, pack_id: object) -> bool:
        if pack_id in self.extra:
            return True
        p = self.packs.table.packs.index(pack_id)
        return 0 <= p < len(self.packs.present) and bool(self.packs.present[p])


def _prune(  # noqa: PLR0913 engine core: prune's settings passed through under its lock (private)
    repo: Repository,
    grace_s: float,
    dry_run: bool,
    clock: Callable[[], float],
    progress: Callable[[int, int], None] | None,
    assume_forgotten: Collection[str],
    backup_wait_s: float,
    lease_ttl_s: float,
    repack_max_bytes: int,
    alive: Callable[[], None],
) -> PruneReport:
    """``prune`` under the lock; ``alive()`` raises when the lock may have been lost (called before each write)."""
    started = time.monotonic()
    now_ts = clock()
    report = PruneReport(dry_run=dry_run)
    store = repo.store
    located = repo.config.located
    state_keys, previous = read_state(store)
    first_seen = previous.first_unreferenced
    listed_keys = previous.garbage

    # Listing order matters: index objects before packs, so every pack an index we read lists
    # was uploaded before we list packs/ (a pack missing from that listing was deleted).
    packs = repo.stored_packs()
    for p, err in packs.unreadable.items():
        log.warning("keeping unreadable pack %s: %s", packs.key(p), err)
        report.unreadable_packs.append(packs.key(p))
    map_ids, odd_maps = _list_maps(store)
    table, index_keys = packs.table, packs.index_keys
    stale_index = any(not packs.present[p] for p in range(packs.indexed))

    # Version 1: one copy of each referenced chunk stays, the one in its home pack, chosen among packs the previous
    # state does not list (backups dedup against those and readers prefer them, see Repository.index). A located
    # repository keeps the copies its pages name (``PINNED``) and needs no homes.
    forwarding = load_forwarding(store) if located else None
    refs = References(table, located, forwarding, _Present(packs))
    readable = array("I", packs.readable())
    if not located:
        for p in readable:
            if packs.key(p) not in listed_keys:
                refs.pack[p] |= CANDIDATE
    report.backups_marked, marked = refs.mark(repo, progress, frozenset(assume_forgotten))
    report.chunks_referenced = refs.chunks_referenced
    if not located:
        _split_homes(refs)
    entry = refs.entry

    kept: dict[str, float | None] = {}  # None: first seen now (stamped when the state is written)
    redundant: set[str] = set()  # kept packs whose referenced chunks all have a copy elsewhere that stays

    def expired(key: str, duplicate: bool = False) -> bool:
        seen = first_seen.get(key)
        hold = grace_s
        if duplicate:  # its copies may be what a running restore reads: a clock of its own, and a day at least
            seen = seen if key in previous.redundant else None
            hold = max(grace_s, DUPLICATE_HOLD_S)
        if hold <= 0 or (seen is not None and now_ts - seen >= hold):
            return True
        kept[key] = seen
        if duplicate:
            redundant.add(key)
        return False

    doomed_packs: list[str] = []
    doomed_ids: dict[str, int] = {}
    partly_used: dict[bytes, tuple[list[PackEntry], int]] = {}  # version 2, kept packs: live entries, stored bytes
    sizes: dict[str, int] = {}
    surviving = bytearray(len(table))
    report.packs_total = sum(packs.present)
    for p in readable:
        key = packs.key(p)
        total = dead = 0
        if located:  # a located page names the pack it reads a chunk from: only that copy is live
            keep, referenced = bool(refs.pack[p] & NAMED), False
            for n, length in zip(table.entries_of(p), table.stored_lengths(p), strict=True):
                total += length
                if not entry[n] & PINNED:
                    dead += length
        else:
            keep = referenced = False
            for n, length in zip(table.entries_of(p), table.stored_lengths(p), strict=True):
                bits = entry[n]
                total += length
                if bits & REF:
                    referenced = True
                    if bits & (HOME | NO_HOME):  # the copy that stays, or every copy stays
                        keep = True
                        continue
                dead += length
        if keep:
            surviving[p] = 1
            report.packs_kept += 1
            report.kept_chunk_bytes += total
            if dead:
                report.packs_partly_used += 1
                report.dead_bytes += dead
                if located and key not in listed_keys:
                    live = [PackEntry(*table.fields(n)) for n in table.entries_of(p) if entry[n] & PINNED]
                    partly_used[table.pack_id(p)] = (live, total)
        elif expired(key, duplicate=referenced):
            doomed_packs.append(key)
            doomed_ids[key] = p
            sizes[key] = store.size(key)
            report.packs_deleted += 1
            report.bytes_deleted += sizes[key]
            report.duplicate_packs_deleted += referenced
        else:
            surviving[p] = 1
            report.packs_in_grace += 1
            report.bytes_in_grace += store.size(key)
            report.duplicate_packs_in_grace += referenced

    doomed_maps = _unreferenced_maps(map_ids, odd_maps, refs.maps, expired, report)
    doomed_moved: list[str] = []
    for old, keys in forwarding.keys.items() if forwarding else ():
        if old not in refs.forwarded:
            for key in keys:
                if expired(key):
                    doomed_moved.append(key)
                else:
                    report.forwarding_objects_in_grace += 1
    report.forwarding_objects_deleted = len(doomed_moved)
    thin = repacking.choose(partly_used, repack_max_bytes)  # kept packs to repack: their live entries
    report.packs_repacked = len(thin)
    report.bytes_repacked = sum(e.stored_len for live in thin.values() for e in live)

    rewrite = bool(doomed_packs or thin) or len(index_keys) > 1 or bool(packs.unindexed) or stale_index
    if rewrite:
        report.index_objects_written = int(any(surviving) or bool(thin))
        report.index_objects_deleted = len(index_keys)
    if dry_run:
        report.leases_deleted = sum(sweep_expired(store, EXPIRED_AFTER_S, prefix=p, delete=False) for p in _LEASES)
        report.duration_s = round(time.monotonic() - started, 3)
        return report
    _sweep_temporaries(store, grace_s, lease_ttl_s)
    new_packs_index: list[tuple[str, bytes]] = []  # index objects of the packs repacking wrote
    if thin:  # copy, then forward; each old pack is then unreferenced and goes the way of any other
        repacked = repacking.repack(repo, thin, alive)
        new_packs_index = encode_sharded_index(sorted(repacked.new_packs.items()))
        refs.present.extra.update(repacked.new_packs)
        report.packs_repacked = len(repacked.moved)
        report.bytes_repacked = repacked.bytes_copied
        for old, (key, moved) in repacked.moved.items():
            forwarding.add(old, key, moved)
            p = table.packs.index(old)
            old_key = packs.key(p)
            if expired(old_key):
                doomed_packs.append(old_key)
                doomed_ids[old_key] = p
                sizes[old_key] = store.size(old_key)
                surviving[p] = 0
                report.packs_deleted += 1
                report.bytes_deleted += sizes[old_key]
            else:
                report.packs_in_grace += 1
                report.bytes_in_grace += store.size(old_key)

    # 1. the new state first: the first-seen times of what we keep must survive any crash below,
    # and backups must see what we are about to delete before we delete anything
    state_key = None
    if kept or doomed_packs or doomed_maps or doomed_moved or state_keys:
        stamp = clock()
        first = {key: stamp if seen is None else seen for key, seen in kept.items()}
        state_key, data = encode_state(stamp, first, doomed_packs + doomed_maps + doomed_moved, sorted(redundant))
        alive()
        store.put(state_key, data)
    if doomed_packs or doomed_maps or doomed_moved:
        # a backup that may have read an older state can use what we are about to delete: wait for the
        # backups running now, then mark what they committed; still running after the wait: delete nothing
        doomed = doomed_packs + doomed_maps + doomed_moved
        waited = _wait_for_backups(store, doomed, previous, backup_wait_s, lease_ttl_s, report)
        if waited and report.backups_waited_for:  # what the backups we waited for committed stays
            more, _keys = refs.mark(repo, None, marked | set(assume_forgotten), again=True)
            report.backups_marked += more

        def needed(key: str) -> bool:
            if not waited:
                return True
            if key in doomed_moved:
                return old_pack_of(key) in refs.new_forwarded
            if key in doomed_ids and located:
                return bool(refs.pack[doomed_ids[key]] & NEW_NAMED)
            if key in doomed_ids:  # a chunk committed meanwhile with no copy that stays
                return any(
                    entry[n] & NEW_REF and not (entry[n] & REF and not entry[n] & NO_HOME)
                    for n in table.entries_of(doomed_ids[key])
                )
            return _map_id(key) in refs.new_maps

        for key in [k for k in doomed_packs if needed(k)]:
            doomed_packs.remove(key)
            surviving[doomed_ids[key]] = 1
            report.packs_deferred += 1
            report.packs_deleted -= 1
            report.bytes_deleted -= sizes[key]
        kept_maps = [k for k in doomed_maps if needed(k)]
        doomed_maps = [k for k in doomed_maps if k not in kept_maps]
        report.map_objects_deferred = len(kept_maps)
        report.map_objects_deleted = len(doomed_maps)
        doomed_moved = [k for k in doomed_moved if not needed(k)]
        report.forwarding_objects_deleted = len(doomed_moved)
        rewrite = rewrite or bool(report.packs_deferred)

    def delete(key: str) -> None:
        alive()  # a prune that may have lost its lock stops (the order below keeps the repository readable)
        store.delete(key)

    # 2. one new index of the surviving packs (one per shard in a located repository), 3. then the old objects
    # (the table is not read after this: the version 1 index is made from its end, freeing it)
    if rewrite:
        keep_packs = array("I", (p for p in range(len(table)) if surviving[p]))
        del refs, entry, surviving  # what the new index does not need
        table.drop_lookups(keep_pack_of=located)
        new_keys = set()
        for key, data in chain(table_index_objects(table, keep_packs, sharded=located), new_packs_index):
            alive()
            repo.put_once(key, data)
            new_keys.add(key)
        report.index_objects_written = len(new_keys - set(index_keys))
        report.index_objects_deleted = 0
        for key in index_keys:
            if key not in new_keys:
                delete(key)
                report.index_objects_deleted += 1
    # 4. packs no index lists any more, 5. map objects, 6. older prune states
    for key in doomed_packs:
        delete(key)
    for key in doomed_maps + doomed_moved:
        delete(key)
    for key in state_keys:
        if key != state_key:
            delete(key)
    # 7. lease objects nobody refreshed for long (crashed holders, or holders whose credentials cannot delete)
    alive()
    report.leases_deleted = sum(sweep_expired(store, EXPIRED_AFTER_S, prefix=p) for p in _LEASES)
    # 8. remaps nothing reads (their maps were not marked: freed like a forgotten backup's)
    for key in remap.stale(store.list(BACKUP_PREFIX)):
        delete(key)
        report.remaps_deleted += 1
    repo.drop_cached_index()  # it may list deleted packs
    report.duration_s = round(time.monotonic() - started, 3)
    log.info(
        "prune: deleted %d pack(s) (%d bytes), %d map object(s); %d pack(s) in grace",
        report.packs_deleted,
        report.bytes_deleted,
        report.map_objects_deleted,
        report.packs_in_grace,
    )
    return report


def _unreferenced_maps(
    map_ids: bytearray, odd_keys: list[str], maps: IdSet, expired: Callable[[str], bool], report: PruneReport
) -> list[str]:
    """The keys of the listed map objects (``_list_maps``) not in ``maps`` whose grace is over (``expired``);
    those still in grace are counted."""
    unreferenced = chain(
        (volmap.map_key(oid) for (oid,) in _MAP_ID.iter_unpack(map_ids) if oid not in maps),
        (key for key in odd_keys if _map_id(key) not in maps),
    )
    doomed = []
    for key in unreferenced:
        if expired(key):
            doomed.append(key)
        else:
            report.map_objects_in_grace += 1
    report.map_objects_deleted = len(doomed)
    return doomed
