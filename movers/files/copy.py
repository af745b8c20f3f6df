"""``copy_out(tree, paths, dest)``: files, symlinks and directory trees of a ``Tree`` into a local directory.

Contract:

* ``dest`` is a directory (made, with its parents, when missing); each path lands at ``dest/<its name>`` (``/``:
  the root's entries land in ``dest`` itself).
* Everything is looked up, and every name it would take checked, before anything is written: a path that is not
  in the backup is a ``NotFoundError`` (exit code 3), a name that already exists in ``dest`` (or two paths of the
  same name) a ``UsageError`` (exit code 2); then nothing was written. ``files cp`` never overwrites.
* Every entry is created new (``O_EXCL``/``mkdir``/``symlink``, never through an existing path), so no symlink,
  whether it was already in ``dest`` or copied out of the backup, is ever followed: nothing is written outside
  ``dest``. Names a path cannot take (``..``, with ``/``) are never read from the backup (``Tree.children``).
* Files keep their mode (without set-user-ID and set-group-ID: the owner is not kept), modification and access
  time (ns); directories too, set after their entries are written; symlinks keep their target and times. A
  file's data is read in pieces of ``movers.files.tree.PIECE`` bytes; pieces of zeros are left as holes.
  Devices, FIFOs and sockets are skipped with a warning. A file whose copy fails is removed (its directories
  stay); what was copied before stays, and the error is raised.
"""

from __future__ import annotations

import logging
import os
import posixpath
import stat
from pathlib import Path

from movers.errors import UsageError
from movers.files.request import CopiedEntry
from movers.files.tree import Entry, Tree

log = logging.getLogger("movers")

DROPPED_MODE = stat.S_ISUID | stat.S_ISGID
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Copier:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.copied: list[CopiedEntry] = []
        self.copied_bytes = 0

    def entry(self, entry: Entry, target: Path) -> None:
        if entry.kind == "dir":
            self.directory(entry, target)
        elif entry.kind == "file":
            self.file(entry, target)
        elif entry.kind == "symlink":
            os.symlink(entry.target or "", target)
            os.utime(target, ns=(entry.atime_ns, entry.mtime_ns), follow_symlinks=False)
            self.copied.append(CopiedEntry(path=entry.path, kind="symlink"))
        else:
            log.warning("%s is not a file, directory or symlink: skipped", entry.path)

    def directory(self, entry: Entry, target: Path, existing: bool = False) -> None:
        if not existing:
            os.mkdir(target, 0o700)
        for child in self.tree.children(entry):
            self.entry(child, target / child.name)
        if not existing:
            os.chmod(target, entry.mode & ~DROPPED_MODE)
            os.utime(target, ns=(entry.atime_ns, entry.mtime_ns))
            self.copied.append(CopiedEntry(path=entry.path, kind="dir"))

    def file(self, entry: Entry, target: Path) -> None:
        fd = os.open(target, FILE_FLAGS, 0o600)
        try:
            for data in self.tree.read(entry):
                if data.count(0) == len(data):
                    os.lseek(fd, len(data), os.SEEK_CUR)
                else:
                    os.write(fd, data)
            os.ftruncate(fd, entry.size)
            os.fchmod(fd, entry.mode & ~DROPPED_MODE)
            os.utime(fd, ns=(entry.atime_ns, entry.mtime_ns))
        except BaseException:
            os.close(fd)
            os.unlink(target)
            raise
        os.close(fd)
        self.copied.append(CopiedEntry(path=entry.path, kind="file", size=entry.size))
        self.copied_bytes += entry.size


def copy_out(tree: Tree, paths: tuple[str, ...], dest: str) -> tuple[list[CopiedEntry], int]:
    """Copy ``paths`` of ``tree`` into ``dest`` (see the module doc); the entries written and the file bytes."""
    root = Path(dest)
    if root.exists() and not root.is_dir():
        raise UsageError(f"{dest} is not a directory: files cp copies into a directory")
    entries = [tree.lookup(path) for path in paths]
    names: dict[str, str] = {}
    for entry in entries:
        for name in [c.name for c in tree.children(entry)] if entry.path == "/" else [entry.name]:
            if name in names:
                raise UsageError(f"{entry.path} and {names[name]} would both be copied to {root / name}")
            names[name] = entry.path
            if os.path.lexists(root / name):
                raise UsageError(f"{root / name} exists: files cp never overwrites (remove it or copy elsewhere)")
    root.mkdir(parents=True, exist_ok=True)
    copier = _Copier(tree)
    for entry in entries:
        if entry.path == "/":
            copier.directory(entry, root, existing=True)
        else:
            copier.entry(entry, root / posixpath.basename(entry.path))
    return copier.copied, copier.copied_bytes
