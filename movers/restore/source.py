"""Where a restored volume's data comes from: the snapshot the backup kept in the cluster, or the repository.

``source: auto | snapshot | repository`` (``RestoreOptions.source``; ``auto`` by default). The kept snapshot serves
(``snapshot_source``) when, as a CSI provisioner would check it (KEP-3476's phase 1: a new claim from a member
snapshot):

* the backup recorded its VolumeSnapshot and the handle of its content;
* the snapshot lives in the namespace restored into (a claim's ``dataSource`` names a snapshot of its own
  namespace);
* the VolumeSnapshot still exists, is not being deleted, is ready, and its bound content's ``snapshotHandle`` is
  the one the backup recorded (not another snapshot that took its name): the test a CBT base passes
  (``movers.backup.bases.SnapshotCheck``);
* the content's driver is the target class's provisioner (a driver provisions only from its own snapshots).

Then the write claim is provisioned from the snapshot (``dataSource``; no download) and the writer compares it
with the backup by the digests the map records, fetching and writing only what differs (``restore --overwrite
if-changed``): the volume is verified as every restore is. Otherwise the volume comes from the repository, and the
reason is the target's ``source_reason``. ``snapshot`` asked for and not possible is refused before anything is
created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from movers.backup.bases import SnapshotCheck
from movers.repo.manifest import SnapshotIdentity

Source = Literal["auto", "snapshot", "repository"]
SOURCES = ("auto", "snapshot", "repository")


@dataclass(frozen=True)
class Chosen:
    """Where one volume's data comes from: ``snapshot`` (the VolumeSnapshot to provision from) and its content, or
    None for the repository; ``reason`` says why."""

    snapshot: str | None
    content: str | None
    reason: str

    @property
    def source(self) -> str:
        return "repository" if self.snapshot is None else "snapshot"


def snapshot_source(
    check: SnapshotCheck, namespace: str, recorded: Mapping[str, Any], storage_class: Mapping[str, Any] | None
) -> Chosen:
    """The kept snapshot of a volume restored into ``namespace`` (``recorded``: the backup's ``snapshot`` record,
    ``{volume_snapshot, namespace, snapshot_handle}``), or the repository and why not (see the module doc). ``check``
    is the one test of a recorded snapshot a CBT base passes too (``movers.backup.bases.SnapshotCheck``)."""
    snapshot = SnapshotIdentity(**recorded)
    if snapshot.namespace and snapshot.namespace != namespace:
        where = f"{snapshot.namespace}/{snapshot.volume_snapshot}"
        return Chosen(None, None, f"its snapshot {where} is in another namespace than {namespace}")
    why, content = check.content(snapshot)
    if content is None:
        return Chosen(None, None, why or "its snapshot cannot be checked")
    driver, provisioner = (content.get("spec") or {}).get("driver"), (storage_class or {}).get("provisioner")
    if provisioner != driver:
        return Chosen(None, None, f"its snapshot is of driver {driver}, the StorageClass's is {provisioner}")
    name = snapshot.volume_snapshot
    return Chosen(
        name, content["metadata"]["name"], f"VolumeSnapshot {namespace}/{name} still holds the backup's snapshot"
    )
