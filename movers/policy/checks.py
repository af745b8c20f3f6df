"""The field checks of a policy (``movers.policy.model``'s models use them as validators).

Every check takes the raw value and ``at``, its path relative to the model field being validated, and
returns the clean value or raises ``problem(at, message)``: a pydantic error whose context carries the
relative path, so the policy's error names the whole field path (``mover.affinity.nodeAffinity...``).
Kubernetes-shaped values (label selectors, tolerations, node affinity, resources) are checked as the API
server validates them and stay plain Kubernetes JSON, ready for a pod spec.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError  # a dependency of prefect, the same field syntax
from pydantic import AliasChoices, BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from movers.values import EXAMPLES, parse_duration, parse_quantity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# label key: optional DNS subdomain prefix + "/" + name (<= 63, alphanumeric ends, - _ . inside)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")
_CRON_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


# a duration in a JSON schema (a UI form, enforce_parameter_schema): seconds or a Go duration string
DURATION_SCHEMA = {
    "anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}],
    "description": "seconds, or a Go duration: 90s, 5m, 1h30m, 500ms, 7d",
}


def problem(at: str, message: str) -> PydanticCustomError:
    """The error of a bad value at ``at`` (relative to the field being validated; "" for the field); its text
    names ``at`` too, for pydantic's own error reports (e.g. a flow's parameters)."""
    return PydanticCustomError("policy", "{at}: {message}" if at else "{message}", {"message": message, "at": at})


def first_problem(err: ValidationError, prefix: str = "") -> tuple[str, str]:
    """The field path (after ``prefix``; ``[i]`` for list items) and the message of ``err``'s first error."""
    first = err.errors(include_url=False)[0]
    where = prefix
    for part in first["loc"]:
        where = join(where, f"[{part}]" if isinstance(part, int) else str(part))
    ctx = first.get("ctx") or {}
    if first["type"] == "policy":
        return join(where, ctx["at"]), ctx["message"]
    return where, first["msg"]


class Section(BaseModel):
    """A mapping of known keys (None: every default), its required ones not null, each key given once (a
    field may accept several spellings: ``validation_alias=AliasChoices(...)``); frozen."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    not_a_mapping: ClassVar[str] = "must be a mapping"
    none_is_default: ClassVar[bool] = True  # ``section: null`` in YAML: every default

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            return data
        if (data is not None or not cls.none_is_default) and not isinstance(data, dict):
            raise problem("", f"{cls.not_a_mapping}, not {kind(data)}")
        data = mapping(data, "")
        spellings = {name: _spellings(name, f) for name, f in cls.model_fields.items() if not f.exclude}
        every = {key for keys in spellings.values() for key in keys}
        known(data, "", every, shown={keys[0] for keys in spellings.values()})
        for name, keys in spellings.items():
            given = [key for key in keys if key in data]
            if len(given) > 1:
                raise problem(given[1], f"the same field as {given[0]}: give one of them")
            if cls.model_fields[name].is_required() and (not given or data[given[0]] is None):
                raise problem(given[0] if given else keys[0], "is required")
        return data


def _spellings(name: str, f: Any) -> list[str]:
    if isinstance(f.validation_alias, AliasChoices):
        return [choice for choice in f.validation_alias.choices if isinstance(choice, str)]
    return [f.alias or name]


def join(parent: str, key: str) -> str:
    if not parent:
        return key
    if not key:
        return parent
    return f"{parent}{key}" if key.startswith("[") else f"{parent}.{key}"


def kind(value: Any) -> str:
    """How a value reads in an error: ``nothing``, ``a mapping``, ``str 'x'``."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return "a number"
    return f"{type(value).__name__} {value!r}"


# -- plain values


def mapping(value: Any, at: str, required: bool = False) -> dict[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise problem(at, f"must be a mapping, not {kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise problem(at, f"key {key!r} must be a string")
    return value


def known(data: dict[str, Any], at: str, keys: set[str], shown: set[str] | None = None) -> None:
    """No key of ``data`` but ``keys``; the error names ``shown`` (default ``keys``) as the known ones."""
    unknown = sorted(set(data) - keys)
    if unknown:
        raise problem(join(at, unknown[0]), f"unknown field (known: {', '.join(sorted(shown or keys))})")


def required(data: dict[str, Any], key: str, at: str) -> Any:
    if data.get(key) is None:
        raise problem(join(at, key), "is required")
    return data[key]


def string(value: Any, at: str = "") -> str:
    if not isinstance(value, str) or not value.strip():
        raise problem(at, f"must be a non-empty string, not {kind(value)}")
    return value


def dns_label(value: Any, at: str = "") -> str:
    value = string(value, at)
    if not DNS_LABEL.match(value):
        raise problem(at, f"{value!r} is not a DNS-1123 label (lower case a-z, 0-9, '-', at most 63)")
    return value


def object_name(value: Any, at: str = "") -> str:
    value = string(value, at)
    if not DNS_SUBDOMAIN.match(value):
        raise problem(at, f"{value!r} is not a valid Kubernetes object name (DNS-1123 subdomain)")
    return value


def optional_object_name(value: Any) -> str | None:
    return None if value is None else object_name(value)


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise problem("", f"must be true or false, not {kind(value)}")
    return value


def count(minimum: int):
    """A check of an integer (not a boolean) of at least ``minimum``."""

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise problem("", f"must be an integer, not {kind(value)}")
        if value < minimum:
            raise problem("", f"must be at least {minimum}, not {value}")
        return value

    return check


def duration(value: Any, at: str = "", *, zero: bool = False) -> float:
    """Seconds, positive (``zero``: or 0): a number or a Go duration (``movers.values``)."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise problem(at, f"must be a duration ({EXAMPLES}), not {kind(value)}") from None
    if seconds < 0 and zero:
        raise problem(at, f"{value!r} must not be negative")
    if seconds < 0 or (seconds == 0 and not zero):
        raise problem(at, "must be a positive duration")
    return seconds


def repo_url(value: Any) -> str:
    url = string(value)
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise problem("", f"{url!r} has no bucket (s3://bucket[/prefix])")
    elif parsed.scheme == "file":
        if not parsed.path.startswith("/"):
            raise problem("", f"{url!r} must be an absolute path (file:///path)")
    else:
        raise problem("", f"{url!r} is not s3://bucket[/prefix] or file:///path")
    return url


def cron(value: Any) -> str:
    expr = string(value).strip()
    spec = _CRON_MACROS.get(expr.lower(), expr)
    if len(spec.split()) != 5:
        raise problem("", f"{expr!r} is not a cron expression of 5 fields: minute hour day month weekday")
    if any(part.upper() in ("H", "R") or "H(" in part.upper() for part in spec.split()):
        raise problem("", f"{expr!r}: hashed/random cron fields are not supported")
    try:
        CronSim(spec, datetime(2000, 1, 1))
    except CronSimError as err:
        raise problem("", f"{expr!r} is not a valid cron expression: {err}") from None
    return expr


def timezone(value: Any) -> str:
    name = string(value)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise problem("", f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
    return name


# -- labels and selectors


def label_key(key: Any, at: str) -> str:
    if not isinstance(key, str):
        raise problem(at, f"label key {key!r} must be a string")
    prefix, _, name = key.rpartition("/")
    if (prefix and not DNS_SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(name):
        raise problem(at, f"{key!r} is not a valid label key")
    return key


def label_value(value: Any, at: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise problem(at, f"label value must be a string, not {kind(value)}")
    value = str(value)
    if not _LABEL_VALUE.match(value):
        raise problem(at, f"{value!r} is not a valid label value")
    return value


def labels(value: Any, at: str = "") -> dict[str, str]:
    """A map of label keys to label values (numbers become strings); None is empty."""
    return {label_key(k, join(at, k)): label_value(v, join(at, k)) for k, v in mapping(value, at).items()}


def selector(value: Any, at: str = "") -> dict[str, Any]:
    """A LabelSelector that selects something (matchLabels and/or matchExpressions)."""
    sel = mapping(value, at, required=True)
    known(sel, at, {"matchLabels", "matchExpressions"})
    out: dict[str, Any] = {}
    if sel.get("matchLabels") is not None:
        out["matchLabels"] = labels(sel["matchLabels"], join(at, "matchLabels"))
    exprs = sel.get("matchExpressions")
    if exprs is not None:
        where = join(at, "matchExpressions")
        if not isinstance(exprs, list):
            raise problem(where, f"must be a list, not {kind(exprs)}")
        out["matchExpressions"] = [_expression(e, f"{where}[{i}]") for i, e in enumerate(exprs)]
    if not out.get("matchLabels") and not out.get("matchExpressions"):
        raise problem(at, "selects every PVC of the namespace; give matchLabels or matchExpressions")
    return out


def _expression(value: Any, at: str) -> dict[str, Any]:
    expr = mapping(value, at, required=True)
    known(expr, at, {"key", "operator", "values"})
    key = label_key(required(expr, "key", at), join(at, "key"))
    op = required(expr, "operator", at)
    if op not in _SELECTOR_OPERATORS:
        raise problem(join(at, "operator"), f"must be one of {', '.join(_SELECTOR_OPERATORS)}, not {op!r}")
    values = expr.get("values")
    if op in ("In", "NotIn"):
        if not isinstance(values, list) or not values:
            raise problem(join(at, "values"), f"must be a non-empty list for {op}")
        values = [label_value(x, join(at, f"values[{i}]")) for i, x in enumerate(values)]
        return {"key": key, "operator": op, "values": values}
    if values:
        raise problem(join(at, "values"), f"must be empty for {op}")
    return {"key": key, "operator": op}


# -- pod resources and scheduling


def resources(value: Any) -> dict[str, dict[str, str]]:
    """``{requests, limits}`` of Kubernetes quantities (kept as written); no request above its limit."""
    res = mapping(value, "")
    known(res, "", {"requests", "limits"})
    out: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        out[part] = {}
        for resource, quantity in mapping(res.get(part), part).items():
            at = f"{part}.{resource}"
            if isinstance(quantity, bool) or not isinstance(quantity, (str, int, float)):
                raise problem(at, f"must be a quantity like 500m, 1Gi; not {kind(quantity)}")
            try:
                parse_quantity(quantity)
            except ValueError:
                raise problem(at, f"{quantity!r} is not a Kubernetes quantity (e.g. 500m, 2, 512Mi, 1Gi)") from None
            out[part][resource] = str(quantity)
    for resource, limit in out["limits"].items():
        request = out["requests"].get(resource)
        if request is not None and parse_quantity(request) > parse_quantity(limit):
            raise problem(f"requests.{resource}", f"request {request} is above the limit {limit}")
    return out


def tolerations(value: Any) -> list[dict[str, Any]]:
    """A list of Tolerations (key, operator, value, effect, tolerationSeconds), as the API server
    validates them: key a label key (empty only with Exists: tolerate every taint), operator Exists or
    Equal (empty: Equal), value a label value and empty with Exists, effect NoSchedule, PreferNoSchedule,
    NoExecute or empty (every effect), tolerationSeconds an integer and only with NoExecute."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise problem("", f"must be a list of tolerations, not {kind(value)}")
    return [_toleration(item, f"[{i}]") for i, item in enumerate(value)]


def _toleration(item: Any, at: str) -> dict[str, Any]:
    tol = mapping(item, at, required=True)
    known(tol, at, {"key", "operator", "value", "effect", "tolerationSeconds"})
    key, op = tol.get("key") or "", tol.get("operator") or ""
    if key:
        label_key(key, join(at, "key"))
    if op and op not in _TOLERATION_OPERATORS:
        raise problem(join(at, "operator"), f"must be Exists or Equal, not {op!r}")
    if not key and op != "Exists":
        raise problem(
            join(at, "operator"), "must be Exists when key is empty (which means: match all values and all keys)"
        )
    val = tol.get("value")
    if op == "Exists" and val not in (None, ""):
        raise problem(join(at, "value"), "must be empty when operator is Exists")
    effect = tol.get("effect") or ""
    if effect and effect not in _TAINT_EFFECTS:
        raise problem(
            join(at, "effect"), f"must be one of {', '.join(_TAINT_EFFECTS)} or empty (every effect), not {effect!r}"
        )
    seconds = tol.get("tolerationSeconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise problem(join(at, "tolerationSeconds"), f"must be an integer, not {kind(seconds)}")
        if effect != "NoExecute":
            raise problem(join(at, "effect"), "must be NoExecute when tolerationSeconds is set")
    clean: dict[str, Any] = {"key": key} if key else {}
    if op:
        clean["operator"] = op
    if val not in (None, ""):
        clean["value"] = label_value(val, join(at, "value"))
    if effect:
        clean["effect"] = effect
    if seconds is not None:
        clean["tolerationSeconds"] = seconds
    return clean


def affinity(value: Any) -> dict[str, Any] | None:
    """A Kubernetes Affinity with ``nodeAffinity`` only (pod (anti-)affinity is not for movers), its
    required NodeSelector and preferred terms validated as the API server does."""
    if value is None:
        return None
    aff = mapping(value, "", required=True)
    for other in ("podAffinity", "podAntiAffinity"):
        if other in aff:
            raise problem(other, "is not supported: mover pods take nodeAffinity only")
    known(aff, "", {"nodeAffinity"})
    node = mapping(required(aff, "nodeAffinity", ""), "nodeAffinity", required=True)
    known(node, "nodeAffinity", {REQUIRED, PREFERRED})
    out: dict[str, Any] = {}
    if node.get(REQUIRED) is not None:
        at = f"nodeAffinity.{REQUIRED}"
        sel = mapping(node[REQUIRED], at, required=True)
        known(sel, at, {"nodeSelectorTerms"})
        terms = sel.get("nodeSelectorTerms")
        if not isinstance(terms, list) or not terms:
            raise problem(f"{at}.nodeSelectorTerms", "must have at least one node selector term")
        out[REQUIRED] = {
            "nodeSelectorTerms": [_node_term(t, f"{at}.nodeSelectorTerms[{i}]", True) for i, t in enumerate(terms)]
        }
    if node.get(PREFERRED) is not None:
        at = f"nodeAffinity.{PREFERRED}"
        prefs = node[PREFERRED]
        if not isinstance(prefs, list):
            raise problem(at, f"must be a list of weighted terms, not {kind(prefs)}")
        out[PREFERRED] = [_preference(item, f"{at}[{i}]") for i, item in enumerate(prefs)]
    if not out:
        raise problem("nodeAffinity", f"give {REQUIRED} or {PREFERRED}")
    return {"nodeAffinity": out}


def _preference(item: Any, at: str) -> dict[str, Any]:
    pref = mapping(item, at, required=True)
    known(pref, at, {"weight", "preference"})
    weight = required(pref, "weight", at)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise problem(f"{at}.weight", f"must be in the range 1-100, not {weight!r}")
    return {"weight": weight, "preference": _node_term(required(pref, "preference", at), f"{at}.preference", False)}


def _node_term(value: Any, at: str, is_required: bool) -> dict[str, Any]:
    term = mapping(value, at, required=True)
    known(term, at, {"matchExpressions", "matchFields"})
    out: dict[str, Any] = {}
    for part in ("matchExpressions", "matchFields"):
        reqs = term.get(part)
        if reqs is None:
            continue
        if not isinstance(reqs, list):
            raise problem(f"{at}.{part}", f"must be a list, not {kind(reqs)}")
        out[part] = [
            _node_requirement(r, f"{at}.{part}[{i}]", part == "matchFields", is_required) for i, r in enumerate(reqs)
        ]
    return out


def _node_requirement(value: Any, at: str, field_selector: bool, is_required: bool) -> dict[str, Any]:
    req = mapping(value, at, required=True)
    known(req, at, {"key", "operator", "values"})
    key = required(req, "key", at)
    op = required(req, "operator", at)
    values = req.get("values") or []
    if not isinstance(values, list):
        raise problem(f"{at}.values", f"must be a list, not {kind(values)}")
    if field_selector:  # matchFields: metadata.name only, In/NotIn one node name
        if key != "metadata.name":
            raise problem(f"{at}.key", f"{key!r} is not a valid field selector key (metadata.name)")
        if op not in ("In", "NotIn"):
            raise problem(f"{at}.operator", f"must be In or NotIn for a node field selector, not {op!r}")
        if len(values) != 1:
            raise problem(
                f"{at}.values", "must be only one value when operator is In or NotIn for a node field selector"
            )
        return {"key": key, "operator": op, "values": [object_name(values[0], f"{at}.values[0]")]}
    label_key(key, f"{at}.key")
    if op not in _NODE_SELECTOR_OPERATORS:
        raise problem(f"{at}.operator", f"must be one of {', '.join(_NODE_SELECTOR_OPERATORS)}, not {op!r}")
    if op in ("In", "NotIn") and not values:
        raise problem(f"{at}.values", f"must be specified when operator is {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise problem(f"{at}.values", f"may not be specified when operator is {op}")
    if op in ("Gt", "Lt") and len(values) != 1:
        raise problem(f"{at}.values", f"must be a single value when operator is {op}")
    if is_required:  # the API server checks the values of required terms as label values
        values = [label_value(x, f"{at}.values[{i}]") for i, x in enumerate(values)]
    else:
        values = [str(x) for x in values]
    return {"key": key, "operator": op, **({"values": values} if values else {})}
