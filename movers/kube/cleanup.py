"""Deleting what a run made: ``delete_by_label`` removes its pods, PVCs, VolumeGroupSnapshots and
VolumeSnapshots (found by the run's label) in an order the controllers accept, optionally waiting until
they are gone, including the member snapshots of the deleted groups.
"""

from __future__ import annotations

import time

from movers.kube import retained
from movers.kube.apply import KubeError, _call, _path, api_error, list_objects, served_group_snapshot_version
from movers.kube.snapshots import group_members

CLEANUP_ORDER = ("Pod", "PersistentVolumeClaim", "VolumeGroupSnapshot", "VolumeSnapshot")


def delete_by_label(
    api_client,
    namespace: str,
    label_selector: str,
    wait: bool = False,
    timeout: float = 60.0,
    keep_retained: bool = False,
) -> dict[str, list[str]]:
    """Delete a run's pods, PVCs, VolumeGroupSnapshots and VolumeSnapshots matching ``label_selector``.

    Pods go first (they hold the PVCs), groups before single snapshots (a member snapshot cannot
    be deleted while its group exists; deleting the group deletes its members). Objects already
    gone are fine. Returns kind -> deleted names; ``wait`` polls until none is listed any more,
    including the member VolumeSnapshots of the deleted groups (the controller removes those).
    Snapshots of a Retain class take their contents and storage snapshots with them, unless ``keep_retained``:
    then those stay and are listed under ``"retained"`` (``movers.kube.retained``).
    """
    from kubernetes.client.exceptions import ApiException

    group_version = served_group_snapshot_version(api_client)
    kinds = [(k, group_version if k == "VolumeGroupSnapshot" else "v1") for k in CLEANUP_ORDER]
    kinds = [(k, v) for k, v in kinds if v]
    deleted: dict[str, list[str]] = {}
    groups: dict[str, str] = {}  # name -> uid of the deleted groups: their members go with them
    for kind, version in kinds:
        for obj in list_objects(api_client, kind, namespace, label_selector, version):
            obj_name = obj["metadata"]["name"]
            if kind == "VolumeGroupSnapshot":
                groups[obj_name] = obj["metadata"].get("uid", "")
            if kind in ("VolumeGroupSnapshot", "VolumeSnapshot"):
                left = retained.delete(api_client, namespace, kind, obj_name, version, keep_retained)
                deleted.setdefault(kind, []).append(obj_name)
                if left:
                    deleted.setdefault("retained", []).extend(c.describe() for c in left)
                continue
            try:
                _call(api_client, "DELETE", _path(kind, version, namespace, obj_name))
            except ApiException as err:
                if err.status != 404:
                    raise api_error(err, f"deleting {kind} {namespace}/{obj_name}") from None
            deleted.setdefault(kind, []).append(obj_name)
    if wait:
        deadline = time.monotonic() + timeout
        for kind, version in kinds:
            while left := list_objects(api_client, kind, namespace, label_selector, version):
                if time.monotonic() >= deadline:
                    names = ", ".join(o["metadata"]["name"] for o in left)
                    raise KubeError(f"{kind} still present after {timeout:g} s in {namespace}: {names}")
                time.sleep(0.2)
        for name, uid in groups.items():
            while members := group_members(
                api_client, {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
            ):
                if time.monotonic() >= deadline:
                    names = ", ".join(x.snapshot for x in members)
                    raise KubeError(f"members of {namespace}/{name} still present after {timeout:g} s: {names}")
                time.sleep(0.2)
    return deleted
