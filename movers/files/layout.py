"""The filesystems a volume holds: ``find_filesystems(source) -> Layout``.

A volume is searched in this order, the first that matches wins at each level:

* a filesystem at offset 0 (a bare filesystem): id ``whole``;
* an LVM2 physical volume (label ``LABELONE``, read by ``pyvslvm``): each logical volume of its volume group, id
  ``VG/LV`` (a volume group that spans other volumes cannot be read from this one: skipped, with a warning);
* a partition table (the two bytes ``55 aa`` at 510): a protective MBR (type ``0xee``) means GPT (``pyvsgpt``),
  else the MBR's four primary entries and the chain of logical partitions of an extended one; partition ``N`` of
  the table (1-based, as Linux numbers them: logical partitions from 5) gets id ``pN``; each partition is searched
  for a filesystem, then for an LVM2 physical volume.

The kind comes from the superblock's magic: ext2/ext3/ext4 (``0xef53`` at byte 1080; ext3 with a journal, ext4
with extents, 64-bit or flex_bg), XFS (``XFSB`` at 0), NTFS (``NTFS    `` at 3); anything else is ``None`` (listed,
not readable). MBR sectors are 512 bytes; an entry that points outside the volume is ignored.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyvsgpt
import pyvslvm

from movers.files.source import SliceFile, Source

log = logging.getLogger("movers")

WHOLE = "whole"
SECTOR = 512
EXTENDED_TYPES = frozenset({0x05, 0x0F, 0x85})
GPT_PROTECTIVE = 0xEE
MAX_LOGICAL = 128  # the most logical partitions followed in an extended partition's chain (a loop ends there)
EXT_COMPAT_JOURNAL = 0x4
EXT4_INCOMPAT = 0x40 | 0x80 | 0x200  # extents, 64bit, flex_bg

Peek = Callable[[int, int], bytes]  # (offset, length) -> bytes of one region


@dataclass(frozen=True)
class Filesystem:
    """One filesystem (or unknown content: ``kind`` None) of the volume: ``id`` (``whole``, ``pN`` or ``VG/LV``),
    ``offset`` in the volume (None inside an LVM logical volume), ``size`` in bytes, and ``file``: the file object
    a filesystem reader opens."""

    id: str
    kind: str | None
    offset: int | None
    size: int
    file: Any = field(repr=False, compare=False)


@dataclass
class Layout:
    """What ``find_filesystems`` found; ``close()`` closes the LVM handles the logical volumes' files need."""

    filesystems: list[Filesystem]
    _handles: list[Any] = field(default_factory=list, repr=False)

    @property
    def readable(self) -> list[Filesystem]:
        return [fs for fs in self.filesystems if fs.kind is not None]

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
        self._handles.clear()


def filesystem_kind(peek: Peek) -> str | None:
    """The kind of the filesystem whose first bytes ``peek`` reads (see the module doc), or None."""
    head = peek(0, 2048)
    if head[3:11] == b"NTFS    ":
        return "ntfs"
    if head[:4] == b"XFSB":
        return "xfs"
    if len(head) >= 1124 and head[1080:1082] == b"\x53\xef":
        compat, incompat = struct.unpack_from("<II", head, 1024 + 0x5C)
        return "ext4" if incompat & EXT4_INCOMPAT else "ext3" if compat & EXT_COMPAT_JOURNAL else "ext2"
    return None


def find_filesystems(source: Source) -> Layout:
    """The filesystems of the volume ``source`` reads (see the module doc)."""
    layout = Layout([])
    whole = SliceFile(source)
    kind = filesystem_kind(whole.pread)
    if kind is not None:
        layout.filesystems.append(Filesystem(WHOLE, kind, 0, source.size, whole))
    elif not _lvm(whole, layout):
        for pid, offset, length in _partitions(whole):
            part = SliceFile(source, offset, length)
            kind = filesystem_kind(part.pread)
            if kind is not None or not _lvm(part, layout):
                layout.filesystems.append(Filesystem(pid, kind, offset, length, part))
    return layout


def _lvm(pv: SliceFile, layout: Layout) -> bool:
    """Add the logical volumes of the LVM2 physical volume ``pv`` to ``layout``; False when ``pv`` is none."""
    if not pyvslvm.check_volume_signature_file_object(pv):
        return False
    handle = pyvslvm.handle()
    try:
        handle.open_file_object(pv)
        handle.open_physical_volume_files_as_file_objects([pv])
        group = handle.get_volume_group()
        volumes = list(group.logical_volumes)
    except OSError as err:
        pv.source.reraise()
        log.warning("an LVM2 volume group that cannot be read from this volume alone (skipped): %s", err)
        handle.close()
        return True
    layout._handles.append(handle)
    for lv in volumes:
        kind = filesystem_kind(lambda offset, length, lv=lv: lv.read_buffer_at_offset(length, offset))
        layout.filesystems.append(Filesystem(f"{group.name}/{lv.name}", kind, None, lv.size, lv))
    return True


def _partitions(disk: SliceFile) -> list[tuple[str, int, int]]:
    """``(id, offset, length)`` of the partitions of ``disk``'s table (none without one; see the module doc)."""
    mbr = disk.pread(0, SECTOR)
    if len(mbr) < SECTOR or mbr[510:512] != b"\x55\xaa":
        return []
    entries = _mbr_entries(mbr)
    if any(kind == GPT_PROTECTIVE for kind, _start, _count in entries):
        return _gpt(disk)
    found = []
    for number, (kind, start, count) in enumerate(entries, start=1):
        if kind in EXTENDED_TYPES:
            found += _logical(disk, start)
        elif kind and count:
            found.append((f"p{number}", start * SECTOR, count * SECTOR))
    inside = [(pid, offset, length) for pid, offset, length in found if offset + length <= disk.length]
    for pid, offset, length in sorted(set(found) - set(inside)):
        log.warning("partition %s (%d bytes at %d) ends past the volume's end: left out", pid, length, offset)
    return inside


def _mbr_entries(sector: bytes) -> list[tuple[int, int, int]]:
    """``(type, first LBA, sector count)`` of the four entries of an MBR or EBR sector."""
    return [
        (sector[446 + 16 * i + 4], *struct.unpack_from("<II", sector, 446 + 16 * i + 8))
        for i in range(4)  # type at +4, first LBA at +8, count at +12
    ]


def _logical(disk: SliceFile, extended: int) -> list[tuple[str, int, int]]:
    """The logical partitions (``p5`` on) of the extended partition starting at LBA ``extended``: each EBR's first
    entry is relative to that EBR, its second names the next EBR relative to the extended partition."""
    found, ebr, seen = [], extended, set()
    while ebr not in seen and len(found) < MAX_LOGICAL:
        seen.add(ebr)
        sector = disk.pread(ebr * SECTOR, SECTOR)
        if len(sector) < SECTOR or sector[510:512] != b"\x55\xaa":
            break
        (kind, start, count), (next_kind, next_start, _n) = _mbr_entries(sector)[:2]
        if kind and count:
            found.append((f"p{5 + len(found)}", (ebr + start) * SECTOR, count * SECTOR))
        if next_kind not in EXTENDED_TYPES or not next_start:
            break
        ebr = extended + next_start
    return found


def _gpt(disk: SliceFile) -> list[tuple[str, int, int]]:
    """The partitions of the GPT behind ``disk``'s protective MBR (``pyvsgpt``), by their entry's number."""
    table = pyvsgpt.volume()
    try:
        table.open_file_object(disk)
        found = [(f"p{p.entry_index + 1}", p.volume_offset, p.size) for p in table.partitions]
    except OSError as err:
        disk.source.reraise()
        log.warning("a protective MBR without a readable GPT (no partitions): %s", err)
        return []
    finally:
        table.close()
    return found
