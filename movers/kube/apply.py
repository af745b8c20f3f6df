"""Thin adapters that apply ``movers.kube.manifests`` through the ``kubernetes`` client.

Every function takes the ``kubernetes.client.ApiClient`` to use (no module globals, no config
loading) and returns plain dicts or small dataclasses. Errors are ``KubeError`` subclasses of
``MoverError`` carrying the API's message; ``retriable`` says whether a retry can help.

* ``create``: tolerates AlreadyExists when the existing object carries the same run label (a
  retried run reuses what it made), refuses otherwise (``ConflictError``).
* ``served_group_snapshot_version``: v1, v1beta2 or v1beta1 (preferred first), None if none.
* ``wait_snapshot_ready``: VolumeSnapshot / VolumeGroupSnapshot readyToUse, or
  ``SnapshotNotReadyError`` with the controller's ``status.error.message``.
* ``group_members``: the member VolumeSnapshots of a VolumeGroupSnapshot, mapped to their PVCs
  and the snapshot handles of their contents.
* ``run_pod_to_completion``: creates a pod, follows its log, waits for Succeeded/Failed.
* ``delete_by_label``: removes the pods, PVCs, VolumeGroupSnapshots and VolumeSnapshots of a run.
* ``patch_content_annotation``: merge-patches annotations onto a VolumeSnapshotContent.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from movers.errors import MoverError, NotFoundError
from movers.kube.manifests import (
    GROUP_SNAPSHOT_GROUP,
    GROUP_SNAPSHOT_VERSIONS,
    RUN_LABEL,
    SNAPSHOT_GROUP,
    allow_volume_mode_change_patch,
)

# kind -> (group, plural, namespaced)
KINDS = {
    "Pod": ("", "pods", True),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims", True),
    "Secret": ("", "secrets", True),
    "ServiceAccount": ("", "serviceaccounts", True),
    "VolumeSnapshot": (SNAPSHOT_GROUP, "volumesnapshots", True),
    "VolumeSnapshotContent": (SNAPSHOT_GROUP, "volumesnapshotcontents", False),
    "VolumeGroupSnapshot": (GROUP_SNAPSHOT_GROUP, "volumegroupsnapshots", True),
    "VolumeGroupSnapshotContent": (GROUP_SNAPSHOT_GROUP, "volumegroupsnapshotcontents", False),
}


class KubeError(MoverError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (None: not an API error)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retriable = status is None or status in (429, 500, 502, 503, 504)


class ConflictError(KubeError):
    """The object exists and does not belong to this run."""


class SnapshotNotReadyError(KubeError):
    """A snapshot did not become ready in time; the message carries the controller's error."""


class PodTimeoutError(KubeError):
    """A pod did not finish in time (it is left for ``delete_by_label``)."""


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


@dataclass
class PodResult:
    name: str
    phase: str  # Succeeded or Failed
    exit_code: int | None
    message: str  # the termination message (or log tail under FallbackToLogsOnError)
    result: Any  # the message parsed as JSON, None when it is not JSON
    log_tail: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded" and self.exit_code == 0


def _api_error(err, what: str) -> MoverError:
    message = err.reason
    try:
        message = json.loads(err.body).get("message") or message
    except (TypeError, ValueError, AttributeError):
        pass
    if err.status == 404:
        return NotFoundError(f"{what} not found")
    return KubeError(f"{what}: {err.status} {message}", err.status)


def _path(kind: str, version: str, namespace: str | None, name: str | None = None) -> str:
    try:
        group, plural, namespaced = KINDS[kind]
    except KeyError:
        raise ValueError(f"unsupported kind {kind!r}") from None
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespaced:
        if not namespace:
            raise ValueError(f"{kind} needs a namespace")
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    return f"{path}/{name}" if name else path


def _call(api_client, method: str, path: str, body=None, query=None, content_type: str = "application/json"):
    """One REST call through ``api_client`` (its auth and TLS); the JSON answer as a dict."""
    method, url, headers, body, post = api_client.param_serialize(
        method, path, query_params=list((query or {}).items()), body=body,
        header_params={"Accept": "application/json", "Content-Type": content_type}, auth_settings=["BearerToken"],
    )  # fmt: skip
    resp = api_client.call_api(method, url, header_params=headers, body=body, post_params=post)
    resp.read()
    return api_client.response_deserialize(resp, {"2XX": "object"}).data


def _version_of(kind: str, api_version: str | None) -> str:
    return (api_version or "v1").rsplit("/", 1)[-1]


def get(api_client, kind: str, namespace: str | None, name: str, version: str = "v1") -> dict:
    """The object as a dict; ``NotFoundError`` when it does not exist."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _call(api_client, "GET", _path(kind, version, namespace, name))
    except ApiException as err:
        raise _api_error(err, f"{kind} {namespace + '/' if namespace else ''}{name}") from None


def list_objects(api_client, kind: str, namespace: str | None, label_selector: str | None = None,
                 version: str = "v1") -> list[dict]:  # fmt: skip
    """The items of a list call (``label_selector`` in the usual syntax)."""
    from kubernetes.client.exceptions import ApiException

    query = {"labelSelector": label_selector} if label_selector else {}
    try:
        return _call(api_client, "GET", _path(kind, version, namespace), query=query).get("items") or []
    except ApiException as err:
        raise _api_error(err, f"listing {kind} in {namespace}") from None


def create(api_client, manifest: Mapping[str, Any], run_label: str = RUN_LABEL) -> dict:
    """Create ``manifest``; if it exists with the same ``run_label`` value, return the existing object.

    An existing object without that label, or of another run, raises ``ConflictError``: a run never
    adopts (and later deletes) what it did not create.
    """
    from kubernetes.client.exceptions import ApiException

    kind, meta = manifest["kind"], manifest["metadata"]
    version, namespace = _version_of(kind, manifest.get("apiVersion")), meta.get("namespace")
    what = f"{kind} {namespace + '/' if namespace else ''}{meta['name']}"
    try:
        return _call(api_client, "POST", _path(kind, version, namespace), body=dict(manifest))
    except ApiException as err:
        if err.status != 409:
            raise _api_error(err, f"creating {what}") from None
    existing = get(api_client, kind, namespace, meta["name"], version)
    mine = (meta.get("labels") or {}).get(run_label)
    theirs = ((existing.get("metadata") or {}).get("labels") or {}).get(run_label)
    if mine is None or mine != theirs:
        raise ConflictError(f"{what} already exists and is not from this run ({run_label}={theirs!r})", 409)
    return existing


def served_group_snapshot_version(api_client) -> str | None:
    """The preferred served ``groupsnapshot.storage.k8s.io`` version (v1 > v1beta2 > v1beta1), or None."""
    from kubernetes import client

    for group in client.ApisApi(api_client).get_api_versions().groups or []:
        if group.name == GROUP_SNAPSHOT_GROUP:
            served = {v.version for v in group.versions or []}
            return next((v for v in GROUP_SNAPSHOT_VERSIONS if v in served), None)
    return None


def _ready(kind: str, obj: dict, until: str = "ready") -> bool:
    status = obj.get("status") or {}
    done = status.get("readyToUse") if until == "ready" else status.get("creationTime")
    if kind == "VolumeSnapshot":
        return bool(done) and bool(status.get("boundVolumeSnapshotContentName"))
    return bool(done)


def wait_snapshot_ready(api_client, kind: str, namespace: str, name: str, timeout: float = 300.0,
                        version: str | None = None, interval: float = 0.5, until: str = "ready") -> dict:  # fmt: skip
    """Poll a VolumeSnapshot or VolumeGroupSnapshot until ``status.readyToUse``; return the object.

    ``until="cut"`` waits only until ``status.creationTime`` is set: the point in time is taken (the
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
        if until not in ("ready", "cut"):
            raise ValueError(f"until must be 'ready' or 'cut', not {until!r}")
        obj = get(api_client, kind, namespace, name, version)
        if _ready(kind, obj, until):
            return obj
        if time.monotonic() >= deadline:
            error = ((obj.get("status") or {}).get("error") or {}).get("message")
            why = f": {error}" if error else " (no error reported by the snapshot controller)"
            raise SnapshotNotReadyError(f"{kind} {namespace}/{name} not ready after {timeout:g} s{why}")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def patch_labels(api_client, kind: str, namespace: str | None, name: str, labels: Mapping[str, str | None],
                 version: str | None = None) -> dict:  # fmt: skip
    """Merge-patch ``metadata.labels`` (a None value removes the label); returns the object."""
    path = _path(kind, version or _default_version(api_client, kind), namespace, name)
    return _call(api_client, "PATCH", path, body={"metadata": {"labels": dict(labels)}},
                 content_type="application/merge-patch+json")  # fmt: skip


def delete(api_client, kind: str, namespace: str | None, name: str, version: str | None = None) -> None:
    """Delete one object; a missing one is not an error."""
    from kubernetes.client.exceptions import ApiException

    try:
        _call(api_client, "DELETE", _path(kind, version or _default_version(api_client, kind), namespace, name))
    except ApiException as err:
        if err.status != 404:
            raise


def _default_version(api_client, kind: str) -> str:
    if kind in ("VolumeGroupSnapshot", "VolumeGroupSnapshotContent", "VolumeGroupSnapshotClass"):
        version = served_group_snapshot_version(api_client)
        if version is None:
            raise KubeError(f"the cluster serves no {GROUP_SNAPSHOT_GROUP} version", 404)
        return version
    return "v1"


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
        owned = any(ref.get("kind") == "VolumeGroupSnapshot" and uid and ref.get("uid") == uid
                    for ref in (vs.get("metadata") or {}).get("ownerReferences") or [])  # fmt: skip
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
        members.append(GroupMember(
            pvc=((vs.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName") or None,
            snapshot=vs["metadata"]["name"], content=content_name, handle=cstatus.get("snapshotHandle"),
            volume_handle=(cspec.get("source") or {}).get("volumeHandle"),
            restore_size=_quantity(size), source_volume_mode=cspec.get("sourceVolumeMode"),
            ready=bool(status.get("readyToUse")) and bool(cstatus.get("readyToUse")),
        ))  # fmt: skip
    return sorted(members, key=lambda m: (m.pvc or "", m.snapshot))


def _quantity(value) -> int | None:
    from movers.cbt.discovery import _quantity as quantity

    return quantity(value)


def patch_content_annotation(api_client, content: str, annotations: Mapping[str, str] | None = None) -> dict:
    """Merge-patch ``annotations`` (default: allow-volume-mode-change) onto VolumeSnapshotContent ``content``."""
    from kubernetes.client.exceptions import ApiException

    body = {"metadata": {"annotations": dict(annotations)}} if annotations else allow_volume_mode_change_patch()
    try:
        return _call(api_client, "PATCH", _path("VolumeSnapshotContent", "v1", None, content), body=body,
                     content_type="application/merge-patch+json")  # fmt: skip
    except ApiException as err:
        raise _api_error(err, f"patching VolumeSnapshotContent {content}") from None


def _terminal(pod) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def _waiting_reason(pod) -> str:
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        if cs.state and cs.state.waiting:
            return f"{cs.state.waiting.reason}: {cs.state.waiting.message or ''}".strip(": ")
    return ""


def run_pod_to_completion(api_client, pod: Mapping[str, Any], timeout: float,
                          on_log_line: Callable[[str], None] | None = None, tail: int = 20) -> PodResult:  # fmt: skip
    """Create ``pod`` (tolerating the same run's pod), follow its log, wait until Succeeded/Failed.

    ``on_log_line`` is called with each log line (e.g. ``progress done=N total=N``) from a helper
    thread, while the pod runs. Returns the first container's exit code, its termination message
    (parsed as JSON into ``result`` when it is JSON) and the last ``tail`` log lines. A pod not
    finished after ``timeout`` s raises ``PodTimeoutError`` with its waiting reason; the pod is
    not deleted (``delete_by_label`` cleans up).
    """
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    create(api_client, pod)
    lines: collections.deque[str] = collections.deque(maxlen=tail)
    done = threading.Event()
    follower = threading.Thread(target=_follow_log, args=(core, namespace, name, lines, on_log_line, done),
                                name=f"log-{name}", daemon=True)  # fmt: skip
    follower.start()
    deadline = time.monotonic() + timeout
    try:
        current = core.read_namespaced_pod(name, namespace)
        while not _terminal(current):
            left = deadline - time.monotonic()
            if left <= 0:
                why = _waiting_reason(current)
                raise PodTimeoutError(f"pod {namespace}/{name} not finished after {timeout:g} s"
                                      f" (phase {current.status.phase if current.status else '?'}"
                                      f"{', ' + why if why else ''})")  # fmt: skip
            w = watch.Watch()
            try:
                for event in w.stream(core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                                      timeout_seconds=max(1, int(min(left, 10)))):  # fmt: skip
                    if _terminal(event["object"]):
                        break
            finally:
                w.stop()
            current = core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        raise _api_error(err, f"pod {namespace}/{name}") from None
    finally:
        done.set()
    follower.join(timeout=5)
    exit_code, message = None, ""
    for cs in current.status.container_statuses or []:
        if cs.state and cs.state.terminated:
            exit_code, message = cs.state.terminated.exit_code, cs.state.terminated.message or ""
            break
    try:
        result = json.loads(message) if message.strip() else None
    except ValueError:
        result = None
    return PodResult(name, current.status.phase, exit_code, message, result, list(lines))


def _follow_log(core, namespace, name, lines, on_log_line, done: threading.Event) -> None:
    """Stream the pod's log (retrying until the container has started); one call per line."""
    from kubernetes.client.exceptions import ApiException

    seen = 0
    while True:
        try:
            resp = core.read_namespaced_pod_log(name, namespace, follow=True, _preload_content=False)
        except ApiException:  # 400 while the container is being created
            if done.wait(0.2):
                return
            continue
        try:
            index = 0
            for raw in _iter_lines(resp):
                index += 1
                if index <= seen:  # a re-follow starts from the beginning
                    continue
                seen = index
                lines.append(raw)
                if on_log_line is not None:
                    on_log_line(raw)
            return
        except Exception:  # noqa: BLE001  (connection dropped: re-follow unless the pod is done)
            if done.is_set():
                return
        finally:
            resp.release_conn()


def _iter_lines(resp):
    pending = b""
    for chunk in resp.stream(4096):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


CLEANUP_ORDER = ("Pod", "PersistentVolumeClaim", "VolumeGroupSnapshot", "VolumeSnapshot")


def delete_by_label(api_client, namespace: str, label_selector: str, wait: bool = False,
                    timeout: float = 60.0) -> dict[str, list[str]]:  # fmt: skip
    """Delete a run's pods, PVCs, VolumeGroupSnapshots and VolumeSnapshots matching ``label_selector``.

    Pods go first (they hold the PVCs), groups before single snapshots (a member snapshot cannot
    be deleted while its group exists; deleting the group deletes its members). Objects already
    gone are fine. Returns kind -> deleted names; ``wait`` polls until none is listed any more,
    including the member VolumeSnapshots of the deleted groups (the controller removes those).
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
            try:
                _call(api_client, "DELETE", _path(kind, version, namespace, obj_name))
            except ApiException as err:
                if err.status != 404:
                    raise _api_error(err, f"deleting {kind} {namespace}/{obj_name}") from None
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
            while members := group_members(api_client, {"metadata": {"namespace": namespace, "name": name,
                                                                     "uid": uid}}):  # fmt: skip
                if time.monotonic() >= deadline:
                    names = ", ".join(x.snapshot for x in members)
                    raise KubeError(f"members of {namespace}/{name} still present after {timeout:g} s: {names}")
                time.sleep(0.2)
    return deleted


# -- restore: claims, volumes and the hand-over of a volume to another claim ----------------------------------

KINDS.update({  # kinds the restore reads or writes besides the backup's
    "PersistentVolume": ("", "persistentvolumes", False),
    "Namespace": ("", "namespaces", False),
    "Event": ("", "events", True),
    "StorageClass": ("storage.k8s.io", "storageclasses", False),
})
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def merge_patch(api_client, kind: str, namespace: str | None, name: str, body: Mapping[str, Any],
                version: str = "v1") -> dict:  # fmt: skip
    """A JSON merge patch of one object; returns the object."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _call(api_client, "PATCH", _path(kind, version, namespace, name), body=dict(body),
                     content_type="application/merge-patch+json")  # fmt: skip
    except ApiException as err:
        raise _api_error(err, f"patching {kind} {namespace + '/' if namespace else ''}{name}") from None


def find(api_client, kind: str, namespace: str | None, name: str, version: str = "v1") -> dict | None:
    """The object, or None when it does not exist."""
    try:
        return get(api_client, kind, namespace, name, version)
    except NotFoundError:
        return None


def default_storage_class(api_client) -> str | None:
    """The cluster's default StorageClass (the newest one annotated default, as admission picks), or None."""
    classes = [c for c in list_objects(api_client, "StorageClass", None)
               if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]  # fmt: skip
    classes.sort(key=lambda c: c["metadata"].get("creationTimestamp") or "")
    return classes[-1]["metadata"]["name"] if classes else None


def pods_using_claim(api_client, namespace: str, claim: str) -> list[str]:
    """Names of the pods of ``namespace`` that are not finished and have a volume of claim ``claim``."""
    users = []
    for pod in list_objects(api_client, "Pod", namespace):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim
               for v in (pod.get("spec") or {}).get("volumes") or []):  # fmt: skip
            users.append(pod["metadata"]["name"])
    return sorted(users)


def _warning_about(api_client, namespace: str, name: str) -> str:
    events = [e for e in list_objects(api_client, "Event", namespace)
              if (e.get("involvedObject") or {}).get("name") == name and e.get("type") == "Warning"]  # fmt: skip
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f": {events[-1].get('reason')}: {events[-1].get('message')}" if events else ""


def wait_claim_bound(api_client, namespace: str, name: str, timeout: float = 120.0, interval: float = 0.2) -> dict:
    """Poll PVC ``name`` until Bound; return it. On timeout a ``KubeError`` (retriable) names the claim's
    phase and the last Warning event about it (e.g. the provisioner's ProvisioningFailed)."""
    deadline = time.monotonic() + timeout
    while True:
        pvc = get(api_client, "PersistentVolumeClaim", namespace, name)
        phase = (pvc.get("status") or {}).get("phase")
        if phase == "Bound" and (pvc.get("spec") or {}).get("volumeName"):
            return pvc
        if time.monotonic() >= deadline:
            raise KubeError(f"PersistentVolumeClaim {namespace}/{name} not bound after {timeout:g} s (phase {phase})"
                            f"{_warning_about(api_client, namespace, name)}")  # fmt: skip
        time.sleep(interval)


def delete_and_wait(api_client, kind: str, namespace: str | None, name: str, timeout: float = 60.0,
                    version: str = "v1") -> bool:  # fmt: skip
    """Delete one object and wait until it is gone (finalizers done); False when it did not exist."""
    from kubernetes.client.exceptions import ApiException

    try:
        _call(api_client, "DELETE", _path(kind, version, namespace, name))
    except ApiException as err:
        if err.status == 404:
            return False
        raise _api_error(err, f"deleting {kind} {namespace + '/' if namespace else ''}{name}") from None
    deadline = time.monotonic() + timeout
    while find(api_client, kind, namespace, name, version) is not None:
        if time.monotonic() >= deadline:
            raise KubeError(f"{kind} {namespace + '/' if namespace else ''}{name} still present after {timeout:g} s"
                            " (a finalizer is holding it)")  # fmt: skip
        time.sleep(0.2)
    return True


@dataclass(frozen=True)
class Rebound:
    claim: str  # the new claim (Bound)
    volume: str  # its new PV
    volume_handle: str
    replaced: bool  # an existing claim of that name was deleted first


def rebind_volume(api_client, namespace: str, claim: str, new_claim: str, volume_mode: str, *,
                  labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
                  replace_existing: bool = False, fs_type: str = "ext4",
                  timeout: float = 120.0) -> Rebound:  # fmt: skip
    """Hand the volume of Bound claim ``claim`` to a new claim ``new_claim`` of ``volume_mode`` (same namespace).

    A PV's ``volumeMode`` is immutable and a PV binds one claim for life, so, in this order (each step
    leaves the data on a PV whose policy keeps it):

    1. the PV gets reclaim policy Retain (and ``labels``, so a failed run finds it);
    2. ``replace_existing``: an existing claim ``new_claim`` is deleted (the caller checked that no pod
       uses it; its own volume follows its reclaim policy). Without it an existing claim is a
       ``ConflictError`` before anything changed;
    3. ``claim`` is deleted (its PV turns Released, the storage stays);
    4. a new PV (``manifests.rebound_pv``, name ``<old PV>-<mode>``) pre-bound to ``new_claim``;
    5. ``new_claim`` (``manifests.prebound_pvc``, the PV's class and capacity), waited for until Bound;
    6. the old PV object is deleted (Retain: the storage stays, now under the new PV);
    7. the new PV gets the old PV's original reclaim policy back.

    Any error leaves the objects as they are (all labelled) for the caller's cleanup.
    """
    from movers.kube.manifests import prebound_pvc, rebound_pv, reclaim_policy_patch

    if find(api_client, "PersistentVolumeClaim", namespace, new_claim) is not None and not replace_existing:
        raise ConflictError(f"PersistentVolumeClaim {namespace}/{new_claim} already exists", 409)
    source = get(api_client, "PersistentVolumeClaim", namespace, claim)
    old_name = (source.get("spec") or {}).get("volumeName")
    if not old_name or (source.get("status") or {}).get("phase") != "Bound":
        raise KubeError(f"PersistentVolumeClaim {namespace}/{claim} is not bound to a volume", 409)
    old = get(api_client, "PersistentVolume", None, old_name)
    policy = (old.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Delete"
    merge_patch(api_client, "PersistentVolume", None, old_name,
                {**reclaim_policy_patch("Retain"), "metadata": {"labels": dict(labels or {})}})  # fmt: skip
    replaced = replace_existing and delete_and_wait(api_client, "PersistentVolumeClaim", namespace, new_claim,
                                                    timeout)  # fmt: skip
    delete_and_wait(api_client, "PersistentVolumeClaim", namespace, claim, timeout)
    new_pv = rebound_pv(f"{old_name}-{volume_mode.lower()}"[:253], old, namespace, new_claim, volume_mode,
                        fs_type=fs_type, labels=labels)  # fmt: skip
    create(api_client, new_pv)
    spec = new_pv["spec"]
    create(api_client, prebound_pvc(new_claim, namespace, new_pv["metadata"]["name"], spec["capacity"]["storage"],
                                    spec["storageClassName"], volume_mode, spec["accessModes"], labels,
                                    annotations))  # fmt: skip
    wait_claim_bound(api_client, namespace, new_claim, timeout)
    delete_and_wait(api_client, "PersistentVolume", None, old_name, timeout)
    merge_patch(api_client, "PersistentVolume", None, new_pv["metadata"]["name"], reclaim_policy_patch(policy))
    return Rebound(new_claim, new_pv["metadata"]["name"], spec["csi"]["volumeHandle"], bool(replaced))
