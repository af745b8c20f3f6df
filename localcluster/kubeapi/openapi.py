"""A minimal OpenAPI v3 publication, enough for kubectl's create/apply/replace to rely on
server-side field validation instead of downloading a full schema.

``/openapi/v3`` lists one document per served group version (``api/v1``, ``apis/GROUP/VERSION``);
each document has the resource paths with their operations tagged by
``x-kubernetes-group-version-kind`` and, for PATCH/PUT/POST, the ``fieldValidation`` query
parameter (kubectl's ``QueryParamVerifierV3`` looks for exactly that). Component schemas are the
CRD schemas where known, an open object otherwise. There is no ``/openapi/v2``.
"""

from __future__ import annotations

import hashlib
import json

from localcluster.kubeapi.resources import Obj, Registry, ResourceType

_PARAMS = [
    {"name": n, "in": "query", "schema": {"type": "string"}} for n in ("dryRun", "fieldManager", "fieldValidation")
]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def document(registry: Registry, group: str, version: str) -> Obj | None:
    types = registry.in_version(group, version)
    if not types:
        return None
    paths: Obj = {}
    schemas: Obj = {}
    for rt in types:
        _add(paths, schemas, rt, group, version)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (localcluster)", "version": "v1.34.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _add(paths: Obj, schemas: Obj, rt: ResourceType, group: str, version: str) -> None:
    gvk = {"group": group, "version": version, "kind": rt.kind}
    ref_name = ".".join(p for p in (group or "core", version, rt.kind) if p)
    schema = dict(rt.schema_for(version) or {"type": "object"})
    schema["x-kubernetes-group-version-kind"] = [gvk]
    schemas[ref_name] = schema
    body = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref_name}"}}}}
    ok = {"200": {"description": "OK"}}
    base = "/" + _gv_path(group, version) + ("/namespaces/{namespace}" if rt.namespaced else "") + f"/{rt.plural}"

    def op(action: str, with_body: bool = False, params: bool = False) -> Obj:
        out: Obj = {"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk, "responses": ok}
        if with_body:
            out["requestBody"] = body
        if params:
            out["parameters"] = _PARAMS
        return out

    if "create" in rt.verbs:
        paths[base] = {"post": op("post", True, True)}
        if "list" in rt.verbs:
            paths[base]["get"] = op("list")
    if "get" in rt.verbs:
        paths[base + "/{name}"] = {
            "get": op("get"),
            "put": op("put", True, True),
            "patch": op("patch", True, True),
            "delete": op("delete"),
        }


def root(registry: Registry) -> Obj:
    out: Obj = {}
    for group, versions in sorted(registry.groups().items()):
        for version in versions:
            doc = document(registry, group, version)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()
            out[_gv_path(group, version)] = {
                "serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}?hash={digest}"
            }
    return {"paths": out}
