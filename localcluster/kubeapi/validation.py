"""Admission of the built-in kinds, as kube-apiserver decodes and validates them.

``decode(rt, obj)`` is what decoding a request body does to a built-in object: every field that
is a ``resource.Quantity`` (container and pod resources, PVC requests and capacity, PV capacity,
node capacity, emptyDir size, divisors) is parsed as ``ParseQuantity`` and rewritten in the form
the server stores and returns, and Secret ``data`` must be base64. A failure raises
``DecodeError`` (the caller answers 400 on create/update, 422 ``patch`` on a patch, as upstream).

``validate(rt, obj, old, subresource)`` returns the ``FieldError``s of the kind's strategy (the
create, update or status-update validation of ``pkg/apis/core/validation`` and
``pkg/apis/storage/validation``; the apps/v1 workloads' in ``apps.py``), then, as
``BeforeCreate``/``BeforeUpdate`` do for every kind, the generic ObjectMeta checks (path-segment names,
labels, annotations, owner references, immutable metadata on update). Custom resources get the
ObjectMeta checks (DNS-subdomain names); their schemas are checked by ``schema.py``.

``namespace_lifecycle(rt, namespace, name, ns)`` is the NamespaceLifecycle admission plugin's
answer for a create in ``namespace`` (``ns`` the stored Namespace or None): 404 when it does not
exist, 403 with a ``NamespaceTerminating`` cause while it terminates.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from typing import Any

from localcluster.kubeapi import apps, gotime
from localcluster.kubeapi import fields as f
from localcluster.kubeapi import podspec as ps
from localcluster.kubeapi import quantity as q
from localcluster.kubeapi import specparts as sp
from localcluster.kubeapi import storagevalidation as st
from localcluster.kubeapi.errors import ApiError, not_found
from localcluster.kubeapi.fields import FieldError
from localcluster.kubeapi.resources import Obj, ResourceType

_m, _l, _s = f.as_map, f.as_list, f.as_str  # tolerant accessors: a body may hold anything

MAX_SECRET_SIZE = 1024 * 1024


_LIMITS = ("limits", "requests")


_CONTAINERS = ("containers", "initContainers", "ephemeralContainers")


_STATUSES = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


_QUANTITIES: dict[tuple[str, str], list[tuple[str, ...]]] = {
    ("", "pods"): [
        *[("spec", c, "*", "resources", lim, "{}") for c in _CONTAINERS for lim in _LIMITS],
        *[("spec", c, "*", "env", "*", "valueFrom", "resourceFieldRef", "divisor") for c in _CONTAINERS],
        ("spec", "volumes", "*", "emptyDir", "sizeLimit"),
        ("spec", "volumes", "*", "downwardAPI", "items", "*", "resourceFieldRef", "divisor"),
        (
            "spec",
            "volumes",
            "*",
            "projected",
            "sources",
            "*",
            "downwardAPI",
            "items",
            "*",
            "resourceFieldRef",
            "divisor",
        ),
        *[
            ("spec", "volumes", "*", "ephemeral", "volumeClaimTemplate", "spec", "resources", lim, "{}")
            for lim in _LIMITS
        ],
        ("spec", "overhead", "{}"),
        *[("spec", "resources", lim, "{}") for lim in _LIMITS],
        *[("status", s, "*", "allocatedResources", "{}") for s in _STATUSES],
        *[("status", s, "*", "resources", lim, "{}") for s in _STATUSES for lim in _LIMITS],
    ],
    ("", "persistentvolumeclaims"): [
        *[("spec", "resources", lim, "{}") for lim in _LIMITS],
        ("status", "capacity", "{}"),
        ("status", "allocatedResources", "{}"),
    ],
    ("", "persistentvolumes"): [("spec", "capacity", "{}")],
    ("", "nodes"): [("status", "capacity", "{}"), ("status", "allocatable", "{}")],
}


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


_JSON_KINDS = {bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


class DecodeError(ValueError):
    """A body the server cannot decode into the kind (``str()`` is the decoder's message)."""


# ---- decoding ------------------------------------------------------------------------------------


def decode(rt: ResourceType, obj: Obj) -> None:
    for name in ("labels", "annotations"):
        for value in _m(_m(obj.get("metadata")).get(name)).values():
            if value is not None and not isinstance(value, str):
                kind = _JSON_KINDS.get(type(value), "object")
                raise DecodeError(
                    f"json: cannot unmarshal {kind} into Go struct field ObjectMeta.metadata.{name} of type string"
                )
    for pattern in _QUANTITIES.get(rt.key, ()):
        _canonical_quantities(obj, pattern)
    if rt.key == ("", "secrets"):
        for v in _m(obj.get("data")).values():
            if v is not None and not (isinstance(v, str) and _decodes(v)):
                raise DecodeError(f"illegal base64 data at input byte {_bad_byte(v)}")
    if rt.key == ("", "events"):
        _decode_event(obj)


def _decode_event(obj: Obj) -> None:
    """An Event's typed fields as ``json.Unmarshal`` into ``v1.Event`` takes them: ``metav1.Time`` (RFC 3339) and
    ``metav1.MicroTime`` (RFC 3339 with exactly six fractional digits) strings, ``int32`` counts."""
    series = obj.get("series")
    for where, name, micro in (
        (obj, "firstTimestamp", False),
        (obj, "lastTimestamp", False),
        (obj, "eventTime", True),
        (series, "lastObservedTime", True),
    ):
        value = where.get(name) if isinstance(where, dict) else None
        if value is None:
            continue
        if not isinstance(value, str):
            kind = _JSON_KINDS.get(type(value), "object")
            raise DecodeError(f"json: cannot unmarshal {kind} into Go value of type string")
        problem = gotime.parse_error(value, micro)
        if problem:
            raise DecodeError(problem)
    for where, struct, field in ((obj, "Event", "count"), (series, "EventSeries", "series.count")):
        value = where.get(field.rsplit(".", 1)[-1]) if isinstance(where, dict) else None
        if value is None or (type(value) is int and -(2**31) <= value < 2**31):
            continue
        kind = "string" if isinstance(value, str) else _JSON_KINDS.get(type(value), "object")
        number = f" {value}" if kind == "number" else ""
        raise DecodeError(f"json: cannot unmarshal {kind}{number} into Go struct field {struct}.{field} of type int32")


def _canonical_quantities(node: Any, pattern: tuple[str, ...]) -> None:
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        for item in node if isinstance(node, list) else ():
            _canonical_quantities(item, rest)
        return
    if not isinstance(node, dict):
        return
    if head == "{}":
        for k, v in list(node.items()):
            node[k] = str(_quantity(v))
    elif not rest:
        if head in node:
            if node[head] is None:
                del node[head]
            else:
                node[head] = str(_quantity(node[head]))
    elif head in node:
        _canonical_quantities(node[head], rest)


def _quantity(value: Any) -> q.Quantity:
    try:
        return q.from_json(value)
    except q.QuantityError as err:
        raise DecodeError(str(err)) from None


def _decodes(text: str) -> bool:
    try:
        base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _bad_byte(value: Any) -> int:
    text = value if isinstance(value, str) else ""
    match = _BASE64.match(text)
    end = match.end() if match else 0
    return end if end < len(text) else len(text) - len(text) % 4


# ---- NamespaceLifecycle ----------------------------------------------------------------------------


def namespace_lifecycle(rt: ResourceType, namespace: str, name: str, ns: Obj | None) -> None:
    if ns is None:
        raise not_found("namespaces", "", namespace)
    if (ns.get("status") or {}).get("phase") == "Terminating" or ns["metadata"].get("deletionTimestamp"):
        what = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
        name = name or "Unknown"
        raise ApiError(
            403,
            "Forbidden",
            f'{what} "{name}" is forbidden: unable to create new content in namespace {namespace} because it is'
            " being terminated",
            {
                "name": name,
                "group": rt.group,
                "kind": rt.plural,
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        )


# ---- validation ------------------------------------------------------------------------------------


def validate(rt: ResourceType, obj: Obj, old: Obj | None = None, subresource: str | None = None) -> list[FieldError]:
    md = _m(obj.get("metadata"))
    if rt.crd:
        out = f.object_meta(md, rt.namespaced, f.name_is_dns_subdomain)
        return out if old is None else out + f.object_meta_update(md, _m(old.get("metadata")))
    if old is None:
        create = _CREATE.get(rt.key)
        out = create(obj) if create else []
        return out or f.object_meta(md, rt.namespaced, f.path_segment_name)
    common = f.object_meta(md, rt.namespaced, f.path_segment_name)
    common += f.object_meta_update(md, _m(old.get("metadata")))
    table = _STATUS if subresource == "status" else _UPDATE
    check = table.get(rt.key)
    return common + (check(obj, old) if check else [])


# ---- Secret, ConfigMap, ServiceAccount -------------------------------------------------------------


def _secret(obj: Obj) -> list[FieldError]:
    out = f.core_meta(obj, True)
    data = _m(obj.get("data"))
    total = 0
    for k, v in sorted(data.items()):
        out += [f.invalid(f.key("data", k), k, m) for m in f.config_map_key(k)]
        total += len(base64.b64decode(_s(v))) if v else 0
    if total > MAX_SECRET_SIZE:
        out.append(f.too_long("data", MAX_SECRET_SIZE))
    kind, annotations = obj.get("type"), _m(_m(obj.get("metadata")).get("annotations"))
    required_keys = {
        "kubernetes.io/dockercfg": [".dockercfg"],
        "kubernetes.io/dockerconfigjson": [".dockerconfigjson"],
        "kubernetes.io/ssh-auth": ["ssh-privatekey"],
        "kubernetes.io/tls": ["tls.crt", "tls.key"],
    }
    if kind == "kubernetes.io/service-account-token" and not annotations.get("kubernetes.io/service-account.name"):
        out.append(f.required(f.key("metadata.annotations", "kubernetes.io/service-account.name")))
    elif kind == "kubernetes.io/basic-auth" and "username" not in data and "password" not in data:
        out += [f.required(f.key("data", "username")), f.required(f.key("data", "password"))]
    for k in required_keys.get(_s(kind), []):
        if not data.get(k):
            out.append(f.required(f.key("data", k)))
    return out


def _immutable_data(obj: Obj, old: Obj, keys: tuple[str, ...]) -> list[FieldError]:
    if old.get("immutable") is not True:
        return []
    out = (
        [] if obj.get("immutable") is True else [f.forbidden("immutable", "field is immutable when `immutable` is set")]
    )
    return out + [
        f.forbidden(k, "field is immutable when `immutable` is set")
        for k in keys
        if (obj.get(k) or {}) != (old.get(k) or {})
    ]


def _secret_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = f.core_meta_update(obj, old)
    if obj.get("type") != old.get("type"):
        out.append(f.invalid("type", obj.get("type"), "field is immutable"))
    return out + _immutable_data(obj, old, ("data",)) + _secret(obj)


def _config_map(obj: Obj) -> list[FieldError]:
    out = f.core_meta(obj, True)
    data, binary = _m(obj.get("data")), _m(obj.get("binaryData"))
    total = 0
    for k, v in sorted(data.items()):
        out += [f.invalid(f.key("data", k), k, m) for m in f.config_map_key(k)]
        if k in binary:
            out.append(f.invalid(f.key("data", k), k, "duplicate of key present in binaryData"))
        total += len(_s(v).encode())
    for k, v in sorted(binary.items()):
        out += [f.invalid(f.key("binaryData", k), k, m) for m in f.config_map_key(k)]
        total += len(base64.b64decode(_s(v))) if v and _decodes(_s(v)) else 0
    if total > MAX_SECRET_SIZE:
        out.append(f.too_long("", MAX_SECRET_SIZE))
    return out


def _config_map_update(obj: Obj, old: Obj) -> list[FieldError]:
    return f.core_meta_update(obj, old) + _immutable_data(obj, old, ("data", "binaryData")) + _config_map(obj)


# ---- Namespace, Node, Event, Service ---------------------------------------------------------------


def _namespace(obj: Obj) -> list[FieldError]:
    out = f.core_meta(obj, False, f.name_is_dns_label)
    for fin in _l(_m(obj.get("spec")).get("finalizers")):
        out += [f.invalid("spec.finalizers", fin, m) for m in f.qualified_name(_s(fin))]
        if "/" not in _s(fin) and fin not in ("kubernetes", "orphan", "foregroundDeletion"):
            out.append(
                f.invalid("spec.finalizers", fin, "name is neither a standard finalizer name nor is it fully qualified")
            )
    return out


def _namespace_status(obj: Obj, old: Obj) -> list[FieldError]:
    out = f.core_meta_update(obj, old)
    phase = _m(obj.get("status")).get("phase")
    if not _m(obj.get("metadata")).get("deletionTimestamp"):
        if phase != "Active":
            out.append(f.invalid("status.Phase", phase, "may only be 'Active' if `deletionTimestamp` is empty"))
    elif phase != "Terminating":
        out.append(f.invalid("status.Phase", phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
    return out


def _node(obj: Obj) -> list[FieldError]:
    out = f.core_meta(obj, False)
    out += sp.taints(_l(_m(obj.get("spec")).get("taints")), "metadata.taints")
    return out + _node_resources(obj)


def _node_resources(obj: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    for part in ("capacity", "allocatable"):
        for name, value in sorted(_m(_m(obj.get("status")).get(part)).items()):
            out += sp.resource_value(name, q.from_json(value), f"status.{part}.{name}")
    return out


def _node_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = f.core_meta_update(obj, old) + _node_resources(obj)
    seen: list[Any] = []
    for i, address in enumerate(_l(_m(obj.get("status")).get("addresses"))):
        if address in seen:
            out.append(f.duplicate(f"status.addresses[{i}]", address))
        seen.append(address)
    spec, old_spec = _m(obj.get("spec")), _m(old.get("spec"))
    if old_spec.get("podCIDRs") and spec.get("podCIDRs") != old_spec["podCIDRs"]:
        out.append(f.forbidden("spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'))
    if old_spec.get("providerID") and spec.get("providerID") != old_spec["providerID"]:
        out.append(f.forbidden("spec.providerID", 'node updates may not change providerID except from "" to valid'))
    return out + sp.taints(_l(spec.get("taints")), "metadata.taints")


def _event(obj: Obj) -> list[FieldError]:
    """``legacyValidateEvent`` (core/v1 Events get no ObjectMeta validation of their own)."""
    out: list[FieldError] = []
    namespace = _s(_m(obj.get("metadata")).get("namespace"))
    involved = _s(_m(obj.get("involvedObject")).get("namespace"))
    if not obj.get("eventTime"):
        if (not involved and namespace not in ("", "default")) or (involved and namespace != involved):
            out.append(f.invalid("involvedObject.namespace", involved, "does not match event.namespace"))
    else:
        if not involved and namespace not in ("default", "kube-system"):
            out.append(f.invalid("involvedObject.namespace", involved, "does not match event.namespace"))
        controller = _s(obj.get("reportingComponent"))
        if not controller:
            out.append(f.required("reportingController"))
        out += [f.invalid("reportingController", controller, m) for m in f.qualified_name(controller)]
        for name, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = _s(obj.get(name))
            if not value:
                out.append(f.required(name))
            if len(value) > limit:
                out.append(f.invalid(name, "", f"can have at most {limit} characters"))
        if len(_s(obj.get("message"))) > 1024:
            out.append(f.invalid("message", "", "can have at most 1024 characters"))
    return out + [f.invalid("namespace", namespace, m) for m in f.dns1123_subdomain(namespace)]


def _event_update(obj: Obj, old: Obj) -> list[FieldError]:
    return _event(obj)


def _service(obj: Obj) -> list[FieldError]:
    return f.core_meta(obj, True, f.name_is_dns1035_label)


def _service_account(obj: Obj) -> list[FieldError]:
    return f.core_meta(obj, True)


def _same_meta_update(obj: Obj, old: Obj) -> list[FieldError]:
    return f.core_meta_update(obj, old)


def _pod_update(obj: Obj, old: Obj) -> list[FieldError]:
    return ps.pod_update(obj, old)


_CREATE: dict[tuple[str, str], Callable[[Obj], list[FieldError]]] = {
    ("", "pods"): ps.pod_create,
    ("", "persistentvolumeclaims"): st.pvc_create,
    ("", "persistentvolumes"): st.pv_create,
    ("", "secrets"): _secret,
    ("", "configmaps"): _config_map,
    ("", "serviceaccounts"): _service_account,
    ("", "namespaces"): _namespace,
    ("", "nodes"): _node,
    ("", "events"): _event,
    ("", "services"): _service,
    ("storage.k8s.io", "storageclasses"): st.storage_class_create,
    ("storage.k8s.io", "csidrivers"): st.csi_driver_create,
    **{key: functools.partial(apps.validate_create, key) for key in apps.KEYS},
}


_UPDATE: dict[tuple[str, str], Callable[[Obj, Obj], list[FieldError]]] = {
    ("", "pods"): _pod_update,
    ("", "persistentvolumeclaims"): st.pvc_update,
    ("", "persistentvolumes"): st.pv_update,
    ("", "secrets"): _secret_update,
    ("", "configmaps"): _config_map_update,
    ("", "serviceaccounts"): lambda o, old: f.core_meta_update(o, old) + _service_account(o),
    ("", "namespaces"): _same_meta_update,
    ("", "nodes"): _node_update,
    ("", "events"): _event_update,
    ("", "services"): lambda o, old: f.core_meta_update(o, old) + _service(o),
    ("storage.k8s.io", "storageclasses"): st.storage_class_update,
    ("storage.k8s.io", "csidrivers"): lambda o, old: f.core_meta_update(o, old) + st.csi_driver_create(o),
    **{key: functools.partial(apps.validate_update, key) for key in apps.KEYS},
}


_STATUS: dict[tuple[str, str], Callable[[Obj, Obj], list[FieldError]]] = {
    ("", "pods"): ps.pod_status_update,
    ("", "persistentvolumeclaims"): st.pvc_status_update,
    ("", "persistentvolumes"): _same_meta_update,
    ("", "namespaces"): _namespace_status,
    ("", "nodes"): _node_update,
    ("", "services"): _same_meta_update,
    **{key: functools.partial(apps.validate_status, key) for key in apps.KEYS},
}
