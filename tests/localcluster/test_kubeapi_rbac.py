"""RBAC on the Kubernetes API emulator, as kube-apiserver enforces it, through the real ``kubernetes``
client with ServiceAccount tokens: request attributes, rule matching (verbs, groups, resources,
subresources, resourceNames, non-resource URLs), RoleBindings vs ClusterRoleBindings, subjects,
the 403 bodies, anonymous requests, access reviews, RBAC object validation, escalation checks,
ServiceAccount admission for pods, and the audit log's authorization fields."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.requestinfo import request_attributes
from localcluster.kubeapi.testing import serve

RBAC = "rbac.authorization.k8s.io"
SNAP = "snapshot.storage.k8s.io"
SA_USER = "system:serviceaccount:ns:app"


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path, audit_log=tmp_path / "audit.jsonl") as k:
        for ns in ("ns", "other"):
            k.core.create_namespace({"metadata": {"name": ns}})
        k.core.create_namespaced_service_account("ns", {"metadata": {"name": "app"}})
        yield k


def rule(verbs, resources, groups=("",), names=()):
    out = {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
    if names:
        out["resourceNames"] = list(names)
    return out


def refused(call, *args, **kwargs) -> ApiException:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


def body(err: ApiException) -> dict:
    return json.loads(err.body)


def cm(name):
    return {"metadata": {"name": name}, "data": {"k": "v"}}


def pod(name, **spec):
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def cluster_grant(kube, name, rules, subjects):
    kube.rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    kube.rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        }
    )


SA = [{"kind": "ServiceAccount", "name": "app", "namespace": "ns"}]


# ---- request attributes (requestinfo.go) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "query", "want"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "0"}, ("list", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods/p", {}, ("watch", "", "ns", "pods", "", "p")),
        (
            "GET",
            "/api/v1/namespaces/ns/pods",
            {"fieldSelector": "metadata.name=p"},
            ("list", "", "ns", "pods", "", "p"),
        ),
        (
            "GET",
            "/api/v1/pods",
            {"fieldSelector": "spec.nodeName=n,metadata.name==p", "watch": "1"},
            ("watch", "", "", "pods", "", "p"),
        ),
        ("GET", "/api/v1/pods", {"fieldSelector": "metadata.name!=p"}, ("list", "", "", "pods", "", "")),
        ("POST", "/api/v1/namespaces/ns/pods", {}, ("create", "", "ns", "pods", "", "")),
        ("PUT", "/api/v1/namespaces/ns/pods/p/status", {}, ("update", "", "ns", "pods", "status", "p")),
        (
            "PATCH",
            "/apis/snapshot.storage.k8s.io/v1/namespaces/ns/volumesnapshots/s",
            {},
            ("patch", SNAP, "ns", "volumesnapshots", "", "s"),
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, ("delete", "", "ns", "pods", "", "p")),
        ("DELETE", "/api/v1/namespaces/ns/pods", {}, ("deletecollection", "", "ns", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "ns", "namespaces", "", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "ns", "namespaces", "finalize", "ns")),
        ("GET", "/api/v1/namespaces", {}, ("list", "", "", "namespaces", "", "")),
        (
            "POST",
            "/api/v1/namespaces/ns/serviceaccounts/app/token",
            {},
            ("create", "", "ns", "serviceaccounts", "token", "app"),
        ),
        (
            "GET",
            "/apis/cbt.storage.k8s.io/v1beta1/snapshotmetadataservices/d",
            {},
            ("get", "cbt.storage.k8s.io", "", "snapshotmetadataservices", "", "d"),
        ),
    ],
)
def test_request_attributes_as_requestinfo(method, path, query, want):
    attrs = request_attributes(method, path, query)
    assert attrs.resource_request
    assert (attrs.verb, attrs.api_group, attrs.namespace, attrs.resource, attrs.subresource, attrs.name) == want


@pytest.mark.parametrize(
    "path",
    [
        "/version",
        "/healthz",
        "/api",
        "/api/v1",
        "/apis",
        "/apis/storage.k8s.io",
        "/apis/storage.k8s.io/v1",
        "/openapi/v3",
        "/foo",
    ],
)
def test_non_resource_requests(path):
    attrs = request_attributes("GET", path, {})
    assert not attrs.resource_request and (attrs.verb, attrs.path) == ("get", path)
    assert request_attributes("POST", path, {}).verb == "post"


# ---- rules through the client ---------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"])
def test_each_verb_is_granted_alone(kube, verb):
    kube.core.create_namespaced_config_map("ns", cm("a"))
    kube.grant("ns", "ns/app", [rule([verb], ["configmaps"])])
    calls = {
        "get": lambda c: c.read_namespaced_config_map("a", "ns"),
        "list": lambda c: c.list_namespaced_config_map("ns"),
        "watch": lambda c: c.list_namespaced_config_map("ns", watch=True, timeout_seconds=1, _preload_content=False),
        "create": lambda c: c.create_namespaced_config_map("ns", cm("b"), dry_run="All"),
        "update": lambda c: c.replace_namespaced_config_map("a", "ns", cm("a"), dry_run="All"),
        "patch": lambda c: c.patch_namespaced_config_map("a", "ns", {"data": {"k": "w"}}, dry_run="All"),
        "delete": lambda c: c.delete_namespaced_config_map("a", "ns", dry_run="All"),
        "deletecollection": lambda c: c.delete_collection_namespaced_config_map("ns", label_selector="none=here"),
    }
    with kube.as_service_account("ns", "app") as api_client:
        core = client.CoreV1Api(api_client)
        for name, call in calls.items():
            if name == verb:
                call(core)
            else:
                assert refused(call, core).status == 403, name


def test_403_bodies_as_upstream(kube):
    with kube.as_service_account("ns", "app") as api_client:
        core = client.CoreV1Api(api_client)
        assert body(refused(core.list_namespaced_pod, "ns")) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f'pods is forbidden: User "{SA_USER}" cannot list resource "pods" in API group "" in the'
            ' namespace "ns"',
            "reason": "Forbidden",
            "details": {"kind": "pods"},
            "code": 403,
        }
        err = body(
            refused(
                client.CustomObjectsApi(api_client).get_cluster_custom_object,
                "cbt.storage.k8s.io",
                "v1beta1",
                "snapshotmetadataservices",
                "hostpath.csi.k8s.io",
            )
        )
        assert err["message"] == (
            f'snapshotmetadataservices.cbt.storage.k8s.io "hostpath.csi.k8s.io" is forbidden:'
            f' User "{SA_USER}" cannot get resource "snapshotmetadataservices" in API group'
            ' "cbt.storage.k8s.io" at the cluster scope'
        )
        assert err["details"] == {
            "group": "cbt.storage.k8s.io",
            "kind": "snapshotmetadataservices",
            "name": "hostpath.csi.k8s.io",
        }
        err = body(refused(core.create_namespaced_service_account_token, "app", "ns", {"spec": {}}))
        assert err["message"] == (
            f'serviceaccounts "app" is forbidden: User "{SA_USER}" cannot create resource'
            ' "serviceaccounts/token" in API group "" in the namespace "ns"'
        )
        code, text = kube.raw("GET", "/foo", token=kube.api.issue_token("ns", "app"))
        assert (code, text["message"], text["details"]) == (
            403,
            f'forbidden: User "{SA_USER}" cannot get path "/foo"',
            {},
        )
    # a binding to a role that does not exist: the authorizer's reason is appended
    kube.rbac.create_namespaced_role_binding(
        "ns",
        {
            "metadata": {"name": "dangling"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "missing"},
            "subjects": SA,
        },
    )
    with kube.as_service_account("ns", "app") as api_client:
        err = body(refused(client.CoreV1Api(api_client).list_namespaced_pod, "ns"))
        assert err["message"].endswith(
            ' in the namespace "ns": RBAC: clusterrole.rbac.authorization.k8s.io "missing" not found'
        )


def test_subresources_names_and_groups(kube):
    kube.core.create_namespaced_pod("ns", pod("p"))
    for name in ("a", "b"):
        kube.core.create_namespaced_config_map("ns", cm(name))
    kube.core.create_namespaced_service_account("ns", {"metadata": {"name": "other"}})
    kube.grant(
        "ns",
        "ns/app",
        [
            rule(["get"], ["*/status"]),
            rule(["get", "list", "watch"], ["configmaps"], names=["a"]),
            rule(["create"], ["serviceaccounts/token"], names=["app"]),
            rule(["get"], ["volumesnapshots"]),  # core group only: never matches snapshot.storage.k8s.io
        ],
    )
    with kube.as_service_account("ns", "app") as api_client:
        core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
        assert core.read_namespaced_pod_status("p", "ns").metadata.name == "p"  # "*/status"
        assert refused(core.read_namespaced_pod, "p", "ns").status == 403  # the subresource rule is not the pod's
        assert core.read_namespaced_config_map("a", "ns").data == {"k": "v"}
        assert refused(core.read_namespaced_config_map, "b", "ns").status == 403
        assert refused(core.list_namespaced_config_map, "ns").status == 403  # a collection has no name
        assert [
            c.metadata.name for c in core.list_namespaced_config_map("ns", field_selector="metadata.name=a").items
        ] == ["a"]
        assert refused(core.create_namespaced_config_map, "ns", cm("a")).status == 403  # a create has no name
        core.create_namespaced_service_account_token("app", "ns", {"spec": {}})
        assert refused(core.create_namespaced_service_account_token, "other", "ns", {"spec": {}}).status == 403
        assert refused(custom.get_namespaced_custom_object, SNAP, "v1", "ns", "volumesnapshots", "s").status == 403
        # /watch/NAMESPACE/.../NAME is a watch of that name
        token = kube.api.issue_token("ns", "app")
        assert kube.raw("GET", "/api/v1/watch/namespaces/ns/configmaps/b?timeoutSeconds=1", token=token)[0] == 403
        code, text = kube.raw("GET", "/api/v1/watch/namespaces/ns/configmaps/a?timeoutSeconds=1", token=token)
        events = [text] if isinstance(text, dict) else [json.loads(line) for line in text.splitlines()]
        assert code == 200 and [e["object"]["metadata"]["name"] for e in events] == ["a"]


def test_role_binding_to_a_cluster_role_grants_in_its_namespace_only(kube):
    kube.rbac.create_cluster_role({"metadata": {"name": "pod-reader"}, "rules": [rule(["get", "list"], ["pods"])]})
    kube.rbac.create_namespaced_role_binding(
        "other",
        {
            "metadata": {"name": "read"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "pod-reader"},
            "subjects": SA,
        },
    )
    with kube.as_service_account("ns", "app") as api_client:
        core = client.CoreV1Api(api_client)
        assert core.list_namespaced_pod("other").items == []
        assert refused(core.list_namespaced_pod, "ns").status == 403
        assert refused(core.list_pod_for_all_namespaces).status == 403
        kube.rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "read"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "pod-reader"},
                "subjects": SA,
            }
        )
        assert core.list_pod_for_all_namespaces().items == [] and core.list_namespaced_pod("ns").items == []


@pytest.mark.parametrize(
    ("subject", "allowed"),
    [
        ({"kind": "ServiceAccount", "name": "app"}, True),  # namespace: the RoleBinding's
        ({"kind": "ServiceAccount", "name": "app", "namespace": "other"}, False),
        ({"kind": "User", "name": SA_USER}, True),
        ({"kind": "Group", "name": "system:serviceaccounts:ns"}, True),
        ({"kind": "Group", "name": "system:serviceaccounts:other"}, False),
        ({"kind": "Group", "name": "system:serviceaccounts"}, True),
        ({"kind": "Group", "name": "system:authenticated"}, True),
    ],
)
def test_subjects(kube, subject, allowed):
    kube.rbac.create_namespaced_role("ns", {"metadata": {"name": "r"}, "rules": [rule(["list"], ["pods"])]})
    kube.rbac.create_namespaced_role_binding(
        "ns",
        {"metadata": {"name": "b"}, "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "r"}, "subjects": [subject]},
    )
    with kube.as_service_account("ns", "app") as api_client:
        core = client.CoreV1Api(api_client)
        if allowed:
            assert core.list_namespaced_pod("ns").items == []
        else:
            assert refused(core.list_namespaced_pod, "ns").status == 403


def test_exec_over_websocket_needs_get_and_create(kube):
    """A GET (the WebSocket upgrade) is authorized as get pods/exec and, as since Kubernetes 1.35
    (AuthorizePodWebsocketUpgradeCreatePermission), also as create; a POST (SPDY) as create."""
    kube.core.create_namespaced_pod("ns", pod("p"))
    token = kube.api.issue_token("ns", "app")
    exec_path = "/api/v1/namespaces/ns/pods/p/exec?command=true&stdout=true"
    kube.grant("ns", "ns/app", [rule(["get"], ["pods/exec"])], name="get-exec")
    code, text = kube.raw("GET", exec_path, token=token)
    assert (code, text["message"], text["details"]) == (403, 'pods "p" is forbidden: ', {"kind": "pods", "name": "p"})
    kube.rbac.delete_namespaced_role_binding("get-exec", "ns")
    kube.grant("ns", "ns/app", [rule(["create"], ["pods/exec"])], name="create-exec")
    code, text = kube.raw("GET", exec_path, token=token)
    assert code == 403 and 'cannot get resource "pods/exec" in API group "" in the namespace "ns"' in text["message"]
    assert kube.raw("POST", exec_path, token=token)[0] == 400  # authorized: no kubelet serves exec here
    kube.grant("ns", "ns/app", [rule(["get"], ["pods/exec"])], name="get-exec-again")
    assert kube.raw("GET", exec_path, token=token)[0] == 400
    entry = [json.loads(line) for line in (kube.kubeconfig.parent / "audit.jsonl").read_text().splitlines()][-1]
    assert entry["authz"]["verb"] == "get" and entry["authz"]["subresource"] == "exec"
    assert [(a["verb"], a["allowed"]) for a in entry["authz"]["also"]] == [("create", True)]


def test_masters_short_cut_and_bootstrap_policy(kube):
    roles = {r.metadata.name: r for r in kube.rbac.list_cluster_role().items}
    assert {"cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer"} <= set(roles)
    assert roles["cluster-admin"].metadata.labels == {"kubernetes.io/bootstrapping": "rbac-defaults"}
    viewer = kube.rbac.read_cluster_role_binding("system:public-info-viewer")
    assert {s.name for s in viewer.subjects} == {"system:authenticated", "system:unauthenticated"}
    kube.rbac.delete_cluster_role_binding("cluster-admin")
    assert kube.core.list_namespaced_pod("ns").items == []  # system:masters needs no binding
    sar = client.AuthorizationV1Api(kube.client).create_subject_access_review(
        {
            "spec": {
                "user": "someone",
                "groups": ["system:masters"],
                "resourceAttributes": {"verb": "delete", "resource": "nodes"},
            }
        }
    )
    assert sar.status.allowed and not sar.status.reason


# ---- anonymous and discovery ----------------------------------------------------------------------


def test_anonymous_requests(kube):
    with kube.as_token(None) as anonymous:
        assert client.VersionApi(anonymous).get_code().minor  # system:public-info-viewer
        assert client.CoreV1Api(anonymous).api_client.call_api("GET", kube.api.url + "/healthz").status == 200
        err = refused(client.CoreApi(anonymous).get_api_versions)
        assert body(err)["message"] == 'forbidden: User "system:anonymous" cannot get path "/api/"'
        err = refused(client.CoreV1Api(anonymous).list_namespace)
        assert body(err)["message"] == (
            'namespaces is forbidden: User "system:anonymous" cannot list resource'
            ' "namespaces" in API group "" at the cluster scope'
        )
    with kube.as_token("not-a-token") as wrong:
        assert refused(client.VersionApi(wrong).get_code).status == 401


def test_anonymous_refused_with_require_auth(tmp_path):
    with serve(tmp_path, require_auth=True) as kube, kube.as_token(None) as anonymous:
        assert refused(client.VersionApi(anonymous).get_code).status == 401


def test_discovery_for_any_authenticated_user(kube):
    with kube.as_service_account("ns", "app") as api_client:
        assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
        groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
        assert {RBAC, SNAP, "authorization.k8s.io"} <= groups
        rbac = client.RbacAuthorizationV1Api(api_client).get_api_resources()
        assert {r.name for r in rbac.resources} == {"roles", "rolebindings", "clusterroles", "clusterrolebindings"}
        assert kube.raw("GET", "/openapi/v3", token=kube.api.issue_token("ns", "app"))[0] == 200
        assert refused(client.RbacAuthorizationV1Api(api_client).list_cluster_role).status == 403


# ---- access reviews -------------------------------------------------------------------------------


def test_subject_access_reviews(kube):
    kube.core.create_namespaced_service_account("ns", {"metadata": {"name": "sidecar"}})
    cluster_grant(kube, "pods-everywhere", [rule(["get"], ["pods"])], SA)
    kube.grant("ns", "ns/app", [rule(["list"], ["volumesnapshots"], groups=[SNAP])], name="snaps")
    review = {
        "spec": {
            "user": SA_USER,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ns"],
            "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "x"},
        }
    }
    with kube.as_service_account("ns", "sidecar") as api_client:  # needs create subjectaccessreviews
        assert refused(client.AuthorizationV1Api(api_client).create_subject_access_review, review).status == 403
    kube.rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "sidecar"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:auth-delegator"},
            "subjects": [{"kind": "ServiceAccount", "name": "sidecar", "namespace": "ns"}],
        }
    )
    with kube.as_service_account("ns", "sidecar") as api_client:
        authz = client.AuthorizationV1Api(api_client)
        status = authz.create_subject_access_review(review).status
        assert status.allowed and status.reason == (
            'RBAC: allowed by ClusterRoleBinding "pods-everywhere" of'
            ' ClusterRole "pods-everywhere" to ServiceAccount "app/ns"'
        )
        review["spec"]["resourceAttributes"] = {
            "verb": "list",
            "group": SNAP,
            "resource": "volumesnapshots",
            "namespace": "ns",
        }
        status = authz.create_subject_access_review(review).status
        assert status.allowed and status.reason == (
            'RBAC: allowed by RoleBinding "snaps/ns" of Role "snaps" to ServiceAccount "app/ns"'
        )
        review["spec"]["resourceAttributes"]["namespace"] = "other"
        status = authz.create_subject_access_review(review).status
        assert status.allowed is False and status.reason is None
        review["spec"].pop("resourceAttributes")
        review["spec"]["nonResourceAttributes"] = {"verb": "get", "path": "/apis/anything"}
        assert authz.create_subject_access_review(review).status.allowed is False  # discovery: authenticated only
        review["spec"]["groups"].append("system:authenticated")
        assert authz.create_subject_access_review(review).status.allowed  # system:discovery has "/apis/*"
        err = refused(authz.create_subject_access_review, {"spec": {"user": "x"}})
        assert (
            err.status == 422 and "exactly one of nonResourceAttributes or resourceAttributes" in body(err)["message"]
        )


def test_self_subject_access_and_rules_reviews(kube):
    kube.grant("ns", "ns/app", [rule(["get", "list"], ["pods"])], name="pods")
    with kube.as_service_account("ns", "app") as api_client:
        authz = client.AuthorizationV1Api(api_client)
        ask = {"spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "ns"}}}
        status = authz.create_self_subject_access_review(ask).status
        assert status.allowed and status.reason.startswith('RBAC: allowed by RoleBinding "pods/ns" of Role "pods"')
        ask["spec"]["resourceAttributes"]["verb"] = "delete"
        assert not authz.create_self_subject_access_review(ask).status.allowed
        rules = authz.create_self_subject_rules_review({"spec": {"namespace": "ns"}}).status
        assert {"verbs": ["get", "list"], "api_groups": [""], "resources": ["pods"], "resource_names": None} in [
            r.to_dict() for r in rules.resource_rules
        ]
        assert any("/apis/*" in r.non_resource_urls for r in rules.non_resource_rules)
        assert rules.incomplete is False
        other = authz.create_self_subject_rules_review({"spec": {"namespace": "other"}}).status
        assert not any("pods" in (r.resources or []) for r in other.resource_rules)


# ---- RBAC objects ---------------------------------------------------------------------------------


def test_rbac_object_validation(kube):
    rbac = kube.rbac
    roles, cluster_roles = f"/apis/{RBAC}/v1/namespaces/ns/roles", f"/apis/{RBAC}/v1/clusterroles"
    bindings, cluster_bindings = f"/apis/{RBAC}/v1/namespaces/ns/rolebindings", f"/apis/{RBAC}/v1/clusterrolebindings"
    pods_rule = {"apiGroups": [""], "resources": ["pods"]}
    cases = [
        (roles, {"rules": [pods_rule]}, "rules[0].verbs: Required value: verbs must contain at least one value"),
        (
            roles,
            {"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}]},
            'rules[0].nonResourceURLs: Invalid value: []string{"/x"}: namespaced rules cannot apply to non-resource'
            " URLs",
        ),
        (
            cluster_roles,
            {"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"], "resources": ["pods"]}]},
            "rules cannot apply to both regular resources and non-resource URLs",
        ),
        (
            cluster_roles,
            {"rules": [{"verbs": ["get"]}]},
            "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
        ),
        (
            cluster_roles,
            {"aggregationRule": {"clusterRoleSelectors": []}},
            "aggregationRule.clusterRoleSelectors: Required value",
        ),
        (
            bindings,
            {"roleRef": {"apiGroup": RBAC, "kind": "Secret", "name": "x"}, "subjects": SA},
            'roleRef.kind: Unsupported value: "Secret": supported values: "Role", "ClusterRole"',
        ),
        (
            bindings,
            {"roleRef": {"apiGroup": "example.com", "kind": "Role", "name": "x"}, "subjects": SA},
            'roleRef.apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io"',
        ),
        (
            cluster_bindings,
            {"roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "x"}, "subjects": SA},
            'roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"',
        ),
        (cluster_bindings, {"roleRef": {"apiGroup": RBAC, "kind": "ClusterRole"}}, "roleRef.name: Required value"),
        (
            cluster_bindings,
            {
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "app"}],
            },
            "subjects[0].namespace: Required value",
        ),
        (
            bindings,
            {"roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "x"}, "subjects": [{"kind": "Robot", "name": "r"}]},
            'subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"',
        ),
    ]
    for path, obj, message in cases:
        code, answer = kube.raw("POST", path, {"metadata": {"name": "x"}, **obj})
        assert code == 422 and message in answer["message"], (message, answer)
    code, answer = kube.raw("POST", cluster_roles, {"metadata": {"name": "a%b"}})
    assert code == 422 and "metadata.name: Invalid value: \"a%b\": may not contain '%'" in answer["message"]
    assert rbac.create_cluster_role({"metadata": {"name": "system:colons-are-fine"}}).metadata.name

    binding = rbac.create_namespaced_role_binding(
        "ns",
        {
            "metadata": {"name": "b"},
            "roleRef": {"kind": "Role", "name": "x"},
            "subjects": [{"kind": "User", "name": "u"}],
        },
    )
    assert binding.role_ref.api_group == RBAC and binding.subjects[0].api_group == RBAC  # v1 defaults
    err = refused(rbac.patch_namespaced_role_binding, "b", "ns", {"roleRef": {"name": "y"}})
    assert err.status == 422 and body(err)["message"] == (
        'RoleBinding.rbac.authorization.k8s.io "b" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:'
        '"rbac.authorization.k8s.io", Kind:"Role", Name:"y"}: cannot change roleRef'
    )
    rbac.patch_namespaced_role_binding("b", "ns", {"subjects": [{"kind": "Group", "name": "g"}]})
    aggregated = rbac.create_cluster_role(
        {
            "metadata": {"name": "system:aggregated"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]},
        }
    )
    assert aggregated.aggregation_rule.cluster_role_selectors[0].match_labels == {"x": "y"} and not aggregated.rules


# ---- escalation -----------------------------------------------------------------------------------


def test_roles_grant_only_what_their_author_holds(kube):
    kube.grant(
        "ns",
        "ns/app",
        [rule(["create", "update"], ["roles"], groups=[RBAC]), rule(["get"], ["pods"])],
        name="role-writer",
    )
    with kube.as_service_account("ns", "app") as api_client:
        rbac = client.RbacAuthorizationV1Api(api_client)
        rbac.create_namespaced_role("ns", {"metadata": {"name": "held"}, "rules": [rule(["get"], ["pods"])]})
        err = refused(
            rbac.create_namespaced_role,
            "ns",
            {"metadata": {"name": "more"}, "rules": [rule(["get", "list", "delete"], ["pods"])]},
        )
        assert err.status == 403 and body(err)["message"] == (
            'roles.rbac.authorization.k8s.io "more" is forbidden: user "system:serviceaccount:ns:app" (groups=['
            '"system:serviceaccounts" "system:serviceaccounts:ns" "system:authenticated"]) is attempting to grant RBAC'
            ' permissions not currently held:\n{APIGroups:[""], Resources:["pods"], Verbs:["list" "delete"]}'
        )
        assert body(err)["details"] == {"group": RBAC, "kind": "roles", "name": "more"}
        err = refused(
            rbac.replace_namespaced_role,
            "held",
            "ns",
            {"metadata": {"name": "held"}, "rules": [rule(["get"], ["secrets"])]},
        )
        assert err.status == 403 and '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}' in body(err)["message"]
    kube.grant("ns", "ns/app", [rule(["escalate"], ["roles"], groups=[RBAC])], name="escalator")
    with kube.as_service_account("ns", "app") as api_client:
        rbac = client.RbacAuthorizationV1Api(api_client)
        rbac.create_namespaced_role("ns", {"metadata": {"name": "more"}, "rules": [rule(["*"], ["*"], groups=["*"])]})


def test_bindings_need_the_role_s_rules_or_bind(kube):
    kube.rbac.create_namespaced_role("ns", {"metadata": {"name": "pod-reader"}, "rules": [rule(["get"], ["pods"])]})
    kube.rbac.create_namespaced_role(
        "ns", {"metadata": {"name": "secret-reader"}, "rules": [rule(["get"], ["secrets"])]}
    )
    kube.grant("ns", "ns/app", [rule(["create"], ["rolebindings"], groups=[RBAC]), rule(["get"], ["pods"])], "binder")
    cluster_grant(kube, "role-maker", [rule(["create"], ["clusterroles"], groups=[RBAC])], SA)

    def binding(name, role, kind="Role"):
        return {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": "someone"}],
        }

    with kube.as_service_account("ns", "app") as api_client:
        rbac = client.RbacAuthorizationV1Api(api_client)
        rbac.create_namespaced_role_binding("ns", binding("pods", "pod-reader"))  # holds get pods
        err = refused(rbac.create_namespaced_role_binding, "ns", binding("secrets", "secret-reader"))
        assert err.status == 403 and body(err)["message"].startswith(
            'rolebindings.rbac.authorization.k8s.io "secrets" is forbidden: user "system:serviceaccount:ns:app"'
        )
        assert body(err)["message"].endswith('{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}')
        err = refused(rbac.create_namespaced_role_binding, "ns", binding("ghost", "ghost"))
        assert (err.status, body(err)["message"]) == (404, 'roles.rbac.authorization.k8s.io "ghost" not found')
        err = refused(
            rbac.create_cluster_role,
            {"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}},
        )
        assert body(err)["message"] == (
            'clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have'
            " cluster-admin privileges to use the aggregationRule"
        )
    kube.grant("ns", "ns/app", [rule(["bind"], ["roles"], groups=[RBAC], names=["secret-reader"])], name="bind")
    with kube.as_service_account("ns", "app") as api_client:
        client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
            "ns", binding("secrets", "secret-reader")
        )


# ---- ServiceAccount admission ---------------------------------------------------------------------


def test_pods_need_an_existing_service_account(kube):
    err = refused(kube.core.create_namespaced_pod, "ns", pod("p", serviceAccountName="ghost"))
    assert body(err) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "p" is forbidden: error looking up service account ns/ghost: serviceaccount "ghost" not found',
        "reason": "Forbidden",
        "details": {"kind": "pods", "name": "p"},
        "code": 403,
    }
    generated = {"metadata": {"generateName": "job-"}, "spec": {**pod("x")["spec"], "serviceAccountName": "ghost"}}
    assert body(refused(kube.core.create_namespaced_pod, "ns", generated))["message"].startswith('pods "job-" is')
    created = kube.core.create_namespaced_pod("ns", pod("q"))
    assert created.spec.service_account_name == "default"
    assert kube.core.create_namespaced_pod("ns", pod("r", serviceAccountName="app")).spec.service_account_name == "app"


# ---- audit ----------------------------------------------------------------------------------------


def test_audit_records_the_authorization(kube):
    kube.grant("ns", "ns/app", [rule(["get", "list"], ["configmaps"])], name="cm")
    with kube.as_service_account("ns", "app") as api_client:
        core = client.CoreV1Api(api_client)
        core.list_namespaced_config_map("ns", field_selector="metadata.name=x")
        refused(core.list_namespaced_secret, "ns")
    with kube.as_token(None) as anonymous:
        client.VersionApi(anonymous).get_code()
    entries = [json.loads(line) for line in (kube.kubeconfig.parent / "audit.jsonl").read_text().splitlines()]
    listed, denied, version = entries[-3:]
    assert listed["user"] == SA_USER and listed["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:ns",
        "system:authenticated",
    ]
    assert listed["authz"] == {
        "verb": "list",
        "apiGroup": "",
        "resource": "configmaps",
        "subresource": "",
        "namespace": "ns",
        "name": "x",
        "path": "/api/v1/namespaces/ns/configmaps",
        "resourceRequest": True,
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "cm/ns" of Role "cm" to ServiceAccount "app/ns"',
    }
    assert (denied["code"], denied["authz"]["resource"], denied["authz"]["allowed"]) == (403, "secrets", False)
    assert version["user"] == "system:anonymous" and version["authz"]["resourceRequest"] is False
    assert version["authz"]["reason"].startswith('RBAC: allowed by ClusterRoleBinding "system:public-info-viewer"')
    admin = next(e for e in entries if e["user"] == "kubernetes-admin")
    assert "system:masters" in admin["groups"] and admin["authz"]["allowed"] and admin["authz"]["reason"] == ""
