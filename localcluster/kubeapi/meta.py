"""Object metadata and the light validation and defaulting of the built-in kinds.

- ``rfc3339(t)`` formats timestamps as the API server does (seconds, ``Z``).
- ``metadata_errors(rt, obj)``: name (or generateName) present and a DNS subdomain (a DNS label for
  namespaces, a path segment for RBAC kinds: ``system:basic-user`` is valid), label keys and values
  well formed.
- ``defaults(rt, obj)``: what the real API server sets on create (pod phase Pending and container
  defaults, PVC/PV phase Pending and volumeMode, namespace phase Active, secret type Opaque and
  ``stringData`` folded into base64 ``data``).
- ``kind_errors(rt, obj, old)``: the few built-in-kind rules the product can trip on (pod containers,
  PVC access modes and size, immutable pod and PVC specs, base64 secret data).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import re

from localcluster.kubeapi.resources import Obj, ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")  # fmt: skip
# names checked as DNS labels rather than subdomains
_LABEL_NAMED = {("", "namespaces"), ("", "services")}


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(int(t), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def metadata_errors(rt: ResourceType, obj: Obj) -> list[tuple[str, str]]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [("metadata", "Required value")]
    out: list[tuple[str, str]] = []
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        out.append(("metadata.name", "Required value: name or generateName is required"))
    elif name:
        if rt.group == "rbac.authorization.k8s.io":  # RBAC names are path segments ("system:masters")
            out += [("metadata.name", f'Invalid value: "{name}": {msg}') for msg in path_segment_errors(name)]
        elif rt.key in _LABEL_NAMED:
            if not _LABEL.match(name) or len(name) > 63:
                out.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of'
                                             " lower case alphanumeric characters or '-'"))  # fmt: skip
        elif not _SUBDOMAIN.match(name) or len(name) > 253:
            out.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of'
                                         " lower case alphanumeric characters, '-' or '.'"))  # fmt: skip
    for key, value in (meta.get("labels") or {}).items():
        if not _QUALIFIED.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
            out.append(("metadata.labels", f'Invalid value: "{key}": name part must be a valid label key'))
        if not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
            out.append(("metadata.labels", f'Invalid value: "{value}": a valid label value must be 63 characters'
                                             " or less, alphanumeric, '-', '_' or '.'"))  # fmt: skip
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            out.append((f"metadata.annotations[{key}]", "Invalid value: annotation values must be strings"))
    return out


def path_segment_errors(name: str) -> list[str]:
    """path.IsValidPathSegmentName."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def defaults(rt: ResourceType, obj: Obj) -> None:
    kind = rt.key
    spec = obj.setdefault("spec", {}) if kind in {("", "pods"), ("", "persistentvolumeclaims"),
                                                  ("", "persistentvolumes")} else obj.get("spec")  # fmt: skip
    if kind == ("", "pods"):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("schedulerName", "default-scheduler")
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("imagePullPolicy", "Always" if str(c.get("image", "")).endswith(":latest") else "IfNotPresent")
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif kind == ("", "persistentvolumeclaims"):
        spec.setdefault("volumeMode", "Filesystem")
        obj["status"] = {"phase": "Pending"}
    elif kind == ("", "persistentvolumes"):
        spec.setdefault("volumeMode", "Filesystem")
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        obj["status"] = {"phase": "Pending"}
    elif kind == ("", "namespaces"):
        obj["status"] = {"phase": "Active"}
    elif kind == ("", "secrets"):
        fold_string_data(obj)
        obj.setdefault("type", "Opaque")


def fold_string_data(obj: Obj) -> None:
    """Secrets: ``stringData`` is write-only, merged into ``data`` as base64."""
    string_data = obj.pop("stringData", None)
    if string_data:
        data = obj.setdefault("data", {}) or {}
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data


def kind_errors(rt: ResourceType, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    spec = obj.get("spec") or {}
    if rt.key == ("", "pods"):
        containers = spec.get("containers")
        if not containers:
            out.append(("spec.containers", "Required value"))
        for i, c in enumerate(containers or []):
            for required in ("name", "image"):
                if not c.get(required):
                    out.append((f"spec.containers[{i}].{required}", "Required value"))
        if old is not None and _mutable_pod_spec(spec) != _mutable_pod_spec(old.get("spec") or {}):
            out.append(("spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations`"
                                " (only additions to existing tolerations)"))  # fmt: skip
    elif rt.key == ("", "persistentvolumeclaims"):
        if not spec.get("accessModes"):
            out.append(("spec.accessModes", "Required value: at least 1 access mode is required"))
        if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            out.append(("spec.resources[storage]", "Required value"))
        if old is not None and _without_size(spec) != _without_size(old.get("spec") or {}):
            out.append(("spec", "Forbidden: spec is immutable after creation except resources.requests and"
                                " volumeAttributesClassName for bound claims"))  # fmt: skip
    elif rt.key == ("", "secrets"):
        for k, v in (obj.get("data") or {}).items():
            try:
                base64.b64decode(v or "", validate=True)
            except (binascii.Error, ValueError, TypeError):
                out.append((f"data[{k}]", "Invalid value: illegal base64 data"))
    return out


def _mutable_pod_spec(spec: Obj) -> Obj:
    spec = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            c.pop("image", None)
    spec.pop("activeDeadlineSeconds", None)
    spec.pop("tolerations", None)
    return spec


def _without_size(spec: Obj) -> Obj:
    spec = copy.deepcopy(spec)
    (spec.get("resources") or {}).pop("requests", None)
    spec.pop("volumeAttributesClassName", None)
    spec.pop("volumeName", None)  # set by binding
    return spec
