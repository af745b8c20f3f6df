"""Snapshots of a Retain class: what deleting them would leave behind, and removing it with them.

Deleting a VolumeSnapshot bound to a VolumeSnapshotContent whose ``spec.deletionPolicy`` is Retain, or a
VolumeGroupSnapshot bound to such a VolumeGroupSnapshotContent, deletes only the API object: the snapshot-controller
marks the content(s) being-deleted and leaves them, and the storage snapshots, in place (for a group: its content,
its members' contents, every member's storage snapshot). Nothing removes them later, not even a policy patched to
Delete afterwards: only deleting the contents then would. external-snapshotter's documented way is to patch the
contents to Delete *before* deleting the snapshot (for a group, the group content and every member's content: a
member content deleted as Delete leaves its storage snapshot to the group content's deletion).

``delete(api, namespace, kind, name, version, keep)``: deletes a VolumeSnapshot or VolumeGroupSnapshot the product
made. ``keep`` False (the policy's ``retained_snapshots: remove``, the default): its Retain contents are patched to
Delete first, so that they and their storage snapshots go with it, and any of them still there once the snapshot is
gone is deleted (the controller may have decided on a stale copy); returns []. ``keep`` True (``retained_snapshots:
keep``): nothing is patched, and the contents left behind are returned (``RetainedContent``) for the run's report.
Contents whose policy is Delete are never touched. A snapshot already gone is fine.
"""

from __future__ import annotations

from dataclasses import dataclass

from movers.errors import NotFoundError
from movers.kube import apply as k
from movers.kube.snapshots import group_members


@dataclass(frozen=True)
class RetainedContent:
    kind: str  # VolumeSnapshotContent or VolumeGroupSnapshotContent
    name: str
    handle: str | None  # the storage snapshot (a group content: its group snapshot handle)
    left_by: str  # "<kind> <namespace>/<name>" whose deletion left it

    def describe(self) -> str:
        return f"{self.kind} {self.name} (storage snapshot {self.handle or 'unknown'}) of {self.left_by}"


def retain_contents(api, namespace: str, kind: str, name: str, version: str = "v1") -> list[RetainedContent]:
    """The contents of ``kind`` ``namespace/name`` whose deletionPolicy is Retain (group: its content first, then its
    members' contents); [] when it is gone or has no content yet."""
    obj = k.find(api, kind, namespace, name, version)
    if obj is None:
        return []
    status, left_by = obj.get("status") or {}, f"{kind} {namespace}/{name}"
    if kind == "VolumeSnapshot":
        named = [("VolumeSnapshotContent", status.get("boundVolumeSnapshotContentName"), "v1")]
    elif kind == "VolumeGroupSnapshot":
        named = [("VolumeGroupSnapshotContent", status.get("boundVolumeGroupSnapshotContentName"), version)]
        named += [("VolumeSnapshotContent", m.content, "v1") for m in group_members(api, obj)]
    else:
        raise ValueError(f"not a snapshot kind: {kind}")
    found = []
    for content_kind, content_name, content_version in named:
        content = k.find(api, content_kind, None, content_name, content_version) if content_name else None
        if content is None or (content.get("spec") or {}).get("deletionPolicy") != "Retain":
            continue
        cstatus = content.get("status") or {}
        handle = cstatus.get("volumeGroupSnapshotHandle") if content_kind.startswith("VolumeGroup") else None
        found.append(RetainedContent(content_kind, content_name, handle or cstatus.get("snapshotHandle"), left_by))
    return found


def delete(
    api, namespace: str, kind: str, name: str, version: str = "v1", keep: bool = False, timeout: float = 60.0
) -> list[RetainedContent]:
    """Delete ``kind`` ``namespace/name``, removing its Retain contents with it unless ``keep`` (see the module doc);
    the contents left behind.

    The snapshot-controller decides from its informer cache, which may not have seen the patch yet when the deletion
    arrives: then it keeps the contents. So once the snapshot is gone (waited for up to ``timeout`` seconds; longer
    is left to the controller) the patched contents still there and not yet being deleted are deleted: being Delete
    and marked being-deleted by then, they go with their storage snapshots."""
    found = retain_contents(api, namespace, kind, name, version)
    if keep or not found:
        k.delete(api, kind, namespace, name, version)
        return found
    for content in found:
        try:
            k.merge_patch(api, content.kind, None, content.name, DELETE_POLICY, _version(content, version))
        except NotFoundError:  # gone meanwhile: nothing left of it
            pass
    k.delete(api, kind, namespace, name, version)
    if not k.wait_gone(api, kind, namespace, name, timeout, version):
        return []
    for content in found:
        left = k.find(api, content.kind, None, content.name, _version(content, version))
        if left is not None and not left["metadata"].get("deletionTimestamp"):
            k.delete(api, content.kind, None, content.name, _version(content, version))
    return []


DELETE_POLICY = {"spec": {"deletionPolicy": "Delete"}}


def _version(content: RetainedContent, group_version: str) -> str:
    return group_version if content.kind == "VolumeGroupSnapshotContent" else "v1"
