"""Label and field selectors as the API server parses them.

``parse_label_selector(text)`` accepts ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k``, ``!k``, ``k>n``, ``k<n`` joined by commas; ``parse_field_selector(text, allowed)`` accepts
``f=v``, ``f==v``, ``f!=v`` over the field labels in ``allowed``. Both return a predicate over an
object (dict) and raise ``ApiError`` 400 on a malformed selector or an unsupported field label.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from localcluster.kubeapi.errors import bad_request
from localcluster.kubeapi.resources import Obj

Predicate = Callable[[Obj], bool]

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_CMP = re.compile(rf"^({_KEY})\s*(==|!=|=|>|<)\s*({_VALUE})$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _requirement(part: str) -> Predicate:
    if m := _SET.match(part):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _CMP.match(part):
        key, op, value = m.groups()
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        try:
            bound = int(value)
        except ValueError:
            raise bad_request(
                f"unable to parse requirement: for 'gt', 'lt' operators, the value must be an integer: {part}"
            ) from None
        gt = op == ">"
        return lambda labels: (
            _int(labels.get(key)) is not None
            and (_int(labels.get(key)) > bound if gt else _int(labels.get(key)) < bound)
        )
    if m := _EXISTS.match(part):
        negate, key = m.groups()
        return (lambda labels: key not in labels) if negate else (lambda labels: key in labels)
    raise bad_request(f"unable to parse requirement: found '{part}', expected: valid label selector")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_label_selector(text: str | None) -> Predicate:
    if not text:
        return lambda obj: True
    reqs = [_requirement(p) for p in _split_top(text)]

    def match(obj: Obj) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def match_label_selector(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels, matchExpressions) against labels; None matches nothing."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def field_value(obj: Obj, path: str) -> str:
    cur: object = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, dict):  # e.g. events' "source": the component
        return str(cur.get("component", ""))
    return str(cur)


def parse_field_selector(text: str | None, allowed: Iterable[str]) -> Predicate:
    if not text:
        return lambda obj: True
    allowed = {"metadata.name", "metadata.namespace", *allowed}
    reqs = []
    for part in _split_top(text):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        label, op, value = m.groups()
        if label not in allowed:
            raise bad_request(f"field label not supported: {label}")
        reqs.append((label, op != "!=", value))

    def match(obj: Obj) -> bool:
        return all((field_value(obj, label) == value) == eq for label, eq, value in reqs)

    return match
