"""Scheduling rules, as k8s.io/component-helpers and kube-scheduler's plugins define them (pure functions).

- Taints and tolerations (``tolerates``, ``untolerated_taint``): a toleration with an effect
  matches only that effect; with a key only that key (an empty key with ``Exists`` matches every
  taint); ``Equal`` (or no operator) compares values, ``Exists`` does not.
- Node selector terms (``match_terms``): terms are ORed, a term's expressions and fields ANDed; a
  term with neither is skipped, so an empty list matches nothing; a malformed term (unknown
  operator, In/NotIn without values, Exists/DoesNotExist with values, Gt/Lt without exactly one
  integer) matches nothing. ``matchFields`` knows ``metadata.name`` (In/NotIn, one value) and is
  ignored when no node name is given (``pv_affinity_ok``: PV node affinity is checked against the
  node's labels only, as ``volume.CheckNodeAffinity`` does).
- ``node_affinity_ok``: the pod's ``nodeSelector`` (every label equal) and its required node
  affinity; ``preferred_score``: the sum of the weights of the matching preferred terms.
- ``topology_ok``: a StorageClass's ``allowedTopologies`` (terms ORed, each key's values ANDed).
- ``label_selector_ok``: a metav1 LabelSelector (matchLabels, matchExpressions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]
SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    taints: Iterable[Obj], tolerations: Iterable[Obj], effects: tuple[str, ...] = SCHEDULE_EFFECTS
) -> Obj | None:
    """The first taint of ``effects`` no toleration tolerates, or None."""
    tolerations = list(tolerations or [])
    for taint in taints or []:
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def requirement_ok(expr: Obj, labels: Mapping[str, str]) -> bool | None:
    """Whether a NodeSelectorRequirement holds for ``labels``; None when it is malformed."""
    key, op, values = expr.get("key") or "", expr.get("operator"), list(expr.get("values") or [])
    if not key:
        return None
    if op in ("In", "NotIn"):
        if not values:
            return None
        return (labels.get(key) in values) if op == "In" else (key not in labels or labels[key] not in values)
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return (key in labels) == (op == "Exists")
    if op in ("Gt", "Lt"):
        bound = _int(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        have = _int(labels.get(key, ""))
        return have is not None and (have > bound if op == "Gt" else have < bound)
    return None


def _field_ok(expr: Obj, name: str) -> bool | None:
    values = list(expr.get("values") or [])
    if expr.get("key") != "metadata.name" or expr.get("operator") not in ("In", "NotIn") or len(values) != 1:
        return None
    return (name == values[0]) == (expr["operator"] == "In")


def term_ok(term: Obj, labels: Mapping[str, str], name: str | None) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    results = [requirement_ok(e, labels) for e in exprs]
    checked = (
        [_field_ok(f, name) for f in fields] if name else [None if _field_ok(f, "") is None else True for f in fields]
    )
    return all(r is True for r in results + checked)


def match_terms(terms: Iterable[Obj] | None, labels: Mapping[str, str], name: str | None = None) -> bool:
    """NodeSelectorTerms ORed; empty terms are skipped (an empty list matches nothing)."""
    for term in terms or []:
        if not (term.get("matchExpressions") or term.get("matchFields")):
            continue
        if term_ok(term, labels, name):
            return True
    return False


def node_labels(node: Obj) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def node_affinity_ok(pod: Obj, node: Obj) -> bool:
    spec, labels = pod.get("spec") or {}, node_labels(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None:
        return match_terms(required.get("nodeSelectorTerms"), labels, node["metadata"]["name"])
    return True


def preferred_score(pod: Obj, node: Obj) -> int:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    labels, name = node_labels(node), node["metadata"]["name"]
    score = 0
    for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        pref = term.get("preference") or {}
        if int(term.get("weight") or 0) and (pref.get("matchExpressions") or pref.get("matchFields")):
            if term_ok(pref, labels, name):
                score += int(term["weight"])
    return score


def pv_affinity_ok(pv: Obj, labels: Mapping[str, str]) -> bool:
    """``volume.CheckNodeAffinity``: the PV's required node affinity against the node's labels."""
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if required is None:
        return True
    return match_terms(required.get("nodeSelectorTerms"), labels)


def topology_ok(allowed: Iterable[Obj] | None, labels: Mapping[str, str]) -> bool:
    """A StorageClass's allowedTopologies: no terms match every node; otherwise one term must."""
    terms = list(allowed or [])
    if not terms:
        return True
    for term in terms:
        if all(labels.get(e.get("key")) in (e.get("values") or []) for e in term.get("matchLabelExpressions") or []):
            return True
    return False


def label_selector_ok(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if expr.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist") or not requirement_ok(expr, labels):
            return False
    return True
