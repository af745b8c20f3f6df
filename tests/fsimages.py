"""Test helpers: filesystem images made by the real tools, and partition tables around them.

* ``fill_tree(dir)``: the tree the files tests copy out (files of several sizes and modes, a file with a hole,
  nested directories, relative and absolute symlinks, a name with a space and non-ASCII), with fixed times.
* ``make_ext4`` (``mkfs.ext4 -d``, no mount), ``make_xfs`` (``mkfs.xfs``, a loop mount as root, ``cp -a``),
  ``make_ntfs`` (``mkntfs``, an ``ntfs-3g`` FUSE mount, ``cp -a``): each an image of ``size`` bytes holding a copy
  of a directory; every mount is undone. ``require(kind)`` skips the test when the tools (or root) are missing.
* ``gpt_disk`` / ``mbr_disk``: a disk image whose partition table (written here with ``struct``: a protective
  MBR, GPT header and entries with their CRC32s and the backup copy at the end; or four MBR entries with an
  extended partition's chain of EBRs) puts the given images at the given offsets.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import struct
import subprocess
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

MiB = 1 << 20
SECTOR = 512
LINUX_FS_GUID = uuid.UUID("0fc63daf-8483-4772-8e79-3d69d8477de4")
TOOLS = {"ext4": ["mkfs.ext4"], "xfs": ["mkfs.xfs", "mount", "umount"], "ntfs": ["mkntfs", "ntfs-3g", "umount"]}
TREE_MTIME_NS = 1_577_934_245_123_456_700  # 2020-01-02 03:04:05.1234567 UTC: exact in ns, in NTFS' 100 ns, in XFS
TREE_ATIME_NS = 1_600_000_000_000_000_000


def require(kind: str) -> None:
    """Skip the test when ``kind``'s tools are missing (or, for a mount, root)."""
    missing = [tool for tool in TOOLS[kind] if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{kind} images need {', '.join(missing)}")
    if kind in ("xfs", "ntfs") and os.geteuid() != 0:
        pytest.skip(f"{kind} images are filled through a mount, which needs root")
    if kind == "ntfs" and not os.path.exists("/dev/fuse"):
        pytest.skip("ntfs images are filled through ntfs-3g, which needs /dev/fuse")


def fill_tree(root: Path, big: int = 0) -> dict[str, bytes]:
    """Write the test tree under ``root`` (``big``: the size of ``data/big.bin``, left out when 0); returns each
    file's bytes by its path inside the tree."""
    rng = random.Random(24)
    files = {
        "/one.bin": rng.randbytes(1 * MiB),
        "/etc/app.conf": b"listen = 8080\n",
        "/etc/secret.key": rng.randbytes(300),
        "/data/odd size.bin": rng.randbytes(2 * MiB + 12345),
        "/data/holes.bin": rng.randbytes(4096) + bytes(3 * MiB) + rng.randbytes(5000),
        "/data/empty": b"",
        "/data/deep/er/n\u00e4me.txt": "gr\u00fc\u00dfe\n".encode(),
    }
    if big:
        files["/data/big.bin"] = rng.randbytes(big)
    for path, data in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    os.chmod(root / "etc/secret.key", 0o600)
    os.chmod(root / "data/odd size.bin", 0o751)
    os.symlink("../etc/app.conf", root / "data/conf-link")
    os.symlink("/etc/passwd", root / "data/outside")
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            os.utime(Path(dirpath) / name, ns=(TREE_ATIME_NS, TREE_MTIME_NS), follow_symlinks=False)
    return files


def make_ext4(image: Path, size: int, tree: Path) -> None:
    _sparse(image, size)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "256", "-d", str(tree), str(image)], check=True)


def make_xfs(image: Path, size: int, tree: Path) -> None:
    _sparse(image, size)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(image)], check=True, capture_output=True)
    with _mounted(["mount", "-o", "loop", str(image)], ["umount"]) as mnt:
        _copy_into(tree, mnt)


def make_ntfs(image: Path, size: int, tree: Path) -> None:
    _sparse(image, size)
    subprocess.run(["mkntfs", "-q", "-F", "-f", str(image)], check=True, capture_output=True)
    with _mounted(["ntfs-3g", str(image)], ["umount"]) as mnt:  # root unmounts a FUSE mount too
        _copy_into(tree, mnt)


MAKERS = {"ext4": make_ext4, "xfs": make_xfs, "ntfs": make_ntfs}
MIN_SIZE = {"ext4": 16 * MiB, "xfs": 300 * MiB, "ntfs": 16 * MiB}  # mkfs.xfs refuses less than 300 MB


def _sparse(image: Path, size: int) -> None:
    with open(image, "wb") as f:
        f.truncate(size)


def _copy_into(tree: Path, mnt: Path) -> None:
    subprocess.run(["cp", "-a", f"{tree}/.", str(mnt)], check=True)
    os.sync()


@contextlib.contextmanager
def _mounted(mount: list[str], unmount: list[str]) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="files-mnt-") as mnt:
        subprocess.run([*mount, mnt], check=True, capture_output=True)
        try:
            yield Path(mnt)
        finally:
            subprocess.run([*unmount, mnt], check=True, capture_output=True)


def _copy_at(disk: Path, image: Path, offset: int) -> None:
    with open(image, "rb") as src, open(disk, "r+b") as dst:
        while data := src.read(4 * MiB):
            if data.count(0) != len(data):
                os.pwrite(dst.fileno(), data, offset)
            offset += len(data)


def _mbr_entry(kind: int, first_lba: int, sectors: int) -> bytes:
    return struct.pack("<B3sB3sII", 0, b"\0\0\0", kind, b"\0\0\0", first_lba, sectors)


def _mbr_sector(entries: list[bytes]) -> bytes:
    table = b"".join(entries).ljust(64, b"\0")
    return bytes(446) + table + b"\x55\xaa"


def gpt_disk(disk: Path, size: int, parts: list[tuple[int, Path]]) -> None:
    """``disk`` of ``size`` bytes with a GPT whose entry ``i`` (partition ``p{i+1}``) holds ``parts[i]``'s image at
    its byte offset (sector aligned)."""
    _sparse(disk, size)
    last_lba = size // SECTOR - 1
    entries = bytearray(128 * 128)
    for i, (offset, image) in enumerate(parts):
        first = offset // SECTOR
        end = first + os.path.getsize(image) // SECTOR - 1
        name = f"part{i + 1}".encode("utf-16-le").ljust(72, b"\0")
        struct.pack_into(
            "<16s16sQQQ72s", entries, 128 * i, LINUX_FS_GUID.bytes_le, uuid.uuid4().bytes_le, first, end, 0, name
        )
        _copy_at(disk, image, offset)
    entries_crc = zlib.crc32(entries)
    disk_guid = uuid.uuid4().bytes_le

    def header(current: int, backup: int, entries_lba: int) -> bytes:
        fields = [b"EFI PART", 0x10000, 92, 0, 0, current, backup, 34, last_lba - 33, disk_guid, entries_lba, 128, 128]
        raw = struct.pack("<8sIIIIQQQQ16sQIII", *fields, entries_crc)
        crc = zlib.crc32(raw)
        return (raw[:16] + struct.pack("<I", crc) + raw[20:]).ljust(SECTOR, b"\0")

    with open(disk, "r+b") as f:
        os.pwrite(f.fileno(), _mbr_sector([_mbr_entry(0xEE, 1, min(last_lba, 0xFFFFFFFF))]), 0)
        os.pwrite(f.fileno(), header(1, last_lba, 2) + bytes(entries), SECTOR)
        os.pwrite(f.fileno(), bytes(entries) + header(last_lba, 1, last_lba - 32), (last_lba - 32) * SECTOR)


def mbr_disk(disk: Path, size: int, primary: list[tuple[int, Path]], logical: list[tuple[int, Path]] = ()) -> None:
    """``disk`` of ``size`` bytes with an MBR: ``primary`` images as ``p1``.. at their offsets, then (with
    ``logical``) an extended partition over the rest of the disk whose chain of EBRs, each one sector before its
    logical partition, puts ``logical`` images as ``p5``.."""
    _sparse(disk, size)
    entries = []
    for offset, image in primary:
        entries.append(_mbr_entry(0x83, offset // SECTOR, os.path.getsize(image) // SECTOR))
        _copy_at(disk, image, offset)
    ebrs = []
    if logical:
        lbas = [offset // SECTOR - 1 for offset, _image in logical]  # each EBR: the sector before its partition
        ext_start = lbas[0]
        entries.append(_mbr_entry(0x05, ext_start, size // SECTOR - ext_start))
        for i, (offset, image) in enumerate(logical):
            own = _mbr_entry(0x83, 1, os.path.getsize(image) // SECTOR)  # relative to its EBR
            nxt = [_mbr_entry(0x05, lbas[i + 1] - ext_start, 1)] if i + 1 < len(logical) else []  # to the extended
            ebrs.append((lbas[i], _mbr_sector([own, *nxt])))
            _copy_at(disk, image, offset)
    with open(disk, "r+b") as f:
        os.pwrite(f.fileno(), _mbr_sector(entries), 0)
        for lba, sector in ebrs:
            os.pwrite(f.fileno(), sector, lba * SECTOR)


LVM_MDA_MAGIC = b" LVM2 x[5A%r0N*>"
LVM_INITIAL_CRC = 0xF597A6CF
LVM_EXTENT = 4 * MiB
LVM_PE_START = 1 * MiB
LVM_MDA_OFFSET = 4096


def _lvm_crc(data: bytes) -> int:
    """LVM2's CRC32: the standard polynomial from ``0xf597a6cf``, with no inversion before or after."""
    return zlib.crc32(data, LVM_INITIAL_CRC ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def _lvm_uuid(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(32))


def _dashed(uuid32: str) -> str:
    cuts = [6, 4, 4, 4, 4, 4, 6]
    parts, at = [], 0
    for n in cuts:
        parts.append(uuid32[at : at + n])
        at += n
    return "-".join(parts)


def lvm_volume(pv: Path, size: int, volumes: list[tuple[str, Path]], group: str = "vg0") -> None:
    """``pv`` of ``size`` bytes as an LVM2 physical volume (what ``pvcreate`` and ``lvcreate`` write, made here
    without lvm2: the label, the PV header, one metadata area with the volume group's text) whose group ``group``
    holds one linear logical volume per ``(name, image)``, in order, each starting on a 4 MiB extent."""
    rng = random.Random(size)
    _sparse(pv, size)
    pe_count = (size - LVM_PE_START) // LVM_EXTENT
    pv_uuid = _lvm_uuid(rng)
    lvs, extent = [], 0
    for name, image in volumes:
        count = -(-os.path.getsize(image) // LVM_EXTENT)
        _copy_at(pv, image, LVM_PE_START + extent * LVM_EXTENT)
        lvs.append(
            f'{name} {{\nid = "{_dashed(_lvm_uuid(rng))}"\nstatus = ["READ", "WRITE", "VISIBLE"]\nflags = []\n'
            f'segment_count = 1\n\nsegment1 {{\nstart_extent = 0\nextent_count = {count}\n\ntype = "striped"\n'
            f'stripe_count = 1\n\nstripes = [\n"pv0", {extent}\n]\n}}\n}}\n'
        )
        extent += count
    text = (
        f'{group} {{\nid = "{_dashed(_lvm_uuid(rng))}"\nseqno = 1\nformat = "lvm2"\n'
        'status = ["RESIZEABLE", "READ", "WRITE"]\nflags = []\n'
        f"extent_size = {LVM_EXTENT // SECTOR}\nmax_lv = 0\nmax_pv = 0\nmetadata_copies = 0\n\n"
        f'physical_volumes {{\n\npv0 {{\nid = "{_dashed(pv_uuid)}"\ndevice = "/dev/test"\n\n'
        f'status = ["ALLOCATABLE"]\nflags = []\ndev_size = {size // SECTOR}\npe_start = {LVM_PE_START // SECTOR}\n'
        f"pe_count = {pe_count}\n}}\n}}\n\nlogical_volumes {{\n\n{''.join(lvs)}}}\n}}\n"
        '# Generated by the cbt-mover tests\n\ncontents = "Text Format Volume Group"\nversion = 1\n\n'
        'description = ""\n\ncreation_host = "test"\ncreation_time = 0\n'
    ).encode() + b"\0"
    mda_size = LVM_PE_START - LVM_MDA_OFFSET
    locn = struct.pack("<QQII", SECTOR, len(text), _lvm_crc(text), 0)
    body = (LVM_MDA_MAGIC + struct.pack("<IQQ", 1, LVM_MDA_OFFSET, mda_size) + locn).ljust(SECTOR - 4, b"\0")
    mda_header = struct.pack("<I", _lvm_crc(body)) + body
    areas = struct.pack("<QQQQQQQQ", LVM_PE_START, 0, 0, 0, LVM_MDA_OFFSET, mda_size, 0, 0)
    pv_header = pv_uuid.encode() + struct.pack("<Q", size) + areas
    rest = (struct.pack("<I", 32) + b"LVM2 001" + pv_header).ljust(SECTOR - 20, b"\0")
    label = b"LABELONE" + struct.pack("<QI", 1, _lvm_crc(rest)) + rest
    with open(pv, "r+b") as f:
        os.pwrite(f.fileno(), label, SECTOR)
        os.pwrite(f.fileno(), mda_header + text, LVM_MDA_OFFSET)
