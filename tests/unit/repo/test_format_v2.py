"""Format version 2: map pages say where their chunks are, so restores and incrementals read nothing
repository-wide, a first backup reads only the index shards its chunks fall in, and version 1
repositories stay readable and are still written as version 1."""

from __future__ import annotations

import pytest

from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.repo import volmap
from movers.repo.config import RepoConfig
from movers.repo.index import INDEX_PREFIX, shard_prefix
from movers.repo.manifest import VolumeIdentity, volume_prefix
from movers.repo.prune import prune
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import RecordingStore, make_image, sha256_file, write_blocks

MiB = 1 << 20
CONFIG = RepoConfig(page_size=4 * MiB, pack_target=2 * MiB)


def _fill(repo: Repository, tmp_path, volumes: int) -> None:
    """Other volumes' backups: what a restore or a small backup must not read."""
    for n in range(volumes):
        image = tmp_path / f"other-{n}.img"
        make_image(image, 8 * MiB, seed=100 + n)
        run_backup(repo, str(image), VolumeIdentity(f"other/{n}"))


def _restore(repo: Repository, volume: str, tmp_path) -> str:
    target = tmp_path / "restored.img"
    target.unlink(missing_ok=True)
    run_restore(repo, repo.resolve(volume, "latest"), str(target))
    return sha256_file(target)


def _volume_among_others(tmp_path):
    """A repository holding three other volumes and a full backup of ``app/data``: the store, the repository and
    the volume's image."""
    store = RecordingStore(MemoryStore())
    repo = Repository.init(store, CONFIG)
    _fill(repo, tmp_path, 3)
    image = tmp_path / "vol.img"
    make_image(image, 8 * MiB, seed=7)
    run_backup(repo, str(image), VolumeIdentity("app/data"))
    return store, repo, image


def test_a_restore_reads_its_manifest_map_and_pack_ranges_and_nothing_else(tmp_path):
    store, repo, image = _volume_among_others(tmp_path)
    changed = write_blocks(image, [5 * MiB + 4096 * n * 7 for n in range(40)])
    run_backup(repo, str(image), VolumeIdentity("app/data"), extents=changed)

    store.reset()
    assert _restore(Repository.open(store), "app/data", tmp_path) == sha256_file(image)
    assert set(store.listed) == {volume_prefix("app/data")}  # "latest": this volume's backups only
    kinds = {key.split("/", 1)[0] for key in store.reads}
    assert kinds == {"config", "backups", "maps", "packs"}
    assert not any(key.startswith(INDEX_PREFIX) for key in store.reads)


def test_a_cbt_incremental_lists_and_reads_nothing_repository_wide(tmp_path):
    store, repo, image = _volume_among_others(tmp_path)
    changed = write_blocks(image, [MiB + 4096 * n * 9 for n in range(30)])

    store.reset()
    m = run_backup(Repository.open(store), str(image), VolumeIdentity("app/data"), extents=changed)
    assert m.mode == "incremental-cbt" and m.stats["new_chunk_bytes"] > 0
    assert set(store.listed) <= {"prune/", "leases/", volume_prefix("app/data")}
    assert not any(key.startswith((INDEX_PREFIX, "packs/")) for key in store.reads)
    assert _restore(repo, "app/data", tmp_path) == sha256_file(image)


def test_a_first_backup_reads_only_the_index_shards_its_chunks_fall_in_and_dedups_there(tmp_path):
    store = RecordingStore(MemoryStore())
    repo = Repository.init(store, CONFIG)
    _fill(repo, tmp_path, 2)
    image = tmp_path / "small.img"
    make_image(image, 1 * MiB, seed=100)  # the same bytes as the first MiB of other/0
    store.reset()
    m = run_backup(Repository.open(store), str(image), VolumeIdentity("app/small"))
    shards = {prefix for prefix in store.listed if prefix.startswith(INDEX_PREFIX)}
    chunks = {e[2] for _page, entries in repo.iter_map(m) for e in entries}
    assert shards == {shard_prefix(cid[0]) for cid in chunks} and len(shards) < 16
    assert m.stats["new_chunk_bytes"] == 0 and m.stats["dedup_bytes"] > 0  # found in other/0's shards
    assert _restore(repo, "app/small", tmp_path) == sha256_file(image)


def test_a_version_1_repository_is_read_and_written_as_version_1(tmp_path):
    store = MemoryStore()
    repo = Repository.init(store, RepoConfig(page_size=4 * MiB, pack_target=2 * MiB, format_version=1))
    image = tmp_path / "vol.img"
    make_image(image, 8 * MiB, seed=3)
    run_backup(repo, str(image), VolumeIdentity("v1"))
    changed = write_blocks(image, [2 * MiB + 4096 * n * 5 for n in range(20)])
    m = run_backup(Repository.open(store), str(image), VolumeIdentity("v1"), extents=changed)
    assert m.format_version == 1 and "located-pages" not in m.mandatory_features
    pages = [key for key in store.list(volmap.MAP_PREFIX) if store.get(key).startswith(b"CBTMAP")]
    assert pages and all(store.get(key).startswith(volmap.PAGE_MAGIC) for key in pages)
    assert _restore(Repository.open(store), "v1", tmp_path) == sha256_file(image)


@pytest.mark.parametrize("forget_first", [True, False])
def test_prune_keeps_exactly_the_packs_located_pages_name(tmp_path, forget_first):
    """Two volumes store the same chunks in different packs (an incremental does not dedup against the
    repository); forgetting one volume's backups frees its packs although the other still uses the same
    chunk ids."""
    store = MemoryStore()
    repo = Repository.init(store, CONFIG)
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=5)
    run_backup(repo, str(image), VolumeIdentity("a"), force_full=True)
    base = tmp_path / "zeros.img"
    base.write_bytes(bytes(4 * MiB))
    run_backup(repo, str(base), VolumeIdentity("b"))
    run_backup(repo, str(image), VolumeIdentity("b"), extents=[(0, 4 * MiB)])  # the same data, new packs
    packs_before = set(store.list("packs/"))
    if forget_first:  # forget never expires a volume's newest backup: delete them as an operator would
        for ref in repo.list_backups("a"):
            store.delete(ref.key)
    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0)
    kept = set(store.list("packs/"))
    assert report.dead_bytes == 0
    assert (kept < packs_before) == forget_first
    for volume in ("b",) if forget_first else ("a", "b"):
        assert _restore(Repository.open(store), volume, tmp_path) == sha256_file(image)
