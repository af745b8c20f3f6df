"""Kubernetes API refusals: a 401/403 is exit code 6 with the API's own message (``apply``, the mover
CLI), and ``access.denied`` asks SelfSubjectAccessReview for each permission the caller needs."""

from __future__ import annotations

import json

import pytest

from localcluster.kubeapi.testing import serve
from movers import errors
from movers.kube import access
from movers.kube import apply as k

SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "closing"}}


def test_a_403_is_an_access_error_with_the_apis_message(tmp_path):
    with serve(tmp_path) as kube:
        # a namespace being deleted refuses new content with a real 403 Forbidden Status
        kube.core.create_namespace({"metadata": {"name": "closing", "finalizers": ["example.com/hold"]}})
        kube.core.delete_namespace("closing")
        with pytest.raises(k.ForbiddenError) as info:
            k.create(kube.client, SECRET)
        err = info.value
        assert (err.exit_code, err.status, err.retriable) == (errors.EXIT_ACCESS, 403, False)
        assert isinstance(err, errors.KubeAccessDenied) and "\n" not in str(err)
        assert str(err) == (
            'creating Secret closing/x: 403 secrets "x" is forbidden: unable to create new content in'
            " namespace closing because it is being terminated"
        )
    assert k.ForbiddenError("m", 403).exit_code == 6 and k.KubeError("m", 403).exit_code == errors.EXIT_INTERNAL


def test_a_rejected_token_is_an_access_error(tmp_path):
    from kubernetes import config

    with serve(tmp_path) as kube:
        bad = tmp_path / "bad-kubeconfig"
        bad.write_text(kube.kubeconfig.read_text().replace(kube.api.token, "not-a-valid-token"))
        api = config.new_client_from_config(str(bad))
        try:
            with pytest.raises(k.ForbiddenError, match="^listing PersistentVolumeClaim in default: 401 "):
                k.list_objects(api, "PersistentVolumeClaim", "default")
            with pytest.raises(errors.KubeAccessDenied):
                access.denied(api, [("get", "", "pods", "", "default")])
            for call in (
                lambda: k.patch_labels(api, "Secret", "default", "x", {"a": "b"}),  # raised ApiException
                lambda: k.delete(api, "Secret", "default", "x"),
            ):
                with pytest.raises(k.ForbiddenError, match=": 401 "):
                    call()
        finally:
            api.close()


def test_denied_asks_one_review_per_distinct_check(tmp_path):
    audit = tmp_path / "audit.jsonl"
    checks = [
        access.Check("create", "groupsnapshot.storage.k8s.io", "volumegroupsnapshots", namespace="shop"),
        ("create", "", "pods", "exec", "shop"),
        access.Check("get", "", "secrets", namespace="shop", name="cbt-mover-repo"),
        access.Check("list", "storage.k8s.io", "storageclasses"),
        access.Check("create", "", "pods", "exec", "shop"),  # the same as the tuple: asked once
    ]
    with serve(tmp_path, audit_log=audit) as kube:
        assert access.denied(kube.client, checks) == []  # the emulator of this branch allows everything
    reviews = [json.loads(line) for line in audit.read_text().splitlines()]
    reviews = [r for r in reviews if r["path"] == access.REVIEW_PATH]
    assert [(r["verb"], r["code"]) for r in reviews] == [("create", 201)] * 4
    assert [r["body"] for r in reviews] == [
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": a}}
        for a in (
            {
                "verb": "create",
                "group": "groupsnapshot.storage.k8s.io",
                "resource": "volumegroupsnapshots",
                "namespace": "shop",
            },
            {"verb": "create", "resource": "pods", "subresource": "exec", "namespace": "shop"},
            {"verb": "get", "resource": "secrets", "namespace": "shop", "name": "cbt-mover-repo"},
            {"verb": "list", "group": "storage.k8s.io", "resource": "storageclasses"},
        )
    ]


def test_refusal_lines_are_readable():
    check = access.Check("patch", "groupsnapshot.storage.k8s.io", "volumegroupsnapshots", namespace="shop")
    assert access.refusal_line(check, {"allowed": True}) is None
    assert access.refusal_line(check, {"allowed": False}) == (
        "cannot patch volumegroupsnapshots.groupsnapshot.storage.k8s.io in namespace shop"
    )
    secret = access.Check("get", "", "secrets", namespace="shop", name="repo")
    assert access.refusal_line(secret, {"allowed": False, "denied": True, "reason": "no RBAC policy matched"}) == (
        'cannot get secrets "repo" in namespace shop (no RBAC policy matched)'
    )
    token = access.Check("create", "", "serviceaccounts", "token", "shop", "cbt-mover")
    assert access.refusal_line(token, {"evaluationError": "role not found"}) == (
        'cannot create serviceaccounts/token "cbt-mover" in namespace shop (role not found)'
    )
    assert access.refusal_line(access.Check("list", "storage.k8s.io", "storageclasses"), {}) == (
        "cannot list storageclasses.storage.k8s.io cluster-wide"
    )
