"""Damaged repositories seen through the CLI: ``ls`` lists every readable backup and names the
unreadable ones; ``verify --json`` damage entries carry the fields their messages name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import run
from tests.volumes import make_image

MiB = 1 << 20


@pytest.fixture
def repo(tmp_path):
    url = f"file://{tmp_path}/repo"
    run("init", "--repo", url, check_rc=0)
    return url


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 4 * MiB, seed=6, data_fraction=1.0)
    return path


def backup(repo, volume, image) -> str:
    proc = run("backup", "--repo", repo, "--volume", volume, "--device", image, "--scan", "--json", check_rc=0)
    return json.loads(proc.stdout)["backup_id"]


def manifest_path(repo: str, volume: str, backup_id: str) -> Path:
    return Path(repo[len("file://") :]) / "backups" / volume / backup_id


def split_stderr(proc) -> tuple[list[str], str]:
    """The ``unreadable: ...`` lines of stderr and its last line (progress lines left out)."""
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("progress ")]
    assert "Traceback" not in proc.stderr and lines, proc.stderr
    return lines[:-1], lines[-1]


def test_ls_lists_every_readable_backup_and_names_the_damaged_one(repo, image):
    ids = {v: [backup(repo, v, image), backup(repo, v, image)] for v in ("v", "w")}
    damaged = manifest_path(repo, "v", ids["v"][0])
    damaged.write_bytes(b"{not json")
    key = f"backups/v/{ids['v'][0]}"

    proc = run("ls", "--repo", repo)
    assert proc.returncode == 4, proc.stderr
    listed = [line.split("\t")[:2] for line in proc.stdout.splitlines()]
    assert listed == [["v", ids["v"][1]], ["w", ids["w"][0]], ["w", ids["w"][1]]]
    problems, last = split_stderr(proc)
    assert problems == [f"unreadable: {key} is not valid JSON"]
    assert last.startswith("cbt-mover: error: ") and "1 of 4 backup manifests cannot be read (damaged" in last

    proc = run("ls", "--repo", repo, "--json")
    assert proc.returncode == 4
    doc = json.loads(proc.stdout)
    assert [b["backup_id"] for b in doc["backups"]] == [ids["v"][1], *ids["w"]]
    assert doc["unreadable"] == [
        {"key": key, "volume": "v", "backup_id": ids["v"][0], "error": f"{key} is not valid JSON"}
    ]
    assert split_stderr(proc)[1].startswith("cbt-mover: error: ")

    proc = run("ls", "--repo", repo, "--volume", "w", "--json")  # the damage is not in what was asked for
    assert proc.returncode == 0 and json.loads(proc.stdout)["unreadable"] == []


def test_ls_of_a_manifest_from_a_newer_version_exits_7_and_lists_the_rest(repo, image):
    old, new = backup(repo, "v", image), backup(repo, "v", image)
    path = manifest_path(repo, "v", new)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "format_version": 99}))
    proc = run("ls", "--repo", repo)
    assert proc.returncode == 7, proc.stderr
    assert [line.split("\t")[1] for line in proc.stdout.splitlines()] == [old]
    problems, last = split_stderr(proc)
    assert len(problems) == 1 and f"backups/v/{new}" in problems[0] and "format version 99" in problems[0]
    # a damaged one as well: damage wins (exit 4)
    manifest_path(repo, "v", old).write_bytes(b"[]")
    assert run("ls", "--repo", repo).returncode == 4
