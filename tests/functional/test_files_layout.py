"""``movers.files`` on images the real tools made, read as a local file (``ImageFile``): the filesystems of bare,
GPT and MBR (with logical partitions) volumes, every entry of ext4, XFS and NTFS copied out exactly, and the
errors: no or several filesystems, a path not there, a name that exists in DEST, a damaged read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from movers.errors import DamagedData, NotFoundError, UsageError
from movers.files.copy import copy_out
from movers.files.source import ImageFile
from movers.files.volume import open_filesystem
from tests.fsimages import (
    MAKERS,
    MIN_SIZE,
    TREE_MTIME_NS,
    MiB,
    fill_tree,
    gpt_disk,
    lvm_volume,
    mbr_disk,
    require,
)

KINDS = ("ext4", "xfs", "ntfs")
TIME_STEP_NS = {"ext4": 1_000_000_000, "xfs": 1, "ntfs": 100}  # mkfs.ext4 -d keeps seconds; NTFS counts 100 ns


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("tree")
    return root, fill_tree(root)


@pytest.fixture(scope="module")
def images(tmp_path_factory, tree):
    """One image per kind, made on first use."""
    made: dict[str, Path] = {}
    where = tmp_path_factory.mktemp("images")

    def image(kind: str) -> Path:
        require(kind)
        if kind not in made:
            made[kind] = where / f"{kind}.img"
            MAKERS[kind](made[kind], MIN_SIZE[kind], tree[0])
        return made[kind]

    return image


def assert_same_tree(src: Path, out: Path, kind: str) -> None:
    """``out`` holds what ``src`` does: names, kinds, bytes, symlink targets, times; modes where the filesystem
    keeps them (NTFS: 0o755 directories, 0o644 files)."""
    for dirpath, dirnames, filenames in os.walk(src):
        for name in dirnames + filenames:
            a = Path(dirpath) / name
            b = out / a.relative_to(src)
            sa, sb = a.lstat(), b.lstat()
            assert stat.S_IFMT(sa.st_mode) == stat.S_IFMT(sb.st_mode), b
            assert sb.st_mtime_ns == TREE_MTIME_NS - TREE_MTIME_NS % TIME_STEP_NS[kind], b
            if stat.S_ISLNK(sa.st_mode):
                assert os.readlink(b) == os.readlink(a)
                continue
            if kind == "ntfs":
                assert stat.S_IMODE(sb.st_mode) == (0o755 if stat.S_ISDIR(sa.st_mode) else 0o644), b
            else:
                assert stat.S_IMODE(sb.st_mode) == stat.S_IMODE(sa.st_mode), b
            if stat.S_ISREG(sa.st_mode):
                assert b.read_bytes() == a.read_bytes(), b


@pytest.mark.parametrize("kind", KINDS)
def test_a_bare_filesystem_copies_out_exactly(kind, images, tree, tmp_path):
    with ImageFile(images(kind)) as image, open_filesystem(image, None) as opened:
        assert [(fs.id, fs.kind, fs.offset) for fs in opened.layout.filesystems] == [("whole", kind, 0)]
        assert opened.tree is not None
        names = [e.name for e in opened.tree.children(opened.tree.lookup("/"))]
        assert {"data", "etc", "one.bin"} <= set(names) and not any(n.startswith("$") for n in names)
        copied, copied_bytes = copy_out(opened.tree, ("/",), str(tmp_path / "out"))
    assert_same_tree(tree[0], tmp_path / "out", kind)
    assert copied_bytes == sum(map(len, tree[1].values()))
    assert {c.path for c in copied if c.kind == "file"} == set(tree[1])
    holes = os.stat(tmp_path / "out/data/holes.bin")
    assert holes.st_blocks * 512 < holes.st_size  # the zeros were left as a hole


def test_gpt_partitions_are_found_and_chosen_by_id(images, tree, tmp_path):
    disk = tmp_path / "gpt.img"
    gpt_disk(disk, 64 * MiB, [(1 * MiB, images("ext4")), (20 * MiB, images("ntfs"))])
    with ImageFile(disk) as image:
        with pytest.raises(UsageError, match=r"several filesystems.*--filesystem \(p1 \(ext4\), p2 \(ntfs\)\)"):
            open_filesystem(image, None)
        with open_filesystem(image, "p2") as opened:
            layout = [(fs.id, fs.kind, fs.offset, fs.size) for fs in opened.layout.filesystems]
            assert layout == [("p1", "ext4", 1 * MiB, 16 * MiB), ("p2", "ntfs", 20 * MiB, 16 * MiB)]
            assert opened.tree is not None
            copy_out(opened.tree, ("/etc/app.conf", "/data/deep"), str(tmp_path / "out"))
        with pytest.raises(UsageError, match=r"--filesystem p3 is not on this volume; found: p1 \(ext4\), p2"):
            open_filesystem(image, "p3")
    assert (tmp_path / "out/app.conf").read_bytes() == tree[1]["/etc/app.conf"]
    assert (tmp_path / "out/deep/er/n\u00e4me.txt").read_bytes() == tree[1]["/data/deep/er/n\u00e4me.txt"]


def test_mbr_primary_and_logical_partitions(images, tree, tmp_path):
    disk = tmp_path / "mbr.img"
    mbr_disk(
        disk, 80 * MiB, [(1 * MiB, images("ntfs"))], logical=[(20 * MiB, images("ext4")), (40 * MiB, images("ntfs"))]
    )
    with ImageFile(disk) as image, open_filesystem(image, "p6") as opened:
        layout = [(fs.id, fs.kind, fs.offset) for fs in opened.layout.filesystems]
        assert layout == [("p1", "ntfs", 1 * MiB), ("p5", "ext4", 20 * MiB), ("p6", "ntfs", 40 * MiB)]
        assert opened.tree is not None
        assert opened.tree.lookup("/one.bin").size == MiB
    with ImageFile(disk) as image, open_filesystem(image, "p5") as opened:
        assert opened.tree is not None
        copy_out(opened.tree, ("/one.bin",), str(tmp_path / "out"))
    assert (tmp_path / "out/one.bin").read_bytes() == tree[1]["/one.bin"]


def test_no_filesystem_and_unknown_content_are_refused_naming_what_was_found(images, tmp_path):
    zeros = tmp_path / "zeros.img"
    zeros.write_bytes(bytes(4 * MiB))
    with ImageFile(zeros) as image:
        with pytest.raises(UsageError, match=r"no filesystem cbt-mover reads .* on this volume; found: none"):
            open_filesystem(image, None)
    noise = tmp_path / "noise.img"
    noise.write_bytes(os.urandom(2 * MiB))
    disk = tmp_path / "mixed.img"
    gpt_disk(disk, 32 * MiB, [(1 * MiB, noise), (4 * MiB, images("ext4"))])
    with ImageFile(disk) as image:
        with open_filesystem(image, None) as opened:  # the one readable filesystem is chosen
            assert opened.filesystem is not None and opened.filesystem.id == "p2"
        with pytest.raises(UsageError, match=r"--filesystem p1: not a filesystem cbt-mover reads"):
            open_filesystem(image, "p1")


class DamagedImage(ImageFile):
    """An image whose reads of ``[bad, bad + 1)`` raise the lazy reader's error for a damaged chunk."""

    def __init__(self, path: Path, bad: int) -> None:
        super().__init__(path)
        self.bad = bad
        self.raised: list[DamagedData] = []

    def read(self, offset: int, length: int) -> bytes:
        if offset <= self.bad < offset + length:
            self.raised.append(DamagedData(f"chunk at volume offset {self.bad} is damaged", offset=self.bad, length=1))
            raise self.raised[-1]
        return super().read(offset, length)


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_read_reaches_the_caller_unchanged_and_leaves_no_partial_file(kind, images, tree, tmp_path):
    data = tree[1]["/data/odd size.bin"]
    with open(images(kind), "rb") as f:
        at = f.read().find(data[MiB : MiB + 64])  # the file's second MiB in the image
    assert at > 0
    with DamagedImage(images(kind), at + 10) as image, open_filesystem(image, None) as opened:
        assert opened.tree is not None
        with pytest.raises(DamagedData) as raised:
            copy_out(opened.tree, ("/etc", "/data/odd size.bin"), str(tmp_path / "out"))
        assert raised.value is image.raised[0]
    assert (tmp_path / "out/etc/app.conf").exists() and not (tmp_path / "out/odd size.bin").exists()


def test_a_missing_path_or_an_existing_name_writes_nothing(images, tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(outside, dest / "one.bin")
    with ImageFile(images("ext4")) as image, open_filesystem(image, None) as opened:
        assert opened.tree is not None
        with pytest.raises(NotFoundError, match=r"no /etc/nope in filesystem whole \(ext4\) of this backup"):
            copy_out(opened.tree, ("/etc", "/etc/nope"), str(dest))
        with pytest.raises(UsageError, match="one.bin exists: files cp never overwrites"):
            copy_out(opened.tree, ("/etc", "/one.bin"), str(dest))
        with pytest.raises(UsageError, match="would both be copied to"):
            copy_out(opened.tree, ("/etc", "/"), str(tmp_path / "new"))
    assert sorted(os.listdir(dest)) == ["one.bin"] and outside.read_bytes() == b"keep"
    assert not (tmp_path / "new").exists()


def test_lvm_logical_volumes_on_the_volume_and_in_a_partition(images, tree, tmp_path):
    pv = tmp_path / "pv.img"
    lvm_volume(pv, 48 * MiB, [("data", images("ext4")), ("win", images("ntfs"))])
    with ImageFile(pv) as image:
        with pytest.raises(UsageError, match=r"several filesystems.*\(vg0/data \(ext4\), vg0/win \(ntfs\)\)"):
            open_filesystem(image, None)
        with open_filesystem(image, "vg0/win") as opened:
            layout = [(fs.id, fs.kind, fs.offset, fs.size) for fs in opened.layout.filesystems]
            assert layout == [("vg0/data", "ext4", None, 16 * MiB), ("vg0/win", "ntfs", None, 16 * MiB)]
            assert opened.tree is not None
            copy_out(opened.tree, ("/data",), str(tmp_path / "win"))
    assert_same_tree(tree[0] / "data", tmp_path / "win/data", "ntfs")

    disk = tmp_path / "disk.img"
    mbr_disk(disk, 80 * MiB, [(1 * MiB, images("ext4")), (20 * MiB, pv)])
    at = tree[1]["/one.bin"][:64]
    with open(pv, "rb") as f:
        bad = 20 * MiB + f.read().find(at, 1 * MiB + 16 * MiB) + 100  # inside vg0/win's one.bin, on the disk
    with ImageFile(disk) as image, open_filesystem(image, "vg0/data") as opened:
        assert [fs.id for fs in opened.layout.filesystems] == ["p1", "vg0/data", "vg0/win"]
        assert opened.tree is not None
        copy_out(opened.tree, ("/one.bin",), str(tmp_path / "data"))
    assert (tmp_path / "data/one.bin").read_bytes() == tree[1]["/one.bin"]
    with DamagedImage(disk, bad) as image, open_filesystem(image, "vg0/win") as opened:
        assert opened.tree is not None
        with pytest.raises(DamagedData) as raised:  # through pyfsntfs and pyvslvm, the error raised
            copy_out(opened.tree, ("/one.bin",), str(tmp_path / "damaged"))
        assert raised.value is image.raised[0]
