"""The rbac.authorization.k8s.io/v1 kinds: resource types, v1 defaulting and upstream validation.

- ``types()``: Role and RoleBinding (namespaced), ClusterRole and ClusterRoleBinding (cluster).
- ``defaults(rt, obj)`` (rbac/v1 ``SetDefaults_*``): a binding's ``roleRef.apiGroup`` and a User or
  Group subject's ``apiGroup`` default to rbac.authorization.k8s.io.
- ``errors(rt, obj, old)`` (``pkg/apis/rbac/validation``): every rule needs verbs; a resource rule
  needs apiGroups and resources; nonResourceURLs only in ClusterRoles and never together with
  resources; ``roleRef`` needs apiGroup rbac.authorization.k8s.io, kind Role or ClusterRole
  (ClusterRole only in a ClusterRoleBinding) and a name, and may not change on update ("cannot
  change roleRef"); subjects are ServiceAccount (apiGroup "", a namespace in ClusterRoleBindings),
  User or Group (apiGroup rbac.authorization.k8s.io) with a name. A RoleBinding's Role is always
  looked up in the binding's own namespace (roleRef has no namespace), so it cannot name another.
- ``name_errors(name)``: RBAC object names are path segments (not ".", "..", no "/" or "%").

A ClusterRole's ``aggregationRule`` is validated (at least one selector) and stored, but nothing
aggregates: no controller fills in the rules of the roles it selects (the bootstrap roles that
upstream builds by aggregation, admin/edit/view, are not created).
"""

from __future__ import annotations

import json
import re

from localcluster.kubeapi import fields
from localcluster.kubeapi.resources import Obj, ResourceType

GROUP = "rbac.authorization.k8s.io"
_BINDINGS = ("rolebindings", "clusterrolebindings")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def types() -> list[ResourceType]:
    def rbac(plural: str, kind: str, namespaced: bool) -> ResourceType:
        return ResourceType(GROUP, plural, kind, ("v1",), "v1", namespaced)

    return [
        rbac("roles", "Role", True),
        rbac("rolebindings", "RoleBinding", True),
        rbac("clusterroles", "ClusterRole", False),
        rbac("clusterrolebindings", "ClusterRoleBinding", False),
    ]


def defaults(rt: ResourceType, obj: Obj) -> None:
    if rt.group != GROUP or rt.plural not in _BINDINGS:
        return
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = GROUP
    for subject in obj.get("subjects") or []:
        if isinstance(subject, dict) and not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
            subject["apiGroup"] = GROUP


def name_errors(name: str) -> list[str]:
    """path.IsValidPathSegmentName (``validation`` applies it to RBAC object names too)."""
    return fields.path_segment_name(name)


def _unsupported(value: object, supported: tuple[str, ...]) -> str:
    return f"Unsupported value: {json.dumps(value)}: supported values: " + ", ".join(json.dumps(s) for s in supported)


def _go_strings(values: list) -> str:
    return "[]string{" + ", ".join(json.dumps(v) for v in values) + "}"


def _rule_errors(rule: Obj, path: str, namespaced: bool) -> list[tuple[str, str]]:
    out = []
    if not rule.get("verbs"):
        out.append((f"{path}.verbs", "Required value: verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        if namespaced:
            out.append(
                (
                    f"{path}.nonResourceURLs",
                    f"Invalid value: {_go_strings(urls)}: namespaced rules cannot apply to non-resource URLs",
                )
            )
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            out.append(
                (
                    f"{path}.nonResourceURLs",
                    f"Invalid value: {_go_strings(urls)}: rules cannot apply to both"
                    " regular resources and non-resource URLs",
                )
            )
        return out
    if not rule.get("apiGroups"):
        out.append((f"{path}.apiGroups", "Required value: resource rules must supply at least one api group"))
    if not rule.get("resources"):
        out.append((f"{path}.resources", "Required value: resource rules must supply at least one resource"))
    return out


def _subject_errors(subject: Obj, path: str, namespaced: bool) -> list[tuple[str, str]]:
    out = []
    name, kind, group = subject.get("name") or "", subject.get("kind"), subject.get("apiGroup") or ""
    if not name:
        out.append((f"{path}.name", "Required value"))
    if kind == "ServiceAccount":
        if name and (not _SUBDOMAIN.match(name) or len(name) > 253):
            out.append(
                (
                    f"{path}.name",
                    f"Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must"
                    " consist of lower case alphanumeric characters, '-' or '.', and must start"
                    " and end with an alphanumeric character",
                )
            )
        if group:
            out.append((f"{path}.apiGroup", _unsupported(group, ("",))))
        if not namespaced and not subject.get("namespace"):
            out.append((f"{path}.namespace", "Required value"))
    elif kind in ("User", "Group"):
        if not name:
            out.append((f"{path}.name", f'Invalid value: "": {kind.lower()} name cannot be empty'))
        if group != GROUP:
            out.append((f"{path}.apiGroup", _unsupported(group, (GROUP,))))
    else:
        out.append((f"{path}.kind", _unsupported(kind or "", ("ServiceAccount", "User", "Group"))))
    return out


def _ref_text(ref: Obj) -> str:
    return (
        f"rbac.RoleRef{{APIGroup:{json.dumps(ref.get('apiGroup') or '')}, Kind:{json.dumps(ref.get('kind') or '')},"
        f" Name:{json.dumps(ref.get('name') or '')}}}"
    )


def errors(rt: ResourceType, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
    if rt.group != GROUP:
        return []
    out: list[tuple[str, str]] = []
    if rt.plural in ("roles", "clusterroles"):
        for i, rule in enumerate(obj.get("rules") or []):
            out += _rule_errors(rule if isinstance(rule, dict) else {}, f"rules[{i}]", rt.namespaced)
        agg = obj.get("aggregationRule")
        if rt.plural == "clusterroles" and agg is not None and not (agg or {}).get("clusterRoleSelectors"):
            out.append(
                (
                    "aggregationRule.clusterRoleSelectors",
                    "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil",
                )
            )
        return out
    ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
    if ref.get("apiGroup") != GROUP:
        out.append(("roleRef.apiGroup", _unsupported(ref.get("apiGroup") or "", (GROUP,))))
    kinds = ("Role", "ClusterRole") if rt.namespaced else ("ClusterRole",)
    if ref.get("kind") not in kinds:
        out.append(("roleRef.kind", _unsupported(ref.get("kind") or "", kinds)))
    if not ref.get("name"):
        out.append(("roleRef.name", "Required value"))
    else:
        out += [("roleRef.name", f"Invalid value: {json.dumps(ref['name'])}: {m}") for m in name_errors(ref["name"])]
    for i, subject in enumerate(obj.get("subjects") or []):
        out += _subject_errors(subject if isinstance(subject, dict) else {}, f"subjects[{i}]", rt.namespaced)
    if old is not None:
        old_ref = old.get("roleRef") or {}
        if {k: ref.get(k) or "" for k in ("apiGroup", "kind", "name")} != {
            k: old_ref.get(k) or "" for k in ("apiGroup", "kind", "name")
        }:
            out.append(("roleRef", f"Invalid value: {_ref_text(ref)}: cannot change roleRef"))
    return out
