"""Admission of the built-in kinds, as kube-apiserver decodes and validates them.

``decode(rt, obj)`` is what decoding a request body does to a built-in object: every field that
is a ``resource.Quantity`` (container and pod resources, PVC requests and capacity, PV capacity,
node capacity, emptyDir size, divisors) is parsed as ``ParseQuantity`` and rewritten in the form
the server stores and returns, and Secret ``data`` must be base64. A failure raises
``DecodeError`` (the caller answers 400 on create/update, 422 ``patch`` on a patch, as upstream).

``validate(rt, obj, old, subresource)`` returns the ``FieldError``s of the kind's strategy (the
create, update or status-update validation of ``pkg/apis/core/validation`` and
``pkg/apis/storage/validation``), then, as ``BeforeCreate``/``BeforeUpdate`` do for every kind, the
generic ObjectMeta checks (path-segment names, labels, annotations, owner references, immutable
metadata on update). Custom resources get the ObjectMeta checks (DNS-subdomain names); their
schemas are checked by ``schema.py``.

``namespace_lifecycle(rt, namespace, name, ns)`` is the NamespaceLifecycle admission plugin's
answer for a create in ``namespace`` (``ns`` the stored Namespace or None): 404 when it does not
exist, 403 with a ``NamespaceTerminating`` cause while it terminates.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from collections.abc import Callable
from typing import Any

from localcluster.kubeapi import fields as f
from localcluster.kubeapi import podspec as ps
from localcluster.kubeapi import quantity as q
from localcluster.kubeapi.errors import ApiError, not_found
from localcluster.kubeapi.fields import FieldError
from localcluster.kubeapi.resources import Obj, ResourceType

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
_RECLAIM = ["Delete", "Recycle", "Retain"]
_CLASS_RECLAIM = ["Delete", "Retain"]
_BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]
_PV_SOURCES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
)
_BETA_TO_GA = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
}
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


class DecodeError(ValueError):
    """A body the server cannot decode into the kind (``str()`` is the decoder's message)."""


# ---- decoding ------------------------------------------------------------------------------------


def decode(rt: ResourceType, obj: Obj) -> None:
    for pattern in _QUANTITIES.get(rt.key, ()):
        _canonical_quantities(obj, pattern)
    if rt.key == ("", "secrets"):
        for v in _m(obj.get("data")).values():
            if v is not None and not (isinstance(v, str) and _decodes(v)):
                raise DecodeError(f"illegal base64 data at input byte {_bad_byte(v)}")


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


def _meta(obj: Obj, namespaced: bool, name_fn: f.NameFn = f.name_is_dns_subdomain) -> list[FieldError]:
    return f.object_meta(_m(obj.get("metadata")), namespaced, name_fn, kube_finalizers=True)


def _meta_update(obj: Obj, old: Obj) -> list[FieldError]:
    return f.object_meta_update(_m(obj.get("metadata")), _m(old.get("metadata")), kube_finalizers=True)


# ---- PersistentVolumeClaim -------------------------------------------------------------------------


def _pvc(obj: Obj) -> list[FieldError]:
    return _meta(obj, True) + ps.pvc_spec(_m(obj.get("spec")), "spec")


def _pvc_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = _meta_update(obj, old) + _pvc(obj)
    spec, old_spec = copy.deepcopy(_m(obj.get("spec"))), copy.deepcopy(_m(old.get("spec")))
    if not old_spec.get("volumeName"):  # the PV controller binds a claim once
        old_spec.pop("volumeName", None)
        if "volumeName" in spec:
            old_spec["volumeName"] = spec["volumeName"]
    old_ann = _m(_m(old.get("metadata")).get("annotations"))
    new_ann = _m(_m(obj.get("metadata")).get("annotations"))
    beta = "volume.beta.kubernetes.io/storage-class"
    if (
        beta in old_ann
        and old_spec.get("storageClassName") is None
        and spec.get("storageClassName") == old_ann[beta]
        and new_ann.get(beta, old_ann[beta]) == old_ann[beta]
    ):
        spec.pop("storageClassName", None)
    else:
        if new_ann.get(beta) != old_ann.get(beta):
            out.append(f.invalid(f"metadata.annotations.{beta}", new_ann.get(beta, ""), "field is immutable"))
        if (
            spec.get("storageClassName") is not None
            and old_spec.get("storageClassName") is None
            and (beta not in old_ann or spec["storageClassName"] == old_ann[beta])
        ):
            spec.pop("storageClassName")
    bound = _m(obj.get("status")).get("phase") == "Bound"
    if bound:
        requests = _m(_m(spec.get("resources")).get("requests"))
        if "storage" in _m(_m(old_spec.get("resources")).get("requests")) and requests:
            requests["storage"] = old_spec["resources"]["requests"]["storage"]
        if spec.get("volumeAttributesClassName") is not None:
            spec["volumeAttributesClassName"] = old_spec.get("volumeAttributesClassName")
    if ps._unset_empty(spec) != ps._unset_empty(old_spec):
        out.append(
            f.forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and"
                " volumeAttributesClassName for bound claims\n"
                + ps.spec_diff("core.PersistentVolumeClaimSpec", old_spec, spec),
            )
        )
    new_size, old_size = _storage(obj.get("spec")), _storage(old.get("spec"))
    status_size = q.from_json(_m(_m(old.get("status")).get("capacity")).get("storage"))
    if new_size < old_size and new_size <= status_size:
        out.append(f.forbidden("spec.resources.requests.storage", "field can not be less than status.capacity"))
    old_mode, new_mode = _m(old.get("spec")).get("volumeMode"), _m(obj.get("spec")).get("volumeMode")
    if new_mode != old_mode:
        out.append(f.invalid("volumeMode", new_mode, "field is immutable"))
    old_vac = _m(old.get("spec")).get("volumeAttributesClassName")
    new_vac = _m(obj.get("spec")).get("volumeAttributesClassName")
    if old_vac is not None and new_vac != old_vac:
        if new_vac is None:
            out.append(f.forbidden("spec.volumeAttributesClassName", "update from non-nil value to nil is forbidden"))
        elif new_vac == "":
            out.append(
                f.forbidden(
                    "spec.volumeAttributesClassName", "update from non-nil value to an empty string is forbidden"
                )
            )
    return out


def _storage(spec: Any) -> q.Quantity:
    return q.from_json(_m(_m(_m(spec).get("resources")).get("requests")).get("storage"))


def _pvc_status(obj: Obj, old: Obj) -> list[FieldError]:
    out = _meta_update(obj, old)
    if not _m(obj.get("spec")).get("accessModes"):
        out.append(f.required("Spec.accessModes"))
    for name, value in sorted(_m(_m(obj.get("status")).get("capacity")).items()):
        out += _basic_resource(value, f.key("status.capacity", name))
    for name, value in sorted(_m(_m(obj.get("status")).get("allocatedResources")).items()):
        out += _basic_resource(value, f.key("status.allocatedResources", name))
    return out


def _basic_resource(value: Any, path: str) -> list[FieldError]:
    number = q.from_json(value).value()
    return [f.invalid(path, number, "must be a valid resource quantity")] if number < 0 else []


# ---- PersistentVolume ------------------------------------------------------------------------------


def _pv(obj: Obj) -> list[FieldError]:
    spec, md = _m(obj.get("spec")), _m(obj.get("metadata"))
    out = _meta(obj, False)
    out += ps.access_modes(ps._l(spec.get("accessModes")), "spec.accessModes", "")
    capacity = _m(spec.get("capacity"))
    if not capacity:
        out.append(f.required("spec.capacity"))
    if "storage" not in capacity or len(capacity) > 1:
        out.append(f.not_supported("spec.capacity", dict(capacity), ["storage"]))
    for name, value in sorted(capacity.items()):
        p = f.key("spec.capacity", name)
        out += _basic_resource(value, p)
        if q.from_json(value).sign() <= 0:
            out.append(f.invalid(p, str(q.from_json(value)), "must be greater than zero"))
    if spec.get("persistentVolumeReclaimPolicy"):
        out += ps._enum(spec["persistentVolumeReclaimPolicy"], "spec.persistentVolumeReclaimPolicy", _RECLAIM)
    affinity = spec.get("nodeAffinity")
    if affinity is not None:
        if _m(affinity).get("required") is not None:
            out += ps.node_selector(_m(affinity["required"]), "spec.nodeAffinity.required")
        else:
            out.append(f.required("spec.nodeAffinity.required", "must specify required node constraints"))
    count = 0
    for source in _PV_SOURCES:
        if spec.get(source) is None:
            continue
        if count and source != "flexVolume":
            out.append(
                f.forbidden(
                    f"spec.{'cephFS' if source == 'cephfs' else source}", "may not specify more than 1 volume type"
                )
            )
            continue
        count += 1
        out += _pv_source(source, _m(spec[source]), _s(md.get("name")), affinity is not None)
    if not count:
        out.append(f.required("spec", "must specify a volume type"))
    if spec.get("storageClassName"):
        out += [
            f.invalid("spec.storageClassName", spec["storageClassName"], m)
            for m in f.name_is_dns_subdomain(_s(spec["storageClassName"]))
        ]
    if spec.get("volumeMode") is not None:
        out += ps._enum(spec["volumeMode"], "spec.volumeMode", ps.VOLUME_MODES, required=False)
    vac = spec.get("volumeAttributesClassName")
    if vac is not None:
        if not vac:
            out.append(f.required("spec.volumeAttributesClassName", "an empty string is disallowed"))
        else:
            out += [f.invalid("spec.volumeAttributesClassName", vac, m) for m in f.name_is_dns_subdomain(_s(vac))]
        if spec.get("csi") is None:
            out.append(f.required("spec.csi", "has to be specified when using volumeAttributesClassName"))
    return out


def _pv_source(source: str, src: dict, pv_name: str, has_affinity: bool) -> list[FieldError]:
    p = f"spec.{source}"
    if source == "csi":
        out = ps.csi_driver_name(src.get("driver"), f"{p}.driver")
        if not src.get("volumeHandle"):
            out.append(f.required(f"{p}.volumeHandle"))
        for ref in (
            "controllerPublishSecretRef",
            "controllerExpandSecretRef",
            "nodePublishSecretRef",
            "nodeExpandSecretRef",
        ):
            if src.get(ref) is not None:
                out += _secret_reference(_m(src[ref]), f"{p}.{ref}")
        return out
    if source in ("hostPath", "local"):
        if not src.get("path"):
            return [f.required(f"{p}.path")]
        out = ps._no_backsteps(_s(src["path"]), f"{p}.path")
        if source == "local" and not has_affinity:
            out.append(f.required("spec.nodeAffinity", "Local volume requires node affinity"))
        return out
    if source == "nfs":
        out = [f.required(f"{p}.{k}") for k in ("server", "path") if not src.get(k)]
        if not _s(src.get("path")).startswith("/"):
            out.append(f.invalid(f"{p}.path", _s(src.get("path")), "must be an absolute path"))
        return out
    return []


def _secret_reference(ref: dict, path: str) -> list[FieldError]:
    name, namespace = _s(ref.get("name")), _s(ref.get("namespace"))
    out = (
        [f.required(f"{path}.name")]
        if not name
        else [f.invalid(f"{path}.name", name, m) for m in f.dns1123_subdomain(name)]
    )
    out += (
        [f.required(f"{path}.namespace")]
        if not namespace
        else [f.invalid(f"{path}.namespace", namespace, m) for m in f.dns1123_label(namespace)]
    )
    return out


def _pv_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = _pv(obj)
    spec, old_spec = _m(obj.get("spec")), _m(old.get("spec"))
    new_src = {k: copy.deepcopy(spec[k]) for k in _PV_SOURCES if spec.get(k) is not None}
    old_src = {k: old_spec[k] for k in _PV_SOURCES if old_spec.get(k) is not None}
    csi, old_csi = _m(new_src.get("csi")), _m(old_src.get("csi"))
    if old_csi and old_csi.get("controllerExpandSecretRef") is None:
        csi.pop("controllerExpandSecretRef", None)  # may be set once
    if ps._unset_empty(new_src) != ps._unset_empty(old_src):
        out.append(
            f.forbidden(
                "spec.persistentvolumesource",
                "spec.persistentvolumesource is immutable after"
                " creation\n" + ps.spec_diff("core.PersistentVolumeSource", old_src, new_src),
            )
        )
    if spec.get("volumeMode") != old_spec.get("volumeMode"):
        out.append(f.invalid("volumeMode", spec.get("volumeMode"), "field is immutable"))
    if (
        old_spec.get("nodeAffinity") is not None
        and _ga_labels(spec.get("nodeAffinity")) != old_spec["nodeAffinity"]
        and spec.get("nodeAffinity") != old_spec["nodeAffinity"]
    ):
        out.append(
            f.invalid(
                "nodeAffinity",
                spec.get("nodeAffinity"),
                "field is immutable, except for updating from beta label to GA",
            )
        )
    if old_spec.get("volumeAttributesClassName") is not None and spec.get("volumeAttributesClassName") is None:
        out.append(f.forbidden("spec.volumeAttributesClassName", "update from non-nil value to nil is forbidden"))
    return out


def _ga_labels(affinity: Any) -> Any:
    """The affinity with GA keys turned back into the beta keys they replaced (an allowed update)."""
    affinity = copy.deepcopy(affinity)
    ga_to_beta = {v: k for k, v in _BETA_TO_GA.items()}
    for term in ps._l(_m(_m(affinity).get("required")).get("nodeSelectorTerms")):
        for req in ps._l(_m(term).get("matchExpressions")):
            if isinstance(req, dict) and req.get("key") in ga_to_beta:
                req["key"] = ga_to_beta[req["key"]]
    return affinity


# ---- Secret, ConfigMap, ServiceAccount -------------------------------------------------------------


def _secret(obj: Obj) -> list[FieldError]:
    out = _meta(obj, True)
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
    out = _meta_update(obj, old)
    if obj.get("type") != old.get("type"):
        out.append(f.invalid("type", obj.get("type"), "field is immutable"))
    return out + _immutable_data(obj, old, ("data",)) + _secret(obj)


def _config_map(obj: Obj) -> list[FieldError]:
    out = _meta(obj, True)
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
    return _meta_update(obj, old) + _immutable_data(obj, old, ("data", "binaryData")) + _config_map(obj)


# ---- Namespace, Node, Event, Service ---------------------------------------------------------------


def _namespace(obj: Obj) -> list[FieldError]:
    out = _meta(obj, False, f.name_is_dns_label)
    for fin in ps._l(_m(obj.get("spec")).get("finalizers")):
        out += [f.invalid("spec.finalizers", fin, m) for m in f.qualified_name(_s(fin))]
        if "/" not in _s(fin) and fin not in ("kubernetes", "orphan", "foregroundDeletion"):
            out.append(
                f.invalid("spec.finalizers", fin, "name is neither a standard finalizer name nor is it fully qualified")
            )
    return out


def _namespace_status(obj: Obj, old: Obj) -> list[FieldError]:
    out = _meta_update(obj, old)
    phase = _m(obj.get("status")).get("phase")
    if not _m(obj.get("metadata")).get("deletionTimestamp"):
        if phase != "Active":
            out.append(f.invalid("status.Phase", phase, "may only be 'Active' if `deletionTimestamp` is empty"))
    elif phase != "Terminating":
        out.append(f.invalid("status.Phase", phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
    return out


def _node(obj: Obj) -> list[FieldError]:
    out = _meta(obj, False)
    out += ps.taints(ps._l(_m(obj.get("spec")).get("taints")), "metadata.taints")
    return out + _node_resources(obj)


def _node_resources(obj: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    for part in ("capacity", "allocatable"):
        for name, value in sorted(_m(_m(obj.get("status")).get(part)).items()):
            out += ps._resource_value(name, q.from_json(value), f"status.{part}.{name}")
    return out


def _node_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = _meta_update(obj, old) + _node_resources(obj)
    seen: list[Any] = []
    for i, address in enumerate(ps._l(_m(obj.get("status")).get("addresses"))):
        if address in seen:
            out.append(f.duplicate(f"status.addresses[{i}]", address))
        seen.append(address)
    spec, old_spec = _m(obj.get("spec")), _m(old.get("spec"))
    if old_spec.get("podCIDRs") and spec.get("podCIDRs") != old_spec["podCIDRs"]:
        out.append(f.forbidden("spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'))
    if old_spec.get("providerID") and spec.get("providerID") != old_spec["providerID"]:
        out.append(f.forbidden("spec.providerID", 'node updates may not change providerID except from "" to valid'))
    return out + ps.taints(ps._l(spec.get("taints")), "metadata.taints")


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
    return _meta(obj, True, f.name_is_dns1035_label)


def _service_account(obj: Obj) -> list[FieldError]:
    return _meta(obj, True)


# ---- storage.k8s.io --------------------------------------------------------------------------------


def _storage_class(obj: Obj) -> list[FieldError]:
    out = _meta(obj, False)
    provisioner = _s(obj.get("provisioner"))
    if not provisioner:
        out.append(f.required("provisioner"))
    else:
        out += [f.invalid("provisioner", provisioner.lower(), m) for m in f.qualified_name(provisioner.lower())]
    params = _m(obj.get("parameters"))
    if len(params) > 512:
        return out + [f.too_long("parameters", 512)]
    out += [f.invalid("parameters", k, "field can not be empty.") for k in params if not k]
    if sum(len(_s(k).encode()) + len(_s(v).encode()) for k, v in params.items()) > 256 * 1024:
        out.append(f.too_long("parameters", 256 * 1024))
    reclaim = obj.get("reclaimPolicy")
    if reclaim and reclaim not in _CLASS_RECLAIM:
        out.append(f.not_supported("reclaimPolicy", reclaim, _CLASS_RECLAIM))
    out += ps._enum(obj.get("volumeBindingMode"), "volumeBindingMode", _BINDING_MODES)
    terms: list[Any] = []
    for i, term in enumerate(ps._l(obj.get("allowedTopologies"))):
        p, expressions = f"allowedTopologies[{i}]", {}
        for j, req in enumerate(ps._l(_m(term).get("matchLabelExpressions"))):
            req, rp = _m(req), f"{p}.matchLabelExpressions[{j}]"
            values = ps._l(req.get("values"))
            if not values:
                out.append(f.required(f"{rp}.values"))
            for k, v in enumerate(values):
                if v in values[:k]:
                    out.append(f.duplicate(f"{rp}.values[{k}]", v))
            out += f.label_name(_s(req.get("key")), f"{rp}.key")
            if req.get("key") in expressions:
                out.append(f.duplicate(f"{rp}.key", req.get("key")))
            expressions[_s(req.get("key"))] = set(map(str, values))
        if expressions in terms:
            out.append(f.duplicate(f"{p}.matchLabelExpressions", ""))
        terms.append(expressions)
    return out


def _storage_class_update(obj: Obj, old: Obj) -> list[FieldError]:
    out = _meta_update(obj, old)
    if (obj.get("parameters") or {}) != (old.get("parameters") or {}):
        out.append(f.forbidden("parameters", "updates to parameters are forbidden."))
    if obj.get("provisioner") != old.get("provisioner"):
        out.append(f.forbidden("provisioner", "updates to provisioner are forbidden."))
    if obj.get("reclaimPolicy") != old.get("reclaimPolicy"):
        out.append(f.forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."))
    if obj.get("volumeBindingMode") != old.get("volumeBindingMode"):
        out.append(f.invalid("volumeBindingMode", obj.get("volumeBindingMode"), "field is immutable"))
    return out


def _csi_driver(obj: Obj) -> list[FieldError]:
    spec = _m(obj.get("spec"))
    out = ps.csi_driver_name(_m(obj.get("metadata")).get("name"), "name")
    for name in ("attachRequired", "podInfoOnMount", "storageCapacity", "requiresRepublish"):
        if spec.get(name) is None:
            out.append(f.required(f"spec.{name}"))
    if spec.get("fsGroupPolicy") is not None:
        out += ps._enum(spec["fsGroupPolicy"], "spec.fsGroupPolicy", ["File", "None", "ReadWriteOnceWithFSType"])
    for i, mode in enumerate(ps._l(spec.get("volumeLifecycleModes"))):
        out += ps._enum(mode, f"spec.volumeLifecycleModes[{i}]", ["Ephemeral", "Persistent"])
    return out


def _same_meta_update(obj: Obj, old: Obj) -> list[FieldError]:
    return _meta_update(obj, old)


def _pod_update(obj: Obj, old: Obj) -> list[FieldError]:
    return ps.pod_update(obj, old)


_CREATE: dict[tuple[str, str], Callable[[Obj], list[FieldError]]] = {
    ("", "pods"): ps.pod_create,
    ("", "persistentvolumeclaims"): _pvc,
    ("", "persistentvolumes"): _pv,
    ("", "secrets"): _secret,
    ("", "configmaps"): _config_map,
    ("", "serviceaccounts"): _service_account,
    ("", "namespaces"): _namespace,
    ("", "nodes"): _node,
    ("", "events"): _event,
    ("", "services"): _service,
    ("storage.k8s.io", "storageclasses"): _storage_class,
    ("storage.k8s.io", "csidrivers"): _csi_driver,
}
_UPDATE: dict[tuple[str, str], Callable[[Obj, Obj], list[FieldError]]] = {
    ("", "pods"): _pod_update,
    ("", "persistentvolumeclaims"): _pvc_update,
    ("", "persistentvolumes"): _pv_update,
    ("", "secrets"): _secret_update,
    ("", "configmaps"): _config_map_update,
    ("", "serviceaccounts"): lambda o, old: _meta_update(o, old) + _service_account(o),
    ("", "namespaces"): _same_meta_update,
    ("", "nodes"): _node_update,
    ("", "events"): _event_update,
    ("", "services"): lambda o, old: _meta_update(o, old) + _service(o),
    ("storage.k8s.io", "storageclasses"): _storage_class_update,
    ("storage.k8s.io", "csidrivers"): lambda o, old: _meta_update(o, old) + _csi_driver(o),
}
_STATUS: dict[tuple[str, str], Callable[[Obj, Obj], list[FieldError]]] = {
    ("", "pods"): ps.pod_status_update,
    ("", "persistentvolumeclaims"): _pvc_status,
    ("", "persistentvolumes"): _same_meta_update,
    ("", "namespaces"): _namespace_status,
    ("", "nodes"): _node_update,
    ("", "services"): _same_meta_update,
}


def _m(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))
