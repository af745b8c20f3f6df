"""Properties of the repository format, exercised through the backup and restore pipeline."""

from __future__ import annotations

import json
import os
import random

import pytest

from movers.errors import IncompatibleError, IntegrityError, PermanentStoreError, TransientStoreError, UsageError
from movers.pipeline.backup import BackupOptions, run_backup
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify
from movers.repo.config import RepoConfig
from movers.repo.leases import live_leases
from movers.repo.manifest import SnapshotIdentity, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import LocalStore, MemoryStore, RetryingStore
from movers.testing.faulty import FaultyStore, SimulatedCrash
from tests.volumes import RecordingStore, coalesce, make_image, sha256_file, write_blocks

MiB = 1 << 20
VOL = VolumeIdentity("vol-a")


def restore_equals(repo, manifest, image, tmp_path) -> bool:
    out = tmp_path / f"restore-{manifest.backup_id}.img"
    run_restore(repo, manifest, str(out))
    same = sha256_file(out) == sha256_file(image)
    out.unlink()
    return same


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 64 * MiB, seed=3)
    return path


def allocated(path) -> list[tuple[int, int]]:
    """Non-zero 4 KiB blocks of an image, coalesced (what GetMetadataAllocated would say)."""
    out = []
    with open(path, "rb") as f:
        off = 0
        while block := f.read(4096):
            if block.count(0) != len(block):
                out.append((off, len(block)))
            off += len(block)
    return coalesce(out)


def test_scattered_4k_incremental_stores_at_most_twice_the_changes(image, tmp_path):
    repo = Repository.init(MemoryStore())
    run_backup(repo, str(image), VOL, extents=allocated(image))
    rng = random.Random(11)
    blocks = rng.sample(range(64 * MiB // 4096), 64 * MiB // 4096 // 100)  # 1% of the blocks
    changes = write_blocks(image, [b * 4096 for b in blocks])
    m = run_backup(repo, str(image), VOL, extents=changes)
    changed = sum(n for _, n in changes)
    assert m.mode == "incremental-cbt"
    assert m.stats["changed_bytes"] == changed
    assert m.stats["new_chunk_bytes"] <= 2 * changed
    assert restore_equals(repo, m, image, tmp_path)


def test_large_extents_incremental_reads_only_the_extents(image, tmp_path):
    repo = Repository.init(MemoryStore())
    run_backup(repo, str(image), VOL, extents=allocated(image))
    with open(image, "r+b") as f:
        os.pwrite(f.fileno(), os.urandom(9 * MiB + 4096), 5 * MiB)
    m = run_backup(repo, str(image), VOL, extents=[(5 * MiB, 9 * MiB + 4096)])
    assert m.stats["read_bytes"] == 9 * MiB + 4096
    assert m.stats["new_chunk_bytes"] <= 9 * MiB + 4096
    assert restore_equals(repo, m, image, tmp_path)


def test_restore_of_20th_incremental_reads_one_map(image, tmp_path):
    store = RecordingStore(MemoryStore())
    repo = Repository.init(store, RepoConfig(page_size=16 * MiB))
    full = run_backup(repo, str(image), VOL, extents=allocated(image))
    rng = random.Random(5)
    m = full
    for i in range(20):
        changes = write_blocks(image, [rng.randrange(64 * MiB // 4096) * 4096 for _ in range(50)], seed=i)
        m = run_backup(repo, str(image), VOL, extents=changes)
    store.reset()
    fresh = Repository.open(store)
    out = tmp_path / "inc20.img"
    inc_stats = run_restore(fresh, m, str(out))
    assert sha256_file(out) == sha256_file(image)
    assert [k for k in store.reads if k.startswith("backups/")] == [], "restore must not read other manifests"
    pages_read = [k for k in store.reads if k.startswith("maps/")]
    assert len(pages_read) <= 4 + 1  # this backup's 4 pages + one directory, never the chain's
    full_stats = run_restore(fresh, full, str(tmp_path / "full.img"))
    # one pass over one map: the 20th incremental fetches about what the full does, plus the changes
    assert inc_stats.fetched_bytes <= 1.2 * full_stats.fetched_bytes + 20 * 50 * 4096 * 2


def test_incremental_metadata_grows_with_change_not_volume(tmp_path):
    sizes = {}
    for capacity in (1 << 30, 64 << 30):
        img = tmp_path / f"v{capacity}.img"
        with open(img, "wb") as f:
            f.truncate(capacity)
            os.pwrite(f.fileno(), os.urandom(MiB), 0)
        repo = Repository.init(MemoryStore())
        run_backup(repo, str(img), VOL, extents=[(0, MiB)])
        changes = write_blocks(img, [capacity - 4096, capacity // 2])
        m = run_backup(repo, str(img), VOL, extents=changes)
        sizes[capacity] = m.stats["metadata_bytes"]
    assert sizes[64 << 30] < 16 * 1024
    assert sizes[64 << 30] <= 1.5 * sizes[1 << 30] + 512


def test_chunks_dedup_across_backups_and_volumes(image):
    repo = Repository.init(MemoryStore())
    a = run_backup(repo, str(image), VolumeIdentity("a"), extents=allocated(image))
    b = run_backup(repo, str(image), VolumeIdentity("b"))  # scan of identical content
    assert a.stats["new_chunk_bytes"] > 0
    assert b.stats["new_chunk_bytes"] == 0 and b.stats["dedup_bytes"] == a.stats["new_chunk_bytes"]
    assert b.stats["packs_written"] == 0


def test_zero_ranges_are_holes_never_stored(tmp_path):
    img = tmp_path / "zeros.img"
    with open(img, "wb") as f:
        f.truncate(32 * MiB)
        os.pwrite(f.fileno(), b"\1" * 4096, 8 * MiB)
    repo = Repository.init(MemoryStore())
    # the extents name a zeroed region too (as a CBT delta does after a discard)
    m = run_backup(repo, str(img), VOL, extents=[(0, 12 * MiB)])
    assert m.stats["new_chunk_bytes"] == 4096
    assert m.stats["zero_bytes"] == 12 * MiB - 4096
    entries = [e for _, page in repo.iter_map(m) for e in page]
    assert [(e[0], e[1]) for e in entries] == [(8 * MiB, 4096)]


@pytest.mark.parametrize("version", [1, 2])
def test_packs_are_large_and_named_by_version(tmp_path, version):
    """Version 1 names a pack by the sha256 of its bytes, version 2 at random (a chunk's location is known as
    soon as it is packed, and no pack can take the key of one a prune lists)."""
    img = tmp_path / "rand.img"
    with open(img, "wb") as f:
        f.write(os.urandom(40 * MiB))
    store = MemoryStore()
    repo = Repository.init(store, RepoConfig(pack_target=8 * MiB, format_version=version))
    run_backup(repo, str(img), VOL)
    import hashlib

    packs = list(store.list("packs/"))
    sizes = sorted(store.size(k) for k in packs)
    assert len(packs) == 5 and all(s >= 8 * MiB for s in sizes[1:])
    addressed = [hashlib.sha256(store.get(key)).hexdigest() == key.rsplit("/", 1)[1] for key in packs]
    assert addressed == [version == 1] * len(packs)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("how", ["crash", "error"])
def test_interrupted_backup_leaves_nothing_visible_and_rerun_reuses(tmp_path, version, how):
    """Version 1 finds the packs a crashed backup uploaded by listing packs/; version 2 by the lease the attempt
    left (killed: its last refresh; failed with an error: an ended lease), whose id starts its packs' names."""
    img = tmp_path / "rand.img"
    with open(img, "wb") as f:
        f.write(os.urandom(48 * MiB))
    inner = MemoryStore()
    faulty = FaultyStore(inner)
    repo = Repository.init(faulty, RepoConfig(pack_target=8 * MiB, format_version=version))
    if how == "crash":
        faulty.crash_after_puts(3, prefix="packs/")
    else:
        faulty.fail("put", PermanentStoreError, times=1, key_prefix="packs/", after=3)
    with pytest.raises((SimulatedCrash, PermanentStoreError)):
        run_backup(repo, str(img), VOL, options=BackupOptions(upload_threads=1))
    assert list(inner.list("backups/")) == []
    assert len(list(inner.list("packs/"))) == 3
    repo2 = Repository.open(inner)
    m = run_backup(repo2, str(img), VOL)
    assert m.stats["reused_packs"] == 3
    assert m.stats["stored_bytes"] < 48 * MiB - 3 * 8 * MiB + MiB  # only what was missing went up
    assert restore_equals(repo2, m, img, tmp_path)
    assert len(live_leases(inner)) == (1 if how == "crash" else 0)  # a killed attempt's lease lives out its TTL


def test_transient_errors_are_retried(image, tmp_path):
    faulty = FaultyStore(MemoryStore())
    repo = Repository.init(RetryingStore(faulty, base_delay=0.001))
    faulty.fail("put", TransientStoreError, times=2, key_prefix="packs/")
    faulty.fail("get", TransientStoreError, times=1)
    m = run_backup(repo, str(image), VOL)
    assert faulty.calls["put"] >= 3
    assert restore_equals(Repository.open(RetryingStore(faulty, base_delay=0.001)), m, image, tmp_path)


def test_permanent_error_aborts_without_commit(image):
    inner = MemoryStore()
    faulty = FaultyStore(inner)
    repo = Repository.init(RetryingStore(faulty, base_delay=0.001))
    faulty.fail("put", PermanentStoreError, times=1, key_prefix="packs/")
    with pytest.raises(PermanentStoreError):
        run_backup(repo, str(image), VOL)
    assert list(inner.list("backups/")) == []


def test_flipped_byte_fails_restore_and_verify_naming_offset(tmp_path):
    img = tmp_path / "v.img"
    with open(img, "wb") as f:
        f.truncate(16 * MiB)
        os.pwrite(f.fileno(), os.urandom(4 * MiB), 8 * MiB)
    root = tmp_path / "repo"
    repo = Repository.init(LocalStore(root))
    m = run_backup(repo, str(img), VOL)
    (pack_path,) = list((root / "packs").glob("*/*"))
    data = bytearray(pack_path.read_bytes())
    data[100] ^= 0xFF
    pack_path.write_bytes(bytes(data))
    repo = Repository.open(LocalStore(root))
    with pytest.raises(IntegrityError, match=f"volume offset {8 * MiB}"):
        run_restore(repo, m, str(tmp_path / "out.img"))
    report = run_verify(repo, repo.list_backups())
    assert not report.ok and f"volume offset {8 * MiB}" in report.errors[0]


def test_reader_refuses_unknown_manifest_version(image):
    store = MemoryStore()
    repo = Repository.init(store)
    m = run_backup(repo, str(image), VOL)
    doc = json.loads(store.get(m.key))
    doc["format_version"] = 7
    store.put(m.key, json.dumps(doc).encode())
    with pytest.raises(IncompatibleError):
        repo.resolve("vol-a", "latest")


def test_manifest_records_identity_parent_and_latest_by_listing(image):
    repo = Repository.init(MemoryStore())
    vol = VolumeIdentity("c1/ns/data", "c1", "ns", "data", "pv-handle", "hostpath.csi.k8s.io")
    snap = SnapshotIdentity("snap-1", "ns", "handle-1", "vgs-1", "vgs-handle")
    first = run_backup(repo, str(image), vol, extents=allocated(image), snapshot=snap)
    second = run_backup(repo, str(image), vol, extents=[(0, 4096)], snapshot=SnapshotIdentity(snapshot_handle="h2"))
    latest = repo.resolve("c1/ns/data", "latest")
    assert latest.backup_id == second.backup_id and latest.parent == first.backup_id
    back = repo.read_manifest("c1/ns/data", first.backup_id)
    assert back.volume == vol and back.snapshot == snap and back.mode == "full"
    assert back.capacity_bytes == 64 * MiB and back.stats["read_bytes"] > 0
    assert [r.volume for r in repo.list_backups()] == ["c1/ns/data", "c1/ns/data"]


def test_restore_zeroes_holes_on_a_dirty_target(image, tmp_path):
    repo = Repository.init(MemoryStore())
    m = run_backup(repo, str(image), VOL)
    target = tmp_path / "dirty.img"
    target.write_bytes(b"\xaa" * (70 * MiB))
    stats = run_restore(repo, m, str(target))
    assert stats.zeroed_bytes == stats.hole_bytes > 0
    assert sha256_file(target) == sha256_file(image)


def test_volume_shrink_and_grow_keep_restores_exact(tmp_path):
    img = tmp_path / "v.img"
    make_image(img, 24 * MiB + 4096 * 3, seed=9)
    repo = Repository.init(MemoryStore(), RepoConfig(page_size=8 * MiB))
    run_backup(repo, str(img), VOL)
    os.truncate(img, 13 * MiB + 512)
    m = run_backup(repo, str(img), VOL, extents=[])
    assert restore_equals(repo, m, img, tmp_path)
    os.truncate(img, 30 * MiB)
    with open(img, "r+b") as f:
        os.pwrite(f.fileno(), b"\7" * 4096, 29 * MiB)
    m = run_backup(repo, str(img), VOL, extents=[(29 * MiB, 4096)])
    assert restore_equals(repo, m, img, tmp_path)


def test_progress_reports_bytes(image):
    seen = []
    run_backup(Repository.init(MemoryStore()), str(image), VOL, progress=lambda d, t, **_: seen.append((d, t)))
    assert seen[-1] == (64 * MiB, 64 * MiB)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:], strict=False))


def test_progress_of_a_stream_of_extents_moves_by_position_until_the_total_is_known(image):
    """A CBT stream's total is known only at its end: meanwhile each call says how far along the volume the backup
    is (ascending), so progress moves instead of jumping from 0 to 100."""
    seen = []
    extents = allocated(image)
    m = run_backup(
        Repository.init(MemoryStore()),
        str(image),
        VOL,
        extents=iter(extents),
        options=BackupOptions(max_inflight=4 * MiB),
        progress=lambda done, total, **detail: seen.append((done, total, detail)),
    )
    *streaming, (done, total, last) = seen
    assert len(streaming) > 3 and all(t is None for _d, t, _x in streaming), seen[:3]
    positions = [x["position"] for _d, _t, x in streaming]
    assert positions == sorted(positions) and 0 < positions[0] < positions[-1] <= 64 * MiB, positions
    assert {(x["capacity"], x["mode"]) for _d, _t, x in seen} == {(64 * MiB, "full")}
    assert done == total == m.stats["read_bytes"] >= sum(n for _o, n in extents) and last["position"] == 64 * MiB


@pytest.mark.parametrize("how", ["extents", "scan"])
def test_backup_counters_reconcile(image, how):
    """read = zero + new + dedup + unchanged, and stored = packs + metadata: in a full backup and an incremental
    (CBT extents, or a scan that compares with its parent's block digests)."""
    repo = Repository.init(MemoryStore())
    for n in range(2):
        changes = write_blocks(image, [k * 1_048_576 for k in range(0, 60, 7)], seed=n) if n else allocated(image)
        m = run_backup(repo, str(image), VOL, extents=changes if how == "extents" else None)
        s = m.stats
        assert s["read_bytes"] == s["zero_bytes"] + s["new_chunk_bytes"] + s["dedup_bytes"] + s["unchanged_bytes"], s
        assert s["stored_bytes"] == s["pack_bytes"] + s["metadata_bytes"] and s["pack_bytes"] > 0, s
    assert m.mode == {"extents": "incremental-cbt", "scan": "incremental-scan"}[how]
    assert (s["unchanged_bytes"] > 0) == (how == "scan"), s


def test_bad_extents_abort_without_commit(image):
    store = MemoryStore()
    repo = Repository.init(store)
    with pytest.raises(UsageError):
        run_backup(repo, str(image), VOL, extents=[(0, 4096), (64 * MiB, 4096)])
    assert list(store.list("backups/")) == []


def test_scan_incremental_stores_only_changed_digest_blocks(image, tmp_path):
    repo = Repository.init(MemoryStore())
    run_backup(repo, str(image), VOL)  # full scan: digests of every block
    rng = random.Random(3)
    offsets = [rng.randrange(64 * MiB // 4096) * 4096 for _ in range(40)]
    write_blocks(image, offsets)
    m = run_backup(repo, str(image), VOL)
    touched = {o // (64 * 1024) for o in offsets}
    assert m.mode == "incremental-scan"
    assert m.stats["changed_bytes"] == len(touched) * 64 * 1024
    assert m.stats["new_chunk_bytes"] <= len(touched) * 64 * 1024
    assert restore_equals(repo, m, image, tmp_path)
    unchanged = run_backup(repo, str(image), VOL)
    assert unchanged.stats["new_chunk_bytes"] == 0 and unchanged.stats["changed_bytes"] == 0


def test_scan_after_cbt_rereads_only_blocks_cbt_touched_partially(image, tmp_path):
    repo = Repository.init(MemoryStore())
    run_backup(repo, str(image), VOL)
    changes = write_blocks(image, [5 * MiB, 9 * MiB + 8192])
    run_backup(repo, str(image), VOL, extents=changes)  # two digest blocks become unknown
    m = run_backup(repo, str(image), VOL)
    assert m.stats["changed_bytes"] == 2 * 64 * 1024
    assert restore_equals(repo, m, image, tmp_path)


def test_no_object_is_ever_written_twice(image, tmp_path):
    """What object-locked (WORM) buckets need: a key, once written, is never put again."""
    recording = RecordingStore(MemoryStore())
    faulty = FaultyStore(recording)
    repo = Repository.init(faulty, RepoConfig(pack_target=4 * MiB))
    run_backup(repo, str(image), VOL, extents=allocated(image))
    changes = write_blocks(image, [4096 * i * 97 for i in range(50)])
    run_backup(repo, str(image), VOL, extents=changes)
    run_backup(repo, str(image), VOL)
    write_blocks(image, [MiB * i for i in range(40)], seed=5)
    faulty.crash_after_puts(1, prefix="packs/")
    with pytest.raises(SimulatedCrash):
        run_backup(
            Repository.open(faulty), str(image), VolumeIdentity("other"), options=BackupOptions(upload_threads=1)
        )
    faulty.recover()
    run_backup(Repository.open(faulty), str(image), VolumeIdentity("other"))
    run_backup(Repository.open(faulty), str(image), VOL)
    assert len(recording.written) == len(set(recording.written))
