"""Creating a repository whatever the store or the timing: a second ``init`` is refused on every store (an S3
without conditional writes included), racing inits leave one repository that its creator's key opens, and an
interrupted ``init`` is completed by the same command, never at the cost of a repository in use."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading

import pytest

from movers.errors import IntegrityError, RepositoryKeyError, UsageError
from movers.repo import keys
from movers.repo.config import CONFIG_KEY, RepoConfig
from movers.repo.keys import Credentials
from movers.repo.repository import Repository
from movers.repo.store import LocalStore, MemoryStore, Store
from movers.repo.store.s3 import S3Store
from movers.testing.faulty import FaultyStore, SimulatedCrash
from tests.functional.test_cli import CLI, assert_one_line_error, run
from tests.functional.test_encryption import KEY, VOLUME, backup
from tests.volumes import make_image

FAKE = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}


def passphrase(n: int | str) -> Credentials:
    return Credentials.gather(environ={"CBT_MOVER_PASSWORD": f"the passphrase of init {n}"})


def init(store: Store, n: int | str) -> Repository:
    return Repository.init(store, RepoConfig.new(encrypted=True), passphrase(n), kdf_cost=10)


@pytest.fixture(
    params=[
        "memory",
        "local",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("s3-unconditional", marks=pytest.mark.s3),
    ]
)
def clients(request, tmp_path) -> list[Store]:
    """Five clients of one empty location (the racers' and the checker's own store objects)."""
    if request.param == "memory":
        return [MemoryStore()] * 5
    if request.param == "local":
        return [LocalStore(tmp_path / "repo") for _ in range(5)]
    endpoint, bucket = request.getfixturevalue("s3_bucket")
    if request.param == "s3-unconditional":
        endpoint = request.getfixturevalue("unconditional_s3")[0]
    return [S3Store(bucket, "repo", endpoint_url=endpoint, **FAKE) for _ in range(5)]


def test_a_second_init_is_refused_on_every_store(clients):
    new_store = itertools.cycle(clients).__next__
    first = init(new_store(), 1)
    config = new_store().get(CONFIG_KEY)
    with pytest.raises(UsageError, match="already a cbt-mover repository"):
        init(new_store(), 2)
    with pytest.raises(UsageError, match="already a cbt-mover repository"):
        Repository.init(new_store(), RepoConfig())
    assert new_store().get(CONFIG_KEY) == config
    assert Repository.open(new_store(), passphrase(1)).config.repo_id == first.config.repo_id
    with pytest.raises(RepositoryKeyError):
        Repository.open(new_store(), passphrase(2))
    assert [k for k in new_store().list() if k != CONFIG_KEY] == [keys.SLOT_PREFIX + first.opened_by]


def test_racing_inits_leave_one_repository_that_its_creators_key_opens(clients):
    checker = clients[4]
    for trial in range(10):
        start, won, lost = threading.Barrier(4), [], []

        def initialise(n: str, store: Store, start=start, won=won, lost=lost) -> None:
            start.wait()
            try:
                won.append((n, init(store, n)))
            except UsageError as err:
                lost.append(str(err))

        threads = [threading.Thread(target=initialise, args=(f"{trial}.{n}", clients[n])) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(lost) == 3, (won, lost)
        assert all("already a cbt-mover repository" in message for message in lost)
        winner, repo = won[0]
        opened = Repository.open(checker, passphrase(winner))
        assert opened.config == repo.config and opened.keys.master == repo.keys.master
        for n in range(4):
            if f"{trial}.{n}" != winner:
                with pytest.raises(RepositoryKeyError):
                    Repository.open(checker, passphrase(f"{trial}.{n}"))
        assert sorted(checker.list()) == sorted([CONFIG_KEY, keys.SLOT_PREFIX + repo.opened_by])
        for key in list(checker.list()):
            checker.delete(key)


@pytest.mark.s3
def test_cli_second_init_on_an_s3_without_conditional_writes_is_refused(unconditional_s3, tmp_path):
    """The fault as found: on s3rver a second init replaced the config, and the real key no longer opened it."""
    endpoint, bucket = unconditional_s3
    env = {**KEY, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    env["AWS_ENDPOINT_URL"] = endpoint
    url = f"s3://{bucket}/team/repo"
    run("init", "--repo", url, env=env, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 1 << 20, seed=5)
    made = backup(url, image, env, "--scan")
    other = {**env, "CBT_MOVER_PASSWORD": "another passphrase altogether"}
    assert_one_line_error(run("init", "--repo", url, env=other), 2, "already a cbt-mover repository")
    plain = {k: v for k, v in env.items() if k != "CBT_MOVER_PASSWORD"}
    assert_one_line_error(run("init", "--repo", url, "--insecure-no-encryption", env=plain), 2, "already a cbt-mover")
    listed = run("ls", "--repo", url, "--json", env=env, check_rc=0).stdout
    assert made["backup_id"] in listed


@pytest.mark.parametrize("where", ["file", pytest.param("s3-unconditional", marks=pytest.mark.s3)])
def test_cli_racing_init_processes(request, tmp_path, where):
    """Inits in separate processes: one wins, each loser says so in one line (exit code 2)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if where == "file":
        url, env = f"file://{tmp_path}/repo", {}
        store = LocalStore(tmp_path / "repo")
    else:
        _endpoint, bucket = request.getfixturevalue("s3_bucket")
        endpoint = request.getfixturevalue("unconditional_s3")[0]
        url = f"s3://{bucket}/repo"
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        env["AWS_ENDPOINT_URL"] = endpoint
        store = S3Store(bucket, "repo", endpoint_url=endpoint, **FAKE)
    for trial in range(3):
        procs = [
            subprocess.Popen(
                [*CLI, "init", "--repo", url],
                env={**base, **env, **KEY, "CBT_MOVER_PASSWORD": f"racer {trial}.{n}"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(3)
        ]
        results = [(n, p.wait(timeout=120), p.stderr.read()) for n, p in enumerate(procs)]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        winners = [n for n, rc, _err in results if rc == 0]
        assert len(winners) == 1, results
        for _n, rc, err in results:
            if rc != 0:
                errors = [line for line in err.splitlines() if " WARNING " not in line]  # log lines aside
                assert rc == 2 and len(errors) == 1 and "already a cbt-mover repository" in errors[0], err
        run("ls", "--repo", url, env={**env, **KEY, "CBT_MOVER_PASSWORD": f"racer {trial}.{winners[0]}"}, check_rc=0)
        assert len(list(store.list(keys.SLOT_PREFIX))) == 1
        for key in list(store.list()):
            store.delete(key)


@pytest.mark.parametrize("crash_after", [0, 1])
def test_an_init_killed_between_its_writes_is_redone_by_init(tmp_path, crash_after):
    """Killed before or after its first write: no repository is left that init refuses, and init again makes
    one that its key opens."""
    store = FaultyStore(LocalStore(tmp_path / "repo"))
    store.crash_after_puts(crash_after)
    with pytest.raises(SimulatedCrash):
        init(store, "killed")
    store.recover()
    with pytest.raises(Exception, match="no cbt-mover repository"):
        Repository.open(store, passphrase("killed"))
    repo = init(store, "again")
    assert Repository.open(store, passphrase("again")).keys.master == repo.keys.master


def _stuck(store: Store) -> RepoConfig:
    """What an init killed after its config and before its key slot left (versions that wrote the config first)."""
    config = RepoConfig.new(encrypted=True)
    store.put(CONFIG_KEY, config.encode())
    return config


def test_an_init_interrupted_before_its_key_slot_is_completed(tmp_path):
    store = LocalStore(tmp_path / "repo")
    config = _stuck(store)
    with pytest.raises(IntegrityError, match="has no key slot"):
        Repository.open(store, passphrase(1))
    repo = init(store, 1)
    assert repo.config == config and repo.opened_by == keys.first_slot_id(config.repo_id)
    assert Repository.open(store, passphrase(1)).keys.master == repo.keys.master
    with pytest.raises(UsageError, match="already a cbt-mover repository"):  # complete now: refused
        init(store, 2)


def test_completing_an_interrupted_init_never_touches_a_repository_in_use(tmp_path):
    for extra in ("packs/00/" + "0" * 64, "backups/v/1", "index/1", "maps/00/1"):
        store = LocalStore(tmp_path / extra.replace("/", "_"))
        _stuck(store)
        store.put(extra, b"something")
        with pytest.raises(UsageError, match="already a cbt-mover repository"):
            init(store, 1)
        assert sorted(store.list()) == sorted([CONFIG_KEY, extra])
    store = MemoryStore()
    _stuck(store)
    with pytest.raises(UsageError, match="already a cbt-mover repository"):  # unencrypted: not this init's to finish
        Repository.init(store, RepoConfig())


def test_racing_completions_leave_one_key_slot(tmp_path):
    for trial in range(8):
        store = LocalStore(tmp_path / f"repo{trial}")
        _stuck(store)
        start, won, lost = threading.Barrier(3), [], []

        def complete(n: str, start=start, won=won, lost=lost, store=store) -> None:
            start.wait()
            try:
                won.append((n, init(store, n)))
            except UsageError:
                lost.append(n)

        threads = [threading.Thread(target=complete, args=(f"{trial}.{n}",)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(lost) == 2
        assert len(list(store.list(keys.SLOT_PREFIX))) == 1
        assert Repository.open(store, passphrase(won[0][0])).keys.master == won[0][1].keys.master


def test_cli_init_completes_an_interrupted_init(tmp_path):
    url = f"file://{tmp_path}/repo"
    _stuck(LocalStore(tmp_path / "repo"))
    assert_one_line_error(run("ls", "--repo", url, env=KEY), 4, "has no key slot", "run cbt-mover init on it again")
    proc = run("init", "--repo", url, env=KEY, check_rc=0)
    assert "initialized" in proc.stdout
    image = tmp_path / "vol.img"
    make_image(image, 1 << 20, seed=6)
    made = backup(url, image, KEY, "--scan", volume=VOLUME)
    assert made["backup_id"] in run("ls", "--repo", url, "--json", env=KEY, check_rc=0).stdout
    assert sys.executable
