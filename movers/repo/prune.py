"""Prune: delete packs and map objects that no backup references any more, and compact the index.

Mark, then sweep (safe to run while backups run, whatever the grace: see "Backups" and "Leases" below;
two prunes of one repository must not run at the same time: each holds the repository's prune lock,
``movers.repo.prunelock``, from before it reads anything until it is done; a dry run takes none):

1. **Mark.** Read every manifest, its map directories and its pages, and collect the ids of
   all referenced chunks, pages and directories. A page shared by several backups is read
   once. Memory: one ``bytes`` id per distinct referenced chunk (~100 bytes each: ~25 MiB per
   TiB of unique data at 4 MiB chunks) and per map object, plus the pack entries read from the
   index objects (~200 bytes per stored chunk, the same bound as ``ChunkIndex``). Pages are
   read one at a time.
2. **Classify packs: one copy of each chunk.** Every referenced chunk gets a *home*: the pack whose
   copy stays (``choose_homes``), chosen among the packs the previous state does not list (backups
   dedup against those, readers prefer them). A pack that is home to a chunk, or holds a referenced
   chunk no unlisted pack has, is kept; its other chunks (unreferenced, or copies whose home is
   elsewhere) are reported as ``dead_bytes``; in version 2 a pack at least ``repack.DEAD_FRACTION`` dead is
   repacked (``movers.repo.repack``: its live chunks copied to new packs, a forwarding object written, and
   the old pack is then unreferenced like any other; forwarding objects no page needs are freed likewise). A pack
   whose referenced chunks all live elsewhere is *a pack of duplicate copies* (two backups that
   re-uploaded the same listed chunks at once leave such packs); a pack with no referenced chunk,
   and a map object nobody references, is *unreferenced*. Memory: one more dict entry per
   referenced chunk (~100 bytes) for its home.
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
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from movers.errors import IntegrityError, NotFoundError, ObjectNotFound, UsageError
from movers.repo import pack, volmap
from movers.repo import repack as repacking
from movers.repo.forwarding import Forwarding, load_forwarding, old_pack_of, resolve
from movers.repo.index import encode_index, encode_sharded_index
from movers.repo.leases import (
    EXPIRED_AFTER_S,
    LEASE_PREFIX,
    TTL_S,
    live_leases,
    saw_state,
    sweep_expired,
    wait_for_leases,
)
from movers.repo.pack import PackEntry
from movers.repo.prunelock import LOCK_PREFIX, PruneLock
from movers.repo.prunestate import STATE_PREFIX, PruneState, encode_state, read_state
from movers.repo.repository import Repository

_LEASES = (LEASE_PREFIX, LOCK_PREFIX)
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


def _mark(
    repo: Repository,
    report: PruneReport,
    progress=None,
    skip: Collection[str] = (),
    chunks: set[bytes] | None = None,
    maps: set[bytes] | None = None,
    pinned: dict[bytes, set[bytes]] | None = None,
) -> tuple[set[bytes], set[bytes], set[str]]:
    """Referenced chunk ids and map object ids (pages and directories) of all manifests but ``skip`` (added to
    ``chunks`` and ``maps`` when given), and the keys of the manifests marked. Located pages (format version 2)
    also add the chunk ids they use to ``pinned[pack id]`` of the pack they name."""
    chunks = set() if chunks is None else chunks
    maps = set() if maps is None else maps
    pinned = {} if pinned is None else pinned
    refs = [ref for ref in repo.list_backups() if ref.key not in skip]
    for n, ref in enumerate(refs, 1):
        if progress:
            progress(n - 1, len(refs))
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
            entries, _digests, locations = repo.read_located_page(page_id)
            for _voff, _len, cid, _coff in entries:
                chunks.add(cid)
            for cid, location in (locations or {}).items():
                pinned.setdefault(location.pack_id, set()).add(cid)
        report.backups_marked += 1
    if progress:
        progress(len(refs), len(refs))
    return chunks, maps, {ref.key for ref in refs}


def _map_id(key: str) -> bytes:
    return bytes.fromhex(key.rsplit("/", 1)[-1])


def choose_homes(packs: dict[bytes, list[PackEntry]], chunks: Collection[bytes]) -> dict[bytes, bytes]:
    """Chunk id -> the pack whose copy stays, for every chunk of ``chunks`` with a copy in ``packs``.

    Few packs stay (a greedy cover): a pack holding the only copy of a chunk stays anyway, so a chunk with
    several copies goes to such a pack if one holds it; the other duplicated chunks go, pack by pack, to the
    pack holding the most bytes of them (ties: the smaller pack id). Deterministic. Memory: a dict entry per
    chunk; lists and weights only for chunks with several copies and the packs holding them.
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
    for pid in sorted(packs):
        for e in packs[pid]:
            if e.chunk_id in duplicated:
                holders.setdefault(e.chunk_id, []).append(pid)
                size[e.chunk_id] = e.stored_len
    open_: set[bytes] = set()
    for cid in duplicated:
        staying = [pid for pid in holders[cid] if pid in stays]
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
        for cid in {e.chunk_id for e in packs[pid]} & open_:
            home[cid] = pid
            open_.discard(cid)
            for other in set(holders[cid]):
                weight[other] -= size[cid]
    return home


def _wait_for_backups(
    store, doomed: list[str], previous: PruneState, timeout_s: float, ttl_s: float, report: PruneReport
) -> bool:
    """Wait for the running backups that may use ``doomed`` keys (``movers.repo.leases``): all of them when a key
    is new to the garbage, else those that did not read the ``previous`` state. True when they ended in time."""
    running = live_leases(store, ttl_s)
    if any(key not in previous.garbage for key in doomed):
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


def prune(
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


def _prune(
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
    state_keys, previous = read_state(store)
    first_seen = previous.first_unreferenced

    # Listing order matters: index objects before packs, so every pack an index we read lists
    # was uploaded before we list packs/ (a pack missing from that listing was deleted).
    index_keys, entries_of = repo.read_index_objects()
    pack_keys = list(store.list(pack.PACK_PREFIX))
    map_keys = list(store.list(volmap.MAP_PREFIX))
    present: dict[bytes, str] = {pack.pack_id_from_key(k): k for k in pack_keys}
    unindexed = [pid for pid in present if pid not in entries_of]
    for pid in unindexed:
        try:
            entries_of[pid] = repo.read_pack_trailer(present[pid])
        except ObjectNotFound:  # deleted since we listed (this is a dry run beside a prune): gone
            del present[pid]
        except IntegrityError as err:
            log.warning("keeping unreadable pack %s: %s", present[pid], err)
            report.unreadable_packs.append(present[pid])
    stale_index = any(pid not in present for pid in entries_of)

    pinned: dict[bytes, set[bytes]] = {}
    chunks, maps, marked = _mark(repo, report, progress, frozenset(assume_forgotten), pinned=pinned)
    report.chunks_referenced = len(chunks)
    forwarding = load_forwarding(store) if repo.config.located else Forwarding()
    pinned, forwarded = resolve(pinned, present, forwarding)  # where the chunks pages name can be read now

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

    # Version 1: one copy of each referenced chunk stays, the one in its home pack, chosen among packs the previous
    # state does not list (backups dedup against those and readers prefer them, see Repository.index). A located
    # repository keeps the copies its pages name (``pinned``) and needs no homes.
    listed = previous.garbage
    readable = {pid: key for pid, key in present.items() if key not in report.unreadable_packs}
    home = (
        {}
        if repo.config.located
        else choose_homes({pid: entries_of[pid] for pid, key in readable.items() if key not in listed}, chunks)
    )
    homes = set(home.values())
    doomed_packs: list[str] = []
    doomed_ids: dict[str, bytes] = {}
    partly_used: dict[bytes, tuple[list[PackEntry], int]] = {}  # kept packs: live entries, stored bytes
    sizes: dict[str, int] = {}
    surviving: dict[bytes, list[PackEntry]] = {}
    report.packs_total = len(present)
    for pid, key in readable.items():
        entries = entries_of[pid]
        if repo.config.located:  # a located page names the pack it reads a chunk from: only that copy is live
            live = pinned.get(pid, set())
            keep, referenced = bool(live), []
            dead = sum(e.stored_len for e in entries if e.chunk_id not in live)
            if keep and dead and key not in listed:
                partly_used[pid] = ([e for e in entries if e.chunk_id in live], sum(e.stored_len for e in entries))
        else:
            referenced = [e for e in entries if e.chunk_id in chunks]
            keep = pid in homes or any(e.chunk_id not in home for e in referenced)  # holds a copy that must stay
            dead = sum(e.stored_len for e in entries if e.chunk_id not in chunks or home.get(e.chunk_id, pid) != pid)
        if keep:
            surviving[pid] = entries
            report.packs_kept += 1
            report.kept_chunk_bytes += sum(e.stored_len for e in entries)
            if dead:
                report.packs_partly_used += 1
                report.dead_bytes += dead
        elif expired(key, duplicate=bool(referenced)):
            doomed_packs.append(key)
            doomed_ids[key] = pid
            sizes[key] = store.size(key)
            report.packs_deleted += 1
            report.bytes_deleted += sizes[key]
            report.duplicate_packs_deleted += bool(referenced)
        else:
            surviving[pid] = entries
            report.packs_in_grace += 1
            report.bytes_in_grace += store.size(key)
            report.duplicate_packs_in_grace += bool(referenced)

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
    doomed_moved: list[str] = []
    for old, keys in forwarding.keys.items():
        if old not in forwarded:
            for key in keys:
                if expired(key):
                    doomed_moved.append(key)
                else:
                    report.forwarding_objects_in_grace += 1
    report.forwarding_objects_deleted = len(doomed_moved)
    thin = repacking.choose(partly_used, repack_max_bytes)  # kept packs to repack: their live entries
    report.packs_repacked = len(thin)
    report.bytes_repacked = sum(e.stored_len for live in thin.values() for e in live)

    rewrite = bool(doomed_packs or thin) or len(index_keys) > 1 or bool(unindexed) or stale_index
    if rewrite:
        report.index_objects_written = int(bool(surviving))
        report.index_objects_deleted = len(index_keys)
    if dry_run:
        report.leases_deleted = sum(sweep_expired(store, EXPIRED_AFTER_S, prefix=p, delete=False) for p in _LEASES)
        report.duration_s = round(time.monotonic() - started, 3)
        return report
    sweep = getattr(store, "sweep_temporaries", None)  # file:// stores: temporary files of killed writers
    if sweep is not None:
        sweep()
    if thin:  # copy, then forward; each old pack is then unreferenced and goes the way of any other
        repacked = repacking.repack(repo, thin, alive)
        surviving.update(repacked.new_packs)
        report.packs_repacked = len(repacked.moved)
        report.bytes_repacked = repacked.bytes_copied
        for old, (key, table) in repacked.moved.items():
            forwarding.add(old, key, table)
            old_key = present[old]
            if expired(old_key):
                doomed_packs.append(old_key)
                doomed_ids[old_key] = old
                sizes[old_key] = store.size(old_key)
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
        new_chunks: set[bytes] = set()
        new_maps: set[bytes] = set()
        new_pinned: dict[bytes, set[bytes]] = {}
        waited = _wait_for_backups(store, doomed, previous, backup_wait_s, lease_ttl_s, report)
        if waited and report.backups_waited_for:  # what the backups we waited for committed stays
            _mark(repo, report, None, marked | set(assume_forgotten), new_chunks, new_maps, new_pinned)
        new_live, new_forwarded = resolve(new_pinned, set(present) | set(surviving), forwarding)

        def needed(key: str) -> bool:
            if not waited:
                return True
            if key in doomed_moved:
                return old_pack_of(key) in new_forwarded
            if key in doomed_ids and repo.config.located:
                return doomed_ids[key] in new_live
            if key in doomed_ids:  # a chunk committed meanwhile with no copy that stays
                return any(e.chunk_id in new_chunks and e.chunk_id not in home for e in entries_of[doomed_ids[key]])
            return _map_id(key) in new_maps

        for key in [k for k in doomed_packs if needed(k)]:
            doomed_packs.remove(key)
            surviving[doomed_ids[key]] = entries_of[doomed_ids[key]]
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
    if rewrite:
        new_objects = []
        if surviving:
            packs = sorted(surviving.items())
            new_objects = encode_sharded_index(packs) if repo.config.located else [encode_index(packs)]
        for key, data in new_objects:
            alive()
            repo.put_once(key, data)
        new_keys = {key for key, _data in new_objects}
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
