"""Privilege escalation prevention for RBAC writes (upstream ``pkg/registry/rbac/*/policybased``).

``admit_for(authorizer, user, attrs, rt)`` gives the ``Rest`` admit callback for a create, update or
patch of a Role, ClusterRole, RoleBinding or ClusterRoleBinding (None for other kinds and for
members of ``system:masters``, who may grant anything):

- Role / ClusterRole: allowed when the user may ``escalate`` the resource (``roles`` or
  ``clusterroles`` of rbac.authorization.k8s.io, the request's name and namespace: none on a
  create), else every rule must be covered by the user's own rules in the request's namespace
  (cluster-wide rules only for a ClusterRole); a ClusterRole with an ``aggregationRule`` (new or
  old) also needs full authority ("must have cluster-admin privileges to use the aggregationRule").
- RoleBinding / ClusterRoleBinding: allowed when the user may ``bind`` the referenced role
  (``roles``/``clusterroles`` named by the roleRef, in the binding's namespace), else the user must
  hold every rule of that role (404 ``clusterroles.rbac.authorization.k8s.io "x" not found`` when
  it does not exist).
- An update that only changes ownerReferences or finalizers is always allowed (the garbage
  collector's writes).

The comparison is component-helpers' policy comparator: each rule broken down to one verb, group,
resource and name (or URL), every piece covered by one rule the user holds (``*``, ``*/sub``).

A refusal is 403: ``roles.rbac.authorization.k8s.io "r" is forbidden: user "u" (groups=["g"]) is
attempting to grant RBAC permissions not currently held:`` and one line per missing rule
(``{APIGroups:[""], Resources:["pods"], Verbs:["list"]}``), as ``ConfirmNoEscalation`` writes it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from localcluster.kubeapi.errors import ApiError, not_found
from localcluster.kubeapi.rbac import GROUP, MASTERS, Attributes, Authorizer, aggregate, forbidden_error
from localcluster.kubeapi.resources import Obj, ResourceType

FULL_AUTHORITY = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, {"verbs": ["*"], "nonResourceURLs": ["*"]}]


# ---- policy comparator (component-helpers/auth/rbac/validation/policy_comparator.go) ---------------


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


def _only_gc_fields(new: Obj, old: Obj | None) -> bool:
    if old is None:
        return False
    probe = copy.deepcopy(old)
    for key in ("ownerReferences", "finalizers"):
        probe["metadata"].pop(key, None)
        if key in new.get("metadata", {}):
            probe["metadata"][key] = new["metadata"][key]
    strip = ("resourceVersion", "managedFields", "creationTimestamp", "uid", "generation")
    a = {k: v for k, v in probe.items() if k != "metadata"}
    b = {k: v for k, v in new.items() if k != "metadata"}
    ma = {k: v for k, v in probe["metadata"].items() if k not in strip and v not in (None, [], {})}
    mb = {k: v for k, v in new.get("metadata", {}).items() if k not in strip and v not in (None, [], {})}
    return a == b and ma == mb


def _has_aggregation(obj: Obj | None) -> bool:
    return bool(((obj or {}).get("aggregationRule") or {}).get("clusterRoleSelectors"))


def admit_for(
    authorizer: Authorizer, user: Mapping[str, Any], attrs: Attributes, rt: ResourceType
) -> Callable[[Obj, Obj | None], None] | None:
    if rt.group != GROUP or MASTERS in (user.get("groups") or []):
        return None
    namespace = attrs.namespace

    def confirm(rules: list[Obj], name: str) -> None:
        owner, errors = authorizer.rules_for(user, namespace)
        missing = uncovered(owner, rules)
        if missing:
            raise forbidden_error(GROUP, rt.plural, name, escalation_message(user, missing, errors))

    def allowed(verb: str, resource: str, name: str, group: str = GROUP) -> bool:
        check = Attributes(
            verb=verb,
            resource_request=True,
            api_group=group,
            namespace=namespace,
            resource=resource,
            name=name,
            api_version="*" if verb == "escalate" else "",
        )
        return authorizer.authorize(user, check).allowed

    if rt.plural in ("roles", "clusterroles"):
        if allowed("escalate", rt.plural, attrs.name):
            return None

        def check_role(obj: Obj, old: Obj | None) -> None:
            if _only_gc_fields(obj, old):
                return
            name = obj["metadata"].get("name", "")
            confirm(list(obj.get("rules") or []), name)
            if rt.plural == "clusterroles" and (_has_aggregation(obj) or _has_aggregation(old)):
                if uncovered(authorizer.rules_for(user, namespace)[0], FULL_AUTHORITY):
                    raise forbidden_error(
                        GROUP, rt.plural, name, "must have cluster-admin privileges to use the aggregationRule"
                    )

        return check_role

    def check_binding(obj: Obj, old: Obj | None) -> None:
        if _only_gc_fields(obj, old):
            return
        ref = obj.get("roleRef") or {}
        kind = ref.get("kind")
        plural = {"Role": "roles", "ClusterRole": "clusterroles"}.get(kind or "")
        if plural is not None and allowed("bind", plural, ref.get("name") or "", ref.get("apiGroup") or ""):
            return
        if plural is None:
            text = f'unsupported role reference kind: "{kind or ""}"'
            raise ApiError(500, "InternalError", f"Internal error occurred: {text}", {"causes": [{"message": text}]})
        with authorizer.store.lock:
            rules, error = authorizer.role_rules(ref, namespace, lister_names=False)
        if error is not None:
            raise not_found(plural, GROUP, ref.get("name") or "")
        confirm(rules, obj["metadata"].get("name", ""))

    return check_binding
