"""Kubernetes-shaped errors.

``ApiError`` carries an HTTP code, a ``reason`` (the ``metav1.StatusReason``) and a message; its
``status()`` is the ``Status`` object the real API server returns, which the ``kubernetes`` client
turns into ``ApiException`` with the same ``status``. The helpers build the common ones with the
messages the real server uses.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        404,
        "NotFound",
        f'{_qualified(plural, group)} "{name}" not found',
        {"name": name, "group": group, "kind": plural},
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(plural, group)} "{name}" already exists',
        {"name": name, "group": group, "kind": plural},
    )


def conflict(plural: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
        {"name": name, "group": group, "kind": plural},
    )


def invalid(kind: str, group: str, name: str, causes: Sequence[Any]) -> ApiError:
    """422 Invalid as ``NewInvalid``: ``causes`` are ``fields.FieldError``s or ``(field, message)`` pairs
    (message starting with the error type, as ``"Required value"``); the message joins the distinct
    errors as an aggregate does (one as is, several as ``[a, b]``)."""
    what = f"{kind}.{group}" if group else kind
    items = [(c.field, c.body(), c.type) if hasattr(c, "body") else (c[0], c[1], _reason(c[1])) for c in causes]
    texts = list(dict.fromkeys(f"{field}: {body}" for field, body, _ in items))
    text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{what} "{name}" is invalid: {text}' if texts else f'{what} "{name}" is invalid',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": reason, "message": body, **({"field": field} if field else {})}
                for field, body, reason in items
            ],
        },
    )


_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Not found", "FieldValueNotFound"),
    ("Too many", "FieldValueTooMany"),
)


def _reason(message: str) -> str:
    return next((reason for prefix, reason in _REASONS if message.startswith(prefix)), "FieldValueInvalid")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted media types include: "
        + ", ".join(accepted),
    )


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def path_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})", {})
