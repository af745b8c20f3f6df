"""RBAC authorization as kube-apiserver does it: request attributes, rule evaluation, 403 bodies.

The request's ``Attributes`` come from ``requestinfo.request_attributes`` (re-exported here).

``Authorizer(store, registry).authorize(user, attrs) -> Decision``: members of ``system:masters``
are always allowed with no reason (the API server's privileged-group authorizer, ahead of RBAC).
Everyone else is evaluated as ``plugin/pkg/auth/authorizer/rbac``: the ClusterRoleBindings, then
the RoleBindings of the request's namespace (so a RoleBinding to a ClusterRole grants only in its
namespace), in name order; a binding applies when one subject matches (User by name, Group by the
user's groups, ServiceAccount as ``system:serviceaccount:NS:NAME``, its namespace defaulting to the
binding's). A rule allows when verb, API group, resource (``*``, exact ``res/sub``, ``*/sub``),
resource name (none listed = all; a create or a collection list has no name, so a rule with
``resourceNames`` never matches it) and, for non-resource requests, the URL (exact or a ``*``
suffix) match. Allowed: reason ``RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to
User "u"`` (``ServiceAccount "name/ns"``). Denied: no reason, unless a binding names a missing
role: then ``RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`` (several: ``[a, b]``).

``forbidden(user, attrs, reason)`` is the ``Status`` upstream's responsewriters write:
``pods is forbidden: User "u" cannot list resource "pods" in API group "" in the namespace "ns"``
(``... at the cluster scope``; ``pods "p" is forbidden`` when the request names an object;
``forbidden: User "u" cannot get path "/x"`` for non-resource paths), ``: REASON`` appended when
there is one, details ``{group, kind: resource, name}`` with empty fields left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from localcluster.kubeapi.errors import ApiError
from localcluster.kubeapi.requestinfo import Attributes, request_attributes
from localcluster.kubeapi.resources import Obj, Registry
from localcluster.kubeapi.store import Store

__all__ = ["Attributes", "Authorizer", "Decision", "forbidden", "forbidden_error", "request_attributes"]

GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""
    errors: tuple[str, ...] = field(default=())


# ---- rule matching (pkg/apis/rbac/v1/evaluation_helpers.go) -------------------------------------


def _resource_matches(rule: Obj, combined: str, sub: str) -> bool:
    for res in rule.get("resources") or []:
        if res in ("*", combined):
            return True
        if sub and len(res) == len(sub) + 2 and res.startswith("*/") and res.endswith(sub):
            return True
    return False


def _url_matches(rule: Obj, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", path) or (url.endswith("*") and path.startswith(url.rstrip("*"))):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Obj) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.api_group not in groups:
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if not _resource_matches(rule, combined, attrs.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


# ---- subjects and bindings (pkg/registry/rbac/validation/rule.go) -------------------------------


def _applies(user: Mapping[str, Any], subject: Obj, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return user.get("username") == name
    if kind == "Group":
        return name in (user.get("groups") or [])
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return bool(ns) and user.get("username") == f"system:serviceaccount:{ns}:{name}"
    return False


def _describe(subject: Obj, namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name", "")}/{subject.get("namespace") or namespace}"'
    return f'{subject.get("kind", "")} "{subject.get("name", "")}"'


def aggregate(errors: Sequence[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message, or ``[a, b]`` of the distinct ones."""
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    if len(seen) <= 1:
        return seen[0] if seen else ""
    return "[" + ", ".join(seen) + "]"


class Authorizer:
    """RBAC over the emulator's store, behind the privileged-group short cut."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry

    def _type(self, plural: str):
        return self.registry.get(GROUP, plural)

    def role_rules(self, ref: Obj, namespace: str, lister_names: bool = True) -> tuple[list[Obj], str | None]:
        """(rules, error) of a roleRef (a ``Role`` in ``namespace``); lister-style or registry-style 404 text."""
        kind, name = ref.get("kind"), ref.get("name", "")
        if kind not in ("Role", "ClusterRole"):
            return [], f'unsupported role reference kind: "{kind}"'
        plural = "roles" if kind == "Role" else "clusterroles"
        rt = self._type(plural)
        obj = self.store.find(rt, namespace, name) if rt is not None and (namespace or kind == "ClusterRole") else None
        if obj is None:
            what = kind.lower() if lister_names else plural
            return [], f'{what}.{GROUP} "{name}" not found'
        return list(obj.get("rules") or []), None

    def visit(self, user: Mapping[str, Any], namespace: str) -> Iterator[tuple[str | None, Obj | None, str | None]]:
        """(source description, rule, error) for every rule that applies to ``user`` in ``namespace``."""
        with self.store.lock:
            crb, rb = self._type("clusterrolebindings"), self._type("rolebindings")
            bindings: list[tuple[Obj, str]] = []
            if crb is not None:
                bindings += [(b, "") for b in self.store.items(crb)]
            if namespace and rb is not None:
                bindings += [(b, namespace) for b in self.store.items(rb, namespace)]
            resolved = []
            for binding, ns in bindings:
                subject = next((s for s in binding.get("subjects") or [] if _applies(user, s, ns)), None)
                if subject is None:
                    continue
                ref = binding.get("roleRef") or {}
                rules, error = self.role_rules(ref, ns)
                resolved.append((binding, ns, subject, ref, rules, error))
        for binding, ns, subject, ref, rules, error in resolved:
            if error is not None:
                yield None, None, error
                continue
            name = binding["metadata"]["name"]
            what = f'RoleBinding "{name}/{ns}"' if ns else f'ClusterRoleBinding "{name}"'
            source = f'{what} of {ref.get("kind")} "{ref.get("name")}" to {_describe(subject, ns)}'
            for rule in rules:
                yield source, rule, None

    def rules_for(self, user: Mapping[str, Any], namespace: str) -> tuple[list[Obj], list[str]]:
        rules, errors = [], []
        for _, rule, error in self.visit(user, namespace):
            if rule is not None:
                rules.append(rule)
            if error is not None:
                errors.append(error)
        return rules, errors

    def rbac(self, user: Mapping[str, Any], attrs: Attributes) -> Decision:
        """The RBAC authorizer alone (no privileged-group short cut)."""
        errors = []
        for source, rule, error in self.visit(user, attrs.namespace):
            if rule is not None and rule_allows(attrs, rule):
                return Decision(True, f"RBAC: allowed by {source}")
            if error is not None:
                errors.append(error)
        return Decision(False, f"RBAC: {aggregate(errors)}" if errors else "", tuple(errors))

    def authorize(self, user: Mapping[str, Any], attrs: Attributes) -> Decision:
        if MASTERS in (user.get("groups") or []):
            return Decision(True, "")
        return self.rbac(user, attrs)


def forbidden(user: Mapping[str, Any], attrs: Attributes, reason: str = "") -> ApiError:
    """The 403 ``Status`` the API server writes for a request the authorizer did not allow."""
    username = json.dumps(user.get("username", ""))
    if not attrs.resource_request:
        text = f"User {username} cannot {attrs.verb} path {json.dumps(attrs.path)}"
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = f"in the namespace {json.dumps(attrs.namespace)}" if attrs.namespace else "at the cluster scope"
        text = (
            f"User {username} cannot {attrs.verb} resource {json.dumps(resource)} in API group"
            f" {json.dumps(attrs.api_group)} {scope}"
        )
    if reason:
        text = f"{text}: {reason}"
    resource = attrs.resource if attrs.resource_request else ""
    return forbidden_error(attrs.api_group if attrs.resource_request else "", resource, attrs.name, text)


def forbidden_error(group: str, resource: str, name: str, text: str) -> ApiError:
    """``apierrors.NewForbidden(GroupResource{group, resource}, name, errors.New(text))``."""
    if not group and not resource:
        message = f"forbidden: {text}"
    else:
        qualified = f"{resource}.{group}" if group else resource
        message = (
            f"{qualified} {json.dumps(name)} is forbidden: {text}" if name else f"{qualified} is forbidden: {text}"
        )
    details = {k: v for k, v in (("group", group), ("kind", resource), ("name", name)) if v}
    return ApiError(403, "Forbidden", message, details)
