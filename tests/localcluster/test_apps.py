"""The local cluster's apps/v1 workloads through the real client: defaults and validation as kube-apiserver's, the
scale subresource (its own resource for RBAC), and the Deployment, ReplicaSet and StatefulSet controllers making,
counting and removing pods (and a StatefulSet's claims) as upstream's do."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from localcluster.controllers.apps import POD_INDEX, TEMPLATE_HASH
from localcluster.kubelet.testing import wait_until

NS = "apps-double"
IMMEDIATE = "csi-hostpath-immediate"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    client.CoreV1Api(local_cluster.client).create_namespace({"metadata": {"name": NS}})
    yield local_cluster
    client.CoreV1Api(local_cluster.client).delete_namespace(NS)


def _template(labels, **pod_spec):
    container = {"name": "main", "image": "python:3-slim", "command": ["sleep", "600"]}
    return {"metadata": {"labels": labels}, "spec": {"containers": [container], **pod_spec}}


def _deployment(name, replicas=None, labels=None):
    labels = labels or {"app": name}
    spec = {"selector": {"matchLabels": labels}, "template": _template(labels)}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": name}, "spec": spec}


def _message(err: ApiException) -> str:
    return json.loads(err.body)["message"]


def _pods(core, selector):
    return core.list_namespaced_pod(NS, label_selector=selector).items


def _running(core, selector, n):
    pods = _pods(core, selector)
    ready = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return pods if len(pods) == n and len(ready) == n else None


def test_a_deployment_is_defaulted_and_runs_its_pods_through_an_owned_replica_set(cluster):
    apps, core = client.AppsV1Api(cluster.client), client.CoreV1Api(cluster.client)
    created = apps.create_namespaced_deployment(NS, _deployment("web"))
    spec = created.spec
    assert (spec.replicas, spec.revision_history_limit, spec.progress_deadline_seconds) == (1, 10, 600)
    assert (spec.strategy.type, spec.strategy.rolling_update.max_surge) == ("RollingUpdate", "25%")
    assert spec.template.spec.restart_policy == "Always" and created.metadata.generation == 1

    (pod,) = wait_until(lambda: _running(core, "app=web", 1), 30, "one web pod running")
    (rs,) = apps.list_namespaced_replica_set(NS, label_selector="app=web").items
    pod_hash = rs.metadata.labels[TEMPLATE_HASH]
    assert rs.metadata.name == f"web-{pod_hash}" and rs.spec.selector.match_labels[TEMPLATE_HASH] == pod_hash
    assert [(r.kind, r.name, r.controller) for r in rs.metadata.owner_references] == [("Deployment", "web", True)]
    assert [(r.kind, r.name, r.controller) for r in pod.metadata.owner_references] == [
        ("ReplicaSet", rs.metadata.name, True)
    ]
    assert pod.metadata.name.startswith(f"{rs.metadata.name}-") and pod.metadata.labels[TEMPLATE_HASH] == pod_hash

    def status(n):
        s = apps.read_namespaced_deployment("web", NS).status
        want = (n, n, n, n)
        return (
            s
            if (s.replicas, s.ready_replicas or 0, s.available_replicas or 0, s.updated_replicas or 0) == want
            else None
        )

    assert wait_until(lambda: status(1), 20, "status 1/1").observed_generation == 1


def test_the_scale_subresource_scales_the_pods_down_and_back(cluster):
    apps, core = client.AppsV1Api(cluster.client), client.CoreV1Api(cluster.client)
    apps.create_namespaced_deployment(NS, _deployment("scaled", replicas=2))
    wait_until(lambda: _running(core, "app=scaled", 2), 30, "two pods running")
    scale = apps.read_namespaced_deployment_scale("scaled", NS)
    assert (scale.spec.replicas, scale.status.selector) == (2, "app=scaled")

    scale.spec.replicas = 0
    apps.replace_namespaced_deployment_scale("scaled", NS, scale)
    wait_until(lambda: _pods(core, "app=scaled") == [], 30, "every pod gone")
    d = apps.read_namespaced_deployment("scaled", NS)
    assert (d.spec.replicas, d.metadata.generation) == (0, 2)
    wait_until(lambda: apps.read_namespaced_deployment("scaled", NS).status.replicas in (0, None), 20, "status 0")

    with pytest.raises(ApiException) as stale:  # the Scale's resourceVersion is a precondition
        apps.replace_namespaced_deployment_scale("scaled", NS, scale)
    assert stale.value.status == 409
    with pytest.raises(ApiException) as negative:
        apps.patch_namespaced_deployment_scale("scaled", NS, [{"op": "replace", "path": "/spec/replicas", "value": -1}])
    assert negative.value.status == 422
    assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in _message(negative.value)
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment_scale("nothing", NS)
    assert missing.value.status == 404

    apps.patch_namespaced_deployment_scale("scaled", NS, [{"op": "replace", "path": "/spec/replicas", "value": 1}])
    wait_until(lambda: _running(core, "app=scaled", 1), 30, "one pod back")


def test_validation_refuses_what_kube_apiserver_refuses(cluster):
    apps = client.AppsV1Api(cluster.client)
    bad = _deployment("bad")
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(ApiException) as mismatch:
        apps.create_namespaced_deployment(NS, bad)
    assert mismatch.value.status == 422
    assert "spec.template.metadata.labels: Invalid value" in _message(mismatch.value)
    assert "`selector` does not match template `labels`" in _message(mismatch.value)

    never = _deployment("never")
    never["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    with pytest.raises(ApiException) as policy:
        apps.create_namespaced_deployment(NS, never)
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"' in _message(
        policy.value
    )

    apps.create_namespaced_deployment(NS, _deployment("fixed", replicas=0))
    patch = {"spec": {"selector": {"matchLabels": {"app": "fixed", "tier": "x"}}}}
    patch["spec"]["template"] = {"metadata": {"labels": {"app": "fixed", "tier": "x"}}}
    with pytest.raises(ApiException) as immutable:
        apps.patch_namespaced_deployment("fixed", NS, patch)
    assert "spec.selector: Invalid value" in _message(immutable.value) and "field is immutable" in _message(
        immutable.value
    )


def test_scale_is_its_own_resource_for_rbac(cluster):
    rbac, core = client.RbacAuthorizationV1Api(cluster.client), client.CoreV1Api(cluster.client)
    core.create_namespaced_service_account(NS, {"metadata": {"name": "scaler"}})
    rules = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]}]
    rbac.create_namespaced_role(NS, {"metadata": {"name": "scaler"}, "rules": rules})
    binding = {
        "metadata": {"name": "scaler"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "scaler"},
        "subjects": [{"kind": "ServiceAccount", "name": "scaler", "namespace": NS}],
    }
    rbac.create_namespaced_role_binding(NS, binding)
    client.AppsV1Api(cluster.client).create_namespaced_deployment(NS, _deployment("guarded", replicas=0))
    from kubernetes.config import new_client_from_config

    with new_client_from_config(str(cluster.kubeconfig_for(NS, "scaler"))) as as_scaler:
        apps = client.AppsV1Api(as_scaler)
        assert apps.read_namespaced_deployment("guarded", NS).spec.replicas == 0
        with pytest.raises(ApiException) as refused:
            apps.read_namespaced_deployment_scale("guarded", NS)
        assert refused.value.status == 403 and 'resource "deployments/scale"' in _message(refused.value)


def test_a_stateful_set_makes_claims_and_pods_in_order_and_removes_the_highest_first_keeping_the_claims(cluster):
    apps, core = client.AppsV1Api(cluster.client), client.CoreV1Api(cluster.client)
    labels = {"app": "db"}
    template = _template(labels)
    template["spec"]["containers"][0]["volumeDevices"] = [{"name": "data", "devicePath": "/dev/xvda"}]
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Block",
            "storageClassName": IMMEDIATE,
            "resources": {"requests": {"storage": "4Mi"}},
        },
    }
    body = {
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
    }
    body["spec"]["volumeClaimTemplates"] = [claim]
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    created = apps.create_namespaced_stateful_set(NS, body)
    assert (created.spec.pod_management_policy, created.spec.update_strategy.rolling_update.partition) == (
        "OrderedReady",
        0,
    )
    assert created.spec.persistent_volume_claim_retention_policy.when_scaled == "Retain"
    wait_until(lambda: _running(core, "app=db", 2), 60, "db-0 and db-1 running")
    pods = sorted(_pods(core, "app=db"), key=lambda p: p.metadata.name)
    assert [p.metadata.name for p in pods] == ["db-0", "db-1"]
    assert [p.metadata.labels[POD_INDEX] for p in pods] == ["0", "1"]
    assert [p.spec.volumes[-1].persistent_volume_claim.claim_name for p in pods] == ["data-db-0", "data-db-1"]
    assert pods[0].metadata.owner_references[0].kind == "StatefulSet" and pods[0].spec.hostname == "db-0"
    started = {p.metadata.name: p for p in pods}
    ready_at = next(c.last_transition_time for c in started["db-0"].status.conditions if c.type == "Ready")
    assert started["db-1"].metadata.creation_timestamp >= ready_at, "db-1 made only once db-0 was ready"

    apps.patch_namespaced_stateful_set_scale(
        "db", NS, {"spec": {"replicas": 0}}, _content_type="application/merge-patch+json"
    )
    wait_until(lambda: _pods(core, "app=db") == [], 60, "the set scaled to 0")
    deleted, steps = [], []
    for event in watch.Watch().stream(
        core.list_namespaced_pod, NS, label_selector="app=db", resource_version=rv, timeout_seconds=2
    ):
        name = event["object"].metadata.name
        if event["type"] == "DELETED":
            deleted.append(name)
            steps.append(("gone", name))
        elif event["object"].metadata.deletion_timestamp and ("terminating", name) not in steps:
            steps.append(("terminating", name))
    assert deleted == ["db-1", "db-0"], "the highest ordinal first"
    # graceful deletion: each pod terminates before it goes, and db-0 only once db-1 is gone (OrderedReady)
    assert steps == [("terminating", "db-1"), ("gone", "db-1"), ("terminating", "db-0"), ("gone", "db-0")], steps
    claims = sorted(c.metadata.name for c in core.list_namespaced_persistent_volume_claim(NS).items)
    assert claims == ["data-db-0", "data-db-1"], "claims are kept on scale down"
    s = apps.read_namespaced_stateful_set("db", NS).status
    assert (s.replicas, s.ready_replicas or 0, s.observed_generation) == (0, 0, 2)


def test_discovery_names_the_scale_subresource_and_deleting_a_deployment_collects_what_it_owns(cluster):
    apps, core = client.AppsV1Api(cluster.client), client.CoreV1Api(cluster.client)
    resources = {r.name: r for r in apps.get_api_resources().resources}
    for name in ("deployments/scale", "statefulsets/scale", "replicasets/scale"):
        scale = resources[name]
        assert (scale.kind, scale.group, scale.version) == ("Scale", "autoscaling", "v1") and "patch" in scale.verbs
    assert "deploy" in resources["deployments"].short_names and resources["deployments"].namespaced

    apps.create_namespaced_deployment(NS, _deployment("collected", replicas=2))
    wait_until(lambda: _running(core, "app=collected", 2), 30, "two pods running")
    apps.delete_namespaced_deployment("collected", NS)
    wait_until(lambda: not apps.list_namespaced_replica_set(NS, label_selector="app=collected").items, 20, "rs gone")
    wait_until(lambda: _pods(core, "app=collected") == [], 30, "its pods gone with it")


def test_a_stateful_sets_name_is_a_dns_label(cluster):
    labels = {"app": "dotted"}
    body = {"metadata": {"name": "a.b"}, "spec": {"selector": {"matchLabels": labels}, "template": _template(labels)}}
    with pytest.raises(ApiException) as refused:
        client.AppsV1Api(cluster.client).create_namespaced_stateful_set(NS, body)
    assert refused.value.status == 422 and 'metadata.name: Invalid value: "a.b"' in _message(refused.value)
