"""The prune lock (movers.repo.prunelock): two prunes of one repository never overlap, whether started by the
CLI or the maintenance flow (issue 12: only a Prefect concurrency limit serialised them); a crashed prune's
lock is taken over after its TTL."""

from __future__ import annotations

import json
import threading
import time

import pytest

from localcluster.kubelet.testing import wait_until
from movers.errors import EXIT_UNAVAILABLE, PruneLockedError, TransientStoreError
from movers.repo import pack
from movers.repo.leases import TTL_S, Lease
from movers.repo.prune import prune
from movers.repo.prunelock import LOCK_PREFIX, PruneLock
from movers.repo.repository import Repository
from movers.repo.store import LocalStore, MemoryStore
from movers.testing.faulty import FaultyStore
from tests.functional.test_prune import check_all_restore, forgotten_content, keys
from tests.volumes import RecordingStore


def held_in_thread(store, started, go, reports, errors):
    """A thread that prunes ``store`` with grace 0 and stops inside its mark (lock held) until ``go``."""

    def hold(done, total):
        started.set()
        assert go.wait(60), "the test never let the prune go on"

    def run():
        try:
            reports.append(prune(Repository.open(store), grace_s=0, progress=hold))
        except BaseException as err:  # noqa: BLE001  (the test asserts on it)
            errors.append(err)
            started.set()

    return threading.Thread(target=run)


def test_a_prune_while_another_holds_the_lock_fails_with_one_line_and_exit_5(tmp_path):
    """The second prune is the CLI, the first the engine (as the flow runs it): the CLI deletes nothing."""
    from tests.functional.test_cli import assert_one_line_error, run

    store = LocalStore(tmp_path / "repo")
    _, expected = forgotten_content(store, tmp_path)
    packs = keys(store, pack.PACK_PREFIX)
    started, go, reports, errors = threading.Event(), threading.Event(), [], []
    first = held_in_thread(store, started, go, reports, errors)
    first.start()
    try:
        assert started.wait(60) and not errors
        url = f"file://{tmp_path / 'repo'}"
        second = run("prune", "--repo", url, "--grace", "0", "--json")
        assert_one_line_error(second, EXIT_UNAVAILABLE, "another prune of", "holds the prune lock", "pid")
        assert keys(store, pack.PACK_PREFIX) == packs and len(keys(store, LOCK_PREFIX)) == 1
    finally:
        go.set()
        first.join(60)
    [report] = reports
    assert report.packs_deleted > 0 and keys(store, LOCK_PREFIX) == set(), "the winner ran and let go of its lock"
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


class LockRace(MemoryStore):
    """Holds every thread's first listing of ``locks/`` until ``parties`` threads got there: each has written
    its candidate lock before any of them looks. Records who wrote which lock key."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(parties)
        self.waited: set[str] = set()
        self.writers: dict[str, str] = {}

    def put(self, key, data):
        if key.startswith(LOCK_PREFIX):
            self.writers.setdefault(key[len(LOCK_PREFIX) :].rsplit("-", 1)[0], threading.current_thread().name)
        super().put(key, data)

    def list(self, prefix=""):
        me = threading.current_thread().name
        if prefix.startswith(LOCK_PREFIX) and me.startswith("pruner") and me not in self.waited:
            self.waited.add(me)
            self.barrier.wait(30)
        return super().list(prefix)


def test_two_prunes_that_write_their_locks_at_once_the_older_one_runs(tmp_path):
    store = LockRace(2)
    _, expected = forgotten_content(store, tmp_path)
    outcome: dict[str, object] = {}

    def run():
        try:
            outcome[threading.current_thread().name] = prune(Repository.open(store), grace_s=0)
        except PruneLockedError as err:
            outcome[threading.current_thread().name] = err

    threads = [threading.Thread(target=run, name=f"pruner-{n}") for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(store.writers) == 2 and len(outcome) == 2
    older, younger = (store.writers[lock_id] for lock_id in sorted(store.writers))
    assert older != younger
    assert not isinstance(outcome[older], Exception) and outcome[older].packs_deleted > 0
    assert isinstance(outcome[younger], PruneLockedError) and "holds the prune lock" in str(outcome[younger])
    assert keys(store, LOCK_PREFIX) == set()
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


class AfterFirstLockListing(MemoryStore):
    """Runs ``hook()`` once, right after the first listing of ``locks/`` was taken (the caller acts on it)."""

    hook = None

    def list(self, prefix=""):
        listed = list(super().list(prefix))
        if prefix.startswith(LOCK_PREFIX) and self.hook:
            hook, self.hook = self.hook, None
            hook()
        return iter(listed)


@pytest.mark.parametrize("younger_decides", ["holds", "yields"])
def test_an_older_candidate_waits_for_a_younger_one_that_listed_first(younger_decides):
    """The case a clock behind the other's makes: the younger lock listed before the older one was written, so
    it saw nothing and takes the lock; the older one sees it undecided and must not take the lock too."""
    store = AfterFirstLockListing()
    younger = Lease(store, "the other prune", prefix=LOCK_PREFIX, lease_id="99991231T235959999999Z-ffff")
    younger.__enter__()
    try:
        store.hook = (lambda: younger.update(held=True)) if younger_decides == "holds" else younger.__exit__
        if younger_decides == "holds":
            with pytest.raises(PruneLockedError, match="the other prune"):
                PruneLock(store, poll_s=0.01).__enter__()
        else:
            with PruneLock(store, poll_s=0.01) as lock:
                assert lock.lease is not None and keys(store, LOCK_PREFIX) == {lock.lease.key}
    finally:
        younger.__exit__()
    assert keys(store, LOCK_PREFIX) == set()


def test_a_crashed_prunes_lock_is_taken_over_after_its_ttl(tmp_path):
    store = MemoryStore()
    _, expected = forgotten_content(store, tmp_path)
    doc = {"format": "cbt-mover-lease", "what": "prune", "host": "gone", "pid": 1, "held": True}
    crashed = f"{LOCK_PREFIX}20200101T000000000000Z-0000-00000001"
    store.put(crashed, json.dumps({**doc, "refreshed": time.time() - TTL_S + 30}).encode())
    with pytest.raises(PruneLockedError, match="on gone pid 1, refreshed 5[0-9]{2} s ago"):
        prune(Repository.open(store), grace_s=0)
    store.put(crashed, json.dumps({**doc, "refreshed": time.time() - TTL_S - 1}).encode())
    report = prune(Repository.open(store), grace_s=0)
    assert report.packs_deleted > 0
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 1


def test_waiting_for_the_lock_prunes_once_the_other_prune_ends(tmp_path):
    """``lock_wait_s`` (the flow's ``lock_wait``): wait for the other prune rather than fail."""
    store = FaultyStore(MemoryStore())
    forgotten_content(store, tmp_path)
    started, go, reports, errors = threading.Event(), threading.Event(), [], []
    first = held_in_thread(store, started, go, reports, errors)
    first.start()
    try:
        assert started.wait(60)
        waiting = []
        second = threading.Thread(
            target=lambda: waiting.append(prune(Repository.open(store), grace_s=0, lock_wait_s=60))
        )
        second.start()
        lock_puts = lambda: [k for k in store.puts if k.startswith(LOCK_PREFIX)]  # noqa: E731
        wait_until(
            lambda: len(lock_puts()) >= 3 and len(keys(store, LOCK_PREFIX)) == 1,
            10,
            "the second prune's candidate lock written and withdrawn (the first holds the lock)",
        )
        assert second.is_alive(), "it waits (without a lock object)"
    finally:
        go.set()
        first.join(60)
    second.join(60)
    [done], [again] = reports, waiting
    assert done.packs_deleted > 0 and again.packs_deleted == 0 and not errors


def test_a_prune_that_cannot_refresh_its_lock_stops_before_deleting():
    store = FaultyStore(MemoryStore())
    with PruneLock(store, ttl_s=0.3, refresh_s=0.05) as lock:
        lock.check()
        store.fail("put", TransientStoreError, times=10**6, key_prefix=LOCK_PREFIX)
        wait_until(lambda: time.monotonic() - lock.lease.refreshed > 0.3, 10, "the lock to go stale")
        with pytest.raises(TransientStoreError, match="a prune stops deleting"):
            lock.check()


def test_no_object_is_ever_written_twice_by_backups_and_prunes(tmp_path):
    """What object-locked buckets need, with the prune lock and leases in play."""
    recording = RecordingStore(MemoryStore())
    forgotten_content(recording, tmp_path)
    prune(Repository.open(recording), grace_s=0)
    prune(Repository.open(recording), grace_s=0)
    assert any(k.startswith(LOCK_PREFIX) for k in recording.written)
    assert len(recording.written) == len(set(recording.written))
