"""Discovery documents: /version, /api, /apis, /apis/GROUP, /api/v1 and /apis/GROUP/VERSION.

Built from the ``Registry`` at request time, so the served-versions setting shows: a group with no
served version is absent, and its versions are listed in preference order (v1 > v1beta2 > v1beta1).
Subresources appear as ``plural/sub`` entries (``pods/status``, ``pods/log``, ``pods/exec``,
``serviceaccounts/token`` ...) with the verbs the real server gives them.
"""

from __future__ import annotations

import hashlib

from localcluster.kubeapi.resources import Obj, Registry, ResourceType

VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0-localcluster",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2025-08-27T00:00:00Z",
    "goVersion": "go1.24.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SUB_VERBS = {
    "status": ["get", "patch", "update"],
    "token": ["create"],
    "binding": ["create"],
    "log": ["get"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
    "portforward": ["create", "get"],
    "finalize": ["update"],
    "scale": ["get", "patch", "update"],
}
_SUB_KIND = {
    "scale": ("Scale", "autoscaling", "v1"),
    "token": ("TokenRequest", "authentication.k8s.io", "v1"),
    "binding": ("Binding", "", "v1"),
    "exec": ("PodExecOptions", "", "v1"),
    "log": ("Pod", "", "v1"),
    "attach": ("PodAttachOptions", "", "v1"),
    "portforward": ("PodPortForwardOptions", "", "v1"),
}


def api_versions(host: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group(name: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: Registry) -> Obj:
    groups = [_group(g, vs) for g, vs in sorted(registry.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> Obj | None:
    versions = registry.groups().get(group)
    if not versions or not group:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def _entries(rt: ResourceType, group_version: str) -> list[Obj]:
    main: Obj = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.verbs != ("create",):
        main["storageVersionHash"] = hashlib.sha256(f"{group_version}/{rt.plural}".encode()).hexdigest()[:11]
    out = [main]
    for sub in rt.subresources:
        entry: Obj = {
            "name": f"{rt.plural}/{sub}",
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": _SUB_VERBS.get(sub, ["get"]),
        }
        if sub in _SUB_KIND:
            kind, group, version = _SUB_KIND[sub]
            entry["kind"] = kind
            if group:
                entry["group"], entry["version"] = group, version
        out.append(entry)
    return out


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    types = registry.in_version(group, version)
    if not types:
        return None
    gv = f"{group}/{version}" if group else version
    resources = [e for rt in sorted(types, key=lambda t: t.plural) for e in _entries(rt, gv)]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
