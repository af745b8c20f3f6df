"""Files of a backup, read lazily from the repository: ``list_files`` (``cbt-mover files ls``) and ``copy_files``
(``cbt-mover files cp`` and the ``restore-files`` pod, one ``FilesRequest`` -> one ``FilesResult``).

Both resolve the backup (an id or ``latest``), read its volume through one ``movers.pipeline.lazy.BackupReader``
(each chunk fetched once, verified, cached in a bound), find the filesystem (``movers.files.volume``) and read
only what the asked-for entries and the filesystem's own structures occupy. ``fetched_bytes``: the stored bytes
the reader fetched from the repository, the measure to compare with a full restore's. Errors keep their engine
exit codes: a path not in the backup 3, no such filesystem or several 2, a damaged chunk 4 (the reader's own
``IntegrityError``, through the filesystem reader).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from movers.files.copy import copy_out
from movers.files.layout import Filesystem
from movers.files.request import FilesRequest, FilesResult
from movers.files.tree import Entry
from movers.files.volume import Opened, open_filesystem

if TYPE_CHECKING:
    from movers.repo.repository import Repository


def filesystem_dict(fs: Filesystem) -> dict[str, Any]:
    return {"id": fs.id, "kind": fs.kind, "offset": fs.offset, "size": fs.size}


@dataclass
class Listing:
    """What ``files ls`` shows: with a ``filesystem`` chosen, the ``entries`` of ``path`` (a directory's entries,
    or the one entry of anything else); without (several filesystems and none chosen, no path), none: the
    ``filesystems`` are the listing."""

    volume: str
    backup_id: str
    path: str | None
    filesystems: list[Filesystem]
    filesystem: Filesystem | None = None
    entries: list[Entry] = field(default_factory=list)
    fetched_bytes: int = 0

    def as_output(self) -> dict[str, Any]:
        """The ``--json`` object."""
        return {
            "volume": self.volume,
            "backup_id": self.backup_id,
            "path": self.path,
            "filesystem": self.filesystem.id if self.filesystem else None,
            "filesystems": [filesystem_dict(fs) for fs in self.filesystems],
            "entries": [e.as_dict() for e in self.entries],
            "fetched_bytes": self.fetched_bytes,
        }


def list_files(
    open_repo: Callable[[], Repository],
    volume: str,
    backup: str,
    path: str | None,
    filesystem: str | None = None,
    workers: int = 4,
) -> Listing:
    """The ``Listing`` of ``path`` (None: the root, or the filesystems when there are several and none was chosen)
    in ``filesystem`` of backup ``backup`` (an id or ``latest``) of ``volume``."""
    from movers.pipeline.lazy import BackupReader

    repo = open_repo()
    manifest = repo.resolve(volume, backup)
    with BackupReader(repo, manifest, workers=workers) as reader:
        with open_filesystem(reader, filesystem, pick=path is not None) as opened:
            listing = Listing(volume, manifest.backup_id, path, list(opened.layout.filesystems), opened.filesystem)
            if opened.tree is not None:
                listing.path = path or "/"
                listing.entries = _entries(opened, listing.path)
        listing.fetched_bytes = reader.fetched_bytes
    return listing


def _entries(opened: Opened, path: str) -> list[Entry]:
    assert opened.tree is not None
    entry = opened.tree.lookup(path)
    found = opened.tree.children(entry) if entry.kind == "dir" else [entry]
    return [replace(e, native=None) for e in found]  # the reader's objects do not outlive its volume


def copy_files(open_repo: Callable[[], Repository], request: FilesRequest) -> FilesResult:
    """Copy ``request.paths`` of its backup's filesystem into ``request.dest`` (``movers.files.copy.copy_out``)."""
    from movers.pipeline.lazy import BackupReader

    started = time.monotonic()
    repo = open_repo()
    manifest = repo.resolve(request.volume, request.backup)
    with BackupReader(repo, manifest, workers=request.workers) as reader:
        with open_filesystem(reader, request.filesystem) as opened:
            assert opened.tree is not None and opened.filesystem is not None
            copied, copied_bytes = copy_out(opened.tree, request.paths, request.dest)
            fs_id = opened.filesystem.id
        fetched = reader.fetched_bytes
    return FilesResult(
        volume=request.volume,
        backup_id=manifest.backup_id,
        filesystem=fs_id,
        copied=copied,
        copied_bytes=copied_bytes,
        fetched_bytes=fetched,
        duration_s=round(time.monotonic() - started, 3),
    )
