"""Kubernetes LabelSelectors as data: ``{"matchLabels": {...}, "matchExpressions": [...]}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_string(selector: Mapping[str, Any]) -> str:
    """A LabelSelector in the API's ``labelSelector`` query syntax (``k=v,k2 in (a,b),!k3``)."""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[op]
        )
    return ",".join(parts)


def expression_problem(expr: Any) -> str | None:
    """Why ``expr`` is not a LabelSelectorRequirement (None: it is one): a string ``key``, an ``operator`` of
    ``OPERATORS``, string ``values``, required for In/NotIn and empty otherwise."""
    if not isinstance(expr, Mapping) or set(expr) - {"key", "operator", "values"}:
        return f"{expr!r} is not a {{key, operator, values}} mapping"
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if not isinstance(key, str) or not key:
        return f"{expr!r}: key must be a non-empty string"
    if op not in OPERATORS:
        return f"{expr!r}: operator must be one of {', '.join(OPERATORS)}"
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return f"{expr!r}: values must be a list of strings"
    if (op in ("In", "NotIn")) != bool(values):
        return f"{expr!r}: values must be {'non-empty' if op in ('In', 'NotIn') else 'empty'} for {op}"
    return None
