"""Bad input is one line with a documented exit code, and changes nothing: a restore onto a read-only block device,
extents a backup refuses (from a file or stdin) leave the repository's objects exactly as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import loop_device, make_image

MiB = 1 << 20


def repo_objects(url: str) -> dict[str, bytes]:
    root = Path(url[len("file://") :])
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def backed_up(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 2 * MiB, seed=51)
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", "--json", check_rc=0)
    return repo, image, json.loads(proc.stdout)["backup_id"]


@pytest.fixture
def read_only_loop_device(tmp_path):
    backing = tmp_path / "ro-backing.img"
    backing.write_bytes(b"\x5a" * (4 * MiB))
    with loop_device(backing, read_only=True) as dev:
        yield dev, backing


def test_restore_onto_a_read_only_block_device_is_one_line_and_writes_nothing(backed_up, read_only_loop_device):
    repo, _image, backup_id = backed_up
    dev, backing = read_only_loop_device
    before = repo_objects(repo)
    for flags in ([], ["--assume-zeroed"]):
        proc = run("restore", "--repo", repo, "--volume", "v", "--backup", backup_id, "--device", dev, *flags)
        assert_one_line_error(proc, 2, f"restore target {dev} is a read-only block device")
    assert backing.read_bytes() == b"\x5a" * (4 * MiB)
    assert repo_objects(repo) == before


def test_refused_extents_leave_the_repository_unchanged(backed_up, tmp_path):
    repo, image, backup_id = backed_up
    before = repo_objects(repo)
    lines = {
        "unsorted": ('{"offset": 8192, "length": 4096}\n{"offset": 0, "length": 4096}\n', "sorted"),
        "past the end": (f'{{"offset": {2 * MiB - 4096}, "length": 8192}}\n', "past the device end"),
        "not JSON": ('{"offset": 0, "length": 4096}\nnope\n', "line 2: not valid JSON"),
        "not UTF-8": ("\udcff\n", "not UTF-8"),
    }
    base = ["backup", "--repo", repo, "--volume", "v", "--device", image, "--parent", backup_id]
    for name, (text, says) in lines.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        assert_one_line_error(run(*base, "--extents", path), 2, says)
        if name == "not UTF-8":  # the test's stdin is text
            continue
        assert_one_line_error(run(*base, "--extents", "-", stdin=text), 2, says)
        # a bad line after many good ones: still before anything is written
        many = "".join(json.dumps({"offset": i * 8192, "length": 4096}) + "\n" for i in range(200))
        assert_one_line_error(run(*base, "--extents", "-", stdin=many + text.splitlines()[-1] + "\n"), 2)
    assert repo_objects(repo) == before
