"""A token validator that asks a Kubernetes API (the local emulator or a real one), like the sidecar.

``TokenReviewValidator(api_client, audience)`` does what external-snapshot-metadata's sidecar does
on every call: a TokenReview with ``audiences=[audience]`` (the token must be authenticated and the
audience must be in ``status.audiences``, else ``Unauthenticated``), then a SubjectAccessReview for
the reviewed user (name, uid, groups, extra) to ``get`` ``volumesnapshots.snapshot.storage.k8s.io``
(version v1) in the request namespace; not allowed (or denied) is ``PermissionDenied`` with the
sidecar's message, ``user does not have permissions to perform the operation: <reason>``. The API
client's identity needs ``create`` on tokenreviews and subjectaccessreviews (system:auth-delegator).
"""

from __future__ import annotations

from localcluster.snapshot_metadata.auth import (
    PERMISSION_DENIED_MSG,
    UNAUTHENTICATED_MSG,
    PermissionDenied,
    Unauthenticated,
)


class TokenReviewValidator:
    def __init__(self, api_client, audience: str) -> None:
        from kubernetes import client

        self.auth = client.AuthenticationV1Api(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self.audience = audience

    def __repr__(self) -> str:
        return f"TokenReviewValidator(audience={self.audience!r})"

    def validate(self, token: str, namespace: str) -> None:
        from kubernetes import client

        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[self.audience]))
        status = self.auth.create_token_review(review).status
        if not status or not status.authenticated or self.audience not in (status.audiences or []):
            raise Unauthenticated(UNAUTHENTICATED_MSG)
        user = status.user or client.V1UserInfo()
        sar = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user.username,
                uid=user.uid,
                groups=user.groups,
                extra=user.extra,
                resource_attributes=client.V1ResourceAttributes(
                    verb="get",
                    namespace=namespace,
                    group="snapshot.storage.k8s.io",
                    version="v1",
                    resource="volumesnapshots",
                ),
            )
        )
        answer = self.authz.create_subject_access_review(sar).status
        if not answer.allowed or answer.denied:
            raise PermissionDenied(f"{PERMISSION_DENIED_MSG}: {answer.reason or ''}")
