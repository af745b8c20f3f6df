"""VolumeSnapshots and VolumeGroupSnapshots: readiness, group members, content annotations.

* ``wait_snapshot_ready``: VolumeSnapshot / VolumeGroupSnapshot readyToUse (or only cut), or
  ``apply.SnapshotNotReadyError`` with the controller's ``status.error.message``.
* ``group_members``: the member VolumeSnapshots of a VolumeGroupSnapshot, mapped to their PVCs
  and the snapshot handles of their contents (``GroupMember``).
* ``patch_content_annotation``: merge-patches annotations onto a VolumeSnapshotContent.
* ``resolve_snapshot(api, namespace, name)``: VolumeSnapshot -> VolumeSnapshotContent -> driver,
  ``status.snapshotHandle`` (the base of the next delta), restore size, group, and the source volume's CSI
  handle (``spec.source.volumeHandle``; None for a pre-provisioned content), as a ``SnapshotRef``.

The served group snapshot version is ``apply.served_group_snapshot_version``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from movers.errors import NotFoundError
from movers.kube.apply import (
    KubeError,
    SnapshotNotReadyError,
    _call,
    _path,
    api_error,
    get,
    list_objects,
    served_group_snapshot_version,
)
from movers.kube.manifests import GROUP_SNAPSHOT_GROUP, SNAPSHOT_GROUP, allow_volume_mode_change_patch
from movers.values import quantity_bytes


@dataclass(frozen=True)
class GroupMember:
    pvc: str | None  # spec.source.persistentVolumeClaimName of the member VolumeSnapshot
    snapshot: str  # member VolumeSnapshot name (in the group's namespace)
    content: str | None  # its VolumeSnapshotContent
    handle: str | None  # VolumeSnapshotContent status.snapshotHandle: the base of the next delta
    volume_handle: str | None
    restore_size: int | None
    source_volume_mode: str | None  # VolumeSnapshotContent spec.sourceVolumeMode (Filesystem needs the patch)
    ready: bool


def _ready(kind: str, obj: dict, until: str = "ready") -> bool:
    status = obj.get("status") or {}
    done = status.get("readyToUse") if until == "ready" else status.get("creationTime")
    if kind == "VolumeSnapshot":
        return bool(done) and bool(status.get("boundVolumeSnapshotContentName"))
    return bool(done)


@dataclass(frozen=True)
class SnapshotWait:
    """What ``wait_snapshot_ready`` waits for: ``until`` ``"ready"`` (``status.readyToUse``) or ``"cut"``
    (``status.creationTime``), reading the object every ``interval`` s."""

    until: str = "ready"
    interval: float = 0.5


def wait_snapshot_ready(
    api_client,
    kind: str,
    namespace: str,
    name: str,
    timeout: float = 300.0,
    version: str | None = None,
    wait: SnapshotWait = SnapshotWait(),
) -> dict:
    """Poll a VolumeSnapshot or VolumeGroupSnapshot until ``status.readyToUse``; return the object.

    ``wait.until="cut"`` waits only until ``status.creationTime`` is set: the point in time is taken (the
    CSI snapshot call returned), so an application frozen for the snapshot can be thawed; readiness
    (e.g. an upload to the storage backend) may come later.

    ``version`` None: v1 for VolumeSnapshot, the served group snapshot version for groups. On
    timeout ``SnapshotNotReadyError`` (retriable) names ``status.error.message`` if the controller
    set one; a missing object raises ``NotFoundError``.
    """
    if kind not in ("VolumeSnapshot", "VolumeGroupSnapshot"):
        raise ValueError(f"not a snapshot kind: {kind}")
    if version is None:
        version = "v1" if kind == "VolumeSnapshot" else served_group_snapshot_version(api_client)
        if version is None:
            raise KubeError(f"the cluster serves no {GROUP_SNAPSHOT_GROUP} version", 404)
    deadline = time.monotonic() + timeout
    while True:
        if wait.until not in ("ready", "cut"):
            raise ValueError(f"until must be 'ready' or 'cut', not {wait.until!r}")
        obj = get(api_client, kind, namespace, name, version)
        if _ready(kind, obj, wait.until):
            return obj
        if time.monotonic() >= deadline:
            error = ((obj.get("status") or {}).get("error") or {}).get("message")
            why = f": {error}" if error else " (no error reported by the snapshot controller)"
            raise SnapshotNotReadyError(f"{kind} {namespace}/{name} not ready after {timeout:g} s{why}")
        time.sleep(min(wait.interval, max(0.0, deadline - time.monotonic())))


def group_members(api_client, vgs: Mapping[str, Any]) -> list[GroupMember]:
    """The member VolumeSnapshots of ``vgs`` (a VolumeGroupSnapshot dict), sorted by PVC.

    Members are the VolumeSnapshots of the group's namespace whose ``status.volumeGroupSnapshotName``
    is the group's name or whose ownerReference (kind VolumeGroupSnapshot, any apiVersion) has the
    group's uid (cbt-api-facts §5: VGS status has no member list).
    """
    meta = vgs["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid")
    members = []
    for vs in list_objects(api_client, "VolumeSnapshot", namespace):
        status = vs.get("status") or {}
        owned = any(
            ref.get("kind") == "VolumeGroupSnapshot" and uid and ref.get("uid") == uid
            for ref in (vs.get("metadata") or {}).get("ownerReferences") or []
        )
        if status.get("volumeGroupSnapshotName") != name and not owned:
            continue
        content_name = status.get("boundVolumeSnapshotContentName")
        content: dict = {}
        if content_name:
            try:
                content = get(api_client, "VolumeSnapshotContent", None, content_name)
            except NotFoundError:  # being deleted with its group: the member has no handle any more
                pass
        cstatus, cspec = content.get("status") or {}, content.get("spec") or {}
        size = cstatus.get("restoreSize") or status.get("restoreSize")
        members.append(
            GroupMember(
                pvc=((vs.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName") or None,
                snapshot=vs["metadata"]["name"],
                content=content_name,
                handle=cstatus.get("snapshotHandle"),
                volume_handle=(cspec.get("source") or {}).get("volumeHandle"),
                restore_size=quantity_bytes(size),
                source_volume_mode=cspec.get("sourceVolumeMode"),
                ready=bool(status.get("readyToUse")) and bool(cstatus.get("readyToUse")),
            )
        )
    return sorted(members, key=lambda m: (m.pvc or "", m.snapshot))


def patch_content_annotation(api_client, content: str, annotations: Mapping[str, str] | None = None) -> dict:
    """Merge-patch ``annotations`` (default: allow-volume-mode-change) onto VolumeSnapshotContent ``content``."""
    from kubernetes.client.exceptions import ApiException

    body = {"metadata": {"annotations": dict(annotations)}} if annotations else allow_volume_mode_change_patch()
    try:
        return _call(
            api_client,
            "PATCH",
            _path("VolumeSnapshotContent", "v1", None, content),
            body=body,
            content_type="application/merge-patch+json",
        )
    except ApiException as err:
        raise api_error(err, f"patching VolumeSnapshotContent {content}") from None


SNAPSHOT_VERSION = "v1"


@dataclass(frozen=True)
class SnapshotRef:
    namespace: str
    name: str
    content: str
    driver: str
    handle: str | None
    ready: bool
    restore_size: int | None
    source_pvc: str | None
    group_snapshot: str | None
    group_snapshot_handle: str | None
    error: str | None
    source_volume_handle: str | None = None  # the content's spec.source.volumeHandle: the snapshot's volume


def _custom(api_client):
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


def resolve_snapshot(api_client, namespace: str, name: str) -> SnapshotRef:
    from kubernetes.client.exceptions import ApiException

    custom = _custom(api_client)
    try:
        vs = custom.get_namespaced_custom_object(SNAPSHOT_GROUP, SNAPSHOT_VERSION, namespace, "volumesnapshots", name)
    except ApiException as err:
        raise api_error(err, f"reading VolumeSnapshot {namespace}/{name}") from None
    status = vs.get("status") or {}
    content_name = status.get("boundVolumeSnapshotContentName")
    vs_error = (status.get("error") or {}).get("message")
    if not content_name:
        return SnapshotRef(namespace, name, "", "", None, False, None, _source_pvc(vs), None, None, vs_error)
    try:
        vsc = custom.get_cluster_custom_object(SNAPSHOT_GROUP, SNAPSHOT_VERSION, "volumesnapshotcontents", content_name)
    except ApiException as err:
        raise api_error(err, f"reading VolumeSnapshotContent {content_name}") from None
    cstatus = vsc.get("status") or {}
    ready = bool(status.get("readyToUse")) and bool(cstatus.get("readyToUse")) and bool(cstatus.get("snapshotHandle"))
    size = cstatus.get("restoreSize") or status.get("restoreSize")
    return SnapshotRef(
        namespace=namespace,
        name=name,
        content=content_name,
        driver=(vsc.get("spec") or {}).get("driver", ""),
        handle=cstatus.get("snapshotHandle"),
        ready=ready,
        restore_size=quantity_bytes(size),
        source_pvc=_source_pvc(vs),
        group_snapshot=status.get("volumeGroupSnapshotName"),
        group_snapshot_handle=cstatus.get("volumeGroupSnapshotHandle"),
        error=vs_error or (cstatus.get("error") or {}).get("message"),
        source_volume_handle=((vsc.get("spec") or {}).get("source") or {}).get("volumeHandle"),
    )


def _source_pvc(vs: dict) -> str | None:
    return ((vs.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName") or None
