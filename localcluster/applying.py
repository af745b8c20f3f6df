"""``kubectl apply``-like creation of manifests for the local cluster's harness (create, else replace).

``apply_objects(api_client, registry, source)``: ``source`` is a path to a YAML file (one or more
documents; empty ones skipped) or an iterable of dicts. Each object goes over HTTP with
``api_client`` to the REST path of its kind (looked up in the emulator's ``registry``: a kind it does
not serve is a ``ValueError``): POST to create, and on 409 AlreadyExists a GET for the current
resourceVersion then a PUT of the given object (a replace, not a merge). Errors propagate as
``kubernetes.client.ApiException``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from localcluster.kubeapi.resources import Registry

Obj = dict[str, Any]


def load(source: str | Path | Iterable[Obj]) -> list[Obj]:
    if isinstance(source, str | Path):
        return [d for d in yaml.safe_load_all(Path(source).read_text()) if d]
    return [copy.deepcopy(d) for d in source if d]


def _path(registry: Registry, obj: Obj) -> tuple[str, str]:
    """(collection path, object path) of ``obj``."""
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    rt = registry.by_kind(group, obj.get("kind", ""))
    if rt is None or version not in registry.served(rt):
        raise ValueError(f"the local cluster does not serve {obj.get('kind')} in {obj.get('apiVersion')}")
    md = obj.get("metadata") or {}
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if rt.namespaced:
        base += f"/namespaces/{md.get('namespace') or 'default'}"
    collection = f"{base}/{rt.plural}"
    return collection, f"{collection}/{md.get('name', '')}"


def _call(api_client, method: str, path: str, body: Obj | None = None) -> Obj:
    """One request with the client's credentials; the answer's JSON (ApiException on an error status)."""
    from kubernetes.client.exceptions import ApiException

    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    params = api_client.param_serialize(method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
    response = api_client.call_api(*params)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return json.loads(response.data)


def apply_objects(api_client, registry: Registry, source: str | Path | Iterable[Obj]) -> list[Obj]:
    from kubernetes.client.exceptions import ApiException

    out = []
    for obj in load(source):
        collection, path = _path(registry, obj)
        try:
            out.append(_call(api_client, "POST", collection, obj))
        except ApiException as err:
            if err.status != 409:
                raise
            current = _call(api_client, "GET", path)
            obj.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
            out.append(_call(api_client, "PUT", path, obj))
    return out
