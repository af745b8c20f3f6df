"""Request attributes as apiserver's ``requestinfo.go`` derives them (what the authorizer is asked).

``request_attributes(method, path, query)``: paths with fewer than three segments, or not under
``/api`` or ``/apis/GROUP``, are non-resource requests whose verb is the lower-case HTTP method;
otherwise the verb is get/list/watch (``?watch`` with any value but ``0``/``false``, or a ``/watch/``
path segment)/create/update/patch/delete/deletecollection, ``namespaces/NS`` gives the namespace
(also for the namespace object itself and its ``status``/``finalize``), then resource, name,
subresource. A list or watch whose ``fieldSelector`` requires ``metadata.name=X`` (``=`` or
``==``) has name X.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (``authorizer.Attributes``)."""

    verb: str
    path: str = ""
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    def with_verb(self, verb: str) -> Attributes:
        return Attributes(
            verb,
            self.path,
            self.resource_request,
            self.api_group,
            self.api_version,
            self.namespace,
            self.resource,
            self.subresource,
            self.name,
        )

    def record(self) -> dict[str, Any]:
        """The audit form: verb, apiGroup, resource, subresource, namespace, name, path."""
        d = asdict(self)
        return {
            "verb": d["verb"],
            "apiGroup": d["api_group"],
            "resource": d["resource"],
            "subresource": d["subresource"],
            "namespace": d["namespace"],
            "name": d["name"],
            "path": d["path"],
            "resourceRequest": d["resource_request"],
        }


def _truthy_watch(values: Sequence[str]) -> bool:
    return bool(values) and values[0].lower() not in ("0", "false")


def _valid_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def exact_name(selector: str | None) -> str | None:
    """The value of a ``metadata.name=X`` (or ``==``) term of a field selector, or None."""
    if not selector:
        return None
    terms, cur, escaped = [], "", False
    for ch in selector:
        if escaped:
            cur += ch
            escaped = False
        elif ch == "\\":
            cur += ch
            escaped = True
        elif ch == ",":
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    for term in terms:
        term = term.strip()
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and not key.endswith("!") and key.strip() == "metadata.name":
                value = value.replace("\\,", ",").replace("\\=", "=").replace("\\\\", "\\")
                return value
    return None


def request_attributes(method: str, path: str, query: Mapping[str, Any]) -> Attributes:
    """The attributes of an HTTP request (``query``: a mapping of name -> value or list of values)."""

    def values(key: str) -> list[str]:
        getall = getattr(query, "getall", None)
        if getall is not None:
            return list(getall(key, []))
        value = query.get(key)
        return [] if value is None else (list(value) if isinstance(value, list | tuple) else [value])

    verb = method.lower()
    parts = [p for p in path.strip("/").split("/")] if path.strip("/") else []
    plain = Attributes(verb=verb, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return plain
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return plain
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return Attributes(verb=verb, path=path, resource_request=True, api_group=group, api_version=version)
        verb, rest = rest[0], rest[1:]
    else:
        verb = {
            "post": "create",
            "get": "get",
            "head": "get",
            "put": "update",
            "patch": "patch",
            "delete": "delete",
        }.get(method.lower(), "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource, name, sub = rest[0], "", ""
    if len(rest) >= 2:
        name = rest[1]
    if len(rest) >= 3 and verb != "proxy":
        sub = rest[2]
    if not name and verb == "get":
        verb = "watch" if _truthy_watch(values("watch")) else "list"
        selected = exact_name(next(iter(values("fieldSelector")), None))
        if selected is not None and _valid_segment(selected):
            name = selected
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(verb, path, True, group, version, namespace, resource, sub, name)
