"""Whether a backup's recorded snapshot still exists in the cluster: the check a CBT delta's base must pass.

A delta since a snapshot needs that snapshot: the driver computes it from the storage snapshot, which goes
with its VolumeSnapshotContent (deletionPolicy Delete), and a v1alpha1 SnapshotMetadataService (sidecar
v0.1.0) even looks the base up by its VolumeSnapshot name. A backup records its VolumeSnapshot (namespace,
name) and that content's ``status.snapshotHandle``. The snapshots a run keeps are the rule of
``movers.backup.snapshots`` (``keep``: a run whose every member committed keeps its snapshots and deletes the
ones kept before; any other run's are deleted with the run): this module only reads what is there, so the
base choice can never disagree with it.

``SnapshotCheck(api).missing(snapshot)`` (``snapshot``: a manifest's ``SnapshotIdentity``) says why that
snapshot cannot serve as a base, or None when it can:

* the backup recorded no VolumeSnapshot (name and namespace) or no handle;
* the VolumeSnapshot is gone, being deleted, not ready or not bound to a content;
* its content is gone or holds another handle than the recorded one (a snapshot of the same name made since:
  a delta against it would overlay another point in time's changes).

Reads (the flow's shipped role): list volumesnapshots in the recorded namespace (once per namespace and
check), get the bound volumesnapshotcontent of a snapshot that is there.
"""

from __future__ import annotations

from movers.errors import NotFoundError
from movers.kube.apply import get, list_objects
from movers.repo.manifest import SnapshotIdentity


class SnapshotCheck:
    """See the module doc; one instance lists each namespace's VolumeSnapshots once."""

    def __init__(self, api) -> None:
        self.api = api
        self._listed: dict[str, dict[str, dict]] = {}

    def _snapshots(self, namespace: str) -> dict[str, dict]:
        if namespace not in self._listed:
            items = list_objects(self.api, "VolumeSnapshot", namespace)
            self._listed[namespace] = {o["metadata"]["name"]: o for o in items}
        return self._listed[namespace]

    def missing(self, snapshot: SnapshotIdentity) -> str | None:
        """Why ``snapshot`` (as a backup recorded it) cannot be a delta's base any more; None: it can."""
        return self.content(snapshot)[0]

    def content(self, snapshot: SnapshotIdentity) -> tuple[str | None, dict | None]:
        """``(why not, None)`` as ``missing`` says, or ``(None, the bound VolumeSnapshotContent)`` that still holds
        the recorded handle (a restore provisions from it: ``movers.restore.source``)."""
        ns, name, handle = snapshot.namespace, snapshot.volume_snapshot, snapshot.snapshot_handle
        if not handle:
            return "it recorded no snapshot handle", None
        if not ns or not name:
            return f"it recorded no VolumeSnapshot for handle {handle}, so its existence cannot be checked", None
        vs = self._snapshots(ns).get(name)
        what = f"VolumeSnapshot {ns}/{name}"
        if vs is None:
            return f"{what} no longer exists", None
        if vs["metadata"].get("deletionTimestamp"):
            return f"{what} is being deleted", None
        status = vs.get("status") or {}
        content = status.get("boundVolumeSnapshotContentName")
        if not status.get("readyToUse") or not content:
            return f"{what} is not ready", None
        try:
            vsc = get(self.api, "VolumeSnapshotContent", None, content)
        except NotFoundError:
            return f"{what}'s VolumeSnapshotContent {content} no longer exists", None
        now = (vsc.get("status") or {}).get("snapshotHandle")
        if now != handle:
            return f"{what} is another snapshot now (handle {now}, the backup recorded {handle})", None
        return None, vsc
