"""The store layer through the CLI, as users run it: the requests a backup and a restore report, and a
repository in an object-locked bucket (moto over HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from movers.repo.store.counting import KINDS
from tests.s3proxy import S3Proxy
from tests.volumes import make_image, sha256_file

MiB = 1 << 20


def run(*args, env=None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CBT_MOVER_"))}
    return subprocess.run(
        [sys.executable, "-m", "movers", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=120,
    )


def cli(*args, env=None) -> dict:
    """Run ``cbt-mover ARGS --json``; assert it exits 0 and return its JSON result."""
    proc = run(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cbt-mover: error: "), proc.stderr
    return lines[0]


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 8 * MiB, seed=3)
    return path


@pytest.mark.s3
def test_backup_and_restore_report_the_requests_they_sent(s3_bucket, moto_server, image, tmp_path):
    endpoint, bucket = s3_bucket
    repo = f"s3://{bucket}/team/repo"
    with S3Proxy(endpoint) as proxy:
        env = {**moto_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
        cli("init", "--repo", repo, env=env)
        reported = {}
        for name, command in {
            "backup": ["backup", "--volume", "ns/pvc", "--device", image, "--scan"],
            "restore": ["restore", "--volume", "ns/pvc", "--device", tmp_path / "out.img"],
        }.items():
            before = len(proxy.requests)
            reported[name] = cli(*command, "--repo", repo, env=env)["requests"]
            assert set(reported[name]) == set(KINDS)
            assert sum(reported[name].values()) == len(proxy.requests) - before, name  # every request, no more
    assert sha256_file(tmp_path / "out.img") == sha256_file(image)
    assert reported["backup"]["put"] >= 3  # a pack, a map page, the manifest at least
    assert reported["restore"]["range_get"] + reported["restore"]["get"] >= 2


def test_a_local_repository_reports_requests_too(image, tmp_path):
    repo = f"file://{tmp_path}/repo"
    cli("init", "--repo", repo)
    doc = cli("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan")
    assert set(doc["requests"]) == set(KINDS) and doc["requests"]["put"] >= doc["objects_written"] >= 1


@pytest.mark.s3
def test_a_blip_of_seconds_is_ridden_out(s3_bucket, moto_server):
    """The endpoint answers 503 for 3 s (the issue's blip, which failed a backup before): the default
    budget rides it out, --retry-for 0 fails at once with the storage-unavailable exit code."""
    endpoint, bucket = s3_bucket
    repo = f"s3://{bucket}/r"
    cli("init", "--repo", repo, env=moto_server.env)
    blip: list[float] = []

    def unavailable_for_3s(request):
        blip.append(blip[0] if blip else time.monotonic())
        return (503, "ServiceUnavailable") if time.monotonic() - blip[0] < 3 else None

    with S3Proxy(endpoint, unavailable_for_3s) as proxy:
        env = {**moto_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
        proc = run("ls", "--repo", repo, "--retry-for", "0", env=env)
        assert proc.returncode == 5 and "ServiceUnavailable" in error_line(proc)
        proc = run("ls", "--repo", repo, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "ServiceUnavailable" in proc.stderr and "; retry 1 in" in proc.stderr
        assert json.loads(proc.stdout) == {"backups": [], "runs": []}
        assert time.monotonic() - blip[0] >= 3


@pytest.mark.parametrize(
    ("option", "env", "shown"), [(["--retry-for", "2h"], {}, "'2h'"), ([], {"CBT_MOVER_RETRY_FOR": "soon"}, "'soon'")]
)
def test_a_bad_retry_budget_is_bad_input(tmp_path, option, env, shown):
    proc = run("ls", "--repo", f"file://{tmp_path}/repo", *option, env=env)
    assert proc.returncode == 2
    line = error_line(proc)
    assert "--retry-for (or CBT_MOVER_RETRY_FOR)" in line and shown in line


def test_prune_sweeps_the_temporary_files_of_killed_writers(image, tmp_path):
    root = tmp_path / "repo"
    cli("init", "--repo", f"file://{root}")
    cli("backup", "--repo", f"file://{root}", "--volume", "v", "--device", image, "--scan")
    pack_dir = next((root / "packs").iterdir())
    old, fresh = pack_dir / ".tmp-killed", pack_dir / ".tmp-writing"
    old.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    cli("prune", "--repo", f"file://{root}", "--dry-run")
    assert old.exists()  # a dry run deletes nothing
    cli("prune", "--repo", f"file://{root}")
    assert not old.exists() and fresh.exists()
