"""Reads survive a concurrent prune (issue 12): a backup or restore that listed an index object a prune then
compacted away, or an unindexed pack a prune then deleted, goes on with what the repository holds now."""

from __future__ import annotations

from dataclasses import replace

import pytest

from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.repo import pack
from movers.repo.index import INDEX_PREFIX
from movers.repo.manifest import VolumeIdentity
from movers.repo.prune import prune
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from movers.testing.faulty import FaultyStore, SimulatedCrash
from tests.functional.test_prune import CONFIG, CRASHED, DAY, SIZE, T0, build, check_all_restore, keys
from tests.volumes import make_image, sha256_file


class HookStore(MemoryStore):
    """A memory store that runs ``hook()`` once, just before the first ``method`` call on a key under ``prefix``
    (what the caller listed is then still as it was: the hook plays the other process between list and read)."""

    def __init__(self, method: str, prefix: str) -> None:
        super().__init__()
        self.method, self.prefix, self.hook = method, prefix, None
        self.fired = False

    def _maybe_fire(self, method: str, key: str) -> None:
        if self.hook and method == self.method and key.startswith(self.prefix):
            hook, self.hook = self.hook, None
            hook()
            self.fired = True

    def get(self, key: str) -> bytes:
        self._maybe_fire("get", key)
        return super().get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self._maybe_fire("get", key)  # a read too: index objects are read in ranges
        return super().get_range(key, offset, length)

    def size(self, key: str) -> int:
        self._maybe_fire("size", key)
        return super().size(key)


def compact(store, report):
    """A prune that only compacts the index (nothing is unreferenced): it writes one new index object, then
    deletes the old ones."""

    def run():
        report.append(prune(Repository.open(store), grace_s=DAY, now=T0))

    return run


@pytest.mark.parametrize("reader", ["restore", "backup"])
def test_a_read_that_overlaps_an_index_compaction_lists_the_index_again(reader, tmp_path):
    """Before the fix: ObjectNotFound "object index/... not found" (exit 3) from the first index object read.
    Format version 1 (version 2 restores and incrementals read no index: tests/unit/repo/test_format_v2.py)."""
    store = HookStore("get", INDEX_PREFIX)
    repo = Repository.init(store, replace(CONFIG, format_version=1))
    expected = build(repo, tmp_path, volumes=("vol-a", "vol-b"), rounds=1)
    old_index = keys(store, INDEX_PREFIX)
    assert len(old_index) == 2
    reports = []
    store.hook = compact(store, reports)
    repo = Repository.open(store)
    if reader == "restore":
        latest = repo.latest("vol-a")
        out = tmp_path / "restored.img"
        run_restore(repo, latest, str(out))
        assert sha256_file(out) == expected[latest.backup_id][1]
    else:
        image = tmp_path / "vol-a.img"
        m = run_backup(repo, str(image), VolumeIdentity("vol-c"), force_full=True)
        assert m.stats["new_chunk_bytes"] == 0 and m.stats["dedup_bytes"] > 0, "it deduplicated against the index"
        expected[m.backup_id] = ("vol-c", sha256_file(image))
    [report] = reports
    assert store.fired and report.index_objects_written == 1 and report.index_objects_deleted == 2
    assert not old_index & keys(store, INDEX_PREFIX), "the index objects the reader listed first are gone"
    assert check_all_restore(Repository.open(store), expected, tmp_path) == len(expected)


def test_index_objects_that_keep_vanishing_are_a_transient_error(tmp_path):
    """Bounded: a reader that never gets a stable listing fails with exit 5 (retry), not a loop or exit 3."""
    from movers.errors import EXIT_UNAVAILABLE, TransientStoreError

    class Vanishing(MemoryStore):
        """Every index object read is compacted into a new one just before the read."""

        renamed = 0

        def get(self, key):
            self._rename(key)
            return super().get(key)

        def get_range(self, key, offset, length):
            self._rename(key)
            return super().get_range(key, offset, length)

        def _rename(self, key):
            if key.startswith(INDEX_PREFIX):
                data = super().get(key)
                self.delete(key)
                self.renamed += 1
                self.put(f"{INDEX_PREFIX}{self.renamed:064x}", data)

    store = Vanishing()
    build(Repository.init(store, CONFIG), tmp_path, volumes=("vol-a",), rounds=1)
    with pytest.raises(TransientStoreError, match="kept vanishing") as err:
        Repository.open(store).index()
    assert err.value.exit_code == EXIT_UNAVAILABLE and store.renamed == 5


def test_an_unindexed_pack_a_prune_deletes_while_its_trailer_is_read_is_gone_not_damage(tmp_path, caplog):
    """A crashed backup's pack (no index lists it) that a prune deletes after a restore listed packs/: the
    restore drops it and restores, without calling it unreadable."""
    store = HookStore("size", pack.PACK_PREFIX)
    faulty = FaultyStore(store)
    repo = Repository.init(faulty, CONFIG)
    expected = build(repo, tmp_path, volumes=("vol-a",), rounds=1)
    image = tmp_path / "vol-b.img"
    make_image(image, SIZE, seed=43)
    before = keys(store, pack.PACK_PREFIX)
    faulty.crash_after_puts(1, prefix=pack.PACK_PREFIX)
    with pytest.raises(SimulatedCrash):
        run_backup(repo, str(image), VolumeIdentity("vol-b"), force_full=True)
    faulty.recover()
    [orphan] = keys(store, pack.PACK_PREFIX) - before
    reports = []
    store.prefix = orphan
    store.hook = lambda: reports.append(prune(Repository.open(store), grace_s=0, now=T0, lease_ttl_s=CRASHED))
    repo = Repository.open(store)
    index = repo.index()
    assert store.fired and reports[0].packs_deleted == 1 and orphan not in keys(store)
    assert pack.pack_id_from_key(orphan) not in index.packs and not repo.unindexed_packs
    assert "unreadable" not in caplog.text
    assert check_all_restore(repo, expected, tmp_path) == 1
