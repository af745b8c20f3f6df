"""Prune end to end: forget + prune keep every remaining backup restorable, with grace for running backups."""

from __future__ import annotations

import json

import pytest

from movers.errors import PruneLockedError
from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify
from movers.repo import pack, volmap
from movers.repo.config import RepoConfig
from movers.repo.index import INDEX_PREFIX
from movers.repo.leases import TTL_S
from movers.repo.manifest import VolumeIdentity
from movers.repo.prune import STATE_PREFIX, prune
from movers.repo.prunelock import LOCK_PREFIX
from movers.repo.repository import Repository
from movers.repo.retention import forget
from movers.repo.retention_rules import Policy
from movers.repo.store import LocalStore, MemoryStore
from movers.testing.faulty import FaultyStore, SimulatedCrash
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
SIZE = 16 * MiB
CONFIG = RepoConfig(page_size=4 * MiB, pack_target=2 * MiB)
T0 = 1_700_000_000.0
DAY = 86400.0
CRASHED = 0.0  # lease_ttl_s of a prune after a simulated crash: the crashed backup's lease counts as expired


def snapshot_of(image, tmp_path, name) -> tuple:
    copy = tmp_path / f"{name}.img"
    copy.write_bytes(image.read_bytes())
    return copy, sha256_file(copy)


def build(repo, tmp_path, volumes=("vol-a", "vol-b"), rounds=4):
    """Per volume: a full then incrementals; returns {backup id: (volume, sha256 of the image then)}."""
    expected = {}
    for n, vol in enumerate(volumes):
        image = tmp_path / f"{vol}.img"
        make_image(image, SIZE, seed=10 + n)
        for r in range(rounds):
            if r == 0:
                m = run_backup(repo, str(image), VolumeIdentity(vol), force_full=True)
            else:
                changes = write_blocks(
                    image,
                    [(r * 37 + k * 211) % (SIZE // 4096) * 4096 for k in range(40)],
                    seed=r * 7 + n,
                    length=64 * 1024,
                )
                m = run_backup(repo, str(image), VolumeIdentity(vol), extents=changes)
            expected[m.backup_id] = (vol, sha256_file(image))
    return expected


def check_all_restore(repo, expected, tmp_path):
    refs = repo.list_backups()
    for ref in refs:
        out = tmp_path / "restore.img"
        run_restore(repo, repo.read_manifest(ref.volume, ref.backup_id), str(out))
        assert sha256_file(out) == expected[ref.backup_id][1], ref
        out.unlink()
    report = run_verify(repo, refs)
    assert report.ok, report.errors
    return len(refs)


def keys(store, prefix=""):
    return set(store.list(prefix))


def age_locks(store, seconds):
    """Let ``seconds`` pass for the prune lock objects: their last refresh moves back (a test store only)."""
    for key in store.list(LOCK_PREFIX):
        doc = json.loads(store.get(key))
        doc["refreshed"] -= seconds
        store.put(key, json.dumps(doc).encode())


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "repo")


def test_forget_prune_keeps_every_kept_backup_restorable(store, tmp_path):
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path)
    before = keys(store)
    # dry runs change nothing
    forget(repo, rules=Policy(keep_last=2), dry_run=True)
    dry = prune(repo, grace_s=0, dry_run=True, now=T0)
    assert keys(store) == before
    rep = forget(repo, rules=Policy(keep_last=2))
    assert len(rep.deleted) == 4
    dry = prune(repo, grace_s=0, dry_run=True, now=T0)
    assert dry.packs_deleted + dry.map_objects_deleted > 0
    assert keys(store) == before - set(rep.deleted)

    report = prune(Repository.open(store), grace_s=0, now=T0)
    assert report.packs_deleted == dry.packs_deleted and report.bytes_deleted == dry.bytes_deleted
    assert report.map_objects_deleted == dry.map_objects_deleted > 0
    assert report.backups_marked == 4
    assert report.packs_partly_used > 0 and report.dead_bytes > 0  # overwritten blocks in shared packs
    assert 0 < report.index_objects_written <= compacted(store) and report.index_objects_deleted >= 2
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 4
    # prune is idempotent: a second run finds nothing
    again = prune(Repository.open(store), grace_s=0, now=T0)
    assert again.packs_deleted == again.map_objects_deleted == again.index_objects_deleted == 0
    # forgetting all but the newest of each volume still restores; and new backups still work
    forget(repo, rules=Policy(keep_last=1))
    prune(Repository.open(store), grace_s=0, now=T0)
    repo = Repository.open(store)
    image = tmp_path / "vol-a.img"
    write_blocks(image, [0, 4096 * 100], seed=99)
    m = run_backup(repo, str(image), VolumeIdentity("vol-a"), extents=[(0, 4096), (4096 * 100, 4096)])
    expected[m.backup_id] = ("vol-a", sha256_file(image))
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 3


def test_grace_is_measured_from_the_first_prune_that_sees_an_object_unreferenced(tmp_path):
    store = MemoryStore()
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path, volumes=("vol-a",), rounds=3)
    forget(repo, rules=Policy(keep_last=1))
    first = prune(Repository.open(store), grace_s=DAY, now=T0)
    assert first.packs_deleted == first.map_objects_deleted == 0
    assert first.map_objects_in_grace > 0
    assert len(keys(store, STATE_PREFIX)) == 1
    # an hour short of the grace: still nothing
    early = prune(Repository.open(store), grace_s=DAY, now=T0 + DAY - 3600)
    assert early.packs_deleted == early.map_objects_deleted == 0
    assert early.map_objects_in_grace == first.map_objects_in_grace
    late = prune(Repository.open(store), grace_s=DAY, now=T0 + DAY)
    assert late.map_objects_deleted == first.map_objects_in_grace
    assert late.packs_deleted == first.packs_in_grace
    assert late.packs_in_grace == late.map_objects_in_grace == 0
    assert len(keys(store, STATE_PREFIX)) == 1
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


def test_crashed_backup_packs_are_reused_by_the_retry_until_a_prune_lists_them(tmp_path):
    """Format version 1 (version 2 backups do not list packs/, so they reuse no orphan)."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    repo = Repository.init(store, RepoConfig(page_size=4 * MiB, pack_target=2 * MiB, format_version=1))
    expected = build(repo, tmp_path, volumes=("vol-a",), rounds=1)
    for vol, seed, prune_between in (("vol-b", 42, False), ("vol-c", 43, True)):
        image = tmp_path / f"{vol}.img"
        make_image(image, SIZE, seed=seed)
        packs_before = keys(inner, pack.PACK_PREFIX)
        store.crash_after_puts(1, prefix=pack.PACK_PREFIX)  # uploads a pack, then "dies"
        with pytest.raises(SimulatedCrash):
            run_backup(Repository.open(store), str(image), VolumeIdentity(vol), force_full=True)
        store.recover()
        orphans = keys(inner, pack.PACK_PREFIX) - packs_before
        assert len(orphans) == 1 and not repo.list_backups(vol)
        if prune_between:  # the orphan is now listed: a prune may delete it, so the retry must not use it
            report = prune(Repository.open(store), grace_s=DAY, now=T0, lease_ttl_s=CRASHED)
            assert report.packs_in_grace == 1 and report.packs_deleted == 0
        puts_before = len(store.puts)
        m = run_backup(Repository.open(store), str(image), VolumeIdentity(vol), force_full=True)
        expected[m.backup_id] = (vol, sha256_file(image))
        new_packs = [k for k in store.puts[puts_before:] if k.startswith(pack.PACK_PREFIX)]
        orphan_chunks = {e.chunk_id for k in orphans for e in repo.read_pack_trailer(k)}
        new_chunks = {e.chunk_id for k in new_packs for e in repo.read_pack_trailer(k)}
        assert orphan_chunks
        assert bool(orphan_chunks & new_chunks) == prune_between, vol  # re-uploaded only once listed
        assert not orphans & set(new_packs)  # never re-created under the listed key
        later = prune(Repository.open(store), grace_s=DAY, now=T0 + 10 * DAY, lease_ttl_s=CRASHED)
        # listed and re-uploaded: a pack of duplicate copies now, held a day from this prune (restores may read it)
        assert (later.duplicate_packs_in_grace, later.packs_deleted) == ((1, 0) if prune_between else (0, 0))
        final = prune(Repository.open(store), grace_s=DAY, now=T0 + 11 * DAY, lease_ttl_s=CRASHED)
        assert (orphans <= keys(inner, pack.PACK_PREFIX)) != prune_between  # reused: kept; listed: deleted
        assert final.packs_deleted == final.duplicate_packs_deleted == (1 if prune_between else 0)
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 3


def test_abandoned_packs_older_than_grace_are_deleted(tmp_path):
    inner = MemoryStore()
    store = FaultyStore(inner)
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path, volumes=("vol-a",), rounds=1)
    image = tmp_path / "vol-b.img"
    make_image(image, SIZE, seed=43)
    before = keys(inner)
    store.crash_after_puts(1, prefix=pack.PACK_PREFIX)
    with pytest.raises(SimulatedCrash):
        run_backup(repo, str(image), VolumeIdentity("vol-b"), force_full=True)
    store.recover()
    orphans = keys(inner, pack.PACK_PREFIX) - before
    assert len(orphans) == 1
    assert prune(Repository.open(store), grace_s=DAY, now=T0, lease_ttl_s=CRASHED).packs_in_grace == 1
    dry = prune(Repository.open(store), grace_s=DAY, now=T0 + 2 * DAY, dry_run=True)
    assert dry.packs_deleted == 1 and orphans <= keys(inner)
    orphan_bytes = sum(inner.size(k) for k in orphans)
    report = prune(Repository.open(store), grace_s=DAY, now=T0 + 2 * DAY, lease_ttl_s=CRASHED)
    assert (report.packs_deleted, report.bytes_deleted) == (1, orphan_bytes) == (dry.packs_deleted, dry.bytes_deleted)
    assert not orphans & keys(inner)
    assert keys(inner, pack.PACK_PREFIX) == {k for k in before if k.startswith(pack.PACK_PREFIX)}
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


def compacted(store) -> int:
    """The number of index objects, checked to be one per shard (a compacted version 2 index)."""
    shards = [key.split("/")[1] for key in keys(store, INDEX_PREFIX)]
    assert shards and len(set(shards)) == len(shards) and all(len(shard) == 2 for shard in shards), shards
    return len(shards)


@pytest.mark.parametrize("crash", ["before-index", "after-index", "mid-pack-deletes"])
def test_crash_during_prune_leaves_a_readable_repository(crash, tmp_path):
    inner = MemoryStore()
    store = FaultyStore(inner)
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path, rounds=3)
    forget(repo, rules=Policy(keep_last=1))
    if crash == "before-index":
        store.crash_after_puts(0, prefix=INDEX_PREFIX)
    elif crash == "after-index":
        store.fail("delete", SimulatedCrash, key_prefix=INDEX_PREFIX)
    else:
        store.fail("delete", SimulatedCrash, key_prefix=pack.PACK_PREFIX)
        store.fail("delete", SimulatedCrash, key_prefix=volmap.MAP_PREFIX)
    index_before = keys(inner, INDEX_PREFIX)
    with pytest.raises(SimulatedCrash):
        prune(Repository.open(store), grace_s=0, now=T0)
    store.recover()
    if crash == "before-index":  # the process died holding the prune lock: the next prune waits for its TTL
        assert keys(inner, LOCK_PREFIX)
        with pytest.raises(PruneLockedError, match="another prune of memory:// holds the prune lock"):
            prune(Repository.open(inner), grace_s=0, now=T0)
        age_locks(inner, TTL_S)
    if crash == "after-index":
        assert keys(inner, INDEX_PREFIX) - index_before and index_before <= keys(inner, INDEX_PREFIX)
    assert check_all_restore(Repository.open(inner), expected, tmp_path) == 2
    # a backup after the crash dedups only against data that exists
    image = tmp_path / "vol-a.img"
    m = run_backup(Repository.open(inner), str(image), VolumeIdentity("vol-a"), force_full=True)
    expected[m.backup_id] = ("vol-a", sha256_file(image))
    # the next prune finishes the job
    prune(Repository.open(inner), grace_s=0, now=T0)
    compacted(inner)
    assert check_all_restore(Repository.open(inner), expected, tmp_path) == 3


# -- backups racing a prune ------------------------------------------------------------------------------------------


class HookStore(MemoryStore):
    """A memory store that runs ``hook()`` once, just before the first delete of a key under ``prefix``."""

    def __init__(self) -> None:
        super().__init__()
        self.hook = None
        self.prefix = ""

    def delete(self, key: str) -> None:
        hook, self.hook = (self.hook, None) if key.startswith(self.prefix) and self.hook else (None, self.hook)
        if hook:
            hook()
        super().delete(key)


def prune_before_commit(store, now, reports, lease_ttl_s=TTL_S):
    """A progress callback for a backup with extents that prunes once everything but the manifest is written.

    The engine's last progress call comes after its packs, index and map: only the commit is left. The
    backup read the prune state that lists what this prune deletes, so the prune need not wait for it.
    """

    def progress(done, total, **_):
        if total is not None and not reports:  # with extents, only the last call knows the total
            reports.append(prune(Repository.open(store), grace_s=DAY, now=now, lease_ttl_s=lease_ttl_s))

    return progress


def forgotten_content(store, tmp_path, seeds=(10, 11), config=CONFIG):
    """vol-a backed up twice with different content, the first backup forgotten (no prune yet). Returns a copy
    of that first content and the kept backup as ``check_all_restore`` expects it."""
    repo = Repository.init(store, config)
    image = tmp_path / "vol-a.img"
    make_image(image, SIZE, seed=seeds[0], data_fraction=0.9)
    copy, _ = snapshot_of(image, tmp_path, "content-a")
    run_backup(repo, str(image), VolumeIdentity("vol-a"), force_full=True)
    make_image(image, SIZE, seed=seeds[1], data_fraction=0.9)
    kept = run_backup(repo, str(image), VolumeIdentity("vol-a"), force_full=True)
    forget(repo, rules=Policy(keep_last=1))
    return copy, {kept.backup_id: ("vol-a", sha256_file(image))}


def dead_data_repo(store, tmp_path):
    """``forgotten_content``, then a prune at T0 lists A's packs and pages. Returns a copy of image A (what the
    racing backup will store)."""
    copy, expected = forgotten_content(store, tmp_path)
    first = prune(Repository.open(store), grace_s=DAY, now=T0)
    assert first.packs_in_grace > 0 and first.packs_deleted == 0
    return copy, expected


def test_backup_does_not_dedup_against_dead_data_a_prune_deletes_before_its_commit(tmp_path):
    """The race prune's docstring used to leave open: data dead for longer than the grace is what the
    backup would dedup against, and a prune deletes it while the backup runs."""
    store = MemoryStore()
    content_a, expected = dead_data_repo(store, tmp_path)
    dead_packs = set(store.list(pack.PACK_PREFIX)) - {
        k for k in store.list(pack.PACK_PREFIX) if _referenced_pack(store, k)
    }
    reports = []
    m = run_backup(
        Repository.open(store),
        str(content_a),
        VolumeIdentity("vol-c"),
        extents=[(0, SIZE)],
        progress=prune_before_commit(store, T0 + DAY, reports),
    )
    expected[m.backup_id] = ("vol-c", sha256_file(content_a))
    [racing] = reports
    assert racing.packs_deleted == len(dead_packs) > 0 and not dead_packs & set(store.list(pack.PACK_PREFIX))
    assert m.stats["new_chunk_bytes"] > 0.8 * m.stats["read_bytes"] - m.stats["zero_bytes"]  # re-uploaded
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 2


def test_backup_starting_while_a_prune_deletes_does_not_use_the_doomed_packs(tmp_path):
    """A backup that starts after prune wrote its new index but before it deleted the old index
    objects and the packs: the old index objects still list the packs being deleted."""
    store = HookStore()
    content_a, expected = dead_data_repo(store, tmp_path)
    done = []

    def backup_now():
        m = run_backup(Repository.open(store), str(content_a), VolumeIdentity("vol-c"), extents=[(0, SIZE)])
        done.append(m)
        expected[m.backup_id] = ("vol-c", sha256_file(content_a))

    store.hook, store.prefix = backup_now, INDEX_PREFIX  # prune's first old-index delete
    report = prune(Repository.open(store), grace_s=DAY, now=T0 + DAY)
    assert done and report.packs_deleted > 0 and report.index_objects_deleted > 0
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 2


def test_retry_after_a_prune_never_recreates_listed_packs_or_pages(tmp_path):
    """A crashed backup leaves packs, index, pages and directories; a prune lists them; the retry rebuilds
    the same bytes and must give them other keys, or the prune that deletes the orphans takes the
    retry's data with them."""
    inner = MemoryStore()
    store = FaultyStore(inner)
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path, volumes=("vol-a",), rounds=2)
    image = tmp_path / "vol-b.img"
    make_image(image, SIZE, seed=77, data_fraction=0.9)
    before = keys(inner)
    store.crash_after_puts(0, prefix="backups/")  # everything but the manifest
    with pytest.raises(SimulatedCrash):
        run_backup(Repository.open(store), str(image), VolumeIdentity("vol-b"), extents=[(0, SIZE)])
    store.recover()
    orphans = keys(inner) - before
    orphan_data = {k for k in orphans if k.startswith((pack.PACK_PREFIX, volmap.MAP_PREFIX))}
    assert any(k.startswith(pack.PACK_PREFIX) for k in orphans) and any(
        k.startswith(volmap.MAP_PREFIX) for k in orphans
    )
    listed = prune(Repository.open(store), grace_s=DAY, now=T0, lease_ttl_s=CRASHED)
    assert listed.packs_in_grace + listed.map_objects_in_grace == len(orphan_data)

    reports = []
    m = run_backup(
        Repository.open(store),
        str(image),
        VolumeIdentity("vol-b"),
        extents=[(0, SIZE)],
        progress=prune_before_commit(store, T0 + DAY, reports, CRASHED),
    )
    expected[m.backup_id] = ("vol-b", sha256_file(image))
    [racing] = reports
    assert racing.packs_deleted + racing.map_objects_deleted == len(orphan_data)
    assert not orphan_data & keys(inner)
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 3


def _referenced_pack(store, key):
    repo = Repository.open(store)
    chunks = {
        cid
        for ref in repo.list_backups()
        for _i, entries in repo.iter_map(repo.read_manifest(ref.volume, ref.backup_id))
        for _o, _n, cid, _c in entries
    }
    return any(e.chunk_id in chunks for e in repo.read_pack_trailer(key))


def test_read_state_lists_again_when_the_newest_state_vanishes():
    from movers.repo.prunestate import encode_state, read_state

    store = MemoryStore()
    old_key, old = encode_state(T0, {"packs/aa/old": T0}, [])
    store.put(old_key, old)
    newer_key, newer = encode_state(T0 + 60, {"packs/aa/new": T0 + 60}, ["packs/bb/doomed"])

    class Replacing(MemoryStore):
        def get(self, key):
            if key == old_key and not store.exists(newer_key):  # a prune replaces the state under us
                store.put(newer_key, newer)
                store.delete(old_key)
            return store.get(key)

        def list(self, prefix=""):
            return store.list(prefix)

    keys_, state = read_state(Replacing())
    assert keys_ == [newer_key] and state.key == newer_key
    assert state.garbage == {"packs/aa/new", "packs/bb/doomed"}
