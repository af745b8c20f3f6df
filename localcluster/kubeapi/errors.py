"""Kubernetes-shaped errors.

``ApiError`` carries an HTTP code, a ``reason`` (the ``metav1.StatusReason``) and a message; its
``status()`` is the ``Status`` object the real API server returns, which the ``kubernetes`` client
turns into ``ApiException`` with the same ``status``. The helpers build the common ones with the
messages the real server uses.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:  # upstream writes "details": {} too (Forbidden, unknown paths)
            out["details"] = self.details
        return out


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(plural, group)} "{name}" not found',
        {"name": name, "group": group, "kind": plural},
    )  # fmt: skip


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
        {"name": name, "group": group, "kind": plural},
    )  # fmt: skip


def conflict(plural: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
        {"name": name, "group": group, "kind": plural},
    )  # fmt: skip


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are ``(field, message)`` pairs (field like ``spec.source``)."""
    what = f"{kind}.{group}" if group else kind
    text = "; ".join(f"{field}: {msg}" if field else msg for field, msg in causes)
    return ApiError(
        422, "Invalid", f'{what} "{name}" is invalid: {text}',
        {
            "name": name, "group": group, "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": field} for field, msg in causes],
        },
    )  # fmt: skip


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415, "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted media types include: "
        + ", ".join(accepted),
    )  # fmt: skip


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def path_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})", {})
