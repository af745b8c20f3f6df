"""NTFS (``pyfsntfs``) as a ``movers.files.tree.Tree``.

NTFS keeps no Unix mode: a directory reads as 0o755, a file as 0o644 (0o444 when its read-only attribute is set), a
symlink as 0o777. Times are FILETIMEs (100 ns since 1601), turned into ns since the Unix epoch. A symlink is either
a reparse point the reader resolves (Windows' own) or an Interix symlink (ntfs-3g's default: a system file whose
data is ``IntxLNK\\x01`` and the UTF-16 target). The metafiles at the root (``$MFT``, ``$Bitmap``, ...) are left
out of listings; looking one up by its path still works.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyfsntfs

from movers.files.tree import Entry, Tree

FILETIME_UNIX_EPOCH = 116_444_736_000_000_000  # 1970-01-01 in 100 ns units since 1601-01-01
READ_ONLY = 0x1
SYSTEM = 0x4
INTERIX_LINK = b"IntxLNK\x01"
MAX_INTERIX_LINK = len(INTERIX_LINK) + 2 * 4096  # a target of PATH_MAX UTF-16 units


def unix_ns(filetime: int) -> int:
    return (filetime - FILETIME_UNIX_EPOCH) * 100


class NtfsTree(Tree):
    def _open(self, file: Any) -> None:
        self._volume = pyfsntfs.volume()
        self._volume.open_file_object(file)

    def _lookup(self, path: str) -> Any:
        if path == "/":
            return self._volume.get_root_directory()
        return self._volume.get_file_entry_by_path(path.replace("/", "\\"))

    def _children(self, directory: Entry) -> Iterator[tuple[str, Any]]:
        for native in directory.native.sub_file_entries:
            name = native.name
            if directory.path == "/" and name.startswith("$"):
                continue
            yield name, native

    def _entry(self, native: Any, path: str) -> Entry:
        flags = native.file_attribute_flags
        times = {"mtime_ns": unix_ns(native.get_modification_time_as_integer())}
        times["atime_ns"] = unix_ns(native.get_access_time_as_integer())
        if native.has_directory_entries_index():
            return Entry(path=path, kind="dir", size=0, mode=0o755, native=native, **times)
        target = native.symbolic_link_target or self._interix_target(native, flags)
        if target is not None:
            target = target.replace("\\", "/")
            return Entry(path, "symlink", len(target.encode()), 0o777, target=target, native=native, **times)
        size = native.size if native.has_default_data_stream() else 0
        mode = 0o444 if flags & READ_ONLY else 0o644
        return Entry(path=path, kind="file", size=size, mode=mode, native=native, **times)

    @staticmethod
    def _interix_target(native: Any, flags: int) -> str | None:
        if not flags & SYSTEM or not native.has_default_data_stream():
            return None
        if not len(INTERIX_LINK) < native.size <= MAX_INTERIX_LINK:
            return None
        data = native.read_buffer_at_offset(native.size, 0)
        if not data.startswith(INTERIX_LINK):
            return None
        return data[len(INTERIX_LINK) :].decode("utf-16-le", errors="replace")

    def _read(self, entry: Entry, offset: int, length: int) -> bytes:
        return super()._read(entry, offset, length) if length else b""
