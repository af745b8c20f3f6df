"""Sampled verify: every map is checked, about a fraction of the packs' bytes are read whole; damage
names the volume, backup and volume offset of its first use; store failures raise instead of
passing for damage. Also ``cbt-mover verify --sample``."""

from __future__ import annotations

import json

import pytest

from movers.errors import TransientStoreError, UsageError
from movers.pipeline.backup import run_backup
from movers.pipeline.verify import run_verify, run_verify_sampled
from movers.repo import pack, volmap
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import LocalStore, MemoryStore
from movers.testing.faulty import FaultyStore
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, write_blocks

MiB = 1 << 20
SIZE = 16 * MiB
CONFIG = RepoConfig(page_size=4 * MiB, pack_target=1 * MiB)


def build(store, tmp_path, volumes=("vol-a", "vol-b")) -> Repository:
    repo = Repository.init(store, CONFIG)
    for n, vol in enumerate(volumes):
        image = tmp_path / f"{vol}.img"
        make_image(image, SIZE, seed=30 + n, data_fraction=0.7)
        run_backup(repo, str(image), VolumeIdentity(vol), force_full=True)
        changes = write_blocks(image, [k * 97 * 4096 for k in range(20)], seed=n, length=32 * 1024)
        run_backup(repo, str(image), VolumeIdentity(vol), extents=changes)
    return Repository.open(store)


def first_use(repo, cid):
    """(volume, backup id, volume offset) of the first entry using ``cid``, in the order verify walks."""
    for ref in repo.list_backups():
        for _page, entries in repo.iter_map(repo.read_manifest(ref.volume, ref.backup_id)):
            for voff, _n, c, _o in entries:
                if c == cid:
                    return ref.volume, ref.backup_id, voff
    raise AssertionError("chunk not used")


def flip(store, key, offset):
    data = bytearray(store.get(key))
    data[offset] ^= 0x40
    store.put(key, bytes(data))


def referenced_chunk(repo):
    """A referenced chunk, its location and the pack key holding it."""
    ref = repo.list_backups()[-1]
    _page, entries = next((p, e) for p, e in repo.iter_map(repo.read_manifest(ref.volume, ref.backup_id)) if e)
    cid = entries[len(entries) // 2][2]
    loc = repo.index().get(cid)
    return cid, loc, pack.pack_key(loc.pack_id)


def test_clean_repository_full_sample_zero_sample_and_a_seeded_fraction(tmp_path):
    repo = build(MemoryStore(), tmp_path)
    whole = run_verify_sampled(repo, repo.list_backups(), sample=1.0)
    assert whole.ok and not whole.warnings, whole.errors
    assert whole.backups_checked == 4 and whole.map_objects_checked > 4
    assert whole.packs_read == whole.packs_total > 4
    assert whole.fetched_bytes >= whole.stored_bytes > 0
    assert whole.chunks_verified >= whole.chunks_referenced > 0
    full = run_verify(repo, repo.list_backups())
    assert full.ok and full.chunks_verified == whole.chunks_referenced

    metadata_only = run_verify_sampled(repo, repo.list_backups(), sample=0.0)
    assert metadata_only.ok and metadata_only.packs_read == metadata_only.fetched_bytes == 0
    assert metadata_only.map_objects_checked == whole.map_objects_checked

    some = run_verify_sampled(repo, repo.list_backups(), sample=0.3, seed=7)
    again = run_verify_sampled(repo, repo.list_backups(), sample=0.3, seed=7)
    assert (
        some.ok and some.seed == 7 and (some.packs_read, some.fetched_bytes) == (again.packs_read, again.fetched_bytes)
    )
    assert 0 < some.packs_read < some.packs_total
    largest = max(repo.store.size(k) for k in repo.store.list(pack.PACK_PREFIX))
    assert 0.3 * whole.fetched_bytes - largest <= some.fetched_bytes <= 0.3 * whole.fetched_bytes + largest
    assert run_verify_sampled(repo, repo.list_backups(), sample=0.3).seed is not None  # reported when random
    with pytest.raises(UsageError):
        run_verify_sampled(repo, repo.list_backups(), sample=1.5)


def test_a_flipped_byte_is_found_when_sampled_and_named_by_volume_offset(tmp_path):
    store = MemoryStore()
    repo = build(store, tmp_path)
    cid, loc, key = referenced_chunk(repo)
    flip(store, key, loc.offset + loc.stored_len // 2)
    volume, backup_id, offset = first_use(repo, cid)

    missed = run_verify_sampled(Repository.open(store), repo.list_backups(), sample=0.0)
    assert missed.ok  # the maps are fine; only reading the pack finds it
    report = run_verify_sampled(Repository.open(store), repo.list_backups(), sample=1.0)
    assert not report.ok and len(report.damage) == 1, report.errors
    [damage] = report.damage
    assert (damage["volume"], damage["backup_id"], damage["offset"], damage["object"]) == (
        volume,
        backup_id,
        offset,
        key,
    )
    assert f"at volume offset {offset}" in report.errors[0] and cid.hex()[:16] in report.errors[0]


def test_missing_pack_damaged_page_and_damaged_trailer(tmp_path):
    store = MemoryStore()
    repo = build(store, tmp_path)
    cid, loc, key = referenced_chunk(repo)
    volume, backup_id, offset = first_use(repo, cid)
    # a damaged trailer (restores read through the index, it cannot be indexed again): the pack's damage
    size = store.size(key)
    flip(store, key, size - pack.FOOTER_LEN - 3)
    report = run_verify_sampled(Repository.open(store), repo.list_backups(), sample=1.0)
    assert not report.ok and [(d["object"], d["offset"]) for d in report.damage] == [(key, None)], report.damage
    assert "pack trailer" in report.damage[0]["error"] and "restores read its chunks" in report.damage[0]["error"]
    # the pack is gone: found by the map check alone, at every backup's first use
    store.delete(key)
    report = run_verify_sampled(Repository.open(store), repo.list_backups(), sample=0.0)
    assert not report.ok
    assert any(
        d["volume"] == volume and d["offset"] == offset and "not in any pack" in d["error"] for d in report.damage
    ), report.damage
    # a damaged page of a backup's map names the page's first volume offset
    store2 = MemoryStore()
    repo2 = build(store2, tmp_path)
    ref = repo2.list_backups()[0]
    page_index, page_id = next(
        (i, p)
        for i, (p, _n) in enumerate(repo2.page_slots(repo2.read_manifest(ref.volume, ref.backup_id)))
        if p != volmap.NO_PAGE
    )
    flip(store2, volmap.map_key(page_id), 20)
    report = run_verify_sampled(Repository.open(store2), repo2.list_backups(), sample=0.0)
    hits = [d for d in report.damage if d["object"] == volmap.map_key(page_id)]
    assert hits and hits[0]["volume"] == ref.volume and hits[0]["offset"] == page_index * CONFIG.page_size


def test_store_failures_raise_instead_of_reporting_damage(tmp_path):
    store = FaultyStore(MemoryStore())
    repo = build(store, tmp_path, volumes=("vol-a",))
    store.fail("get", TransientStoreError, times=1, key_prefix=pack.PACK_PREFIX)
    with pytest.raises(TransientStoreError):
        run_verify_sampled(Repository.open(store), repo.list_backups(), sample=1.0)
    store.fail("get_range", TransientStoreError, times=1, key_prefix=pack.PACK_PREFIX)
    with pytest.raises(TransientStoreError):
        run_verify(Repository.open(store), repo.list_backups())
    assert store.pending_faults() == 0


def test_cli_verify_sample(tmp_path):
    store = LocalStore(tmp_path / "repo")
    repo = build(store, tmp_path, volumes=("vol-a",))
    url = f"file://{tmp_path}/repo"
    clean = json.loads(run("verify", "--repo", url, "--sample", "1", "--seed", "5", "--json", check_rc=0).stdout)
    assert clean["ok"] and clean["mode"] == "sampled" and clean["seed"] == 5 and clean["packs_read"] > 0
    text = run("verify", "--repo", url, "--sample", "0.5", check_rc=0).stdout
    assert "packs read whole (seed " in text and ": ok" in text

    cid, loc, key = referenced_chunk(repo)
    flip(store, key, loc.offset + 1)
    volume, backup_id, offset = first_use(repo, cid)
    proc = run("verify", "--repo", url, "--sample", "1", "--json")
    assert proc.returncode == 4, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(d["volume"], d["backup_id"], d["offset"]) for d in doc["damage"]] == [(volume, backup_id, offset)]
    assert (
        f"damaged: {volume}/{backup_id} at volume offset {offset}"
        in run("verify", "--repo", url, "--sample", "1").stderr
    )
    assert run("verify", "--repo", url, "--json").returncode == 4  # full mode finds it too
    assert_one_line_error(run("verify", "--repo", url, "--sample", "1.5"), 2, "--sample")
    assert_one_line_error(run("verify", "--repo", url, "--seed", "3"), 2, "--seed needs --sample")
