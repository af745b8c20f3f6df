"""Access reviews answered from the same rules that authorize requests (``rbac.Authorizer``).

- ``subject_access_review(body)``: SubjectAccessReview for ``spec.user``/``groups`` (the
  privileged-group short cut applies, as in the API server's authorizer chain);
- ``self_subject_access_review(user, body)``: SelfSubjectAccessReview for the requesting user;
- ``self_subject_rules_review(user, body)``: SelfSubjectRulesReview, the user's rules in
  ``spec.namespace`` (400 "no namespace on request" without one), ``incomplete`` false,
  ``evaluationError`` naming roles that bindings refer to but that do not exist.

``spec.resourceAttributes`` (namespace, verb, group, version, resource, subresource, name) or
``spec.nonResourceAttributes`` (path, verb), exactly one (422 otherwise, as upstream's validation).
The answer echoes the spec with ``status.allowed`` and ``status.reason`` (e.g. ``RBAC: allowed by
ClusterRoleBinding "b" of ClusterRole "r" to ServiceAccount "sa/ns"``; a denial has no reason).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from localcluster.kubeapi.errors import bad_request, invalid
from localcluster.kubeapi.rbac import Attributes, Authorizer, aggregate
from localcluster.kubeapi.resources import Obj

API_VERSION = "authorization.k8s.io/v1"


def review_answer(api_version: str, kind: str, spec: Obj | None, status: Obj) -> Obj:
    out: Obj = {"kind": kind, "apiVersion": api_version, "metadata": {"creationTimestamp": None}}
    if spec is not None:
        out["spec"] = spec
    out["status"] = status
    return out


def _spec(body: Any) -> Obj:
    spec = (body or {}).get("spec") if isinstance(body, dict) else None
    return spec if isinstance(spec, dict) else {}


def _attributes(kind: str, spec: Obj) -> Attributes:
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    causes = []
    if res is not None and non is not None:
        causes.append(
            (
                "spec.nonResourceAttributes",
                f"Invalid value: {json.dumps(non)}: cannot be specified in combination with resourceAttributes",
            )
        )
    if res is None and non is None:
        causes.append(
            (
                "spec.resourceAttributes",
                'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
            )
        )
    if kind == "SubjectAccessReview" and not spec.get("user") and not spec.get("groups"):
        causes.append(("spec.user", 'Invalid value: "": at least one of user or group must be specified'))
    if causes:
        raise invalid(kind, "authorization.k8s.io", "", causes)
    if non is not None:
        return Attributes(verb=non.get("verb") or "", path=non.get("path") or "")
    return Attributes(
        verb=res.get("verb") or "",
        resource_request=True,
        api_group=res.get("group") or "",
        api_version=res.get("version") or "",
        namespace=res.get("namespace") or "",
        resource=res.get("resource") or "",
        subresource=res.get("subresource") or "",
        name=res.get("name") or "",
    )


class Reviews:
    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def _status(self, user: Mapping[str, Any], attrs: Attributes) -> Obj:
        decision = self.authorizer.authorize(user, attrs)
        status: Obj = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return status

    def subject_access_review(self, body: Any) -> Obj:
        spec = _spec(body)
        attrs = _attributes("SubjectAccessReview", spec)
        user = {"username": spec.get("user") or "", "groups": list(spec.get("groups") or [])}
        return review_answer(API_VERSION, "SubjectAccessReview", spec, self._status(user, attrs))

    def self_subject_access_review(self, user: Mapping[str, Any], body: Any) -> Obj:
        spec = _spec(body)
        attrs = _attributes("SelfSubjectAccessReview", spec)
        return review_answer(API_VERSION, "SelfSubjectAccessReview", spec, self._status(user, attrs))

    def self_subject_rules_review(self, user: Mapping[str, Any], body: Any) -> Obj:
        spec = _spec(body)
        namespace = spec.get("namespace") or ""
        if not namespace:
            raise bad_request("no namespace on request")
        rules, errors = self.authorizer.rules_for(user, namespace)
        resource_rules, url_rules = [], []
        for rule in rules:
            if rule.get("resources"):
                entry = {"verbs": list(rule.get("verbs") or [])}
                for key in ("apiGroups", "resources", "resourceNames"):
                    if rule.get(key):
                        entry[key] = list(rule[key])
                resource_rules.append(entry)
            if rule.get("nonResourceURLs"):
                url_rules.append({"verbs": list(rule.get("verbs") or []), "nonResourceURLs": rule["nonResourceURLs"]})
        status: Obj = {"resourceRules": resource_rules, "nonResourceRules": url_rules, "incomplete": False}
        if errors:
            status["evaluationError"] = aggregate(errors)
        return review_answer(API_VERSION, "SelfSubjectRulesReview", spec, status)
