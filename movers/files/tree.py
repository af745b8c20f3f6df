"""One filesystem's tree, the same on every filesystem kind: ``Tree`` and its ``Entry``.

A ``Tree`` (``movers.files.posix`` for ext2-4 and XFS, ``movers.files.ntfs`` for NTFS; ``open_tree`` picks) looks
entries up by absolute ``/``-separated path, lists a directory's entries and yields a file's data in bounded
pieces. Every libyal call runs inside ``Tree.guard``: an ``OSError`` from the reader becomes the engine error the
volume's reads raised (``Source.reraise``: a damaged chunk is the reader's ``IntegrityError``, exit code 4), else
a ``DamagedFilesystem`` (exit code 2: the backup holds bytes that do not read as the filesystem its superblock
names). A path that is not there is a ``NotFoundError`` (exit code 3).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from movers.errors import NotFoundError, UsageError
from movers.files.request import EntryKind
from movers.files.source import Source

PIECE = 1 << 20  # bytes of file data read at a time


class DamagedFilesystem(UsageError):
    """The filesystem's structures cannot be read (exit code 2): not an error of the repository, whose every
    chunk was verified, but of what the backed-up volume held."""


@dataclass(frozen=True)
class Entry:
    """One entry of a filesystem: ``path`` (absolute, ``/``-separated), ``kind``, ``size`` (a file's bytes, a
    symlink's target length, else 0), ``mode`` (permission bits, ``0o7777``; NTFS: 0o755 for a directory, 0o644
    for a file, 0o444 when read-only, 0o777 for a symlink), ``mtime_ns``/``atime_ns`` (ns since the Unix epoch),
    ``target`` (a symlink's, else None)."""

    path: str
    kind: EntryKind
    size: int
    mode: int
    mtime_ns: int
    atime_ns: int
    target: str | None = None
    native: Any = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path) or "/"

    def as_dict(self) -> dict[str, Any]:
        """The entry as ``files ls --json`` shows it."""
        return {
            "name": self.name,
            "path": self.path,
            "kind": self.kind,
            "size": self.size,
            "mode": self.mode,
            "mtime_ns": self.mtime_ns,
            "atime_ns": self.atime_ns,
            "target": self.target,
        }


class Tree:
    """A filesystem opened on ``file`` (a ``SliceFile`` or an LVM logical volume) of ``source``; ``label`` names it
    in errors (e.g. ``p1 (ext4)``). Subclasses implement ``_open``, ``_lookup``, ``_children``, ``_entry`` and
    ``_read``; callers use the public methods, which guard every reader call."""

    def __init__(self, source: Source, file: Any, label: str) -> None:
        self.source, self.label = source, label
        with self.guard("open the filesystem"):
            self._open(file)

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Translate a reader's ``OSError`` while doing ``what`` (see the module doc)."""
        try:
            yield
        except OSError as err:
            self.source.reraise()
            raise DamagedFilesystem(f"cannot {what} in filesystem {self.label}: {_last_reason(err)}") from None

    def lookup(self, path: str) -> Entry:
        """The entry at absolute ``path``; ``NotFoundError`` when there is none."""
        path = posixpath.normpath("/" + path.lstrip("/"))
        with self.guard(f"look up {path}"):
            native = self._lookup(path)
            entry = None if native is None else self._entry(native, path)
        if entry is None:
            raise NotFoundError(f"no {path} in filesystem {self.label} of this backup")
        return entry

    def children(self, directory: Entry) -> list[Entry]:
        """The entries of ``directory``, by name (entries a name cannot be written for, e.g. ``..``, left out)."""
        with self.guard(f"list {directory.path}"):
            found = [
                self._entry(native, posixpath.join(directory.path, name))
                for name, native in self._children(directory)
                if name not in ("", ".", "..") and "/" not in name and "\0" not in name
            ]
        return sorted((e for e in found if e is not None), key=lambda e: e.path)

    def read(self, entry: Entry, piece: int = PIECE) -> Iterator[bytes]:
        """The data of file ``entry``, ``piece`` bytes at a time (the last shorter)."""
        for offset in range(0, entry.size, piece):
            with self.guard(f"read {entry.path}"):
                data = self._read(entry, offset, min(piece, entry.size - offset))
            yield data

    def _open(self, file: Any) -> None:
        raise NotImplementedError

    def _lookup(self, path: str) -> Any:
        """The reader's entry at ``path`` or None."""
        raise NotImplementedError

    def _children(self, directory: Entry) -> Iterator[tuple[str, Any]]:
        raise NotImplementedError

    def _entry(self, native: Any, path: str) -> Entry | None:
        """The ``Entry`` of the reader's ``native`` at ``path``, None to hide it."""
        raise NotImplementedError

    def _read(self, entry: Entry, offset: int, length: int) -> bytes:
        data = entry.native.read_buffer_at_offset(length, offset)
        if len(data) != length:
            raise OSError(f"{len(data)} bytes read of {length} at offset {offset}")
        return data


def _last_reason(err: OSError) -> str:
    """The libyal error's innermost reason: its text is ``call: reason. call: reason. ...``, outermost first."""
    parts = [p.strip() for p in str(err).split(". ") if p.strip()]
    return parts[-1].rstrip(".") if parts else type(err).__name__
