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

A refusal is 403: ``roles.rbac.authorization.k8s.io "r" is forbidden: user "u" (groups=["g"]) is
attempting to grant RBAC permissions not currently held:`` and one line per missing rule
(``{APIGroups:[""], Resources:["pods"], Verbs:["list"]}``), as ``ConfirmNoEscalation`` writes it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from localcluster.kubeapi.errors import ApiError, not_found
from localcluster.kubeapi.rbac import (
    GROUP,
    MASTERS,
    Attributes,
    Authorizer,
    escalation_message,
    forbidden_error,
    uncovered,
)
from localcluster.kubeapi.resources import Obj, ResourceType

FULL_AUTHORITY = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, {"verbs": ["*"], "nonResourceURLs": ["*"]}]


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
