"""``cbt-mover files ls|cp`` as users run them: images the real tools made, backed up with ``backup --scan`` into a
``file://`` repository and into S3 (moto over HTTP), then listed and copied out through the CLI (subprocesses).

The issue's measure: out of a 256 MiB filesystem (XFS: 300 MiB, its smallest) holding a 64 MiB file and a 1 MiB
file, ``files cp`` of the 1 MiB file is bit-exact and fetches at most 10% of what the backup stores (what a full
``restore`` fetches)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.fsimages import MAKERS, TREE_MTIME_NS, MiB, fill_tree, gpt_disk, lvm_volume, require
from tests.functional.test_cli import assert_one_line_error, run

KINDS = ("ext4", "xfs", "ntfs")
SIZE = {"ext4": 256 * MiB, "xfs": 300 * MiB, "ntfs": 256 * MiB}
LS_LINE = re.compile(r"(\S+) +(\d+) (\S+ \S+) (.*)$")  # mode, size, mtime, name
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("tree")
    return root, fill_tree(root, big=64 * MiB)


@pytest.fixture(scope="module")
def images(tmp_path_factory, tree):
    """The image of each kind (``SIZE``, the tree with its 64 MiB file), made on first use."""
    made: dict[str, Path] = {}
    where = tmp_path_factory.mktemp("images")

    def image(kind: str) -> Path:
        require(kind)
        if kind not in made:
            made[kind] = where / f"{kind}.img"
            MAKERS[kind](made[kind], SIZE[kind], tree[0])
        return made[kind]

    return image


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path) -> tuple[str, dict[str, str]]:
    """A new repository (its URL and the env the CLI needs for it): ``file://`` or S3 on moto."""
    if request.param == "file":
        url, env = f"file://{tmp_path}/repo", {}
    else:
        endpoint, bucket = request.getfixturevalue("s3_bucket")
        url, env = f"s3://{bucket}/repo", {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}
    run("init", "--insecure-no-encryption", "--repo", url, env=env, check_rc=0)
    return url, env


def backup(repo: str, env: dict[str, str], volume: str, image: Path) -> dict:
    proc = run("backup", "--repo", repo, "--volume", volume, "--device", image, "--scan", "--json", env=env, check_rc=0)
    return json.loads(proc.stdout)


def files(*args, env=None):
    return run("files", *args, env=env)


@pytest.mark.parametrize(
    ("kind", "store"), [(kind, "file") for kind in KINDS] + [("ext4", "s3")], indirect=["store"]
)  # the filesystem readers do not know the store: S3 once is enough
def test_one_small_file_fetches_a_small_part_of_the_backup(kind, images, tree, store, tmp_path):
    repo, env = store
    done = backup(repo, env, "v", images(kind))
    proc = files("cp", "--repo", repo, "--volume", "v", "--json", "/one.bin", tmp_path / "out", env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (tmp_path / "out/one.bin").read_bytes() == tree[1]["/one.bin"]
    assert result["copied"] == [{"path": "/one.bin", "kind": "file", "size": MiB}] and result["copied_bytes"] == MiB
    assert result["filesystem"] == "whole" and result["backup_id"] == done["backup_id"]
    full = run("restore", "--repo", repo, "--volume", "v", "--device", tmp_path / "full.img", "--json", env=env)
    assert full.returncode == 0, full.stderr
    restored = json.loads(full.stdout)["fetched_bytes"]
    assert restored > 64 * MiB and done["stored_bytes"] > 64 * MiB
    assert 0 < result["fetched_bytes"] <= restored // 10, (result["fetched_bytes"], restored)
    print(f"\n{kind} {store[0].split(':')[0]}: files cp fetched {result['fetched_bytes']} of {restored} bytes")


@pytest.mark.parametrize("kind", KINDS)
def test_ls_and_cp_of_trees_keep_bytes_modes_times_and_symlinks(kind, images, tree, tmp_path):
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "ns/claim", images(kind))
    common = ("--repo", repo, "--volume", "ns/claim")

    listing = files("ls", *common, "/data")
    assert listing.returncode == 0, listing.stderr
    shown = {m[4]: m.groups()[:3] for m in map(LS_LINE.match, listing.stdout.splitlines())}
    mode = "-rw-r--r--" if kind == "ntfs" else "-rwxr-x--x"
    assert shown["odd size.bin"] == (mode, str(2 * MiB + 12345), "2020-01-02 03:04:05")
    assert shown["outside -> /etc/passwd"][0] == "lrwxrwxrwx" and shown["deep"][0] == "drwxr-xr-x"
    assert set(shown) == {
        "big.bin",
        "conf-link -> ../etc/app.conf",
        "deep",
        "empty",
        "holes.bin",
        "odd size.bin",
        "outside -> /etc/passwd",
    }

    doc = json.loads(files("ls", *common, "--json", "/data/conf-link").stdout)
    assert doc["filesystem"] == "whole" and doc["filesystems"] == [
        {"id": "whole", "kind": kind, "offset": 0, "size": SIZE[kind]}
    ]
    assert [(e["name"], e["kind"], e["target"]) for e in doc["entries"]] == [
        ("conf-link", "symlink", "../etc/app.conf")
    ]
    assert doc["fetched_bytes"] > 0

    proc = files("cp", *common, "--json", "/data", "/etc/secret.key", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    want = {p: d for p, d in tree[1].items() if p.startswith("/data/") or p == "/etc/secret.key"}
    assert {c["path"]: c["size"] for c in result["copied"] if c["kind"] == "file"} == {
        p: len(d) for p, d in want.items()
    }
    assert result["copied_bytes"] == sum(map(len, want.values()))
    for path, data in want.items():
        local = tmp_path / "out" / (path[len("/") :] if path.startswith("/data/") else "secret.key")
        assert local.read_bytes() == data, path
        assert local.stat().st_mtime_ns // 10**9 == TREE_MTIME_NS // 10**9
    assert os.readlink(tmp_path / "out/data/outside") == "/etc/passwd"
    assert os.readlink(tmp_path / "out/data/conf-link") == "../etc/app.conf"
    modes = {
        p: stat.S_IMODE((tmp_path / "out" / p).stat().st_mode) for p in ("secret.key", "data/odd size.bin", "data")
    }
    assert modes == (
        {"secret.key": 0o600, "data/odd size.bin": 0o751, "data": 0o755}
        if kind != "ntfs"
        else {"secret.key": 0o644, "data/odd size.bin": 0o644, "data": 0o755}
    )


def test_several_filesystems_are_listed_and_chosen(images, tree, tmp_path):
    disk = tmp_path / "disk.img"
    small = tmp_path / "small.img"
    part = tmp_path / "part-tree"
    part.mkdir()
    (part / "only-here.txt").write_bytes(b"p2\n")
    MAKERS["ext4"](small, 16 * MiB, part)
    gpt_disk(disk, 300 * MiB, [(1 * MiB, images("ext4")), (280 * MiB, small)])
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "disk", disk)
    common = ("--repo", repo, "--volume", "disk")

    listed = files("ls", *common)
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[:3] for line in listed.stdout.splitlines()] == [
        ["p1", "ext4", str(MiB)],
        ["p2", "ext4", str(280 * MiB)],
    ]
    assert_one_line_error(files("ls", *common, "/"), 2, "several filesystems", "p1 (ext4), p2 (ext4)")
    assert_one_line_error(files("cp", *common, "/x", tmp_path / "o"), 2, "--filesystem", "p1 (ext4), p2 (ext4)")
    assert_one_line_error(files("ls", *common, "--filesystem", "p9", "/"), 2, "--filesystem p9 is not on this volume")
    proc = files("cp", *common, "--filesystem", "p2", "/only-here.txt", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o/only-here.txt").read_bytes() == b"p2\n"
    doc = json.loads(files("ls", *common, "--filesystem", "p1", "--json", "/").stdout)
    assert {"one.bin", "data", "etc"} <= {e["name"] for e in doc["entries"]}


def test_lvm_logical_volumes_are_listed_and_copied_from(tree, tmp_path):
    for kind in ("ext4", "ntfs"):
        require(kind)
    made = {}
    for kind in ("ext4", "ntfs"):
        made[kind] = tmp_path / f"{kind}.img"
        MAKERS[kind](made[kind], 80 * MiB, tree[0])
    pv = tmp_path / "pv.img"
    lvm_volume(pv, 200 * MiB, [("root", made["ext4"]), ("win", made["ntfs"])], group="data")
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "pv", pv)
    common = ("--repo", repo, "--volume", "pv")
    listed = files("ls", *common)
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t") for line in listed.stdout.splitlines()] == [
        ["data/root", "ext4", "-", "80.0 MiB"],
        ["data/win", "ntfs", "-", "80.0 MiB"],
    ]
    proc = files("cp", *common, "--filesystem", "data/win", "--json", "/data/big.bin", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["filesystem"] == "data/win"
    assert (tmp_path / "out/big.bin").read_bytes() == tree[1]["/data/big.bin"]


def test_errors_are_one_line_with_their_exit_code(images, tree, tmp_path):
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "v", images("ext4"))
    zeros = tmp_path / "zeros.img"
    with open(zeros, "wb") as f:
        f.truncate(8 * MiB)
    backup(repo, {}, "blank", zeros)
    common = ("--repo", repo, "--volume", "v")
    dest = tmp_path / "dest"

    assert_one_line_error(files("cp", *common, "/etc/nope", dest), 3, "no /etc/nope in filesystem whole (ext4)")
    assert_one_line_error(files("ls", *common, "/nope"), 3, "no /nope in filesystem whole (ext4)")
    assert_one_line_error(files("ls", *common, "--backup", "b-nope", "/"), 3)
    assert_one_line_error(files("ls", "--repo", repo, "--volume", "blank", "/"), 2, "no filesystem", "found: none")
    assert_one_line_error(files("cp", *common, "etc", dest), 2, "absolute")
    assert_one_line_error(files("cp", *common, dest), 2, "at least one SRC")
    assert not dest.exists()

    dest.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep")
    os.symlink(outside, dest / "app.conf")
    assert_one_line_error(files("cp", *common, "/etc/app.conf", dest), 2, "app.conf exists", "never overwrites")
    assert outside.read_bytes() == b"keep" and os.listdir(dest) == ["app.conf"]


def test_a_damaged_chunk_of_a_file_fails_the_copy_with_exit_code_4(images, tree, tmp_path):
    from movers.repo import pack
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "v", images("ext4"))
    with open(images("ext4"), "rb") as f:
        at = f.read().find(tree[1]["/data/big.bin"][32 * MiB : 32 * MiB + 64])  # in the middle of the big file
    r = Repository.open(open_store(repo))
    for _index, entries, locator in r.iter_located_map(r.resolve("v", "latest")):
        hit = [e for e in entries if e[0] <= at < e[0] + e[1]]
        if hit:
            loc = locator.get(hit[0][2])
            break
    path = Path(tmp_path / "repo") / pack.pack_key(loc.pack_id)
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.stored_len // 2] ^= 0x01
    path.write_bytes(bytes(data))

    proc = files("cp", "--repo", repo, "--volume", "v", "/etc", "/data/big.bin", tmp_path / "out")
    assert_one_line_error(proc, 4, "volume offset")
    assert (tmp_path / "out/etc/app.conf").read_bytes() == tree[1]["/etc/app.conf"]
    assert not (tmp_path / "out/big.bin").exists()


def test_the_pod_request_comes_whole_from_the_env(images, tree, tmp_path):
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "ns/claim", images("ntfs"))
    request = {"volume": "ns/claim", "paths": ["/etc"], "dest": str(tmp_path / "restored"), "workers": 2}
    env = {"FILES_REQUEST": json.dumps(request)}
    proc = files("cp", "--repo", repo, "--request-env", "FILES_REQUEST", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["volume"] == "ns/claim" and result["filesystem"] == "whole"
    assert {c["path"] for c in result["copied"]} == {"/etc", "/etc/app.conf", "/etc/secret.key"}
    assert (tmp_path / "restored/etc/app.conf").read_bytes() == tree[1]["/etc/app.conf"]
    env = {"FILES_REQUEST": json.dumps({**request, "paths": ["etc"]})}
    assert_one_line_error(files("cp", "--repo", repo, "--request-env", "FILES_REQUEST", env=env), 2, "absolute")


def test_a_big_trees_result_file_fits_a_termination_message(tmp_path):
    """The pod's ``--result-file`` is its termination log, which the kubelet cuts at 4096 bytes: the result written
    there names as many entries as fit and counts the rest; stdout's ``--json`` names them all."""
    from movers.files.request import FilesResult
    from movers.podcontract import TERMINATION_MESSAGE_MAX
    from tests.fsimages import make_ext4

    src = tmp_path / "src"
    (src / "many").mkdir(parents=True)
    for i in range(300):
        (src / "many" / f"file-{i:04d}.txt").write_text(f"{i}\n")
    make_ext4(tmp_path / "small.img", 16 * MiB, src)
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    backup(repo, {}, "v", tmp_path / "small.img")
    out, result_file = tmp_path / "out", tmp_path / "termination-log"
    proc = files("cp", "--repo", repo, "--volume", "v", "--json", "--result-file", result_file, "/many", out)
    assert proc.returncode == 0, proc.stderr
    full = FilesResult.model_validate_json(proc.stdout)
    assert len(full.copied) == full.entries == 301 and full.omitted == 0
    text = result_file.read_text()
    assert len(text) <= TERMINATION_MESSAGE_MAX
    fitted = FilesResult.model_validate_json(text)
    assert fitted.entries == 301 and 0 < len(fitted.copied) < 301, "as many as fit are named, the rest counted"
    assert fitted.copied == full.copied[: len(fitted.copied)] and fitted.copied_bytes == full.copied_bytes
    assert len(list((out / "many").iterdir())) == 300
