"""What a restore needs from a manifest: storage class, volume mode and tags recorded by ``backup``,
shown by ``ls``, bad ``--tag`` refused; manifests without them (or with newer optional fields) decode."""

from __future__ import annotations

import json

import pytest

from movers.errors import IntegrityError, UsageError
from movers.repo.manifest import Manifest, parse_tags
from tests.test_cli import assert_one_line_error, run
from tests.volumes import make_image

MiB = 1 << 20


@pytest.fixture
def repo(tmp_path):
    url = f"file://{tmp_path}/repo"
    run("init", "--repo", url, check_rc=0)
    return url


def test_backup_records_class_mode_and_tags_and_ls_shows_them(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=2)
    out = run("backup", "--repo", repo, "--volume", "ns/data", "--device", image, "--scan", "--namespace", "ns",
              "--pvc", "data", "--storage-class", "fast", "--volume-mode", "Filesystem", "--tag",
              "cbt-mover.io/run=backup-1", "--tag", "cbt-mover.io/app=shop", "--tag", "note=a=b", "--json",
              check_rc=0)  # fmt: skip
    tags = {"cbt-mover.io/run": "backup-1", "cbt-mover.io/app": "shop", "note": "a=b"}
    assert json.loads(out.stdout)["tags"] == tags
    run("backup", "--repo", repo, "--volume", "ns/logs", "--device", image, "--scan", check_rc=0)

    rows = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"]
    by_volume = {r["volume"]: r for r in rows}
    data, logs = by_volume["ns/data"], by_volume["ns/logs"]
    assert (data["storage_class"], data["volume_mode"], data["pvc"], data["tags"]) == ("fast", "Filesystem", "data",
                                                                                          tags)  # fmt: skip
    assert (logs["storage_class"], logs["volume_mode"], logs["tags"]) == (None, None, {})
    text = run("ls", "--repo", repo, check_rc=0).stdout.splitlines()
    shown = "cbt-mover.io/app=shop,cbt-mover.io/run=backup-1,note=a=b"
    assert any(line.startswith("ns/data\t") and line.endswith(shown) for line in text), text


@pytest.mark.parametrize("tag, fragment", [("novalue", "KEY=VALUE"), ("=x", "KEY=VALUE"), ("a b=c", "KEY=VALUE"),
                                           ("-a=1", "KEY=VALUE"), ("a=" + "x" * 1025, "at most 1024")])  # fmt: skip
def test_bad_tag_is_a_usage_error_before_anything_is_read(repo, tmp_path, tag, fragment):
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", tmp_path / "missing.img", "--scan",
               f"--tag={tag}")  # fmt: skip
    assert_one_line_error(proc, 2, fragment)


def test_bad_volume_mode_and_repeated_tag(repo, tmp_path):
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", tmp_path / "x", "--scan", "--volume-mode", "Raw")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    with pytest.raises(UsageError, match="given twice"):
        parse_tags(["a=1", "a=2"])
    assert parse_tags(["k8s.io/x_y-z=", "a=1"]) == {"k8s.io/x_y-z": "", "a": "1"}


def _doc() -> dict:
    return {"backup_id": "20260101T000000000000Z-abcdef", "volume": {"id": "ns/data", "namespace": "ns",
            "pvc": "data"}, "capacity_bytes": 4096, "snapshot": {"snapshot_handle": "h"}, "parent": None,
            "mode": "full", "created": "2026-01-01T00:00:00+00:00",
            "map": {"page_size": 1 << 26, "dir_fanout": 256, "dirs": [None], "entries": 0}, "stats": {},
            "format_version": 1, "mandatory_features": ["paged-map-v1", "sha256-chunks", "zstd"]}  # fmt: skip


def test_old_manifest_decodes_with_defaults_and_unknown_optional_fields_are_ignored():
    old = Manifest.decode(json.dumps(_doc()).encode())
    assert (old.volume.storage_class, old.volume.volume_mode, old.tags) == (None, None, {})

    newer = _doc()
    newer["volume"].update(storage_class="fast", volume_mode="Block", zone="eu-1")
    newer["snapshot"]["future"] = 1
    newer["tags"] = {"cbt-mover.io/run": "r"}
    newer["something_new"] = True
    m = Manifest.decode(json.dumps(newer).encode())
    assert (m.volume.storage_class, m.volume.volume_mode, m.tags) == ("fast", "Block", {"cbt-mover.io/run": "r"})
    assert Manifest.decode(m.encode()) == m

    for bad in ({"tags": {"a": 1}}, {"tags": ["a"]}, {"volume": {"id": "v", "volume_mode": "Raw"}},
                {"volume": {"pvc": "no id"}}):  # fmt: skip
        with pytest.raises(IntegrityError):
            Manifest.decode(json.dumps({**_doc(), **bad}).encode())


def test_restore_verify_device_reads_back_and_reports_progress_over_both_phases(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=6)
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    target = tmp_path / "restored.img"
    out = run("restore", "--repo", repo, "--volume", "v", "--device", target, "--verify-device", "--json", check_rc=0)
    readback = json.loads(out.stdout)["readback"]
    assert readback["checked_bytes"] + readback["zero_bytes"] == 4 * MiB
    progress = [line for line in out.stderr.splitlines() if line.startswith("progress ")]
    assert progress[-1] == f"progress done={8 * MiB} total={8 * MiB}", progress
    assert target.read_bytes() == image.read_bytes()
