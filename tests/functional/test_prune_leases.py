"""Backup leases (movers.repo.leases): a committed backup never loses data to a prune that ran while it did,
whatever grace the user typed (issue 12: `prune --grace 0` during backups destroyed committed backups)."""

from __future__ import annotations

import json
import threading

import pytest

from localcluster.kubelet.testing import wait_until
from movers.errors import TransientStoreError
from movers.pipeline.backup import run_backup
from movers.repo import pack
from movers.repo.leases import LEASE_PREFIX, Lease, live_leases
from movers.repo.manifest import VolumeIdentity
from movers.repo.prune import STATE_PREFIX, prune
from movers.repo.repository import Repository
from movers.repo.store import LocalStore, MemoryStore
from movers.testing.faulty import FaultyStore
from tests.functional.test_prune import check_all_restore, forgotten_content, keys
from tests.volumes import sha256_file


def dead_content(store, tmp_path):
    """Forgotten packs that no prune state lists yet (``test_prune.forgotten_content``)."""
    return forgotten_content(store, tmp_path, seeds=(21, 22))


def test_prune_without_grace_waits_for_a_running_backup_and_keeps_what_it_committed(tmp_path):
    """The backup deduplicates against the forgotten packs (no state listed them when it started); a prune with
    grace 0 starts meanwhile. Without the lease it deleted those packs and the backup committed references to
    them."""
    store = MemoryStore()
    content_a, expected = dead_content(store, tmp_path)
    started, go = threading.Event(), threading.Event()

    def hold(done, total, **_):
        started.set()
        assert go.wait(60), "the test never let the backup go on"

    done = []
    backup = threading.Thread(
        target=lambda: done.append(
            run_backup(Repository.open(store), str(content_a), VolumeIdentity("vol-b"), force_full=True, progress=hold)
        )
    )
    backup.start()
    try:
        assert started.wait(60)
        reports = []
        pruning = threading.Thread(target=lambda: reports.append(prune(Repository.open(store), grace_s=0)))
        pruning.start()
        wait_until(lambda: list(store.list(STATE_PREFIX)), 30, "the prune's state written")
    finally:
        go.set()
        backup.join(60)
    pruning.join(60)
    [report], [m] = reports, done
    assert report.backups_waited_for == 1 and report.packs_deferred > 0
    assert m.stats["dedup_bytes"] > 0, "the backup used the forgotten packs"
    expected[m.backup_id] = ("vol-b", sha256_file(content_a))
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 2
    assert list(store.list(LEASE_PREFIX)) == [], "the backup's lease is gone with it"


def test_prune_that_cannot_wait_long_enough_deletes_nothing(tmp_path):
    store = MemoryStore()
    _, expected = dead_content(store, tmp_path)
    dead = keys(store, pack.PACK_PREFIX)
    with Lease(store, "a backup that runs long") as lease:
        lease.saw(None)
        held = prune(Repository.open(store), grace_s=0, backup_wait_s=0.1)
        assert (held.backups_waited_for, held.packs_deleted, held.bytes_deleted) == (1, 0, 0)
        assert held.packs_deferred > 0 and keys(store, pack.PACK_PREFIX) == dead
    freed = prune(Repository.open(store), grace_s=0)
    assert freed.backups_waited_for == 0 and freed.packs_deleted > 0
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


def test_a_backup_whose_lease_went_stale_does_not_commit():
    """A prune stops waiting for a lease not refreshed within its TTL: the holder must then not commit."""
    store = FaultyStore(MemoryStore())
    with Lease(store, "backup", refresh_s=0.05, ttl_s=0.3) as lease:
        lease.check()
        assert set(live_leases(store, ttl_s=0.3)) == {lease.id}
        store.fail("put", TransientStoreError, times=10**6, key_prefix=LEASE_PREFIX)
        wait_until(lambda: not live_leases(store, ttl_s=0.3), 10, "the lease to go stale")
        with pytest.raises(TransientStoreError, match="does not commit"):
            lease.check()


def test_cli_prune_waits_for_a_running_backup_as_long_as_told(tmp_path):
    """`cbt-mover prune --grace 0` beside a backup that holds its lease: with a short --wait-backups it deletes
    nothing and says so; a bad value is a one-line usage error."""
    from tests.functional.test_cli import assert_one_line_error, run

    url = f"file://{tmp_path / 'repo'}"
    content_a, _ = dead_content(LocalStore(tmp_path / "repo"), tmp_path)
    with Lease(LocalStore(tmp_path / "repo"), "backup") as lease:
        lease.saw(None)
        out = run("prune", "--repo", url, "--grace", "0", "--wait-backups", "1s", "--json", check_rc=0)
    report = json.loads(out.stdout)
    assert (report["backups_waited_for"], report["packs_deleted"]) == (1, 0) and report["packs_deferred"] > 0
    done = json.loads(run("prune", "--repo", url, "--grace", "0", "--json", check_rc=0).stdout)
    assert done["backups_waited_for"] == 0 and done["packs_deleted"] > 0
    assert_one_line_error(run("prune", "--repo", url, "--wait-backups", "soon"), 2, "--wait-backups")


def test_prune_deletes_lease_objects_their_holders_left_behind(tmp_path):
    """A mover whose credentials cannot delete leaves every sequence of its lease (issue 12: they accumulated
    forever). Prune deletes superseded sequences at once and a lease's last object once it has not been
    refreshed for twice the TTL; a live lease stays."""
    from movers.errors import AccessDeniedError
    from movers.repo.leases import EXPIRED_AFTER_S
    from tests.functional.test_prune import CONFIG, T0

    inner = MemoryStore()
    store = FaultyStore(inner)
    Repository.init(inner, CONFIG)
    store.fail("delete", AccessDeniedError, times=10**6, key_prefix=LEASE_PREFIX)
    with Lease(store, "backup with put-only credentials", refresh_s=0.01):
        wait_until(lambda: len(keys(inner, LEASE_PREFIX)) >= 5, 10, "refreshes that could not delete the last key")
    left = sorted(keys(inner, LEASE_PREFIX))
    assert len(left) >= 5, "the lease ended and could not delete a thing"
    with Lease(inner, "a backup running now") as running:
        dry = prune(Repository.open(inner), grace_s=0, now=T0, dry_run=True)
        first = prune(Repository.open(inner), grace_s=0, now=T0)
        assert dry.leases_deleted == first.leases_deleted == len(left) - 1
        assert keys(inner, LEASE_PREFIX) == {left[-1], running.key}, "the newest of each lease stays"
        doc = json.loads(inner.get(left[-1]))
        doc["refreshed"] -= EXPIRED_AFTER_S - 60  # not yet twice the TTL
        inner.put(left[-1], json.dumps(doc).encode())
        assert prune(Repository.open(inner), grace_s=0, now=T0).leases_deleted == 0
        doc["refreshed"] -= 120
        inner.put(left[-1], json.dumps(doc).encode())
        assert prune(Repository.open(inner), grace_s=0, now=T0).leases_deleted == 1
        assert keys(inner, LEASE_PREFIX) == {running.key}
