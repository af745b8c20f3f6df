"""Pod Security admission in the Kubernetes API emulator, through the real ``kubernetes`` client: a namespace's
``pod-security.kubernetes.io/enforce`` level refuses the pods that violate it with upstream's 403 message (the
failed checks in upstream's order, each with its reason and detail), admits the pods that pass it, and checks
nothing where the label is absent; a namespace with an unknown level is refused."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.podsecurity_admission import ENFORCE_LABEL
from localcluster.kubeapi.testing import serve

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        for name, level in (("open", None), ("base", "baseline"), ("strict", "restricted")):
            labels = {ENFORCE_LABEL: level} if level else {}
            k.core.create_namespace({"metadata": {"name": name, "labels": labels}})
        yield k


def pod(name="p", security=None, pod_security=None, volumes=None, **container):
    spec = {"containers": [{"name": "main", "image": "app", "securityContext": security or {}, **container}]}
    if pod_security is not None:
        spec["securityContext"] = pod_security
    if volumes is not None:
        spec["volumes"] = volumes
    return {"metadata": {"name": name}, "spec": spec}


def refused(kube, namespace, body) -> str:
    with pytest.raises(ApiException) as info:
        kube.core.create_namespaced_pod(namespace, body)
    assert info.value.status == 403
    status = json.loads(info.value.body)
    assert status["reason"] == "Forbidden" and status["details"] == {"kind": "pods", "name": body["metadata"]["name"]}
    return status["message"]


def test_restricted_refuses_a_default_pod_naming_every_failed_check_in_upstreams_order(kube):
    message = refused(kube, "strict", pod(volumes=[{"name": "h", "hostPath": {"path": "/tmp"}}]))
    assert message == (
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false'
        ' (container "main" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities'
        ' (container "main" must set securityContext.capabilities.drop=["ALL"]), restricted volume types (volume "h"'
        ' uses restricted volume type "hostPath"), runAsNonRoot != true (pod or container "main" must set'
        ' securityContext.runAsNonRoot=true), seccompProfile (pod or container "main" must set'
        ' securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    assert kube.core.list_namespaced_pod("strict").items == []


def test_restricted_refuses_root_privilege_and_added_capabilities(kube):
    security = {**RESTRICTED_CONTAINER, "privileged": True, "runAsUser": 0}
    security["capabilities"] = {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    message = refused(kube, "strict", pod(security=security, pod_security=RESTRICTED_POD))
    assert message == (
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged (container "main" must not set'
        ' securityContext.privileged=true), unrestricted capabilities (container "main" must not include "SYS_ADMIN"'
        ' in securityContext.capabilities.add), runAsUser=0 (container "main" must not set runAsUser=0)'
    )


def test_restricted_admits_an_unprivileged_pod_with_claims_and_secrets(kube):
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "key", "secret": {"secretName": "repo"}},
    ]
    created = kube.core.create_namespaced_pod(
        "strict", pod(security=RESTRICTED_CONTAINER, pod_security=RESTRICTED_POD, volumes=volumes)
    )
    assert created.metadata.name == "p"


def test_baseline_refuses_host_access_only(kube):
    body = pod(security={"privileged": True}, ports=[{"containerPort": 80, "hostPort": 8080}])
    body["spec"]["hostNetwork"] = True
    message = refused(kube, "base", body)
    assert message == (
        'pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPort'
        ' (container "main" uses hostPort 8080), privileged (container "main" must not set'
        " securityContext.privileged=true)"
    )
    assert kube.core.create_namespaced_pod("base", pod(name="root", security={"runAsUser": 0})).metadata.name == "root"


def test_no_label_checks_nothing_and_a_namespace_with_an_unknown_level_is_refused(kube):
    assert kube.core.create_namespaced_pod("open", pod(security={"privileged": True})).metadata.name == "p"
    with pytest.raises(ApiException) as info:
        kube.core.create_namespace({"metadata": {"name": "odd", "labels": {ENFORCE_LABEL: "strictest"}}})
    assert info.value.status == 422
    assert json.loads(info.value.body)["message"] == (
        'Namespace "odd" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value:'
        ' "strictest": must be one of privileged, baseline, restricted'
    )
