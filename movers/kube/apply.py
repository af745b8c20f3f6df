"""The generic layer over the ``kubernetes`` client: read, create, patch and delete objects by kind.

Every function takes the ``kubernetes.client.ApiClient`` to use (no module globals, no config
loading) and returns plain dicts. Errors are ``KubeError`` subclasses of ``MoverError`` carrying the
API's message; ``retriable`` says whether a retry can help; a missing object is ``NotFoundError``.
``KINDS`` lists the kinds these functions address.

* ``get`` / ``find`` / ``list_objects``: one object (``find``: None when missing), or a list by label.
* ``create``: tolerates AlreadyExists when the existing object carries the same run label (a
  retried run reuses what it made), refuses otherwise (``ConflictError``).
* ``patch_labels`` / ``merge_patch``: JSON merge patches; ``patch_scale``: a workload's replicas (``scale``).
* ``delete`` / ``delete_and_wait``: a missing object is fine; ``delete_and_wait`` waits out finalizers.
* ``served_group_snapshot_version``: v1, v1beta2 or v1beta1 (preferred first), None if none; the
  version the group snapshot kinds are addressed with when none is given.

Workflows on top of these live beside it: ``pods`` (run a pod to completion), ``snapshots``
(snapshot readiness, group members, content annotations), ``volumes`` (claim binding, handing a
volume to another claim), ``cleanup`` (deleting what a run made).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from movers.errors import KubeAccessDenied, MoverError, NotFoundError
from movers.kube.manifests import GROUP_SNAPSHOT_GROUP, GROUP_SNAPSHOT_VERSIONS, RUN_LABEL, SNAPSHOT_GROUP

# kind -> (group, plural, namespaced)
KINDS = {
    "Pod": ("", "pods", True),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims", True),
    "PersistentVolume": ("", "persistentvolumes", False),
    "Secret": ("", "secrets", True),
    "ServiceAccount": ("", "serviceaccounts", True),
    "Namespace": ("", "namespaces", False),
    "Event": ("", "events", True),
    "StorageClass": ("storage.k8s.io", "storageclasses", False),
    "Deployment": ("apps", "deployments", True),
    "ReplicaSet": ("apps", "replicasets", True),
    "StatefulSet": ("apps", "statefulsets", True),
    "VolumeSnapshot": (SNAPSHOT_GROUP, "volumesnapshots", True),
    "VolumeSnapshotContent": (SNAPSHOT_GROUP, "volumesnapshotcontents", False),
    "VolumeSnapshotClass": (SNAPSHOT_GROUP, "volumesnapshotclasses", False),
    "VolumeGroupSnapshot": (GROUP_SNAPSHOT_GROUP, "volumegroupsnapshots", True),
    "VolumeGroupSnapshotContent": (GROUP_SNAPSHOT_GROUP, "volumegroupsnapshotcontents", False),
    "VolumeGroupSnapshotClass": (GROUP_SNAPSHOT_GROUP, "volumegroupsnapshotclasses", False),
}


class KubeError(MoverError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (None: not an API error)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retriable = status is None or status in (429, 500, 502, 503, 504)


class ForbiddenError(KubeError, KubeAccessDenied):
    """The API refused the call: 403 (the identity may not do it) or 401 (its credentials were rejected).
    Exit code 6; never retriable. The message is the API's (verb, resource and user as the API names them)."""


class ConflictError(KubeError):
    """The object exists and does not belong to this run."""


class SnapshotNotReadyError(KubeError):
    """A snapshot did not become ready in time; the message carries the controller's error."""


def api_message(err) -> str:
    """The ``message`` of the Status an ``ApiException`` carries (one line), else its reason."""
    message = err.reason
    try:
        message = json.loads(err.body).get("message") or message
    except (TypeError, ValueError, AttributeError):
        pass
    return " ".join(str(message).split())


def api_error(err, what: str) -> MoverError:
    """The one translation of a Kubernetes ApiException: 404 NotFoundError, 401/403 ForbiddenError (exit 6),
    else KubeError (retriable for 429 and 5xx); the message is ``"<what>: <status> <the API's message>"``."""
    if err.status == 404:
        return NotFoundError(f"{what} not found")
    if err.status in (401, 403):
        return ForbiddenError(f"{what}: {err.status} {api_message(err)}", err.status)
    return KubeError(f"{what}: {err.status} {api_message(err)}", err.status)


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
        method,
        path,
        query_params=list((query or {}).items()),
        body=body,
        header_params={"Accept": "application/json", "Content-Type": content_type},
        auth_settings=["BearerToken"],
    )
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
        raise api_error(err, f"{kind} {namespace + '/' if namespace else ''}{name}") from None


def find(api_client, kind: str, namespace: str | None, name: str, version: str = "v1") -> dict | None:
    """The object, or None when it does not exist."""
    try:
        return get(api_client, kind, namespace, name, version)
    except NotFoundError:
        return None


def list_objects(
    api_client, kind: str, namespace: str | None, label_selector: str | None = None, version: str = "v1"
) -> list[dict]:
    """The items of a list call (``label_selector`` in the usual syntax)."""
    from kubernetes.client.exceptions import ApiException

    query = {"labelSelector": label_selector} if label_selector else {}
    try:
        return _call(api_client, "GET", _path(kind, version, namespace), query=query).get("items") or []
    except ApiException as err:
        raise api_error(err, f"listing {kind} in {namespace}") from None


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
            raise api_error(err, f"creating {what}") from None
    existing = get(api_client, kind, namespace, meta["name"], version)
    mine = (meta.get("labels") or {}).get(run_label)
    theirs = ((existing.get("metadata") or {}).get("labels") or {}).get(run_label)
    if mine is None or mine != theirs:
        raise ConflictError(f"{what} already exists and is not from this run ({run_label}={theirs!r})", 409)
    return existing


def served_group_snapshot_version(api_client) -> str | None:
    """The preferred served ``groupsnapshot.storage.k8s.io`` version (v1 > v1beta2 > v1beta1), or None."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        groups = client.ApisApi(api_client).get_api_versions().groups or []
    except ApiException as err:
        raise api_error(err, "listing the served API groups") from None
    for group in groups:
        if group.name == GROUP_SNAPSHOT_GROUP:
            served = {v.version for v in group.versions or []}
            return next((v for v in GROUP_SNAPSHOT_VERSIONS if v in served), None)
    return None


def patch_labels(
    api_client,
    kind: str,
    namespace: str | None,
    name: str,
    labels: Mapping[str, str | None],
    version: str | None = None,
) -> dict:
    """Merge-patch ``metadata.labels`` (a None value removes the label); returns the object."""
    from kubernetes.client.exceptions import ApiException

    path = _path(kind, version or _default_version(api_client, kind), namespace, name)
    try:
        return _call(
            api_client,
            "PATCH",
            path,
            body={"metadata": {"labels": dict(labels)}},
            content_type="application/merge-patch+json",
        )
    except ApiException as err:
        raise api_error(err, f"patching the labels of {kind} {namespace + '/' if namespace else ''}{name}") from None


def merge_patch(
    api_client, kind: str, namespace: str | None, name: str, body: Mapping[str, Any], version: str = "v1"
) -> dict:
    """A JSON merge patch of one object; returns the object."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _call(
            api_client,
            "PATCH",
            _path(kind, version, namespace, name),
            body=dict(body),
            content_type="application/merge-patch+json",
        )
    except ApiException as err:
        raise api_error(err, f"patching {kind} {namespace + '/' if namespace else ''}{name}") from None


def patch_scale(api_client, kind: str, namespace: str, name: str, replicas: int) -> dict:
    """Set the replicas of a workload through its ``scale`` subresource (a merge patch of the autoscaling/v1
    ``Scale``: RBAC's ``<plural>/scale``); returns the Scale."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _call(
            api_client,
            "PATCH",
            _path(kind, "v1", namespace, name) + "/scale",
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )
    except ApiException as err:
        raise api_error(err, f"scaling {kind} {namespace}/{name} to {replicas}") from None


def delete(api_client, kind: str, namespace: str | None, name: str, version: str | None = None) -> None:
    """Delete one object; a missing one is not an error."""
    from kubernetes.client.exceptions import ApiException

    try:
        _call(api_client, "DELETE", _path(kind, version or _default_version(api_client, kind), namespace, name))
    except ApiException as err:
        if err.status != 404:
            raise api_error(err, f"deleting {kind} {namespace + '/' if namespace else ''}{name}") from None


def delete_and_wait(
    api_client, kind: str, namespace: str | None, name: str, timeout: float = 60.0, version: str = "v1"
) -> bool:
    """Delete one object and wait until it is gone (finalizers done; a pod's containers stopped, as its kubelet
    removes it only then); False when it did not exist."""
    from kubernetes.client.exceptions import ApiException

    try:
        _call(api_client, "DELETE", _path(kind, version, namespace, name))
    except ApiException as err:
        if err.status == 404:
            return False
        raise api_error(err, f"deleting {kind} {namespace + '/' if namespace else ''}{name}") from None
    if not wait_gone(api_client, kind, namespace, name, timeout, version):
        why = "its containers have not stopped, or its node is gone" if kind == "Pod" else "a finalizer is holding it"
        raise KubeError(
            f"{kind} {namespace + '/' if namespace else ''}{name} still present after {timeout:g} s ({why})"
        )
    return True


def wait_gone(api_client, kind: str, namespace: str | None, name: str, timeout: float, version: str = "v1") -> bool:
    """Whether the object is gone within ``timeout`` seconds (read every 0.2 s)."""
    deadline = time.monotonic() + timeout
    while find(api_client, kind, namespace, name, version) is not None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _default_version(api_client, kind: str) -> str:
    if kind in ("VolumeGroupSnapshot", "VolumeGroupSnapshotContent", "VolumeGroupSnapshotClass"):
        version = served_group_snapshot_version(api_client)
        if version is None:
            raise KubeError(f"the cluster serves no {GROUP_SNAPSHOT_GROUP} version", 404)
        return version
    return "v1"
