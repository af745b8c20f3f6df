"""The parent of a delta: the backup its extents are changes since, named, never guessed.

Extents (a CBT delta, or a file of changed ranges) are relative to one snapshot. A backup built from them
keeps every other range from its parent, so the parent must be the backup of that snapshot: had a full
backup of the same volume committed between the extents' computation and the backup, "the newest backup"
would be that full one, and the result a backup that restores without error to data that differs from
what was read.

* ``delta_parent(repo, volume_id, parent_id=..., base_handle=...)``: the backup named by id (which must
  have recorded ``base_handle`` when both are given), else the one backup that recorded snapshot handle
  ``base_handle``. ``NotFoundError`` (exit 3) for an id that is not there, ``UsageError`` (exit 2) when no
  backup recorded the handle, ``AmbiguousParent`` (exit 2) when several did.
* ``backups_with_handle``: every backup of a volume that recorded a snapshot handle, newest first.
"""

from __future__ import annotations

from movers.errors import UsageError
from movers.repo.manifest import Manifest
from movers.repo.repository import Repository


class AmbiguousParent(UsageError):
    """Which backup the extents are changes since is not known for sure: nothing is backed up (exit 2)."""


def backups_with_handle(repo: Repository, volume_id: str, handle: str) -> list[Manifest]:
    """The backups of ``volume_id`` that recorded snapshot handle ``handle``, newest first."""
    found = []
    for ref in reversed(repo.list_backups(volume_id)):
        manifest = repo.read_manifest(volume_id, ref.backup_id)
        if manifest.snapshot.snapshot_handle == handle:
            found.append(manifest)
    return found


def delta_parent(
    repo: Repository, volume_id: str, *, parent_id: str | None = None, base_handle: str | None = None
) -> Manifest:
    """The backup a delta of ``volume_id`` builds on: backup ``parent_id``, else the one that recorded
    ``base_handle`` (see the module doc); one of them must be given."""
    if parent_id is not None:
        check_backup_id(parent_id)
        manifest = repo.read_manifest(volume_id, parent_id)
        recorded = manifest.snapshot.snapshot_handle
        if base_handle is not None and recorded != base_handle:
            raise UsageError(
                f"the extents are changes since snapshot {base_handle}, but backup {parent_id} of {volume_id}"
                f" recorded {f'snapshot {recorded}' if recorded else 'no snapshot handle'}: name the backup of"
                " that snapshot, or back up with --full (and the extents of the whole volume) or --scan"
            )
        return manifest
    if base_handle is None:
        raise ValueError("delta_parent needs a parent id or a base handle")
    found = backups_with_handle(repo, volume_id, base_handle)
    if not found:
        raise UsageError(
            f"no backup of volume {volume_id} recorded snapshot handle {base_handle}: a delta since it has nothing"
            " to build on (back up without a base for a full)"
        )
    if len(found) > 1:
        ids = ", ".join(m.backup_id for m in found)
        raise AmbiguousParent(
            f"{len(found)} backups of volume {volume_id} recorded snapshot handle {base_handle} ({ids}):"
            " name the one the extents are changes since with --parent BACKUP_ID"
        )
    return found[0]


def check_backup_id(backup_id: str) -> str:
    """``backup_id`` when it can be a backup id (one key segment), else ``UsageError``."""
    if backup_id == "latest":
        raise UsageError(
            "the parent must be a backup id, not latest: the newest backup need not be the one the extents are"
            " changes since"
        )
    if not backup_id or "/" in backup_id or backup_id in (".", "..") or not backup_id.isprintable():
        raise UsageError(f"{backup_id!r} is not a backup id (as ls shows them, e.g. 20261121T105300123456Z-1a2b3c)")
    return backup_id
