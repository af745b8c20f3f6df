"""Faults of the store or the timing, tried as a user would: a store that stops answering mid-command (the retry
budget bounds the whole command, not each request) and the temporary files of killed writers (prune reclaims them,
never one a running backup may still rename)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from tests.s3proxy import Request, S3Proxy
from tests.test_cli import CLI, run
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
