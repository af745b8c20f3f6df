"""The CLI as users and the mover pod run it: real subprocesses, real files, S3 over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.volumes import loop_device, make_image, sha256_file, write_blocks

MiB = 1 << 20
CLI = [sys.executable, "-m", "movers"]
BACKUP_KEYS = {
    "backup_id",
    "volume",
    "mode",
    "capacity_bytes",
    "changed_bytes",
    "read_bytes",
    "new_chunk_bytes",
    "stored_bytes",
    "zero_bytes",
    "objects_written",
    "duration_s",
}


def run(*args, env=None, stdin=None, check_rc=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, input=stdin, env={**base, **(env or {})}, timeout=120
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


def assert_one_line_error(proc, rc, *fragments):
    assert proc.returncode == rc, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("progress ")]
    assert len(lines) == 1 and lines[0].startswith("cbt-mover: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 16 * MiB, seed=4)
    return path


def test_backup_incremental_restore_via_cli(repo, image, tmp_path):
    full = run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", "--json", check_rc=0)
    doc = json.loads(full.stdout)
    assert BACKUP_KEYS <= doc.keys() and doc["mode"] == "full" and doc["capacity_bytes"] == 16 * MiB
    changes = write_blocks(image, [4096 * 7, 8 * MiB])
    lines = "".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changes)
    inc = run(
        "backup",
        "--repo",
        repo,
        "--volume",
        "v",
        "--device",
        image,
        "--extents",
        "-",
        "--parent",
        doc["backup_id"],
        "--json",
        "--snapshot-handle",
        "snap-h2",
        "--progress-interval",
        "0",
        stdin=lines,
        check_rc=0,
    )
    doc2 = json.loads(inc.stdout)
    progress = [line for line in inc.stderr.splitlines() if line.startswith("progress ")]
    assert (
        progress[0] == f"progress done=8192 total=? position={8 * MiB + 4096} capacity={16 * MiB} mode=incremental-cbt"
    )
    assert progress[-1] == f"progress done=8192 total=8192 position={16 * MiB} capacity={16 * MiB} mode=incremental-cbt"
    assert doc2["mode"] == "incremental-cbt" and doc2["parent"] == doc["backup_id"]
    assert doc2["changed_bytes"] == 8192 and doc2["read_bytes"] == 8192
    out = tmp_path / "restored.img"
    rest = run("restore", "--repo", repo, "--volume", "v", "--device", out, "--json", check_rc=0)
    assert json.loads(rest.stdout)["backup_id"] == doc2["backup_id"]
    assert sha256_file(out) == sha256_file(image)
    listing = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"]
    assert [b["backup_id"] for b in listing] == [doc["backup_id"], doc2["backup_id"]]
    assert listing[1]["snapshot_handle"] == "snap-h2"
    verify = json.loads(run("verify", "--repo", repo, "--json", check_rc=0).stdout)
    assert verify["ok"] and verify["backups_checked"] == 2


def test_bad_extents_are_one_line_errors(repo, image, tmp_path):
    base = ["backup", "--repo", repo, "--volume", "v", "--device", image, "--extents", "-"]
    unsorted = '{"offset": 8192, "length": 4096}\n{"offset": 0, "length": 4096}\n'
    assert_one_line_error(run(*base, stdin=unsorted), 2, "sorted and non-overlapping")
    overlap = '{"offset": 0, "length": 8192}\n{"offset": 4096, "length": 4096}\n'
    assert_one_line_error(run(*base, stdin=overlap), 2, "non-overlapping")
    past_end = json.dumps({"offset": 16 * MiB - 4096, "length": 8192})
    assert_one_line_error(run(*base, stdin=past_end), 2, "past the device end")
    assert_one_line_error(run(*base, stdin="not json\n"), 2, "line 1")
    missing = tmp_path / "missing.jsonl"
    assert_one_line_error(run(*base[:-1], missing), 2, "cannot read extents file")
    assert run("ls", "--repo", repo, "--json", check_rc=0).stdout.count("backup_id") == 0


def test_lookup_errors(repo, image, tmp_path):
    assert_one_line_error(run("init", "--insecure-no-encryption", "--repo", repo), 2, "already a cbt-mover repository")
    assert_one_line_error(run("restore", "--repo", repo, "--volume", "v", "--device", tmp_path / "o"), 3, "no backups")
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    proc = run(
        "restore",
        "--repo",
        repo,
        "--volume",
        "v",
        "--backup",
        "20990101T000000000000Z-abcdef",
        "--device",
        tmp_path / "o",
    )
    assert_one_line_error(proc, 3, "20990101T000000000000Z-abcdef", "not found")
    assert_one_line_error(run("ls", "--repo", f"file://{tmp_path}/nothing-here"), 3, "cbt-mover init")
    assert_one_line_error(run("backup", "--repo", repo, "--volume", "v", "--device", tmp_path / "nope", "--scan"), 3)


@pytest.mark.parametrize(
    "url", ["gs://bucket/x", "s3://", "file://relative/path", "s3://b/x?versionId=1", "http://example"]
)
def test_wrong_repo_url(url):
    assert_one_line_error(run("ls", "--repo", url), 2, "expected")


def test_missing_repo_option():
    assert_one_line_error(run("ls"), 2, "--repo is required")


def test_unreachable_endpoint_and_missing_credentials(tmp_path):
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    env = {"AWS_ACCESS_KEY_ID": "AKIAFAKE", "AWS_SECRET_ACCESS_KEY": "very-secret-value", "AWS_REGION": "us-east-1"}
    proc = run(
        "ls", "--repo", "s3://bucket/p", "--s3-endpoint", f"http://127.0.0.1:{port}", "--retry-for", "0", env=env
    )
    assert_one_line_error(proc, 5, f"127.0.0.1:{port}")
    assert "very-secret-value" not in proc.stderr
    no_creds = {
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    proc = run("ls", "--repo", "s3://bucket/p", "--s3-endpoint", f"http://127.0.0.1:{port}", env=no_creds)
    assert_one_line_error(proc, 6, "AWS_ACCESS_KEY_ID")


def test_backup_restore_over_s3(s3_bucket, image, tmp_path):
    endpoint, bucket = s3_bucket
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    repo = f"s3://{bucket}/team/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, env=env, check_rc=0)
    run("backup", "--repo", repo, "--volume", "ns/pvc", "--device", image, "--scan", env=env, check_rc=0)
    out = tmp_path / "out.img"
    run("restore", "--repo", repo, "--volume", "ns/pvc", "--device", out, env=env, check_rc=0)
    assert sha256_file(out) == sha256_file(image)
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "wrong"}
    # moto accepts any key; the nonexistent bucket gives the permanent-error path
    assert_one_line_error(run("ls", "--repo", f"s3://no-such-{bucket[:20]}/x", env=wrong), 3, "does not exist")


def test_flipped_byte_makes_verify_and_restore_fail(repo, image, tmp_path):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    packs = sorted((Path(repo[len("file://") :]) / "packs").glob("*/*"))
    data = bytearray(packs[0].read_bytes())
    data[len(data) // 3] ^= 0x01
    packs[0].write_bytes(bytes(data))
    proc = run("verify", "--repo", repo)
    assert proc.returncode == 4 and "volume offset" in proc.stderr
    proc = run("restore", "--repo", repo, "--volume", "v", "--device", tmp_path / "o.img")
    assert_one_line_error(proc, 4, "volume offset")


@pytest.fixture
def small_loop_device(tmp_path):
    backing = tmp_path / "loop.img"
    backing.write_bytes(bytes(4 * MiB))
    with loop_device(backing) as dev:
        yield dev


def test_restore_to_smaller_block_device_is_refused(repo, image, small_loop_device):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    proc = run("restore", "--repo", repo, "--volume", "v", "--device", small_loop_device)
    assert_one_line_error(proc, 2, "smaller than the backup")


def test_backup_and_restore_on_a_loop_device(repo, tmp_path):
    src = tmp_path / "src.img"
    make_image(src, 8 * MiB, seed=8)
    target = tmp_path / "target.img"
    target.write_bytes(b"\xee" * (8 * MiB))
    with loop_device(src) as source, loop_device(target) as written:
        run("backup", "--repo", repo, "--volume", "loop", "--device", source, "--scan", check_rc=0)
        run("restore", "--repo", repo, "--volume", "loop", "--device", written, check_rc=0)
    assert sha256_file(target) == sha256_file(src)


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory and a read-only bind mount of it (opening a file there for writing fails, also as root)."""
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount")
    if subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts unavailable")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("read-only remounts unavailable")
        yield src, ro
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_backup_opens_the_device_read_only(repo, read_only_dir, tmp_path):
    src, ro = read_only_dir
    make_image(src / "vol.img", 4 * MiB, seed=9)
    with pytest.raises(OSError):
        os.open(ro / "vol.img", os.O_RDWR)
    args = ["backup", "--repo", repo, "--volume", "ro", "--device", ro / "vol.img", "--json"]
    scan = run(*args, "--scan", check_rc=0)
    extents = ["--extents", "-", "--parent", json.loads(scan.stdout)["backup_id"]]
    run(*args, *extents, stdin='{"offset": 0, "length": 4096}\n', check_rc=0)
    out = tmp_path / "restored.img"
    run("restore", "--repo", repo, "--volume", "ro", "--backup", "latest", "--device", out, check_rc=0)
    assert sha256_file(out) == sha256_file(src / "vol.img")
