"""One filesystem of a volume, chosen and opened: ``open_filesystem(reader, wanted) -> Opened``.

``wanted`` is a filesystem id of ``movers.files.layout`` (``whole``, ``pN``, ``VG/LV``) or None: then the volume's
one readable filesystem. Refused with one line and exit code 2 (``UsageError``), naming the ids found: no
filesystem at all, several and none chosen, an id that is not there, an id whose content is no filesystem this
reads (ext2/3/4, XFS, NTFS). The layout is read first; ``Opened.close()`` releases it (not the reader).
"""

from __future__ import annotations

from dataclasses import dataclass

from movers.errors import UsageError
from movers.files.layout import Filesystem, Layout, find_filesystems
from movers.files.ntfs import NtfsTree
from movers.files.posix import ExtTree, XfsTree
from movers.files.source import RandomAccess, Source
from movers.files.tree import Tree

TREES: dict[str, type[Tree]] = {"ext2": ExtTree, "ext3": ExtTree, "ext4": ExtTree, "xfs": XfsTree, "ntfs": NtfsTree}


def describe(layout: Layout) -> str:
    """The filesystems found, for an error line: ``p1 (ext4), p2 (unknown)`` or ``none``."""
    return ", ".join(f"{fs.id} ({fs.kind or 'unknown'})" for fs in layout.filesystems) or "none"


@dataclass
class Opened:
    """The volume's ``layout`` and, when one was chosen, its ``filesystem`` opened as ``tree``."""

    source: Source
    layout: Layout
    filesystem: Filesystem | None = None
    tree: Tree | None = None

    def close(self) -> None:
        self.tree = None  # the reader's volume before the LVM handle its file may need
        self.layout.close()

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def choose(layout: Layout, wanted: str | None) -> Filesystem:
    """The filesystem ``wanted`` names, or the only readable one (see the module doc)."""
    if wanted is not None:
        for fs in layout.filesystems:
            if fs.id == wanted or (wanted == "" and fs.id == "whole"):
                if fs.kind is None:
                    raise UsageError(f"--filesystem {wanted}: not a filesystem cbt-mover reads (ext2/3/4, xfs, ntfs)")
                return fs
        raise UsageError(f"--filesystem {wanted} is not on this volume; found: {describe(layout)}")
    readable = layout.readable
    if len(readable) == 1:
        return readable[0]
    if not readable:
        raise UsageError(
            f"no filesystem cbt-mover reads (ext2/3/4, xfs, ntfs) on this volume; found: {describe(layout)}"
        )
    raise UsageError(f"this volume holds several filesystems: choose one with --filesystem ({describe(layout)})")


def open_filesystem(reader: RandomAccess, wanted: str | None, pick: bool = True) -> Opened:
    """The layout of ``reader``'s volume and the filesystem ``wanted`` opened (see the module doc). ``pick``
    False: with no ``wanted`` and several filesystems, none is opened (``files ls`` then lists them)."""
    source = Source(reader)
    opened = Opened(source, find_filesystems(source))
    try:
        if wanted is None and not pick and len(opened.layout.readable) > 1:
            return opened
        fs = choose(opened.layout, wanted)
        opened.filesystem = fs
        opened.tree = TREES[fs.kind or ""](source, fs.file, f"{fs.id} ({fs.kind})")
    except BaseException:
        opened.close()
        raise
    return opened
