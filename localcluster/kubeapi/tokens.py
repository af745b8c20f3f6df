"""Service-account tokens: JWTs (HS256, a key private to this emulator) shaped like the API server's.

``TokenIssuer.issue(...)`` makes a token with the claims the real ones carry (``iss``, ``sub``
``system:serviceaccount:NS:NAME``, ``aud``, ``exp``, ``iat``, ``nbf``, ``jti`` and the
``kubernetes.io`` block naming the namespace, service account and bound pod).
``TokenIssuer.verify(token)`` returns the claims of a token this issuer signed that has not
expired, or None. Whether the service account (and bound pod) still exists is the caller's check
(``authn.py``). ``clock`` (seconds since the epoch) is injectable so tests need no sleeps.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)  # what the API server itself accepts (kind's default)
MIN_EXPIRATION = 600  # ValidateTokenRequest: "may not specify a duration less than 10 minutes"
MAX_EXPIRATION = 1 << 32
DEFAULT_EXPIRATION = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    def __init__(self, clock: Callable[[], float] = time.time, key: bytes | None = None) -> None:
        self.clock = clock
        self._key = key or secrets.token_bytes(32)
        self._kid = hashlib.sha256(self._key).hexdigest()[:16]

    def issue(
        self,
        namespace: str,
        service_account: str,
        sa_uid: str,
        audiences: Sequence[str] = (),
        expiration_seconds: int = DEFAULT_EXPIRATION,
        pod: tuple[str, str] | None = None,  # (name, uid) the token is bound to
    ) -> tuple[str, int]:
        """(token, expiry as seconds since the epoch)."""
        now = int(self.clock())
        exp = now + int(expiration_seconds)
        k8s: dict[str, Any] = {"namespace": namespace, "serviceaccount": {"name": service_account, "uid": sa_uid}}
        if pod is not None:
            k8s["pod"] = {"name": pod[0], "uid": pod[1]}
        claims = {
            "aud": list(audiences) or list(API_AUDIENCES),
            "exp": exp,
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": k8s,
            "sub": f"system:serviceaccount:{namespace}:{service_account}",
        }
        header = _b64(json.dumps({"alg": "HS256", "kid": self._kid, "typ": "JWT"}).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        sig = _b64(hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest())
        return f"{header}.{payload}.{sig}", exp

    def verify(self, token: str) -> dict[str, Any] | None:
        try:
            header, payload, sig = token.split(".")
            want = hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(want, _unb64(sig)):
                return None
            claims = json.loads(_unb64(payload))
        except (ValueError, TypeError):
            return None
        now = self.clock()
        if not isinstance(claims, dict) or claims.get("iss") != ISSUER:
            return None
        if now >= claims.get("exp", 0) or now < claims.get("nbf", 0) - 60:
            return None
        return claims
