"""A mover's read and upload limits (``BackupOptions.read_mib_s`` / ``upload_mib_s``, the policy's
``mover.read_mib_s`` / ``upload_mib_s``, the CLI's ``--read-limit`` / ``--upload-limit``) are enforced by the
engine: a backup of incompressible data takes at least the time its limit allows."""

from __future__ import annotations

import os
import time

import pytest

from movers.pipeline.backup import BackupOptions, run_backup
from movers.pipeline.throttle import MiB
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import LocalStore
from tests.functional.test_cli import assert_one_line_error, run

SIZE = 6 * MiB
RATE = 3.0  # MiB/s: 6 MiB take 2 s


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    path.write_bytes(os.urandom(SIZE))  # incompressible: what is read is what is uploaded
    return str(path)


@pytest.mark.parametrize("limit", ["read_mib_s", "upload_mib_s"])
def test_a_limit_bounds_the_backup_rate(tmp_path, image, limit):
    repo = Repository.init(LocalStore(tmp_path / "repo"))
    started = time.monotonic()
    manifest = run_backup(repo, image, VolumeIdentity("ns/v"), options=BackupOptions(workers=2, **{limit: RATE}))
    took = time.monotonic() - started
    moved = manifest.stats["read_bytes"] if limit == "read_mib_s" else manifest.stats["pack_bytes"]
    assert moved >= SIZE, manifest.stats
    assert took >= moved / MiB / RATE * 0.95, (took, manifest.stats)


def test_the_cli_refuses_a_rate_that_is_not_positive(tmp_path, image):
    url = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    for flag in ("--read-limit", "--upload-limit"):
        proc = run("backup", "--repo", url, "--volume", "v", "--device", image, "--scan", flag, "0")
        assert_one_line_error(proc, 2, f"{flag} must be more than 0 MiB/s")
