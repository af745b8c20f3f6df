"""Which backup a changed-block delta may build on: one of the same source volume, never another.

A CBT delta (``GetMetadataDelta``) lists the blocks that changed between two snapshots *of one volume*,
and a backup built from it overlays them on the base's backup. After a restore into a new claim, a
re-created PVC or PV, or a claim bound to another volume, the base and the target are snapshots of
different volumes: a driver that rejects the pair answers INVALID_ARGUMENT, one that does not would
yield a wrong incremental. So the source's identity is recorded in every manifest (``volume.
pv_volume_handle``, the CSI volume handle, and ``volume.pv_uid``) and compared before a delta is asked:

* ``same_volume(recorded, current)``: None when nothing recorded says they differ, else the reason
  (the volume handles differ, or the PV uids differ where both are recorded).
* ``choose_base(repo, current, missing)``: ``BaseChoice(handle, reason, snapshot, backup_id)``: the snapshot handle
  (VolumeSnapshot name and backup id) of the newest backup of ``current.id`` whose recorded
  volume handle (and PV uid, where both are known) is the current source's and whose snapshot still exists, or
  ``(None, reason)`` for a full backup, e.g. "the PVC is bound to another volume than the last backup's ...: full
  backup". ``missing(snapshot)`` says why a backup's recorded snapshot cannot serve as the base any more
  (``movers.backup.bases.SnapshotCheck.missing``: deleted, replaced), None when it can; such backups are skipped and
  the reason names them, e.g. after a partial run (whose snapshots its cleanup deleted) the delta is since the
  backup of the previous kept base. Without ``missing`` every recorded snapshot counts as existing. A backup that
  records no volume handle (written before the identity was recorded) never serves as a base here: the first backup
  after the upgrade is full.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from movers.repo.manifest import Manifest, SnapshotIdentity, VolumeIdentity
from movers.repo.repository import Repository


class BaseChoice(NamedTuple):
    handle: str | None  # the base snapshot's CSI handle for GetMetadataDelta; None: a full backup
    reason: str  # one line: why this base, or why none
    snapshot: str | None = None  # the base's VolumeSnapshot name (a v1alpha1 service asks for it by name)
    backup_id: str | None = None  # the backup of that snapshot: the delta's parent (never whichever is newest)


def same_volume(recorded: VolumeIdentity, current: VolumeIdentity) -> str | None:
    """Why ``recorded`` (a base backup's source) is not ``current``'s volume, or None when nothing says so."""
    if recorded.pv_volume_handle and current.pv_volume_handle and recorded.pv_volume_handle != current.pv_volume_handle:
        return (
            f"the PVC is bound to another volume than the base backup's (volume handle"
            f" {current.pv_volume_handle}, the base's {recorded.pv_volume_handle})"
        )
    if recorded.pv_uid and current.pv_uid and recorded.pv_uid != current.pv_uid:
        return f"the source PV was re-created (uid {current.pv_uid}, the base's {recorded.pv_uid})"
    return None


def choose_base(
    repo: Repository, current: VolumeIdentity, missing: Callable[[SnapshotIdentity], str | None] | None = None
) -> BaseChoice:
    """The base of the next CBT delta of volume ``current.id`` whose source is now the volume
    ``current.pv_volume_handle`` (PV ``current.pv_uid``), or None and why a full backup is needed (see the module
    doc). Reads manifests newest first and stops at the first match."""
    volume_id, pv_volume_handle = current.id, current.pv_volume_handle
    refs = repo.list_backups(volume_id)
    if not refs:
        return BaseChoice(None, f"no earlier backup of {volume_id}: full backup")
    if not pv_volume_handle:
        return BaseChoice(
            None, "the source volume's CSI volume handle is unknown, so no base can be verified: full backup"
        )
    newest: Manifest | None = None
    gone: list[tuple[str, str]] = []  # (backup id, why its snapshot cannot be the base), newest first
    for ref in reversed(refs):
        manifest = repo.read_manifest(volume_id, ref.backup_id)
        if not manifest.snapshot.snapshot_handle:
            continue
        newest = newest or manifest
        if manifest.volume.pv_volume_handle and same_volume(manifest.volume, current) is None:
            why_not = missing(manifest.snapshot) if missing else None
            if why_not:
                gone.append((manifest.backup_id, why_not))
                continue
            return BaseChoice(
                manifest.snapshot.snapshot_handle,
                f"delta since backup {manifest.backup_id} (snapshot {manifest.snapshot.snapshot_handle})"
                f" of the same volume {pv_volume_handle}{_skipped(gone)}",
                manifest.snapshot.volume_snapshot,
                manifest.backup_id,
            )
    if gone:
        backup_id, why = gone[0]
        return BaseChoice(
            None,
            f"no backup of {volume_id} has its snapshot in the cluster any more (backup {backup_id}: {why}"
            f"{_likewise(gone)}): full backup",
        )
    if newest is None:
        return BaseChoice(None, f"no earlier backup of {volume_id} recorded a snapshot handle: full backup")
    if not newest.volume.pv_volume_handle:
        return BaseChoice(
            None,
            f"the last backup of {volume_id} ({newest.backup_id}) records no source volume"
            " (written before volume identities were recorded): full backup",
        )
    why = same_volume(newest.volume, current) or "no earlier backup is of this volume"
    why = why.replace("the base backup's", "the last backup's").replace("the base's", "the last backup's")
    return BaseChoice(None, f"{why}: full backup")


def _skipped(gone: list[tuple[str, str]]) -> str:
    """The newer backups passed over for the base, for its reason."""
    if not gone:
        return ""
    backup_id, why = gone[0]
    return f"; the newer backup {backup_id} is no base: {why}{_likewise(gone)}"


def _likewise(gone: list[tuple[str, str]]) -> str:
    return f"; {len(gone) - 1} older one(s) likewise" if len(gone) > 1 else ""
