"""Consolidation (``movers.pipeline.consolidate``, ``movers.repo.remap``): a fragmented backup is stored again so that
its restore fetches what it uses, committed as a remap beside its manifest; every backup stays restorable bit-exact
whatever fails, and prune frees what nothing reads any more."""

from __future__ import annotations

import json
import random

import pytest

from movers.errors import IntegrityError, PruneLockedError
from movers.pipeline.backup import run_backup
from movers.pipeline.consolidate import ConsolidationOptions, consolidate, measure
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify
from movers.repo import remap
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.prune import prune
from movers.repo.prunelock import PruneLock
from movers.repo.repository import Repository
from movers.repo.retention import forget_named
from movers.repo.store import LocalStore
from movers.testing.faulty import FaultyStore
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import sha256_file, write_blocks

MiB = 1 << 20
BLOCK = 4096
SIZE = 16 * MiB
CONFIG = RepoConfig(page_size=4 * MiB, pack_target=2 * MiB, chunk_max=1 * MiB)
VOLUME = "app/data"


def _random_image(path, size: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(rng.randbytes(MiB))


def _chain(repo: Repository, tmp_path, rounds: int = 6, fraction: float = 0.05) -> dict[str, str]:
    """A full backup of random data, then ``rounds`` incrementals of scattered 4 KiB writes over ``fraction`` of the
    blocks: ``{backup id: sha256 of the image it backed up}``, oldest first."""
    image = tmp_path / "vol.img"
    _random_image(image, SIZE, seed=1)
    expected = {}
    m = run_backup(repo, str(image), VolumeIdentity(VOLUME), extents=[(0, SIZE)])
    expected[m.backup_id] = sha256_file(image)
    rng = random.Random(2)
    for n in range(rounds):
        offsets = rng.sample(range(0, SIZE, BLOCK), int(SIZE // BLOCK * fraction))
        changed = write_blocks(image, offsets, seed=10 + n)
        m = run_backup(repo, str(image), VolumeIdentity(VOLUME), extents=changed, parent=m.backup_id)
        expected[m.backup_id] = sha256_file(image)
    return expected


def _restored(repo: Repository, backup_id: str, tmp_path) -> tuple[str, int]:
    target = tmp_path / "restored.img"
    target.unlink(missing_ok=True)
    stats = run_restore(repo, repo.resolve(VOLUME, backup_id), str(target))
    return sha256_file(target), stats.fetched_bytes


@pytest.fixture
def repo(tmp_path):
    return Repository.init(LocalStore(tmp_path / "repo"), CONFIG)


def test_a_consolidated_backup_restores_bit_exact_fetching_what_it_uses(repo, tmp_path):
    expected = _chain(repo, tmp_path)
    latest = list(expected)[-1]
    digest, fetched_before = _restored(repo, latest, tmp_path)
    assert digest == expected[latest]
    assert fetched_before > 1.25 * SIZE  # fragmented: dead parts of overwritten chunks are fetched too

    result = consolidate(repo, VOLUME)

    assert result.backup_id == latest and result.remap is not None
    assert result.fetch_before == pytest.approx(fetched_before, rel=0.05)
    assert result.fetch_after <= 1.25 * result.ideal_bytes
    reopened = Repository.open(repo.store)
    manifest = reopened.resolve(VOLUME, "latest")
    assert manifest.remapped == result.remap
    digest, fetched_after = _restored(reopened, latest, tmp_path)
    assert digest == expected[latest]
    assert fetched_after <= 1.25 * SIZE
    for backup_id, sha in expected.items():  # the others are untouched
        assert _restored(reopened, backup_id, tmp_path)[0] == sha
    assert run_verify(reopened, reopened.list_backups(VOLUME)).ok


def test_the_next_incremental_builds_on_the_consolidated_map(repo, tmp_path):
    expected = _chain(repo, tmp_path)
    assert consolidate(repo, VOLUME).remap is not None
    image = tmp_path / "vol.img"
    changed = write_blocks(image, [5 * BLOCK, 3 * MiB + 7 * BLOCK], seed=99)
    m = run_backup(repo, str(image), VolumeIdentity(VOLUME), extents=changed, parent=list(expected)[-1])
    assert m.mode == "incremental-cbt"
    digest, fetched = _restored(Repository.open(repo.store), m.backup_id, tmp_path)
    assert digest == sha256_file(image)
    assert fetched <= 1.25 * SIZE


def test_a_failed_commit_leaves_the_backup_as_it_was(tmp_path):
    store = FaultyStore(LocalStore(tmp_path / "repo"))
    repo = Repository.init(store, CONFIG)
    expected = _chain(repo, tmp_path)
    latest = list(expected)[-1]
    store.fail(
        "create",
        OSError("the store refused the write"),
        key_prefix=repo.manifest_key(repo.resolve(VOLUME, latest)) + remap.REMAP_MARK,
    )

    with pytest.raises(OSError, match="refused"):
        consolidate(repo, VOLUME)

    reopened = Repository.open(store)
    assert reopened.resolve(VOLUME, latest).remapped is None
    prune(reopened, grace_s=0)  # frees the consolidation's orphans
    assert _restored(Repository.open(store), latest, tmp_path)[0] == expected[latest]


def test_damaged_data_is_refused_and_nothing_committed(repo, tmp_path):
    expected = _chain(repo, tmp_path)
    packs = sorted((tmp_path / "repo" / "packs").rglob("*"))
    victim = max((p for p in packs if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))

    with pytest.raises(IntegrityError):
        consolidate(repo, VOLUME)

    assert Repository.open(repo.store).resolve(VOLUME, list(expected)[-1]).remapped is None


def test_prune_frees_the_replaced_map_and_stale_remaps(repo, tmp_path):
    expected = _chain(repo, tmp_path)
    ids = list(expected)
    forgotten = consolidate(repo, VOLUME, ids[-2]).remap
    latest = repo.resolve(VOLUME, "latest")
    same = remap.Remap(
        latest.backup_id, VOLUME, latest.capacity_bytes, latest.map, "2026-11-27T00:00:00+00:00", 0, 0, 0
    )
    superseded = repo.write_remap(latest, same)  # an earlier remap of the latest (its own map)
    image = tmp_path / "vol.img"
    newest = consolidate(repo, VOLUME).remap
    assert None not in (forgotten, superseded, newest)
    forget_named(repo, [ids[-2]], VOLUME)

    report = prune(Repository.open(repo.store), grace_s=0)
    assert report.remaps_deleted == 2
    assert not repo.store.exists(forgotten) and not repo.store.exists(superseded) and repo.store.exists(newest)
    assert report.map_objects_deleted > 0
    reopened = Repository.open(repo.store)
    assert reopened.resolve(VOLUME, "latest").remapped == newest
    for backup_id, sha in expected.items():
        if backup_id != ids[-2]:
            assert _restored(reopened, backup_id, tmp_path)[0] == sha
    assert sha256_file(image) == expected[ids[-1]]


def test_it_waits_for_no_prune(repo, tmp_path):
    _chain(repo, tmp_path, rounds=2)
    with PruneLock(repo.store), pytest.raises(PruneLockedError):
        consolidate(repo, VOLUME)


def test_a_dry_run_measures_and_writes_nothing(repo, tmp_path):
    _chain(repo, tmp_path)
    before = sorted(repo.store.list(""))
    result = consolidate(repo, VOLUME, options=ConsolidationOptions(dry_run=True))
    assert result.dry_run and result.spans > 0 and result.remap is None
    assert result.fetch_before == measure(repo, repo.resolve(VOLUME, "latest")).fetch_bytes
    assert sorted(repo.store.list("")) == before


def test_the_cli_consolidates_and_refuses_a_bad_threshold(repo, tmp_path):
    _chain(repo, tmp_path)
    url = f"file://{tmp_path / 'repo'}"
    bad = run("consolidate", "--repo", url, "--dead-fraction", "1.5")
    assert_one_line_error(bad, 2, "--dead-fraction must be between 0 and 1, not 1.5")
    ok = run("consolidate", "--repo", url, "--json", check_rc=0)
    doc = json.loads(ok.stdout)
    assert doc["rewritten_bytes"] > 0
    (one,) = doc["backups"]
    assert one["fetch_after"] < one["fetch_before"]


def test_an_encrypted_repository_seals_the_remap_and_restores_through_it(tmp_path):
    import dataclasses

    from movers.repo.keys import Credentials

    given = Credentials.gather(environ={"CBT_MOVER_PASSWORD": "consolidation test passphrase"})
    config = dataclasses.replace(RepoConfig.new(encrypted=True), page_size=4 * MiB, pack_target=2 * MiB, chunk_max=MiB)
    store = LocalStore(tmp_path / "repo")
    repo = Repository.init(store, config, given, kdf_cost=10)
    expected = _chain(repo, tmp_path)
    key = consolidate(repo, VOLUME).remap
    assert key is not None and key.startswith(repo.volume_prefix(VOLUME))
    assert b"backup_id" not in (tmp_path / "repo" / key).read_bytes()  # sealed, as a manifest is
    reopened = Repository.open(store, given)
    assert [ref.backup_id for ref in reopened.list_backups()] == list(expected)  # a remap is no backup
    latest = list(expected)[-1]
    assert reopened.resolve(VOLUME, "latest").remapped == key
    digest, fetched = _restored(reopened, latest, tmp_path)
    assert digest == expected[latest] and fetched <= 1.25 * SIZE


def test_a_backup_running_on_top_of_a_backup_being_consolidated_stays_restorable(repo, tmp_path):
    """An incremental reads its parent's map, then the parent is consolidated while it runs (from its progress
    callback): it commits on the old map's pages, which prune (even with no grace) keeps for it."""
    expected = _chain(repo, tmp_path)
    image = tmp_path / "vol.img"
    changed = write_blocks(image, [7 * BLOCK, 9 * MiB + 3 * BLOCK], seed=77)
    consolidated = []

    def during(done, total, **_detail):
        if not consolidated:
            consolidated.append(consolidate(Repository.open(repo.store), VOLUME).remap)

    m = run_backup(
        repo, str(image), VolumeIdentity(VOLUME), extents=changed, parent=list(expected)[-1], progress=during
    )
    assert consolidated and consolidated[0] is not None
    prune(Repository.open(repo.store), grace_s=0)
    reopened = Repository.open(repo.store)
    assert _restored(reopened, m.backup_id, tmp_path)[0] == sha256_file(image)
    assert _restored(reopened, list(expected)[-1], tmp_path)[0] == expected[list(expected)[-1]]
