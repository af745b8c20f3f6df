"""The controllers' view of the API: plain JSON objects through the official ``kubernetes`` client.

``Res`` names a resource (kind, group, version, plural, scope); ``Kube(api_client)`` gets, lists, creates,
patches and deletes any of them with the generated ``CoreV1Api`` / ``StorageV1Api`` / ``AppsV1Api`` /
``CustomObjectsApi`` methods, always as the dicts that travel on the wire (``_preload_content=False`` for the typed
APIs), so the same code handles built-in and custom kinds. ``get``/``delete`` answer None/False on 404; other
API errors propagate as ``kubernetes.client.ApiException``. ``patch`` sends a JSON merge patch, ``json_patch`` an
RFC 6902 patch (used for finalizers, guarded by a resourceVersion ``test``). ``event`` records a core/v1 Event the way
client-go's recorder does (a repeat of the same reason and message bumps ``count``), from this client's component
or another one (one process emulating two components, e.g. the PV controller and external-provisioner).

Also here: Kubernetes quantities (``parse_quantity``, ``format_quantity``) and timestamps.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from localcluster.controllers.names import CBT_GROUP, GROUP_SNAPSHOT_GROUP, SNAPSHOT_GROUP

Obj = dict[str, Any]
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Res:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    stem: str = ""  # typed-API method stem (persistent_volume_claim); empty: a custom resource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def at(self, version: str) -> Res:
        return replace(self, version=version)


PVC = Res("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True, "persistent_volume_claim")
PV = Res("PersistentVolume", "", "v1", "persistentvolumes", False, "persistent_volume")
POD = Res("Pod", "", "v1", "pods", True, "pod")
NODE = Res("Node", "", "v1", "nodes", False, "node")
EVENT = Res("Event", "", "v1", "events", True, "event")
STORAGE_CLASS = Res("StorageClass", "storage.k8s.io", "v1", "storageclasses", False, "storage_class")
CSI_DRIVER = Res("CSIDriver", "storage.k8s.io", "v1", "csidrivers", False, "csi_driver")
CSI_NODE = Res("CSINode", "storage.k8s.io", "v1", "csinodes", False, "csi_node")
VS = Res("VolumeSnapshot", SNAPSHOT_GROUP, "v1", "volumesnapshots", True)
VSC = Res("VolumeSnapshotContent", SNAPSHOT_GROUP, "v1", "volumesnapshotcontents", False)
VS_CLASS = Res("VolumeSnapshotClass", SNAPSHOT_GROUP, "v1", "volumesnapshotclasses", False)
VGS = Res("VolumeGroupSnapshot", GROUP_SNAPSHOT_GROUP, "v1", "volumegroupsnapshots", True)
VGSC = Res("VolumeGroupSnapshotContent", GROUP_SNAPSHOT_GROUP, "v1", "volumegroupsnapshotcontents", False)
VGS_CLASS = Res("VolumeGroupSnapshotClass", GROUP_SNAPSHOT_GROUP, "v1", "volumegroupsnapshotclasses", False)
DEPLOYMENT = Res("Deployment", "apps", "v1", "deployments", True, "deployment")
REPLICASET = Res("ReplicaSet", "apps", "v1", "replicasets", True, "replica_set")
STATEFULSET = Res("StatefulSet", "apps", "v1", "statefulsets", True, "stateful_set")
SMS = Res("SnapshotMetadataService", CBT_GROUP, "v1beta1", "snapshotmetadataservices", False)


def meta(obj: Obj) -> Obj:
    return obj.setdefault("metadata", {})


def ref_of(res: Res, obj: Obj) -> Obj:
    """An ObjectReference to ``obj`` (what ``ref.GetReference`` gives: kind, apiVersion, name, ns, uid, rv)."""
    md = obj["metadata"]
    out = {
        "kind": res.kind,
        "apiVersion": res.api_version,
        "name": md["name"],
        "uid": md["uid"],
        "resourceVersion": md.get("resourceVersion", ""),
    }
    if res.namespaced:
        out["namespace"] = md["namespace"]
    return out


class Kube:
    def __init__(self, api_client, component: str = "localcluster") -> None:
        from kubernetes import client

        self.api_client = api_client
        self.component = component
        self.core = client.CoreV1Api(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._events: dict[tuple[str, str, str, str], tuple[str, int]] = {}
        self._events_lock = threading.Lock()

    # ---- typed-API plumbing --------------------------------------------------------------------

    def _typed(self, res: Res, verb: str, *, namespace: str | None, sub: str = ""):
        api = {"": self.core, "apps": self.apps}.get(res.group, self.storage)
        if verb == "list" and res.namespaced and namespace is None:
            return getattr(api, f"list_{res.stem}_for_all_namespaces")
        scope = "namespaced_" if res.namespaced else ""
        return getattr(api, f"{verb}_{scope}{res.stem}{sub}")

    @staticmethod
    def _raw(resp) -> Obj:
        return json.loads(resp.data or b"{}")

    def _args(self, res: Res, namespace: str | None, *rest: Any) -> tuple:
        if res.stem:
            return (*rest[:1], *((namespace,) if res.namespaced else ()), *rest[1:])
        head = (res.group, res.version) + ((namespace,) if res.namespaced else ()) + (res.plural,)
        return head + rest

    def _custom_fn(self, res: Res, verb: str, sub: str = ""):
        scope = "namespaced" if res.namespaced else "cluster"
        return getattr(self.custom, f"{verb}_{scope}_custom_object{sub}")

    # ---- verbs -----------------------------------------------------------------------------------

    def get(self, res: Res, name: str, namespace: str | None = None) -> Obj | None:
        from kubernetes.client.exceptions import ApiException

        try:
            if res.stem:
                return self._raw(
                    self._typed(res, "read", namespace=namespace)(
                        *self._args(res, namespace, name), _preload_content=False
                    )
                )
            return self._custom_fn(res, "get")(*self._args(res, namespace, name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list(self, res: Res, namespace: str | None = None, label_selector: str | None = None) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion; every namespace when ``namespace`` is None."""
        kw = {"label_selector": label_selector} if label_selector else {}
        if res.stem:
            fn = self._typed(res, "list", namespace=namespace)
            args = (namespace,) if res.namespaced and namespace is not None else ()
            out = self._raw(fn(*args, _preload_content=False, **kw))
        elif res.namespaced and namespace is not None:
            out = self.custom.list_namespaced_custom_object(res.group, res.version, namespace, res.plural, **kw)
        else:
            out = self.custom.list_cluster_custom_object(res.group, res.version, res.plural, **kw)
        return list(out.get("items") or []), str((out.get("metadata") or {}).get("resourceVersion") or "")

    def watch_call(self, res: Res) -> tuple[Any, tuple]:
        """The list function and positional arguments ``kubernetes.watch.Watch.stream`` needs (all namespaces)."""
        if res.stem:
            return self._typed(res, "list", namespace=None), ()
        return self.custom.list_cluster_custom_object, (res.group, res.version, res.plural)

    def create(self, res: Res, body: Obj, namespace: str | None = None) -> Obj:
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        if res.stem:
            fn = self._typed(res, "create", namespace=namespace)
            return self._raw(fn(*((namespace,) if res.namespaced else ()), body, _preload_content=False))
        return self._custom_fn(res, "create")(*self._args(res, namespace, body))

    def patch(
        self,
        res: Res,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        status: bool = False,
        content_type: str = MERGE,
    ) -> Obj:
        sub = "_status" if status else ""
        if res.stem:
            fn = self._typed(res, "patch", namespace=namespace, sub=sub)
            return self._raw(
                fn(*self._args(res, namespace, name, body), _preload_content=False, _content_type=content_type)
            )
        return self._custom_fn(res, "patch", sub)(*self._args(res, namespace, name, body), _content_type=content_type)

    def json_patch(self, res: Res, obj: Obj, ops: list[Obj], *, status: bool = False) -> Obj:
        """An RFC 6902 patch of ``obj`` that fails with 409/422 if ``obj`` changed since it was read."""
        md = obj["metadata"]
        guard = [{"op": "test", "path": "/metadata/resourceVersion", "value": md["resourceVersion"]}]
        return self.patch(res, md["name"], guard + ops, md.get("namespace"), status=status, content_type=JSON_PATCH)

    def set_finalizers(self, res: Res, obj: Obj, finalizers: list[str]) -> Obj:
        return self.json_patch(res, obj, [{"op": "add", "path": "/metadata/finalizers", "value": finalizers}])

    def delete(self, res: Res, name: str, namespace: str | None = None) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            if res.stem:
                self._typed(res, "delete", namespace=namespace)(
                    *self._args(res, namespace, name), _preload_content=False
                )
            else:
                self._custom_fn(res, "delete")(*self._args(res, namespace, name))
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    # ---- events ----------------------------------------------------------------------------------

    def event(self, res: Res, obj: Obj, type_: str, reason: str, message: str, *, component: str | None = None) -> None:
        """Record an Event about ``obj`` (cluster-scoped objects: in namespace ``default``, as client-go does), from
        ``component`` (default: this client's)."""
        md = obj["metadata"]
        namespace = md.get("namespace") or "default"
        component = component or self.component
        key = (md.get("uid", ""), reason, message, component)
        now = rfc3339(time.time())
        with self._events_lock:
            seen = self._events.get(key)
            if seen is not None:
                name, count = seen
                try:
                    self.patch(EVENT, name, {"count": count + 1, "lastTimestamp": now}, namespace)
                    self._events[key] = (name, count + 1)
                    return
                except Exception:  # the event expired or was deleted: record a new one
                    pass
            body = {
                "metadata": {"generateName": f"{md['name'][:200]}.", "namespace": namespace},
                "involvedObject": ref_of(res, obj),
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": component},
                "reportingComponent": component,
                "reportingInstance": component,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
            created = self.create(EVENT, body, namespace)
            self._events[key] = (created["metadata"]["name"], 1)


# ---- quantities and times ------------------------------------------------------------------------

_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][0-9]+)?$")


def parse_quantity(value: Any) -> int:
    """Bytes of a quantity (``"1Gi"``, ``"500M"``, ``"1e9"``, ``1048576``), rounded up; ValueError if malformed."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = m.group(1), m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        factor = 10 ** int(suffix[1:])
    else:
        factor = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    whole, _, frac = number.partition(".")
    num, den = int(whole + frac), 10 ** len(frac)
    return -(-num * factor // den)


def format_quantity(n: int) -> str:
    """The canonical BinarySI form the API server would print (``1Gi``, ``16Mi``, ``1000000000``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if n and n % _BINARY[suffix] == 0:
            return f"{n // _BINARY[suffix]}{suffix}"
    return str(n)


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(int(t), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_ns(t_ns: int) -> str:
    return rfc3339(t_ns / 1e9)
