"""Token validation for the local SnapshotMetadata server, pluggable like the sidecar's TokenReview + SAR.

The sidecar checks the request's ``security_token`` once, at the start of each RPC: a TokenReview with the
audience of the SnapshotMetadataService (failure -> UNAUTHENTICATED "unauthenticated user"), then a
SubjectAccessReview for ``get volumesnapshots`` in the request namespace (failure -> PERMISSION_DENIED).

Contract of a ``TokenValidator``: ``validate(token, namespace)`` returns None when the call may proceed, raises
``Unauthenticated`` for a bad, unknown or expired token or one for another audience, and ``PermissionDenied``
when the token is valid but may not read snapshots in ``namespace``. Any other exception becomes INTERNAL (as a
failing TokenReview call does in the sidecar). It must be thread-safe: RPCs run on a thread pool.

``StaticTokens(audience)`` issues opaque random tokens kept in memory; ``AllowAll`` accepts any non-empty token
(benchmarks). The local cluster plugs in a validator doing a TokenReview against its API emulator.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

UNAUTHENTICATED_MSG = "unauthenticated user"
PERMISSION_DENIED_MSG = "user does not have permissions to perform the operation"


class Unauthenticated(Exception):
    """The token is unknown, expired or for another audience (gRPC UNAUTHENTICATED)."""


class PermissionDenied(Exception):
    """The token is valid but may not read VolumeSnapshots in the namespace (gRPC PERMISSION_DENIED)."""


class TokenValidator(Protocol):
    def validate(self, token: str, namespace: str) -> None:
        """Return if ``token`` may read snapshots in ``namespace``; raise Unauthenticated or PermissionDenied."""
        ...


@dataclass(frozen=True)
class _Grant:
    audience: str
    namespaces: frozenset[str]
    expires_at: float


class StaticTokens:
    """In-memory tokens for one audience: ``issue()`` then pass the token in ``security_token``."""

    def __init__(self, audience: str = "snapshot-metadata", *, clock: Callable[[], float] = time.monotonic):
        self.audience = audience
        self._clock = clock
        self._lock = threading.Lock()
        self._grants: dict[str, _Grant] = {}

    def __repr__(self) -> str:
        return f"StaticTokens(audience={self.audience!r}, tokens={len(self._grants)})"

    def issue(self, namespaces: Iterable[str] = ("*",), audience: str | None = None, expires_in: float = 600) -> str:
        """A new opaque token allowed in ``namespaces`` ("*" = all); ``expires_in <= 0`` gives an expired one."""
        if isinstance(namespaces, str):
            raise TypeError("namespaces must be an iterable of names, not a string")
        token = secrets.token_urlsafe(32)
        grant = _Grant(audience or self.audience, frozenset(namespaces), self._clock() + expires_in)
        with self._lock:
            self._grants[token] = grant
        return token

    def revoke(self, token: str) -> None:
        with self._lock:
            self._grants.pop(token, None)

    def validate(self, token: str, namespace: str) -> None:
        with self._lock:
            grant = self._grants.get(token)
        if grant is None or grant.audience != self.audience or self._clock() >= grant.expires_at:
            raise Unauthenticated(UNAUTHENTICATED_MSG)
        if "*" not in grant.namespaces and namespace not in grant.namespaces:
            raise PermissionDenied(f"{PERMISSION_DENIED_MSG}: namespace {namespace!r}")


class AllowAll:
    """Accepts every non-empty token in every namespace (benchmarks; the server already rejects empty ones)."""

    def validate(self, token: str, namespace: str) -> None:
        if not token:
            raise Unauthenticated(UNAUTHENTICATED_MSG)
