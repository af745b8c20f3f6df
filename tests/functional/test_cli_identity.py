"""What a restore needs from a manifest: storage class, volume mode and tags recorded by ``backup``,
shown by ``ls``, bad ``--tag`` refused; manifests without them (or with newer optional fields) decode."""

from __future__ import annotations

import json

import pytest

from movers.errors import IntegrityError, UsageError
from movers.repo.manifest import Manifest, parse_tags
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image

MiB = 1 << 20


def test_backup_records_class_mode_and_tags_and_ls_shows_them(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=2)
    out = run(
        "backup",
        "--repo",
        repo,
        "--volume",
        "ns/data",
        "--device",
        image,
        "--scan",
        "--namespace",
        "ns",
        "--pvc",
        "data",
        "--storage-class",
        "fast",
        "--volume-mode",
        "Filesystem",
        "--tag",
        "cbt-mover.io/run=backup-1",
        "--tag",
        "cbt-mover.io/app=shop",
        "--tag",
        "note=a=b",
        "--json",
        check_rc=0,
    )
    tags = {"cbt-mover.io/run": "backup-1", "cbt-mover.io/app": "shop", "note": "a=b"}
    assert json.loads(out.stdout)["tags"] == tags
    run("backup", "--repo", repo, "--volume", "ns/logs", "--device", image, "--scan", check_rc=0)

    rows = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"]
    by_volume = {r["volume"]: r for r in rows}
    data, logs = by_volume["ns/data"], by_volume["ns/logs"]
    assert (data["storage_class"], data["volume_mode"], data["pvc"], data["tags"]) == (
        "fast",
        "Filesystem",
        "data",
        tags,
    )
    assert (logs["storage_class"], logs["volume_mode"], logs["tags"]) == (None, None, {})
    text = run("ls", "--repo", repo, check_rc=0).stdout.splitlines()
    shown = "cbt-mover.io/app=shop,cbt-mover.io/run=backup-1,note=a=b"
    assert any(line.startswith("ns/data\t") and line.endswith(shown) for line in text), text


@pytest.mark.parametrize(
    "tag, fragment",
    [
        ("novalue", "KEY=VALUE"),
        ("=x", "KEY=VALUE"),
        ("a b=c", "KEY=VALUE"),
        ("-a=1", "KEY=VALUE"),
        ("a=" + "x" * 1025, "at most 1024"),
    ],
)
def test_bad_tag_is_a_usage_error_before_anything_is_read(repo, tmp_path, tag, fragment):
    proc = run(
        "backup", "--repo", repo, "--volume", "v", "--device", tmp_path / "missing.img", "--scan", f"--tag={tag}"
    )
    assert_one_line_error(proc, 2, fragment)


def test_bad_volume_mode_and_repeated_tag(repo, tmp_path):
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", tmp_path / "x", "--scan", "--volume-mode", "Raw")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    with pytest.raises(UsageError, match="given twice"):
        parse_tags(["a=1", "a=2"])
    assert parse_tags(["k8s.io/x_y-z=", "a=1"]) == {"k8s.io/x_y-z": "", "a": "1"}


def _doc() -> dict:
    return {
        "backup_id": "20260101T000000000000Z-abcdef",
        "volume": {"id": "ns/data", "namespace": "ns", "pvc": "data"},
        "capacity_bytes": 4096,
        "snapshot": {"snapshot_handle": "h"},
        "parent": None,
        "mode": "full",
        "created": "2026-01-01T00:00:00+00:00",
        "map": {"page_size": 1 << 26, "dir_fanout": 256, "dirs": [None], "entries": 0},
        "stats": {},
        "format_version": 1,
        "mandatory_features": ["paged-map-v1", "sha256-chunks", "zstd"],
    }


def test_old_manifest_decodes_with_defaults_and_unknown_optional_fields_are_ignored():
    old = Manifest.decode(json.dumps(_doc()).encode())
    assert (old.volume.storage_class, old.volume.volume_mode, old.tags) == (None, None, {})
    v = old.volume
    assert (v.pv_name, v.pv_uid, v.fs_type, v.node_affinity, v.labels, old.run_pvcs) == (None,) * 6

    newer = _doc()
    newer["volume"].update(storage_class="fast", volume_mode="Block", zone="eu-1")
    newer["snapshot"]["future"] = 1
    newer["tags"] = {"cbt-mover.io/run": "r"}
    newer["something_new"] = True
    m = Manifest.decode(json.dumps(newer).encode())
    assert (m.volume.storage_class, m.volume.volume_mode, m.tags) == ("fast", "Block", {"cbt-mover.io/run": "r"})
    assert Manifest.decode(m.encode()) == m

    for bad in (
        {"tags": {"a": 1}},
        {"tags": ["a"]},
        {"volume": {"id": "v", "volume_mode": "Raw"}},
        {"volume": {"pvc": "no id"}},
        {"run_pvcs": "data"},
        {"run_pvcs": [""]},
        {"volume": {"id": "v", "node_affinity": ["x"]}},
        {"volume": {"id": "v", "labels": {"app": 1}}},
        {"volume": {"id": "v", "labels": ["app=db"]}},
    ):
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


AFFINITY = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}
    ]
}

LABELS = {"app": "db", "app.kubernetes.io/name": "postgres"}


def test_backup_records_the_source_volume_and_the_runs_pvcs(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=3)
    common = [
        "backup",
        "--repo",
        repo,
        "--device",
        image,
        "--scan",
        "--namespace",
        "ns",
        "--json",
        "--run-pvcs",
        "wal,data",
        "--tag",
        "cbt-mover.io/run=run-1",
    ]
    out = run(
        *common,
        "--volume",
        "ns/data",
        "--pvc",
        "data",
        "--volume-mode",
        "Filesystem",
        "--pv-name",
        "pv-1",
        "--pv-uid",
        "uid-1",
        "--pv-handle",
        "vol-1",
        "--csi-driver",
        "disk.csi.local",
        "--fs-type",
        "xfs",
        "--node-affinity",
        json.dumps(AFFINITY),
        "--pvc-labels",
        json.dumps(LABELS),
        check_rc=0,
    )
    assert json.loads(out.stdout)["pv_volume_handle"] == "vol-1"
    block = run(*common, "--volume", "ns/wal", "--pvc", "wal", "--volume-mode", "Block", "--fs-type", "ext4")
    assert block.returncode == 0 and "--fs-type ext4 ignored: a Block volume has no filesystem" in block.stderr

    doc = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)
    rows = {r["volume"]: r for r in doc["backups"]}
    data = rows["ns/data"]
    assert (data["pv_name"], data["pv_uid"], data["pv_volume_handle"], data["csi_driver"], data["fs_type"]) == (
        "pv-1",
        "uid-1",
        "vol-1",
        "disk.csi.local",
        "xfs",
    )
    assert data["run_pvcs"] == ["data", "wal"] and rows["ns/wal"]["fs_type"] is None
    assert doc["runs"] == [
        {
            "run": "run-1",
            "app": None,
            "namespace": "ns",
            "newest_backup": rows["ns/wal"]["backup_id"],
            "pvcs": ["data", "wal"],
            "members": ["data", "wal"],
            "missing": [],
            "complete": True,
        }
    ]
    key = next((tmp_path / "repo" / "backups").glob("ns%2Fdata/*"))
    stored = json.loads(key.read_text())
    assert stored["volume"]["node_affinity"] == AFFINITY and stored["format_version"] == 2
    assert stored["volume"]["labels"] == LABELS
    assert stored["run_pvcs"] == ["data", "wal"]
    # the run with a member that has no backup in it is listed as partial
    run(
        *common[:-4],
        "--run-pvcs",
        "data,wal,logs",
        "--volume",
        "ns/data",
        "--pvc",
        "data",
        "--tag",
        "cbt-mover.io/run=run-2",
        check_rc=0,
    )
    runs = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["runs"]
    assert [(r["run"], r["complete"], r["missing"]) for r in runs] == [
        ("run-2", False, ["logs", "wal"]),
        ("run-1", True, []),
    ]


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--node-affinity", "{zone: a}"], "--node-affinity must be JSON"),
        (["--node-affinity", '{"required": {"nodeSelectorTerms": []}}'], "must be a NodeSelector"),
        (["--run-pvcs", "data,,wal"], "--run-pvcs"),
        (["--pvc-labels", "app=db"], "--pvc-labels must be JSON"),
        (["--pvc-labels", '{"app": 1}'], "--pvc-labels must be an object of strings"),
    ],
)
def test_bad_identity_flags_are_usage_errors(repo, tmp_path, flags, fragment):
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", tmp_path / "missing.img", "--scan", *flags)
    assert_one_line_error(proc, 2, fragment)


def test_extents_on_a_parent_of_another_volume_are_refused(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=5)
    base = ["backup", "--repo", repo, "--volume", "ns/data", "--device", image]
    first = json.loads(run(*base, "--scan", "--pv-handle", "vol-1", "--json", check_rc=0).stdout)["backup_id"]
    extents = tmp_path / "changes.jsonl"
    extents.write_text(json.dumps({"offset": 0, "length": 4096}) + "\n")
    proc = run(*base, "--extents", extents, "--parent", first, "--pv-handle", "vol-2")
    assert_one_line_error(proc, 2, "bound to another volume", "--full")
    doc = json.loads(
        run(*base, "--extents", extents, "--parent", first, "--pv-handle", "vol-1", "--json", check_rc=0).stdout
    )
    assert doc["mode"] == "incremental-cbt"
