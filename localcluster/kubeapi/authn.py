"""Authentication: who a bearer token is, TokenRequest, TokenReview and SelfSubjectReview
(access reviews are answered by ``reviews.py`` from the RBAC rules).

- ``Authn.user(bearer)``: the admin token (the kubeconfig's) is ``kubernetes-admin`` in
  ``system:masters``; a service-account token this emulator issued is
  ``system:serviceaccount:NS:NAME`` if it is valid for the API server's audience and its service
  account (and bound pod) still exist with the same uid; anything else is None.
- ``token_request``: ``POST serviceaccounts/NAME/token`` with ``spec.audiences`` (default: the API
  server's), ``expirationSeconds`` (default 3600, 422 below 600 or above 2^32), optional
  ``boundObjectRef`` to a Pod (which must exist with that uid).
- ``token_review``: ``status.authenticated``, ``status.user`` and ``status.audiences`` = the token's
  audiences that are among ``spec.audiences`` (default: the API server's); none in common, an
  expired or foreign token, or a deleted service account/pod: ``authenticated: false`` + ``error``. A token
  of a pod being deleted stays valid until a minute past its ``deletionTimestamp`` (upstream's jwt leeway).
"""

from __future__ import annotations

import copy
from typing import Any

from localcluster.kubeapi import meta
from localcluster.kubeapi.errors import bad_request, conflict, invalid, not_found
from localcluster.kubeapi.resources import Obj
from localcluster.kubeapi.rest import Rest
from localcluster.kubeapi.reviews import review_answer
from localcluster.kubeapi.tokens import API_AUDIENCES, DEFAULT_EXPIRATION, MAX_EXPIRATION, MIN_EXPIRATION, TokenIssuer

ADMIN = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
DELETION_LEEWAY = 60.0  # seconds past a bound pod's deletionTimestamp its tokens stay valid (jwt.DefaultLeeway)
ANONYMOUS = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}


class Authn:
    def __init__(self, rest: Rest, issuer: TokenIssuer, admin_token: str) -> None:
        self.rest = rest
        self.issuer = issuer
        self.admin_token = admin_token

    def user(self, bearer: str | None) -> dict[str, Any] | None:
        if not bearer:
            return None
        if bearer == self.admin_token:
            return copy.deepcopy(ADMIN)
        user, auds, _ = self._review(bearer, list(API_AUDIENCES))
        return user if user is not None and auds else None

    def _review(self, token: str, audiences: list[str]) -> tuple[dict[str, Any] | None, list[str], str]:
        """(user info or None, audiences in common, error)."""
        if token == self.admin_token:
            common = [a for a in audiences if a in API_AUDIENCES]
            return (copy.deepcopy(ADMIN), common, "") if common else (None, [], "token audiences do not match")
        claims = self.issuer.verify(token)
        if claims is None:
            return None, [], "invalid bearer token"
        k8s = claims.get("kubernetes.io") or {}
        ns = k8s.get("namespace", "")
        sa = k8s.get("serviceaccount") or {}
        store, registry = self.rest.store, self.rest.registry
        with store.lock:
            obj = store.find(registry.get("", "serviceaccounts"), ns, sa.get("name", ""))
            if obj is None or obj["metadata"]["uid"] != sa.get("uid"):
                return None, [], f'serviceaccounts "{sa.get("name")}" not found or its uid changed'
            pod = k8s.get("pod")
            if pod:
                p = store.find(registry.get("", "pods"), ns, pod.get("name", ""))
                if p is None or p["metadata"]["uid"] != pod.get("uid"):
                    return None, [], f'pods "{pod.get("name")}" not found or its uid changed'
                deleted = p["metadata"].get("deletionTimestamp")
                if deleted and meta.parse_rfc3339(deleted) < self.rest.clock() - DELETION_LEEWAY:
                    return None, [], "service account token has been invalidated"
        token_auds = claims.get("aud") or []
        common = [a for a in audiences if a in token_auds]
        if not common:
            return None, [], f"token audiences {token_auds} is invalid for the target audiences {audiences}"
        extra: dict[str, list[str]] = {"authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti')}"]}
        if pod:
            extra["authentication.kubernetes.io/pod-name"] = [pod["name"]]
            extra["authentication.kubernetes.io/pod-uid"] = [pod["uid"]]
        user = {
            "username": claims["sub"],
            "uid": sa.get("uid"),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"],
            "extra": extra,
        }
        return user, common, ""

    def token_request(self, namespace: str, name: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a TokenRequest")
        spec = dict(body.get("spec") or {})
        expiration = spec.get("expirationSeconds")
        expiration = DEFAULT_EXPIRATION if expiration is None else expiration
        if not isinstance(expiration, int):
            raise bad_request("spec.expirationSeconds must be an integer")
        if expiration < MIN_EXPIRATION:
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [
                    (
                        "spec.expirationSeconds",
                        f"Invalid value: {expiration}: may not specify a duration less than 10 minutes",
                    )
                ],
            )
        if expiration > MAX_EXPIRATION:
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [
                    (
                        "spec.expirationSeconds",
                        f"Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds",
                    )
                ],
            )
        audiences = list(spec.get("audiences") or API_AUDIENCES)
        store, registry = self.rest.store, self.rest.registry
        pod = None
        with store.lock:
            sa = store.find(registry.get("", "serviceaccounts"), namespace, name)
            if sa is None:
                raise not_found("serviceaccounts", "", name)
            ref = spec.get("boundObjectRef")
            if ref:
                if ref.get("kind") != "Pod":
                    raise bad_request(f"cannot bind token to object of kind {ref.get('kind')!r} here (Pod only)")
                p = store.find(registry.get("", "pods"), namespace, ref.get("name", ""))
                if p is None:
                    raise not_found("pods", "", ref.get("name", ""))
                if ref.get("uid") and ref["uid"] != p["metadata"]["uid"]:
                    raise conflict(
                        "pods",
                        "",
                        ref["name"],
                        f"the UID in the bound object reference ({ref['uid']})"
                        f" does not match the UID in record ({p['metadata']['uid']})",
                    )
                pod = (p["metadata"]["name"], p["metadata"]["uid"])
                spec["boundObjectRef"] = {**ref, "uid": p["metadata"]["uid"]}
            token, exp = self.issuer.issue(namespace, name, sa["metadata"]["uid"], audiences, expiration, pod)
        spec.update(audiences=audiences, expirationSeconds=expiration)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": meta.rfc3339(self.issuer.clock())},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": meta.rfc3339(exp)},
        }

    def token_review(self, body: Any) -> Obj:
        spec = (body or {}).get("spec") or {}
        token = spec.get("token") or ""
        audiences = list(spec.get("audiences") or [])
        user, common, error = self._review(token, audiences or list(API_AUDIENCES))
        status: Obj = {"authenticated": user is not None, "user": user or {}}
        if user is not None:
            status["audiences"] = common
        else:
            status["error"] = error
        return review_answer("authentication.k8s.io/v1", "TokenReview", spec, status)

    def self_subject_review(self, user: dict[str, Any] | None) -> Obj:
        return review_answer("authentication.k8s.io/v1", "SelfSubjectReview", None, {"userInfo": user or ANONYMOUS})
