"""Parts of the core API's validation that several kinds share (``pkg/apis/core/validation``).

- ``resources`` (container resource requirements: names, non-negative quantities, requests <=
  limits), ``resource_value`` and ``qos_class`` (``ComputePodQOS``);
- ``affinity``, ``node_selector`` (a pod's required node affinity, a PV's ``nodeAffinity.required``),
  ``tolerations``, ``taints``;
- ``access_modes``, ``pvc_spec`` (``ValidatePersistentVolumeClaimSpec``, for claims and a pod's
  ephemeral volumes), ``csi_driver_name``, ``no_backsteps``;
- ``enum`` (Required / Unsupported value), ``dns_label``, and ``unset_empty`` / ``spec_diff`` for
  the immutable-spec checks (Go compares typed structs: absent, null and zero values are alike;
  the diff lists the changed fields as ``cmp.Diff`` does, in a simpler layout).
"""

from __future__ import annotations

import json
from typing import Any

from localcluster.kubeapi import fields as f
from localcluster.kubeapi import quantity as q
from localcluster.kubeapi.fields import FieldError

_m, _l, _s = f.as_map, f.as_list, f.as_str  # tolerant accessors: a body may hold anything

_TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]


_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


_STANDARD_RESOURCES = _CONTAINER_RESOURCES | {
    "storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "requests.storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
}


_INTEGER_RESOURCES = {
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
}


ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]


VOLUME_MODES = ["Block", "Filesystem"]


def resources(reqs: dict, path: str, container: bool = False) -> list[FieldError]:
    """``ValidateContainerResourceRequirements``: names, non-negative quantities, requests <= limits."""
    out: list[FieldError] = []
    limits, requests = _m(reqs.get("limits")), _m(reqs.get("requests"))
    for name, value in limits.items():
        p = f.key(f"{path}.limits", name)
        out += _resource_name(name, p, container) + resource_value(name, q.from_json(value), p)
    for name, value in requests.items():
        p = f.key(f"{path}.requests", name)
        out += _resource_name(name, p, container)
        request = q.from_json(value)
        out += resource_value(name, request, p)
        if name in limits:
            limit = q.from_json(limits[name])
            if request != limit and not _overcommit(name):
                out.append(f.invalid(f"{path}.requests", str(request), f"must be equal to {name} limit of {limit}"))
            elif request > limit:
                out.append(
                    f.invalid(
                        f"{path}.requests", str(request), f"must be less than or equal to {name} limit of {limit}"
                    )
                )
        elif not _overcommit(name):
            out.append(f.required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
    return out


def _native(name: str) -> bool:
    return "/" not in name or name.split("/")[0].endswith("kubernetes.io")


def _extended(name: str) -> bool:
    return not _native(name) and not name.startswith("requests.") and not f.qualified_name("requests." + name)


def _overcommit(name: str) -> bool:
    return _native(name) and not name.startswith("hugepages-")


def _resource_name(name: str, path: str, container: bool) -> list[FieldError]:
    out = [f.invalid(path, name, m) for m in f.qualified_name(name)]
    if out:
        return out
    if "/" not in name and name not in _STANDARD_RESOURCES and not name.startswith("hugepages-"):
        out.append(f.invalid(path, name, "must be a standard resource type or fully qualified"))
    if container and "/" not in name and name not in _CONTAINER_RESOURCES and not name.startswith("hugepages-"):
        out.append(f.invalid(path, name, "must be a standard resource for containers"))
    elif container and not _native(name) and not _extended(name):
        out.append(f.invalid(path, name, "doesn't follow extended resource name standard"))
    return out


def resource_value(name: str, value: q.Quantity, path: str) -> list[FieldError]:
    """``ValidateResourceQuantityValue``."""
    out = [f.invalid(path, str(value), "must be greater than or equal to 0")] if value.sign() < 0 else []
    if (name in _INTEGER_RESOURCES or _extended(name)) and value.milli_value() % 1000:
        out.append(f.invalid(path, str(value), "must be an integer"))
    return out


def qos_class(spec: dict) -> str:
    """``ComputePodQOS``: Guaranteed, Burstable or BestEffort from the containers' cpu and memory."""
    requests: dict[str, q.Quantity] = {}
    limits: dict[str, q.Quantity] = {}
    guaranteed = True
    for c in _l(spec.get("containers")) + _l(spec.get("initContainers")):
        res = _m(_m(c).get("resources"))
        c_limits = {k: q.from_json(v) for k, v in _m(res.get("limits")).items() if k in ("cpu", "memory")}
        for k, v in _m(res.get("requests")).items():
            if k in ("cpu", "memory") and q.from_json(v).sign() > 0:
                requests[k] = q.from_json(v)
        for k, v in c_limits.items():
            if v.sign() > 0:
                limits[k] = v
        if set(k for k, v in c_limits.items() if v.sign() > 0) != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        for c in _l(spec.get("containers")) + _l(spec.get("initContainers")):
            res = _m(_m(c).get("resources"))
            for k in ("cpu", "memory"):
                req, lim = _m(res.get("requests")).get(k), _m(res.get("limits")).get(k)
                if req is not None and lim is not None and q.from_json(req) != q.from_json(lim):
                    guaranteed = False
    return "Guaranteed" if guaranteed else "Burstable"


def affinity(affinity: dict, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    node = affinity.get("nodeAffinity")
    if node is not None:
        node, p = _m(node), f"{path}.nodeAffinity"
        if node.get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
            out += node_selector(
                _m(node["requiredDuringSchedulingIgnoredDuringExecution"]),
                f"{p}.requiredDuringSchedulingIgnoredDuringExecution",
            )
        for i, term in enumerate(_l(node.get("preferredDuringSchedulingIgnoredDuringExecution"))):
            term, tp = _m(term), f"{p}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            weight = term.get("weight", 0)
            if not isinstance(weight, int) or not 1 <= weight <= 100:
                out.append(f.invalid(f"{tp}.weight", weight, "must be in the range 1-100"))
            out += _node_selector_term(_m(term.get("preference")), f"{tp}.preference", allow_invalid_values=True)
    for kind in ("podAffinity", "podAntiAffinity"):
        pa = affinity.get(kind)
        if pa is None:
            continue
        pa, p = _m(pa), f"{path}.{kind}"
        for i, term in enumerate(_l(pa.get("requiredDuringSchedulingIgnoredDuringExecution"))):
            out += _pod_affinity_term(_m(term), f"{p}.requiredDuringSchedulingIgnoredDuringExecution[{i}]")
        for i, term in enumerate(_l(pa.get("preferredDuringSchedulingIgnoredDuringExecution"))):
            term, tp = _m(term), f"{p}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            weight = term.get("weight", 0)
            if not isinstance(weight, int) or not 1 <= weight <= 100:
                out.append(f.invalid(f"{tp}.weight", weight, "must be in the range 1-100"))
            out += _pod_affinity_term(_m(term.get("podAffinityTerm")), f"{tp}.podAffinityTerm")
    return out


def _pod_affinity_term(term: dict, path: str) -> list[FieldError]:
    out = f.label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    out += f.label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector")
    for name in _l(term.get("namespaces")):
        out += [f.invalid(f"{path}.namespace", name, m) for m in f.name_is_dns_label(_s(name))]
    key = _s(term.get("topologyKey"))
    if not key:
        out.append(f.required(f"{path}.topologyKey", "can not be empty"))
    return out + f.label_name(key, f"{path}.topologyKey")


def node_selector(selector: dict, path: str) -> list[FieldError]:
    """``ValidateNodeSelector`` (a required node affinity, a PV's ``nodeAffinity.required``)."""
    terms = _l(selector.get("nodeSelectorTerms"))
    if not terms:
        return [f.required(f"{path}.nodeSelectorTerms", "must have at least one node selector term")]
    out: list[FieldError] = []
    for i, term in enumerate(terms):
        out += _node_selector_term(_m(term), f"{path}.nodeSelectorTerms[{i}]")
    return out


def _node_selector_term(term: dict, path: str, allow_invalid_values: bool = False) -> list[FieldError]:
    out: list[FieldError] = []
    for j, req in enumerate(_l(term.get("matchExpressions"))):
        req, p = _m(req), f"{path}.matchExpressions[{j}]"
        op, values = req.get("operator"), _l(req.get("values"))
        if op in ("In", "NotIn"):
            if not values:
                out.append(f.required(f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append(
                    f.forbidden(f"{p}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
                )
        elif op in ("Gt", "Lt"):
            if len(values) != 1:
                out.append(f.required(f"{p}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"))
        else:
            out.append(f.invalid(f"{p}.operator", _s(op), "not a valid selector operator"))
        out += f.label_name(_s(req.get("key")), f"{p}.key")
        if not allow_invalid_values:
            for k, v in enumerate(values):
                out += [f.invalid(f"{p}.values[{k}]", v, m) for m in f.label_value(_s(v))]
    for j, req in enumerate(_l(term.get("matchFields"))):
        req, p = _m(req), f"{path}.matchFields[{j}]"
        values = _l(req.get("values"))
        if req.get("operator") in ("In", "NotIn"):
            if len(values) != 1:
                out.append(
                    f.required(
                        f"{p}.values",
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    )
                )
        else:
            out.append(f.invalid(f"{p}.operator", _s(req.get("operator")), "not a valid selector operator"))
        if req.get("key") != "metadata.name":
            out.append(f.invalid(f"{p}.key", _s(req.get("key")), "not a valid field selector key"))
        else:
            for k, v in enumerate(values):
                out += [f.invalid(f"{p}.values[{k}]", v, m) for m in f.name_is_dns_subdomain(_s(v))]
    return out


def tolerations(tols: list, path: str) -> list[FieldError]:
    """``ValidateTolerations``."""
    out: list[FieldError] = []
    for i, tol in enumerate(tols):
        tol, p = _m(tol), f"{path}[{i}]"
        key, op, value, effect = _s(tol.get("key")), _s(tol.get("operator")), _s(tol.get("value")), tol.get("effect")
        if key:
            out += f.label_name(key, f"{p}.key")
        if not key and op != "Exists":
            out.append(
                f.invalid(
                    f"{p}.operator",
                    op,
                    'operator must be Exists when `key` is empty, which means "match all values and all keys"',
                )
            )
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            out.append(
                f.invalid(f"{p}.effect", _s(effect), "effect must be 'NoExecute' when `tolerationSeconds` is set")
            )
        if op in ("Equal", ""):
            msgs = f.label_value(value)
            if msgs:
                out.append(f.invalid(f"{p}.operator", value, ";".join(msgs)))
        elif op == "Exists":
            if value:
                out.append(f.invalid(f"{p}.operator", value, "value must be empty when `operator` is 'Exists'"))
        else:
            out.append(f.not_supported(f"{p}.operator", op, ["Equal", "Exists"]))
        if effect:
            out += enum(effect, f"{p}.effect", _TAINT_EFFECTS, required=False)
    return out


def taints(items: list, path: str) -> list[FieldError]:
    """``validateNodeTaints``."""
    out: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(items):
        taint, p = _m(taint), f"{path}[{i}]"
        out += f.label_name(_s(taint.get("key")), f"{p}.key")
        msgs = f.label_value(_s(taint.get("value")))
        if msgs:
            out.append(f.invalid(f"{p}.value", _s(taint.get("value")), ";".join(msgs)))
        out += enum(taint.get("effect"), f"{p}.effect", _TAINT_EFFECTS)
        pair = (_s(taint.get("key")), _s(taint.get("effect")))
        if pair in seen:
            out.append(f.FieldError("FieldValueDuplicate", p, taint, "taints must be unique by key and effect pair"))
            continue
        seen.add(pair)
    return out


def access_modes(modes: list, path: str, required_detail: str) -> list[FieldError]:
    out = [f.required(path, required_detail)] if not modes else []
    for mode in modes:
        if mode not in ACCESS_MODES:
            out.append(f.not_supported(path, mode, ACCESS_MODES))
    if "ReadWriteOncePod" in modes and any(m in ACCESS_MODES and m != "ReadWriteOncePod" for m in modes):
        out.append(f.forbidden(path, "may not use ReadWriteOncePod with other access modes"))
    return out


def pvc_spec(spec: dict, path: str) -> list[FieldError]:
    """``ValidatePersistentVolumeClaimSpec``."""
    out = access_modes(_l(spec.get("accessModes")), f"{path}.accessModes", "at least 1 access mode is required")
    if spec.get("selector") is not None:
        out += f.label_selector(spec["selector"], f"{path}.selector")
    storage_path = f.key(f"{path}.resources", "storage")
    requests = _m(_m(spec.get("resources")).get("requests"))
    if "storage" not in requests:
        out.append(f.required(storage_path))
    else:
        storage = q.from_json(requests["storage"])
        if storage.sign() <= 0:
            out.append(f.invalid(storage_path, str(storage), "must be greater than zero"))
        else:
            out += resource_value("storage", storage, storage_path)
    for name in ("storageClassName", "volumeAttributesClassName"):
        value = _s(spec.get(name))
        if value:
            out += [f.invalid(f"{path}.{name}", value, m) for m in f.name_is_dns_subdomain(value)]
    if spec.get("volumeMode") is not None:
        out += enum(spec["volumeMode"], f"{path}.volumeMode", VOLUME_MODES, required=False)
    source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
    if source is not None:
        out += _data_source(_m(source), f"{path}.dataSource")
    if ref is not None:
        out += _data_source(_m(ref), f"{path}.dataSourceRef")
        namespace = _s(_m(ref).get("namespace"))
        if namespace:
            out += [f.invalid(f"{path}.dataSourceRef.namespace", namespace, m) for m in f.name_is_dns_label(namespace)]
    if ref is not None and _m(ref).get("namespace"):
        if source is not None:
            out.append(
                f.invalid(path, f"{path}.dataSource", "may not be specified when dataSourceRef.namespace is specified")
            )
    elif source is not None and ref is not None:
        a, b = _m(source), _m(ref)
        if (a.get("apiGroup"), a.get("kind"), a.get("name")) != (b.get("apiGroup"), b.get("kind"), b.get("name")):
            out.append(f.invalid(path, f"{path}.dataSource", "must match dataSourceRef"))
    return out


def _data_source(ref: dict, path: str) -> list[FieldError]:
    out = [f.required(f"{path}.{k}") for k in ("name", "kind") if not ref.get(k)]
    group = _s(ref.get("apiGroup"))
    if not group and ref.get("kind") != "PersistentVolumeClaim":
        out.append(
            f.invalid(
                path, _s(ref.get("kind")), "must be 'PersistentVolumeClaim' when referencing the default apiGroup"
            )
        )
    if group:
        out += [f.invalid(f"{path}.apiGroup", group, m) for m in f.dns1123_subdomain(group)]
    return out


def csi_driver_name(name: Any, path: str) -> list[FieldError]:
    name = _s(name)
    out = [f.required(path)] if not name else []
    if len(name.encode()) > 63:
        out.append(f.too_long(path, 63))
    return out + [f.invalid(path, name, m) for m in f.dns1123_subdomain(name.lower())]


def no_backsteps(target: str, path: str) -> list[FieldError]:
    return [f.invalid(path, target, "must not contain '..'")] if ".." in target.split("/") else []


def enum(value: Any, path: str, valid: list[str], required: bool = True) -> list[FieldError]:
    if value in (None, ""):
        return [f.required(path)] if required else []
    return [] if value in valid else [f.not_supported(path, value, valid)]


def dns_label(value: str, path: str) -> list[FieldError]:
    return [f.invalid(path, value, m) for m in f.dns1123_label(value)]


def unset_empty(value: Any) -> Any:
    """Semantic equality as Go compares typed structs: absent, null, empty and zero values are alike."""
    if isinstance(value, dict):
        out = {k: unset_empty(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", [], {}, 0, False)}
    if isinstance(value, list):
        return [unset_empty(v) for v in value]
    return value


def spec_diff(type_name: str, old: dict, new: dict) -> str:
    """A ``cmp.Diff``-like listing of the changed fields (old lines ``-``, new lines ``+``)."""
    old_c, new_c = unset_empty(old), unset_empty(new)
    lines = [f"  {type_name}{{"]
    same = 0
    for name in sorted(set(old_c) | set(new_c)):
        if old_c.get(name) == new_c.get(name):
            same += 1
            continue
        if name in old_c:
            lines.append(f"- \t{name}: {json.dumps(old_c[name], sort_keys=True)},")
        if name in new_c:
            lines.append(f"+ \t{name}: {json.dumps(new_c[name], sort_keys=True)},")
    if same:
        lines.insert(1, f"  \t... // {same} identical fields")
    lines.append("  }")
    return "\n".join(lines)
