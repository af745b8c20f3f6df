"""Validation of CRD objects against their OpenAPI v3 schema, strictly.

``SchemaValidator(schema).errors(obj, old)`` returns ``(field, message)`` pairs (empty when valid):
- the schema via ``jsonschema`` (type, properties, required, enum, items, pattern, minimum, anyOf,
  formats ``byte``, ``date-time``, ``int32``, ``int64``), with every object schema that lists
  ``properties`` closed to unknown fields (the real server would prune them, or refuse them under
  strict field validation: refusing catches misspelled fields);
- ``x-kubernetes-validations`` rules in the CEL subset of ``cel.py``; transition rules (those that
  use ``oldSelf``) run only on update when the old value exists, as upstream.
``metadata`` is not checked here (see ``meta.py``).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
from typing import Any

import jsonschema

from localcluster.kubeapi import cel
from localcluster.kubeapi.resources import Obj

_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("byte", raises=(binascii.Error, ValueError))
def _is_byte(value: object) -> bool:
    if isinstance(value, str):
        base64.b64decode(value, validate=True)
    return True


@_FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    if isinstance(value, str):
        if "T" not in value.upper():
            raise ValueError(value)
        datetime.datetime.fromisoformat(value.replace("z", "Z"))
    return True


@_FORMATS.checks("int64")
def _is_int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


@_FORMATS.checks("int32")
def _is_int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


def _closed(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-validations")}
    if "properties" in out:
        out["properties"] = {k: _closed(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(out.get("items"), dict):
        out["items"] = _closed(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _closed(out["additionalProperties"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [_closed(s) for s in out[key]]
    return out


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class SchemaValidator:
    def __init__(self, schema: Obj):
        self.schema = copy.deepcopy(schema)
        top = _closed(self.schema)
        props = top.setdefault("properties", {})
        props.update(apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
        if not top.get("x-kubernetes-preserve-unknown-fields"):
            top.setdefault("additionalProperties", False)
        self._validator = jsonschema.Draft7Validator(top, format_checker=_FORMATS)

    def errors(self, obj: Obj, old: Obj | None = None) -> list[tuple[str, str]]:
        out = [self._describe(e) for e in sorted(self._validator.iter_errors(obj), key=lambda e: list(e.path))]
        if not out:  # CEL rules assume a schema-valid object
            self._rules(self.schema, obj, old if old is not None else cel.MISSING, [], out)
        return out

    @staticmethod
    def _describe(err: jsonschema.ValidationError) -> tuple[str, str]:
        field = _path(err.absolute_path)
        value = err.instance
        if err.validator == "additionalProperties":
            extra = sorted(set(value) - set(err.schema.get("properties", {})))
            names = ", ".join(f"{field}.{k}" if field else k for k in extra)
            return (f"{field}.{extra[0]}" if field else extra[0], f"field not declared in schema: {names}")
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            return (f"{field}.{missing}" if field else missing, "Required value")
        if err.validator == "type":
            return (field, f"Invalid value: {_short(value)}: {field} in body must be of type {err.validator_value}")
        if err.validator == "format":
            return (field, f"Invalid value: {_short(value)}: {field} in body must be of type {err.validator_value}")
        if err.validator == "enum":
            allowed = ", ".join(f'"{v}"' for v in err.validator_value)
            return (field, f"Unsupported value: {_short(value)}: supported values: {allowed}")
        return (field, f"Invalid value: {_short(value)}: {err.message}")

    def _rules(self, schema: Any, value: Any, old: Any, path: list, out: list[tuple[str, str]]) -> None:
        if not isinstance(schema, dict) or value is cel.MISSING:
            return
        for rule in schema.get("x-kubernetes-validations") or []:
            text = rule.get("rule", "")
            fn = cel.compile_rule(text)
            if fn is None or (cel.uses_old_self(text) and old is cel.MISSING):
                continue
            if not fn(value, old):
                out.append((_path(path), rule.get("message") or f"Invalid value: failed rule: {text}"))
        if isinstance(value, dict):
            for key, sub in (schema.get("properties") or {}).items():
                child_old = old.get(key, cel.MISSING) if isinstance(old, dict) else cel.MISSING
                self._rules(sub, value.get(key, cel.MISSING), child_old, [*path, key], out)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):  # list items are not correlated with old ones
                self._rules(schema["items"], item, cel.MISSING, [*path, i], out)


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 80 else text[:77] + "..."
