"""ext2/3/4 (``pyfsext``) and XFS (``pyfsxfs``) as a ``movers.files.tree.Tree``: both readers share one API
(``file_mode`` is the inode's ``st_mode``, times are ns since the Unix epoch, paths are ``/``-separated)."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from typing import Any

import pyfsext
import pyfsxfs

from movers.files.request import EntryKind
from movers.files.tree import Entry, Tree


def _kind(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


class PosixTree(Tree):
    """A Unix filesystem read by ``reader`` (a libyal module with ``volume``)."""

    reader: Any = None

    def _open(self, file: Any) -> None:
        self._volume = self.reader.volume()
        self._volume.open_file_object(file)

    def _lookup(self, path: str) -> Any:
        return self._volume.get_root_directory() if path == "/" else self._volume.get_file_entry_by_path(path)

    def _children(self, directory: Entry) -> Iterator[tuple[str, Any]]:
        for native in directory.native.sub_file_entries:
            yield native.name, native

    def _entry(self, native: Any, path: str) -> Entry:
        mode = native.file_mode
        kind = _kind(mode)
        return Entry(
            path=path,
            kind=kind,
            size=native.size if kind in ("file", "symlink") else 0,
            mode=stat.S_IMODE(mode),
            mtime_ns=native.get_modification_time_as_integer(),
            atime_ns=native.get_access_time_as_integer(),
            target=native.symbolic_link_target if kind == "symlink" else None,
            native=native,
        )


class ExtTree(PosixTree):
    reader = pyfsext


class XfsTree(PosixTree):
    reader = pyfsxfs
