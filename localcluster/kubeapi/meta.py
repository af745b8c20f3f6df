"""Object metadata times and the defaulting of the built-in kinds, as the API server does it.

- ``rfc3339(t)`` formats timestamps as the API server does (seconds, ``Z``).
- ``defaults(rt, obj)``: the scheme defaults applied when a body is decoded (every create, update
  and patch): pod and container fields (policies, probes, ports, volume modes, requests from
  limits, an empty volume becomes an emptyDir), PVC/PV volume mode and reclaim policy,
  StorageClass reclaim policy and binding mode, CSIDriver flags, Secret type and ``stringData``
  folded into base64 ``data``; the apps/v1 workloads' (``apps.defaults``).
- ``prepare_for_create(rt, obj)``: what the strategies set on create: pod phase Pending and its
  QoS class, PVC/PV phase Pending (a claim's ``dataSource`` and ``dataSourceRef`` mirrored into
  each other), namespace phase Active.
Validation is in ``validation.py``.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from localcluster.kubeapi import apps
from localcluster.kubeapi.resources import Obj, ResourceType
from localcluster.kubeapi.specparts import qos_class

_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)
_CSI_DRIVER = {
    "attachRequired": True,
    "podInfoOnMount": False,
    "storageCapacity": False,
    "requiresRepublish": False,
    "fsGroupPolicy": "ReadWriteOnceWithFSType",
    "seLinuxMount": False,
}


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(int(t), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    """The POSIX time of an ``rfc3339`` timestamp (as the server writes them)."""
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


def defaults(rt: ResourceType, obj: Obj) -> None:
    kind = rt.key
    spec = obj.get("spec")
    if kind in {("", "pods"), ("", "persistentvolumeclaims"), ("", "persistentvolumes")}:
        spec = obj["spec"] = spec if isinstance(spec, dict) else {}
    if kind in apps.KEYS:
        apps.defaults(rt, obj, _pod_spec)
    elif kind == ("", "pods"):
        _pod_spec(spec)
    elif kind == ("", "persistentvolumeclaims"):
        spec.setdefault("volumeMode", "Filesystem")
    elif kind == ("", "persistentvolumes"):
        spec.setdefault("volumeMode", "Filesystem")
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    elif kind == ("", "secrets"):
        fold_string_data(obj)
        obj.setdefault("type", "Opaque")
    elif kind == ("storage.k8s.io", "storageclasses"):
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")
    elif kind == ("storage.k8s.io", "csidrivers") and isinstance(spec, dict):
        for name, value in _CSI_DRIVER.items():
            spec.setdefault(name, value)
        spec.setdefault("volumeLifecycleModes", ["Persistent"])


def prepare_for_create(rt: ResourceType, obj: Obj) -> None:
    if rt.key == ("", "pods"):
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}
    elif rt.key == ("", "persistentvolumeclaims"):
        _normalize_data_sources(obj["spec"])
        obj["status"] = {"phase": "Pending"}
    elif rt.key == ("", "persistentvolumes"):
        obj["status"] = {"phase": "Pending"}
    elif rt.key == ("", "namespaces"):
        obj["status"] = {"phase": "Active"}


def fold_string_data(obj: Obj) -> None:
    """Secrets: ``stringData`` is write-only, merged into ``data`` as base64."""
    string_data = obj.pop("stringData", None)
    if string_data:
        data = obj.setdefault("data", {}) or {}
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data


def _normalize_data_sources(spec: dict) -> None:
    """``NormalizeDataSources``: whichever of dataSource / dataSourceRef is set, the other mirrors it."""
    source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
    if isinstance(source, dict) and ref is None:
        spec["dataSourceRef"] = {k: source[k] for k in ("apiGroup", "kind", "name") if k in source}
    elif isinstance(ref, dict) and source is None and not ref.get("namespace"):
        spec["dataSource"] = {k: ref[k] for k in ("apiGroup", "kind", "name") if k in ref}


def _pod_spec(spec: dict) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    for vol in _items(spec.get("volumes")):
        _volume(vol)
    for key in ("containers", "initContainers"):
        for c in _items(spec.get(key)):
            _container(c, spec.get("hostNetwork") is True)


def _container(c: dict, host_network: bool) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", "Always" if _tag(str(c.get("image") or "")) == "latest" else "IfNotPresent")
    for port in _items(c.get("ports")):
        port.setdefault("protocol", "TCP")
        if host_network and not port.get("hostPort") and port.get("containerPort"):
            port["hostPort"] = port["containerPort"]
    for probe in (c.get(name) for name in _PROBES):
        if isinstance(probe, dict):
            for name, value in _PROBE_DEFAULTS.items():
                probe.setdefault(name, value)
            _http_get(probe.get("httpGet"))
    for hook in (c.get("lifecycle") or {}).values() if isinstance(c.get("lifecycle"), dict) else ():
        if isinstance(hook, dict):
            _http_get(hook.get("httpGet"))
    for var in _items(c.get("env")):
        ref = (var.get("valueFrom") or {}).get("fieldRef") if isinstance(var.get("valueFrom"), dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
    resources = c.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, value in resources["limits"].items():
                requests.setdefault(name, value)


def _http_get(action: Any) -> None:
    if isinstance(action, dict):
        action.setdefault("path", "/")
        action.setdefault("scheme", "HTTP")


def _volume(vol: dict) -> None:
    if not any(vol.get(k) is not None for k in _SOURCES):
        vol["emptyDir"] = {}
    for key in ("secret", "configMap", "downwardAPI", "projected"):
        if isinstance(vol.get(key), dict):
            vol[key].setdefault("defaultMode", 0o644)
    if isinstance(vol.get("hostPath"), dict):
        vol["hostPath"].setdefault("type", "")
    for source in _items((vol.get("projected") or {}).get("sources") if isinstance(vol.get("projected"), dict) else []):
        if isinstance(source.get("serviceAccountToken"), dict):
            source["serviceAccountToken"].setdefault("expirationSeconds", 3600)
    template = (
        (vol.get("ephemeral") or {}).get("volumeClaimTemplate") if isinstance(vol.get("ephemeral"), dict) else None
    )
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        template["spec"].setdefault("volumeMode", "Filesystem")


def _tag(image: str) -> str:
    """The tag ``ParseImageName`` finds: ``latest`` when there is neither a tag nor a digest."""
    if "@" in image:
        return ""
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def _items(value: Any) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
