"""Prune end to end: forget + prune keep every remaining backup restorable, with grace for running backups."""

from __future__ import annotations

import pytest

from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify
from movers.repo import pack, volmap
from movers.repo.config import RepoConfig
from movers.repo.index import INDEX_PREFIX
from movers.repo.manifest import VolumeIdentity
from movers.repo.prune import STATE_PREFIX, prune
from movers.repo.repository import Repository
from movers.repo.retention import forget
from movers.repo.store import FaultyStore, LocalStore, MemoryStore, SimulatedCrash
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
SIZE = 16 * MiB
CONFIG = RepoConfig(page_size=4 * MiB, pack_target=2 * MiB)
T0 = 1_700_000_000.0
DAY = 86400.0


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
                changes = write_blocks(image, [(r * 37 + k * 211) % (SIZE // 4096) * 4096 for k in range(40)],
                                       seed=r * 7 + n, length=64 * 1024)  # fmt: skip
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


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "repo")


def test_forget_prune_keeps_every_kept_backup_restorable(store, tmp_path):
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path)
    before = keys(store)
    # dry runs change nothing
    forget(repo, keep_last=2, dry_run=True)
    dry = prune(repo, grace_s=0, dry_run=True, now=T0)
    assert keys(store) == before
    rep = forget(repo, keep_last=2)
    assert len(rep.deleted) == 4
    dry = prune(repo, grace_s=0, dry_run=True, now=T0)
    assert dry.packs_deleted + dry.map_objects_deleted > 0
    assert keys(store) == before - set(rep.deleted)

    report = prune(Repository.open(store), grace_s=0, now=T0)
    assert report.packs_deleted == dry.packs_deleted and report.bytes_deleted == dry.bytes_deleted
    assert report.map_objects_deleted == dry.map_objects_deleted > 0
    assert report.backups_marked == 4
    assert report.packs_partly_used > 0 and report.dead_bytes > 0  # overwritten blocks in shared packs
    assert report.index_objects_written == 1 and report.index_objects_deleted >= 2
    assert len(keys(store, INDEX_PREFIX)) == 1
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 4
    # prune is idempotent: a second run finds nothing
    again = prune(Repository.open(store), grace_s=0, now=T0)
    assert again.packs_deleted == again.map_objects_deleted == again.index_objects_deleted == 0
    # forgetting all but the newest of each volume still restores; and new backups still work
    forget(repo, keep_last=1)
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
    forget(repo, keep_last=1)
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


def test_running_backup_survives_prune_and_is_reused(tmp_path):
    inner = MemoryStore()
    store = FaultyStore(inner)
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path, volumes=("vol-a",), rounds=1)
    image = tmp_path / "vol-b.img"
    make_image(image, SIZE, seed=42)
    packs_before = keys(inner, pack.PACK_PREFIX)
    store.crash_after_puts(1, prefix=pack.PACK_PREFIX)  # vol-b uploads a pack, then "is still running"
    with pytest.raises(SimulatedCrash):
        run_backup(repo, str(image), VolumeIdentity("vol-b"), force_full=True)
    store.recover()
    orphans = keys(inner, pack.PACK_PREFIX) - packs_before
    assert len(orphans) == 1
    assert not keys(inner, INDEX_PREFIX + "x") and not repo.list_backups("vol-b")

    report = prune(Repository.open(store), grace_s=DAY, now=T0)
    assert report.packs_in_grace == 1 and report.packs_deleted == 0
    assert orphans <= keys(inner, pack.PACK_PREFIX)
    # the backup's next attempt reuses the uploaded packs
    puts_before = len(store.puts)
    m = run_backup(Repository.open(store), str(image), VolumeIdentity("vol-b"), force_full=True)
    expected[m.backup_id] = ("vol-b", sha256_file(image))
    new_packs = [k for k in store.puts[puts_before:] if k.startswith(pack.PACK_PREFIX)]
    orphan_chunks = {e.chunk_id for k in orphans for e in repo.read_pack_trailer(k)}
    new_chunks = {e.chunk_id for k in new_packs for e in repo.read_pack_trailer(k)}
    assert orphan_chunks and not orphan_chunks & new_chunks  # deduplicated against the surviving pack
    # now referenced: a prune long after the grace keeps them
    report = prune(Repository.open(store), grace_s=DAY, now=T0 + 10 * DAY)
    assert report.packs_deleted == 0
    assert orphans <= keys(inner, pack.PACK_PREFIX)
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 2


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
    assert prune(Repository.open(store), grace_s=DAY, now=T0).packs_in_grace == 1
    dry = prune(Repository.open(store), grace_s=DAY, now=T0 + 2 * DAY, dry_run=True)
    assert dry.packs_deleted == 1 and orphans <= keys(inner)
    orphan_bytes = sum(inner.size(k) for k in orphans)
    report = prune(Repository.open(store), grace_s=DAY, now=T0 + 2 * DAY)
    assert (report.packs_deleted, report.bytes_deleted) == (1, orphan_bytes) == (dry.packs_deleted, dry.bytes_deleted)
    assert not orphans & keys(inner)
    assert keys(inner, pack.PACK_PREFIX) == {k for k in before if k.startswith(pack.PACK_PREFIX)}
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


@pytest.mark.parametrize("crash", ["before-index", "after-index", "mid-pack-deletes"])
def test_crash_during_prune_leaves_a_readable_repository(crash, tmp_path):
    inner = MemoryStore()
    store = FaultyStore(inner)
    repo = Repository.init(store, CONFIG)
    expected = build(repo, tmp_path, rounds=3)
    forget(repo, keep_last=1)
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
    if crash == "after-index":
        assert len(keys(inner, INDEX_PREFIX) - index_before) == 1 and index_before <= keys(inner, INDEX_PREFIX)
    assert check_all_restore(Repository.open(inner), expected, tmp_path) == 2
    # a backup after the crash dedups only against data that exists
    image = tmp_path / "vol-a.img"
    m = run_backup(Repository.open(inner), str(image), VolumeIdentity("vol-a"), force_full=True)
    expected[m.backup_id] = ("vol-a", sha256_file(image))
    # the next prune finishes the job
    prune(Repository.open(inner), grace_s=0, now=T0)
    assert len(keys(inner, INDEX_PREFIX)) == 1
    assert check_all_restore(Repository.open(inner), expected, tmp_path) == 3
