"""Field errors and the generic checks of apimachinery (names, labels, annotations, ObjectMeta).

``FieldError`` is a ``field.Error``: ``str(err)`` is ``"<field>: <Type>: <value>: <detail>"`` as the
API server prints it, ``err.type`` the ``StatusCause`` reason (``FieldValueInvalid``, ...). The
constructors (``required``, ``invalid``, ``not_supported``, ``forbidden``, ``duplicate``,
``not_found``, ``too_long``) take the same arguments as their Go namesakes; values print as Go
prints them (strings quoted, numbers and booleans bare, anything else as JSON).

Format checks return the upstream messages (``[]string``): ``dns1123_label``,
``dns1123_subdomain``, ``dns1035_label``, ``qualified_name`` (label keys, annotation keys),
``label_value``, ``config_map_key``, ``path_segment_name``; ``name_is_*`` are the
``ValidateNameFunc``s (``prefix`` for a generateName). ``object_meta`` / ``object_meta_update`` are
``ValidateObjectMetaAccessor`` / ``ValidateObjectMetaAccessorUpdate`` (plus the kube finalizer-name
rule of the core API when ``kube_finalizers``); ``core_meta`` / ``core_meta_update`` apply them to
an object as the core API's ``ValidateObjectMeta`` does. ``label_selector`` and ``labels`` are the
meta/v1 validations. ``as_map`` / ``as_list`` / ``as_str`` read a body that may hold anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

OMIT = object()  # a field.Error without a value (Required, Forbidden, TooLong print none)

_TYPE_TEXT = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
}
_NO_VALUE = {"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "InternalError"}


@dataclass(frozen=True)
class FieldError:
    type: str
    field: str
    value: Any = OMIT
    detail: str = ""

    def body(self) -> str:
        text = _TYPE_TEXT[self.type]
        if self.type not in _NO_VALUE and self.value is not OMIT:
            text += ": " + go_value(self.value)
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, OMIT, detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, OMIT, detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, value, detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, value)


def not_found(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueNotFound", field, value)


def not_supported(field: str, value: Any, valid: list[str]) -> FieldError:
    detail = "supported values: " + ", ".join(go_quote(str(v)) for v in valid) if valid else ""
    return FieldError("FieldValueNotSupported", field, value, detail)


def too_long(field: str, max_length: int) -> FieldError:
    unit = "byte" if max_length == 1 else "bytes"
    return FieldError("FieldValueTooLong", field, OMIT, f"may not be more than {max_length} {unit}")


def key(path: str, k: str) -> str:
    """``Path.Key``: ``spec.resources.requests[storage]``."""
    return f"{path}[{k}]"


# ---- printing values as Go does ----------------------------------------------------------------

_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(text: str) -> str:
    """``strconv.Quote``."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def go_value(value: Any) -> str:
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_string_slice(values: list[str]) -> str:
    """``fmt.Sprintf("%#v", []string{...})``."""
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


# ---- formats (k8s.io/apimachinery/pkg/util/validation and api/validate/content) ---------------

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + "(\\." + _LABEL_FMT + ")*"
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE_FMT = "(" + _KEY_FMT + ")?"
_CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
_LABEL_RE, _SUBDOMAIN_RE, _DNS1035_RE = re.compile(_LABEL_FMT), re.compile(_SUBDOMAIN_FMT), re.compile(_DNS1035_FMT)
_KEY_RE, _VALUE_RE, _CONFIG_KEY_RE = re.compile(_KEY_FMT), re.compile(_VALUE_FMT), re.compile(_CONFIG_KEY_FMT)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start"
    " and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and"
    " must start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic"
    " character, and end with an alphanumeric character"
)
_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must"
    " start and end with an alphanumeric character"
)
_CONFIG_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _size(text: str) -> int:
    return len(text.encode())


def dns1123_label(value: str) -> list[str]:
    errs = ["must be no more than 63 characters"] if _size(value) > 63 else []
    if not _LABEL_RE.fullmatch(value):
        errs.append(
            "must not contain dots"
            if _SUBDOMAIN_RE.fullmatch(value)
            else regex_error(_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc")
        )
    return errs


def dns1123_subdomain(value: str, unit: str = "characters") -> list[str]:
    errs = [f"must be no more than 253 {unit}"] if _size(value) > 253 else []
    if not _SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1035_label(value: str) -> list[str]:
    errs = ["must be no more than 63 characters"] if _size(value) > 63 else []
    if not _DNS1035_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return errs


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName`` (``content.IsLabelKey``): an optional DNS subdomain prefix and a name."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain(prefix, "bytes"))
    else:
        return [
            "a valid label key "
            + regex_error(_KEY_MSG, _KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _size(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _KEY_RE.fullmatch(name):
        errs.append("name part " + regex_error(_KEY_MSG, _KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value(value: str) -> list[str]:
    errs = ["must be no more than 63 bytes"] if _size(value) > 63 else []
    if not _VALUE_RE.fullmatch(value):
        errs.append(regex_error(_VALUE_MSG, _VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def config_map_key(value: str) -> list[str]:
    errs = ["must be no more than 253 characters"] if _size(value) > 253 else []
    if not _CONFIG_KEY_RE.fullmatch(value):
        errs.append(regex_error(_CONFIG_KEY_MSG, _CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if value == ".":
        errs.append("must not be '.'")
    elif value == "..":
        errs.append("must not be '..'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def path_segment_name(name: str, prefix: bool = False) -> list[str]:
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _mask_trailing_dash(name: str) -> str:
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def name_is_dns_subdomain(name: str, prefix: bool = False) -> list[str]:
    return dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool = False) -> list[str]:
    return dns1123_label(_mask_trailing_dash(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool = False) -> list[str]:
    return dns1035_label(_mask_trailing_dash(name) if prefix else name)


NameFn = Callable[[str, bool], list[str]]


# ---- meta/v1 validation ------------------------------------------------------------------------


def label_name(name: Any, path: str) -> list[FieldError]:
    return [invalid(path, name, m) for m in qualified_name(as_str(name))]


def labels(values: Any, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    for k, v in sorted(as_map(values).items()):
        out += label_name(k, path)
        out += [invalid(path, v, m) for m in label_value(as_str(v))]
    return out


def label_selector(selector: Any, path: str) -> list[FieldError]:
    if not isinstance(selector, Mapping):
        return []
    out = labels(selector.get("matchLabels"), f"{path}.matchLabels")
    for i, expr in enumerate(as_list(selector.get("matchExpressions"))):
        p, expr = f"{path}.matchExpressions[{i}]", as_map(expr)
        op, values = expr.get("operator"), as_list(expr.get("values"))
        if op in ("In", "NotIn"):
            if not values:
                out.append(required(f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append(
                    forbidden(f"{p}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
                )
        else:
            out.append(invalid(f"{p}.operator", as_str(op), "not a valid selector operator"))
        out += label_name(expr.get("key", ""), f"{p}.key")
        for j, v in enumerate(values):
            out += [invalid(f"{p}.values[{j}]", v, m) for m in label_value(as_str(v))]
    return out


# ---- ObjectMeta (k8s.io/apimachinery/pkg/api/validation/objectmeta.go) -------------------------

TOTAL_ANNOTATION_SIZE = 256 * 1024
_STANDARD_FINALIZERS = {"kubernetes", "orphan", "foregroundDeletion"}


def annotations(values: Any, path: str) -> list[FieldError]:
    values = as_map(values)
    out = [invalid(path, k, m) for k in sorted(values) for m in qualified_name(as_str(k).lower())]
    if sum(_size(as_str(k)) + _size(as_str(v)) for k, v in values.items()) > TOTAL_ANNOTATION_SIZE:
        out.append(too_long(path, TOTAL_ANNOTATION_SIZE))
    return out


def _owner_references(refs: Any, path: str) -> list[FieldError]:
    out: list[FieldError] = []
    controller = ""
    for i, ref in enumerate(as_list(refs)):
        p, ref = f"{path}[{i}]", as_map(ref)
        api_version = as_str(ref.get("apiVersion"))
        if not api_version:
            out.append(required(f"{p}.apiVersion", "must not be empty"))
        elif api_version.count("/") > 1 or not api_version.rsplit("/", 1)[-1]:
            out.append(invalid(f"{p}.apiVersion", api_version, "must be <group>/<version> or <version>"))
        for name in ("kind", "name", "uid"):
            if not ref.get(name):
                out.append(required(f"{p}.{name}", "must not be empty"))
        if api_version == "v1" and ref.get("kind") == "Event":
            out.append(invalid(p, dict(ref), "/v1, Kind=Event is disallowed from being an owner"))
        if ref.get("controller") is True:
            this = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if controller:
                out.append(
                    invalid(
                        path,
                        list(as_list(refs)),
                        "Only one reference can have Controller set to true."
                        f' Found "true" in references for {controller} and {this}',
                    )
                )
            else:
                controller = this
    return out


def _finalizers(values: Any, path: str, kube: bool) -> list[FieldError]:
    values = [as_str(f) for f in as_list(values)]
    out = [invalid(path, f, m) for f in values for m in qualified_name(f)]
    if "orphan" in values and "foregroundDeletion" in values:
        out.append(invalid(path, values, "finalizer orphan and foregroundDeletion cannot be both set"))
    return out + (_kube_finalizer_names(values, path) if kube else [])


def _kube_finalizer_names(values: list, path: str) -> list[FieldError]:
    return [
        invalid(f"{path}[{i}]", fin, "name is neither a standard finalizer name nor is it fully qualified")
        for i, fin in enumerate(map(as_str, values))
        if "/" not in fin and fin not in _STANDARD_FINALIZERS
    ]


def object_meta(
    md: Mapping[str, Any], namespaced: bool, name_fn: NameFn, kube_finalizers: bool = False
) -> list[FieldError]:
    out: list[FieldError] = []
    generate, name = as_str(md.get("generateName")), as_str(md.get("name"))
    if generate:
        out += [invalid("metadata.generateName", generate, m) for m in name_fn(generate, True)]
    if not name:
        out.append(required("metadata.name", "name or generateName is required"))
    else:
        out += [invalid("metadata.name", name, m) for m in name_fn(name, False)]
    return out + _common(md, namespaced, kube_finalizers)


def _common(md: Mapping[str, Any], namespaced: bool, kube_finalizers: bool) -> list[FieldError]:
    out: list[FieldError] = []
    namespace = as_str(md.get("namespace"))
    if namespaced:
        if not namespace:
            out.append(required("metadata.namespace"))
        else:
            out += [invalid("metadata.namespace", namespace, m) for m in name_is_dns_label(namespace)]
    elif namespace:
        out.append(forbidden("metadata.namespace", "not allowed on this type"))
    generation = md.get("generation")
    if isinstance(generation, int) and generation < 0:
        out.append(invalid("metadata.generation", generation, "must be greater than or equal to 0"))
    out += labels(md.get("labels"), "metadata.labels")
    out += annotations(md.get("annotations"), "metadata.annotations")
    out += _owner_references(md.get("ownerReferences"), "metadata.ownerReferences")
    out += _finalizers(md.get("finalizers"), "metadata.finalizers", kube_finalizers)
    return out


def object_meta_update(
    md: Mapping[str, Any], old: Mapping[str, Any], kube_finalizers: bool = False
) -> list[FieldError]:
    out: list[FieldError] = []
    if old.get("deletionTimestamp"):
        added = sorted(set(as_list(md.get("finalizers"))) - set(as_list(old.get("finalizers"))))
        if added:
            out.append(
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being"
                    f" deleted, found new finalizers {go_string_slice(added)}",
                )
            )
    for name in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
        if md.get(name) != old.get(name):
            out.append(invalid(f"metadata.{name}", md.get(name), "field is immutable"))
    out += labels(md.get("labels"), "metadata.labels")
    out += annotations(md.get("annotations"), "metadata.annotations")
    out += _owner_references(md.get("ownerReferences"), "metadata.ownerReferences")
    if kube_finalizers:
        out += _kube_finalizer_names(as_list(md.get("finalizers")), "metadata.finalizers")
    return out


def core_meta(obj: Mapping[str, Any], namespaced: bool, name_fn: NameFn = name_is_dns_subdomain) -> list[FieldError]:
    """The core API's ``ValidateObjectMeta`` of an object (with its finalizer-name rule)."""
    return object_meta(as_map(obj.get("metadata")), namespaced, name_fn, kube_finalizers=True)


def core_meta_update(obj: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    return object_meta_update(as_map(obj.get("metadata")), as_map(old.get("metadata")), kube_finalizers=True)


# ---- tolerant accessors (the object may be anything a client sent) -----------------------------


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def as_map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
