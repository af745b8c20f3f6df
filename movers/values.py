"""Values as people write them: the one parser of each kind, shared by the policy, the CLI, the flows and
the Kubernetes layer.

- **Durations** (``parse_duration``): every policy field, hook, pod annotation, flag and flow parameter that
  takes a duration. A duration is a number of seconds (``30``, ``0.5``, also as a string) or a Go duration
  (``90s``, ``1m30s``, ``250ms``, ``1.5h``; parsed by ``durationpy``) that may begin with whole or fractional
  days (``7d``, ``1d12h``: not Go syntax; a day is 24 h), for retention-scale settings such as a prune's grace.
- **Kubernetes quantities** (``parse_quantity``, ``quantity_bytes``: ``500m``, ``1Gi``, ``1e3``): the one
  parser, ``kubernetes.utils.parse_quantity`` (exact decimals, the API server's suffixes).
- **Kubernetes LabelSelectors as data** (``selector_string``, ``expression_problem``):
  ``{"matchLabels": {...}, "matchExpressions": [...]}``.
- **Sizes as people read them** (``human_bytes``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decimal import Decimal

# Durations

_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
_DAYS = re.compile(r"^(\d+(?:\.\d+)?)d")
EXAMPLES = "e.g. 30, 90s, 1m30s, 500ms, 24h, 7d"


def parse_duration(value: Any, *, bare_numbers: bool = True) -> float:
    """Seconds from ``value`` (see the module doc); ``ValueError`` naming the value and examples otherwise.
    The sign is kept: callers bound the range (a timeout must be positive, a grace not negative).
    ``bare_numbers=False``: Go's own syntax, where a string needs a unit (``"0"`` aside), as Velero's
    annotations are read."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})")
    if not isinstance(value, str):
        return float(value)
    text = value.strip()
    if _NUMBER.match(text) and (bare_numbers or float(text) == 0):
        return float(text)
    import durationpy  # here, not at the top: every command imports this module, few parse a duration

    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    days = _DAYS.match(body)
    rest = body[days.end() :] if days else body
    try:
        seconds = durationpy.from_str(rest).total_seconds() if rest else 0.0
    except durationpy.DurationError:
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})") from None
    if not body or rest.startswith(("-", "+")):
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})")
    return sign * ((float(days.group(1)) * 86400 if days else 0.0) + seconds)


# Kubernetes quantities


def parse_quantity(value: Any) -> Decimal:
    """The exact value of a quantity given as a string or a number; ``ValueError`` for anything else."""
    from kubernetes.utils import parse_quantity as parse

    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, str) and any(c.isspace() for c in value):  # parse() strips them; the API server does not
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return parse(value)


def quantity_bytes(value: Any) -> int | None:
    """Bytes of a size quantity (``"1Gi"``, ``"500M"``, ``1073741824``; a fraction rounds up), None for None."""
    return None if value is None else math.ceil(parse_quantity(value))


# LabelSelectors

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


# Sizes


def human_bytes(n: float | None, missing: str = "-") -> str:
    """``n`` bytes in B/KiB/MiB/GiB/TiB (``512 B``, ``1.5 MiB``); ``missing`` when ``n`` is None."""
    if n is None:
        return missing
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
