"""A token validator that asks a Kubernetes API (the local emulator or a real one), like the sidecar.

``TokenReviewValidator(api_client, audience)`` sends a TokenReview with ``audiences=[audience]``:
the token must be authenticated and the audience must be in ``status.audiences`` (else
``Unauthenticated``). The sidecar then runs a SubjectAccessReview for ``get volumesnapshots``
in the request namespace; here ``allowed(username, namespace)`` stands in for it (default:
any service account may read its own namespace's snapshots and ``namespaces`` lists extras).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from localcluster.snapshot_metadata.auth import (
    PERMISSION_DENIED_MSG,
    UNAUTHENTICATED_MSG,
    PermissionDenied,
    Unauthenticated,
)


class TokenReviewValidator:
    def __init__(
        self,
        api_client,
        audience: str,
        *,
        namespaces: Iterable[str] = ("*",),
        allowed: Callable[[str, str], bool] | None = None,
    ) -> None:
        from kubernetes import client

        self.auth = client.AuthenticationV1Api(api_client)
        self.audience = audience
        self.namespaces = frozenset(namespaces)
        self.allowed = allowed or self._default_allowed

    def __repr__(self) -> str:
        return f"TokenReviewValidator(audience={self.audience!r})"

    def _default_allowed(self, username: str, namespace: str) -> bool:
        own = username.startswith(f"system:serviceaccount:{namespace}:")
        return own or "*" in self.namespaces or namespace in self.namespaces

    def validate(self, token: str, namespace: str) -> None:
        from kubernetes import client

        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[self.audience]))
        status = self.auth.create_token_review(review).status
        if not status or not status.authenticated or self.audience not in (status.audiences or []):
            raise Unauthenticated(UNAUTHENTICATED_MSG)
        username = status.user.username if status.user else ""
        if not self.allowed(username, namespace):
            raise PermissionDenied(f"{PERMISSION_DENIED_MSG}: namespace {namespace!r}")
