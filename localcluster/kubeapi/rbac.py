"""RBAC authorization as kube-apiserver does it: request attributes, rule evaluation, 403 bodies.

``request_attributes(method, path, query)`` derives the ``Attributes`` of a request exactly as
apiserver's ``requestinfo.go``: paths with fewer than three segments, or not under ``/api`` or
``/apis/GROUP``, are non-resource requests whose verb is the lower-case HTTP method; otherwise the
verb is get/list/watch (``?watch`` with any value but ``0``/``false``, or a ``/watch/`` path
segment)/create/update/patch/delete/deletecollection, ``namespaces/NS`` gives the namespace (also
for the namespace object itself and its ``status``/``finalize``), then resource, name, subresource.
A list or watch whose ``fieldSelector`` requires ``metadata.name=X`` (``=`` or ``==``) has name X.

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

``covers(owner_rules, rules)`` is component-helpers' policy comparator (the escalation check):
the rules the owner does not hold, broken down to one verb/group/resource/name each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from localcluster.kubeapi.errors import ApiError
from localcluster.kubeapi.resources import Obj, Registry
from localcluster.kubeapi.store import Store

GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (``authorizer.Attributes``)."""

    verb: str
    path: str = ""
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    def with_verb(self, verb: str) -> Attributes:
        return Attributes(
            verb,
            self.path,
            self.resource_request,
            self.api_group,
            self.api_version,
            self.namespace,
            self.resource,
            self.subresource,
            self.name,
        )

    def record(self) -> dict[str, Any]:
        """The audit form: verb, apiGroup, resource, subresource, namespace, name, path."""
        d = asdict(self)
        return {
            "verb": d["verb"],
            "apiGroup": d["api_group"],
            "resource": d["resource"],
            "subresource": d["subresource"],
            "namespace": d["namespace"],
            "name": d["name"],
            "path": d["path"],
            "resourceRequest": d["resource_request"],
        }


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""
    errors: tuple[str, ...] = field(default=())


def _truthy_watch(values: Sequence[str]) -> bool:
    return bool(values) and values[0].lower() not in ("0", "false")


def _valid_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def exact_name(selector: str | None) -> str | None:
    """The value of a ``metadata.name=X`` (or ``==``) term of a field selector, or None."""
    if not selector:
        return None
    terms, cur, escaped = [], "", False
    for ch in selector:
        if escaped:
            cur += ch
            escaped = False
        elif ch == "\\":
            cur += ch
            escaped = True
        elif ch == ",":
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    for term in terms:
        term = term.strip()
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and not key.endswith("!") and key.strip() == "metadata.name":
                value = value.replace("\\,", ",").replace("\\=", "=").replace("\\\\", "\\")
                return value
    return None


def request_attributes(method: str, path: str, query: Mapping[str, Any]) -> Attributes:
    """The attributes of an HTTP request (``query``: a mapping of name -> value or list of values)."""

    def values(key: str) -> list[str]:
        getall = getattr(query, "getall", None)
        if getall is not None:
            return list(getall(key, []))
        value = query.get(key)
        return [] if value is None else (list(value) if isinstance(value, list | tuple) else [value])

    verb = method.lower()
    parts = [p for p in path.strip("/").split("/")] if path.strip("/") else []
    plain = Attributes(verb=verb, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return plain
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return plain
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return Attributes(verb=verb, path=path, resource_request=True, api_group=group, api_version=version)
        verb, rest = rest[0], rest[1:]
    else:
        verb = {
            "post": "create",
            "get": "get",
            "head": "get",
            "put": "update",
            "patch": "patch",
            "delete": "delete",
        }.get(method.lower(), "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource, name, sub = rest[0], "", ""
    if len(rest) >= 2:
        name = rest[1]
    if len(rest) >= 3 and verb != "proxy":
        sub = rest[2]
    if not name and verb == "get":
        verb = "watch" if _truthy_watch(values("watch")) else "list"
        selected = exact_name(next(iter(values("fieldSelector")), None))
        if selected is not None and _valid_segment(selected):
            name = selected
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(verb, path, True, group, version, namespace, resource, sub, name)


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


# ---- escalation (component-helpers/auth/rbac/validation/policy_comparator.go) -------------------


def breakdown(rule: Obj) -> list[Obj]:
    """A rule as rules of one verb, one group, one resource and at most one name (or one URL)."""
    out: list[Obj] = []
    verbs = rule.get("verbs") or []
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in verbs:
                names = rule.get("resourceNames") or []
                if names:
                    out += [
                        {"apiGroups": [group], "resources": [resource], "verbs": [verb], "resourceNames": [n]}
                        for n in names
                    ]
                else:
                    out.append({"apiGroups": [group], "resources": [resource], "verbs": [verb]})
    for url in rule.get("nonResourceURLs") or []:
        out += [{"nonResourceURLs": [url], "verbs": [verb]} for verb in verbs]
    return out


def _resources_cover(owned: list[str], wanted: list[str]) -> bool:
    if "*" in owned or set(wanted) <= set(owned):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owned:
            return False
    return True


def _urls_cover(owned: list[str], wanted: list[str]) -> bool:
    return all(any(o == w or (o.endswith("*") and w.startswith(o.rstrip("*"))) for o in owned) for w in wanted)


def _rule_covers(owner: Obj, sub: Obj) -> bool:
    verbs, groups = owner.get("verbs") or [], owner.get("apiGroups") or []
    names, sub_names = owner.get("resourceNames") or [], sub.get("resourceNames") or []
    return (
        ("*" in verbs or set(sub.get("verbs") or []) <= set(verbs))
        and ("*" in groups or set(sub.get("apiGroups") or []) <= set(groups))
        and _resources_cover(owner.get("resources") or [], sub.get("resources") or [])
        and (not names if not sub_names else (not names or set(sub_names) <= set(names)))
        and _urls_cover(owner.get("nonResourceURLs") or [], sub.get("nonResourceURLs") or [])
    )


def uncovered(owner_rules: Sequence[Obj], rules: Sequence[Obj]) -> list[Obj]:
    """The broken-down rules of ``rules`` that no rule of ``owner_rules`` covers (empty: covered)."""
    return [sub for rule in rules for sub in breakdown(rule) if not any(_rule_covers(o, sub) for o in owner_rules)]


def compact(rules: Sequence[Obj]) -> list[Obj]:
    """CompactRules: simple rules (one group, one resource, at most one name) merged across verbs."""
    out: list[Obj] = []
    simple: dict[tuple, Obj] = {}
    for rule in rules:
        names = rule.get("resourceNames") or []
        keys = set(rule) - {"apiGroups", "resources", "verbs", "resourceNames"}
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        if len(names) > 1 or rule.get("nonResourceURLs") or keys or len(groups) != 1 or len(resources) != 1:
            out.append(rule)
            continue
        key = (groups[0], resources[0], tuple(names))
        if key in simple:
            simple[key]["verbs"] += [v for v in rule.get("verbs") or [] if v not in simple[key]["verbs"]]
        else:
            simple[key] = {**rule, "verbs": list(rule.get("verbs") or [])}
    return out + list(simple.values())


def _go_list(values: Sequence[str]) -> str:
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def compact_string(rule: Obj) -> str:
    """rbacv1helpers.CompactString: ``{APIGroups:["g"], Resources:["r"], Verbs:["get" "list"]}``."""
    parts = [
        f"{label}:{_go_list(rule[key])}"
        for label, key in (
            ("APIGroups", "apiGroups"),
            ("Resources", "resources"),
            ("NonResourceURLs", "nonResourceURLs"),
            ("ResourceNames", "resourceNames"),
            ("Verbs", "verbs"),
        )
        if rule.get(key)
    ]
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: Mapping[str, Any], missing: Sequence[Obj], errors: Sequence[str]) -> str:
    """ConfirmNoEscalation's error text for the rules ``missing``."""
    lines = sorted({compact_string(r) for r in compact(missing)})
    groups = _go_list(list(user.get("groups") or []))
    msg = (
        f"user {json.dumps(user.get('username', ''))} (groups={groups}) is attempting to grant RBAC permissions"
        " not currently held:\n" + "\n".join(lines)
    )
    if errors:
        msg += f"; resolution errors: [{aggregate(errors)}]"
    return msg
