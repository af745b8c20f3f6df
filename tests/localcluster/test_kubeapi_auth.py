"""Service-account tokens on the Kubernetes API emulator: TokenRequest (audiences, expiry, bound
pods), TokenReview (audience intersection, expiry, deleted service accounts), bearer-token
authentication and the review kinds, through the real ``kubernetes`` client."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes.client import AuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.testing import serve
from movers.cbt.tokens import TokenRequestToken, service_account_of

AUD = "local-sms"
API_AUD = "https://kubernetes.default.svc.cluster.local"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def kube(tmp_path, clock):
    with serve(tmp_path, clock=clock) as k:
        k.core.create_namespace({"metadata": {"name": "backup"}})
        k.core.create_namespaced_service_account("backup", {"metadata": {"name": "mover"}})
        yield k


def request_token(kube, audiences=(AUD,), expiration=600, sa="mover", **spec):
    body = {"spec": {"audiences": list(audiences), "expirationSeconds": expiration, **spec}}
    return kube.core.create_namespaced_service_account_token(sa, "backup", body)


def review(kube, token, audiences=(AUD,)):
    spec = {"token": token, **({"audiences": list(audiences)} if audiences else {})}
    return kube.authn.create_token_review({"spec": spec}).status


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_token_request_audiences_and_expiry(kube, clock):
    answer = request_token(kube, expiration=600)
    token = answer.status.token
    assert answer.spec.audiences == [AUD] and answer.spec.expiration_seconds == 600
    assert answer.status.expiration_timestamp.timestamp() == clock.now + 600
    c = claims(token)
    assert c["sub"] == "system:serviceaccount:backup:mover" and c["aud"] == [AUD]
    assert c["exp"] - c["iat"] == 600 and c["kubernetes.io"]["namespace"] == "backup"
    assert claims(request_token(kube, audiences=()).status.token)["aud"] == [API_AUD]  # the API server's default

    with pytest.raises(ApiException) as info:
        request_token(kube, expiration=599)
    assert info.value.status == 422 and "may not specify a duration less than 10 minutes" in info.value.body
    with pytest.raises(ApiException) as info:
        request_token(kube, sa="nobody")
    assert info.value.status == 404


def test_token_review_checks_audience_expiry_and_the_service_account(kube, clock):
    token = request_token(kube, audiences=(AUD, "other")).status.token
    ok = review(kube, token, audiences=(AUD, "third"))
    assert ok.authenticated and ok.audiences == [AUD]
    assert ok.user.username == "system:serviceaccount:backup:mover"
    assert "system:serviceaccounts:backup" in ok.user.groups
    assert ok.user.uid == kube.core.read_namespaced_service_account("mover", "backup").metadata.uid

    wrong = review(kube, token, audiences=("someone-else",))
    assert not wrong.authenticated and "invalid for the target audiences" in wrong.error
    assert not review(kube, token, audiences=()).authenticated  # defaults to the API server's audience
    assert not review(kube, token[:-4] + "AAAA").authenticated  # a forged signature
    assert not review(kube, "not-a-jwt").authenticated

    clock.now += 599
    assert review(kube, token).authenticated
    clock.now += 1
    assert not review(kube, token).authenticated  # expired

    fresh = request_token(kube).status.token
    kube.core.delete_namespaced_service_account("mover", "backup")
    kube.core.create_namespaced_service_account("backup", {"metadata": {"name": "mover"}})
    assert not review(kube, fresh).authenticated  # same name, new uid: the old token is dead


def test_pod_bound_token_dies_with_the_pod(kube):
    kube.core.create_namespaced_pod(
        "backup",
        {
            "metadata": {"name": "job"},
            "spec": {"serviceAccountName": "mover", "containers": [{"name": "c", "image": "mover"}]},
        },
    )
    answer = request_token(kube, boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "job"})
    status = review(kube, answer.status.token)
    assert status.authenticated and status.user.extra["authentication.kubernetes.io/pod-name"] == ["job"]
    kube.core.delete_namespaced_pod("job", "backup")
    assert not review(kube, answer.status.token).authenticated
    with pytest.raises(ApiException) as info:
        request_token(kube, boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "job"})
    assert info.value.status == 404


def test_issue_token_for_projected_volumes(kube):
    token = kube.api.issue_token("backup", "mover", [AUD], 3600)
    assert review(kube, token).authenticated


def test_product_token_source_works_against_the_emulator(kube):
    source = TokenRequestToken(kube.core, "backup", "mover", AUD, expiry=600)
    token = source.token()
    assert service_account_of(token) == ("backup", "mover")
    assert review(kube, token).audiences == [AUD]


def test_bearer_authentication_and_reviews(tmp_path):
    with serve(tmp_path, require_auth=True) as kube:
        assert kube.raw("GET", "/api/v1/namespaces", token="wrong")[0] == 401
        kube.core.create_namespaced_service_account("default", {"metadata": {"name": "app"}})
        api_token = kube.api.issue_token("default", "app")  # the API server's audience
        scoped = kube.api.issue_token("default", "app", [AUD])  # for the metadata service only
        code, body = kube.raw("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=api_token)
        assert code == 201 and body["status"]["userInfo"]["username"] == "system:serviceaccount:default:app"
        assert kube.raw("GET", "/api/v1/namespaces/default/pods", token=scoped)[0] == 401
        admin = kube.authn.create_self_subject_review({}).status.user_info
        assert admin.username == "kubernetes-admin" and "system:masters" in admin.groups
        review = {
            "spec": {
                "user": "system:serviceaccount:default:app",
                "resourceAttributes": {
                    "verb": "get",
                    "group": "snapshot.storage.k8s.io",
                    "resource": "volumesnapshots",
                    "namespace": "default",
                },
            }
        }
        assert not AuthorizationV1Api(kube.client).create_subject_access_review(review).status.allowed
        kube.grant(
            "default",
            "default/app",
            [{"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get"]}],
        )
        assert AuthorizationV1Api(kube.client).create_subject_access_review(review).status.allowed


def test_snapshot_metadata_token_validator_against_the_emulator(kube):
    from localcluster.snapshot_metadata.auth import PermissionDenied, Unauthenticated
    from localcluster.snapshot_metadata.kube_auth import TokenReviewValidator

    validator = TokenReviewValidator(kube.client, AUD)
    with pytest.raises(PermissionDenied, match="^user does not have permissions to perform the operation: $"):
        validator.validate(request_token(kube).status.token, "backup")  # a SubjectAccessReview, not a guess
    kube.grant(
        "backup",
        "backup/mover",
        [{"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get"]}],
    )
    validator.validate(request_token(kube).status.token, "backup")
    with pytest.raises(Unauthenticated):
        validator.validate(request_token(kube, audiences=("other",)).status.token, "backup")
    with pytest.raises(PermissionDenied):
        validator.validate(request_token(kube).status.token, "elsewhere")
