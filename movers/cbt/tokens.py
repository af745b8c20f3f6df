"""Where the ``security_token`` of SnapshotMetadata requests comes from.

A token source hands out an audience-scoped Kubernetes token. Tokens are secrets: no
``repr``, log line or error message of this module contains one, and each token is added to
``movers.redaction.KNOWN`` as it is read or minted, so no log line of the process shows it.

* ``FileToken``: a projected service-account token file (kubelet rotates it in place); the
  file is re-read whenever its modification time or size changes.
* ``TokenRequestToken``: the TokenRequest API (``serviceaccounts/token`` create) for a given
  ServiceAccount and audience, renewed when less than a fifth of its lifetime is left or when
  the caller asks for a fresh one (after the service said the old one is no longer valid).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from typing import Protocol

from movers.errors import KubeAccessDenied, UsageError
from movers.redaction import KNOWN

MIN_EXPIRY_SECONDS = 600  # the API server rejects shorter TokenRequests


class TokenSource(Protocol):
    def token(self, fresh: bool = False) -> str:
        """A token for the service; ``fresh`` asks for one newer than the last."""
        ...


class FileToken:
    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = ""
        self._lock = threading.Lock()

    def token(self, fresh: bool = False) -> str:
        with self._lock:
            try:
                st = os.stat(self.path)
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != self._stamp or fresh:
                    with open(self.path, encoding="utf-8") as f:
                        self._token = f.read().strip()
                    KNOWN.add(self._token)
                    self._stamp = stamp
            except OSError as err:
                raise UsageError(f"cannot read the CBT token file {self.path}: {err.strerror}") from None
            if not self._token:
                raise UsageError(f"the CBT token file {self.path} is empty")
            return self._token

    def __repr__(self) -> str:
        return f"FileToken({self.path!r})"


class TokenRequestToken:
    """Tokens from ``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token``."""

    def __init__(self, core_api, namespace: str, service_account: str, audience: str, expiry: int = 600) -> None:
        if expiry < MIN_EXPIRY_SECONDS:
            raise UsageError(f"token expiry must be at least {MIN_EXPIRY_SECONDS} s (the API server's minimum)")
        self.core_api = core_api
        self.namespace = namespace
        self.service_account = service_account
        self.audience = audience
        self.expiry = expiry
        self._token = ""
        self._renew_at = 0.0
        self._lock = threading.Lock()

    def token(self, fresh: bool = False) -> str:
        from kubernetes.client import AuthenticationV1TokenRequest, V1TokenRequestSpec
        from kubernetes.client.exceptions import ApiException

        with self._lock:
            if fresh or not self._token or time.monotonic() >= self._renew_at:
                body = AuthenticationV1TokenRequest(
                    spec=V1TokenRequestSpec(audiences=[self.audience], expiration_seconds=self.expiry)
                )
                try:
                    resp = self.core_api.create_namespaced_service_account_token(
                        self.service_account, self.namespace, body
                    )
                except ApiException as err:
                    from movers.kube.apply import api_message

                    if err.status in (401, 403):
                        raise KubeAccessDenied(
                            f"TokenRequest for ServiceAccount {self.namespace}/{self.service_account} was refused"
                            f" ({err.status}): {api_message(err)}"
                        ) from None
                    raise UsageError(
                        f"TokenRequest for ServiceAccount {self.namespace}/{self.service_account} failed"
                        f" ({err.status} {err.reason}): it needs create on serviceaccounts/token"
                    ) from None
                self._token = resp.status.token
                KNOWN.add(self._token)
                self._renew_at = time.monotonic() + 0.8 * self.expiry
            return self._token

    def __repr__(self) -> str:
        return f"TokenRequestToken({self.namespace}/{self.service_account}, audience={self.audience!r})"


def service_account_of(token: str) -> tuple[str, str] | None:
    """``(namespace, name)`` from the ``sub`` claim of a service-account JWT (not verified:
    used only to know whom to ask the TokenRequest API for), or None."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        prefix, ns, name = claims["sub"].rsplit(":", 2)
    except (IndexError, ValueError, KeyError, AttributeError):
        return None
    return (ns, name) if prefix == "system:serviceaccount" else None
