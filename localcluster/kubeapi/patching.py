"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and a strategic merge patch
subset.

The strategic merge patch is a merge patch in which the lists Kubernetes merges by key (containers,
env, volumes, conditions, ownerReferences ... by ``name``/``type``/``uid``/...) are merged item by
item, ``finalizers`` is merged as a set, ``$patch: delete`` in a keyed item removes it and
``$deleteFromPrimitiveList/<field>`` removes values; every other list is replaced, as upstream.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from localcluster.kubeapi.errors import ApiError, bad_request, unsupported_media_type
from localcluster.kubeapi.resources import Obj

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

# list field -> merge key, by field name wherever it appears (upstream tags these per type)
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "secrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
_SET_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            out[field] = [x for x in out.get(field) or [] if x not in (v or [])]
        elif k.startswith("$"):
            continue
        elif v is None:
            out.pop(k, None)
        elif isinstance(v, list) and k in _MERGE_KEYS and isinstance(out.get(k), list):
            out[k] = _merge_keyed(out[k], v, _MERGE_KEYS[k])
        elif isinstance(v, list) and k in _SET_LISTS and isinstance(out.get(k), list):
            out[k] = out[k] + [x for x in v if x not in out[k]]
        else:
            out[k] = strategic_merge_patch(out.get(k), v)
    return out


def _merge_keyed(current: list, patch: list, key: str) -> list:
    out = [copy.deepcopy(x) for x in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"strategic merge patch: list item without merge key {key!r}: {item!r}")
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def json_patch(target: Obj, ops: Any) -> Obj:
    if not isinstance(ops, list):
        raise bad_request("json patch: the body must be a JSON array of operations")
    try:
        return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(target))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
        raise ApiError(422, "Invalid", f"the JSON patch does not apply: {err}") from None


def apply_patch(content_type: str, target: Obj, body: Any, crd: bool) -> Obj:
    """``target`` patched by ``body`` of ``content_type``; CRD kinds refuse strategic merge (415)."""
    ctype = content_type.split(";")[0].strip().lower()
    accepted = [JSON_PATCH, MERGE] + ([] if crd else [STRATEGIC])
    if ctype == MERGE:
        if not isinstance(body, dict):
            raise bad_request("merge patch: the body must be a JSON object")
        return merge_patch(target, body)
    if ctype == JSON_PATCH:
        return json_patch(target, body)
    if ctype == STRATEGIC and not crd:
        if not isinstance(body, dict):
            raise bad_request("strategic merge patch: the body must be a JSON object")
        return strategic_merge_patch(target, body)
    raise unsupported_media_type(ctype, accepted)
