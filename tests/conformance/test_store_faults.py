"""Faults of the store or the timing, tried as a user would: a store that stops answering mid-command (the retry
budget bounds the whole command, not each request) and the temporary files of killed writers (prune reclaims them,
never one a running backup may still rename)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time

import pytest

from movers.repo.leases import Lease
from movers.repo.store import LocalStore
from tests.functional.test_cli import CLI, run
from tests.s3proxy import Request, S3Proxy
from tests.volumes import make_image

BUDGET_S = 8


@pytest.mark.s3
def test_a_backup_whose_endpoint_hangs_ends_within_its_retry_budget(s3_bucket, moto_server, tmp_path):
    """The endpoint accepts the backup's lease and then never answers again: the backup ends within the budget
    plus a bench-style margin (each lease refresh, end mark and delete waited its own 60 s before)."""
    endpoint, bucket = s3_bucket
    repo = f"s3://{bucket}/r"
    run("init", "--insecure-no-encryption", "--repo", repo, env=moto_server.env, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 1 << 20, seed=7)
    hung, release = threading.Event(), threading.Event()

    def hang_after_the_lease(request: Request):
        if request.method == "PUT" and "/leases/" in request.path:
            hung.set()
        if hung.is_set():
            release.wait(600)  # accept, then never answer (until the test ends)
        return None

    with S3Proxy(endpoint, hang_after_the_lease) as proxy:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env = {**base, **moto_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
        args = ["backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", "--retry-for", f"{BUDGET_S}s"]
        started = time.monotonic()
        try:
            proc = subprocess.run(
                [*CLI, *map(str, args)], env=env, capture_output=True, text=True, timeout=BUDGET_S + 15
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the backup was still running {BUDGET_S + 15} s after it started")
        finally:
            release.set()
        elapsed = time.monotonic() - started
    assert hung.is_set() and proc.returncode == 5, proc.stderr
    assert elapsed < BUDGET_S + 15


def _leftover(folder, age_s: float) -> str:
    """A temporary file as a writer killed mid-write leaves it, last modified ``age_s`` ago."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    os.write(fd, b"part of a pack")
    os.close(fd)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return os.path.basename(path)


def _temporaries(root) -> set[str]:
    return {p.name for p in root.rglob(".tmp-*")}


def test_prune_reclaims_what_killed_writers_left_but_never_a_live_write(tmp_path):
    url, root = f"file://{tmp_path}/repo", tmp_path / "repo"
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 1 << 20, seed=8)
    run("backup", "--repo", url, "--volume", "v", "--device", image, "--scan", check_rc=0)
    killed = _leftover(root / "packs" / "ab", 5 * 60)  # a backup killed five minutes ago
    live = _leftover(root / "packs" / "cd", 5)  # may be a write about to rename its file
    run("prune", "--repo", url, "--grace", "0", check_rc=0)
    assert _temporaries(root) == {live}
    run("prune", "--repo", url, check_rc=0)  # the default grace (a day): an hour at most, as before
    assert _temporaries(root) == {live}

    # while a backup runs, only what is older than its lease's time to live goes: a backup that has not touched
    # its file for that long cannot commit any more
    quiet = _leftover(root / "packs" / "ef", 5 * 60)
    dead = _leftover(root / "packs" / "ef", 20 * 60)
    with Lease(LocalStore(root), "backup of volume w"):
        run("prune", "--repo", url, "--grace", "0", check_rc=0)
    assert _temporaries(root) == {live, quiet}
    assert dead not in _temporaries(root) and killed not in _temporaries(root)
