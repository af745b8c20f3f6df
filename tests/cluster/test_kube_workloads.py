"""``movers.kube.workloads`` on the local cluster: the workload behind each pod using a claim (and a bare pod that
none runs), scaling down with the replicas recorded on the workload (a crashed run's record kept), the bounded wait
for the pods to stop, and scaling back, which reports what it could not do instead of raising."""

from __future__ import annotations

import pytest
from kubernetes import client

from localcluster.kubelet.testing import pod_manifest, wait_until
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import workloads as w

IMMEDIATE = "csi-hostpath-immediate"
NS = "kube-workloads"


@pytest.fixture(scope="module")
def api(local_cluster):
    core = client.CoreV1Api(local_cluster.client)
    core.create_namespace({"metadata": {"name": NS}})
    k.create(local_cluster.client, m.block_pvc("vol", NS, "4Mi", IMMEDIATE))
    yield local_cluster.client
    core.delete_namespace(NS)


def _deployment(name: str, replicas: int) -> dict:
    """``replicas`` pods mounting the Block claim ``vol``."""
    container = {"name": "main", "image": "python:3-slim", "command": ["sleep", "600"]}
    container["volumeDevices"] = [{"name": "v", "devicePath": "/dev/xvda"}]
    volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": "vol"}}]
    template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container], "volumes": volumes}}
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}
    return {"metadata": {"name": name}, "spec": spec}


def _running(api, selector: str, n: int):
    pods = client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=selector).items
    return len(pods) == n and all(p.status.phase == "Running" for p in pods)


def test_users_are_found_scaled_down_waited_out_and_scaled_back(api):
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(NS, _deployment("web", 2))
    bare = pod_manifest("bare", ["sleep", "600"], volumeDevices=[{"name": "v", "devicePath": "/dev/xvda"}])
    bare["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "vol"}}]
    client.CoreV1Api(api).create_namespaced_pod(NS, bare)
    wait_until(lambda: _running(api, "app=web", 2), 60, "two web pods running")

    users = w.claim_users(api, NS, ["vol"])
    web = w.Workload("Deployment", NS, "web")
    assert users.workloads == (web,) and len(users.pods) == 3 and "bare" in users.pods
    assert users.unscalable == ("bare (a bare pod, no workload runs it)",)
    assert w.claim_users(api, NS, ["other"]) == w.Users()

    (scaled,) = w.scale_down(api, [web])
    assert (scaled.workload, scaled.replicas, scaled.recovered) == (web, 2, False)
    d = apps.read_namespaced_deployment("web", NS)
    assert d.spec.replicas == 0 and d.metadata.annotations[w.SCALED_DOWN_FROM] == "2"
    with pytest.raises(w.ClaimsStillUsed, match=r"pod\(s\) bare still use vol in kube-workloads after 1 s"):
        w.wait_unused(api, NS, ["vol"], 1)  # the bare pod stays
    client.CoreV1Api(api).delete_namespaced_pod("bare", NS)
    w.wait_unused(api, NS, ["vol"], 30)
    assert w.claim_users(api, NS, ["vol"]) == w.Users()

    (again,) = w.scale_down(api, [web])  # as the next run after a crash finds it: the record is kept and used
    assert (again.replicas, again.recovered) == (2, True)

    back = w.scale_back(api, [again, w.Scaled(w.Workload("StatefulSet", NS, "gone"), 3)])
    assert back.restored == (again,)
    ((failed, why),) = back.failed
    assert failed.workload.name == "gone" and "not found" in why
    d = apps.read_namespaced_deployment("web", NS)
    assert d.spec.replicas == 2 and w.SCALED_DOWN_FROM not in (d.metadata.annotations or {})
    wait_until(lambda: _running(api, "app=web", 2), 60, "two web pods running again")


def test_a_crashed_runs_scaled_down_workload_is_found_by_its_record_and_recovered(api):
    from movers.restore import quiesce

    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(NS, _deployment("left", 0))
    other = _deployment("unrelated", 0)
    other["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "elsewhere"
    apps.create_namespaced_deployment(NS, other)
    for name in ("left", "unrelated"):
        apps.patch_namespaced_deployment(name, NS, {"metadata": {"annotations": {w.SCALED_DOWN_FROM: "1"}}})

    assert [s.workload.name for s in quiesce.stranded(api, NS, ["vol"])] == ["left"]
    back = quiesce.recover(api, NS, ["vol"])
    assert [(s.workload.name, s.replicas, s.recovered) for s in back.restored] == [("left", 1, True)]
    assert apps.read_namespaced_deployment("left", NS).spec.replicas == 1
    assert apps.read_namespaced_deployment("unrelated", NS).spec.replicas == 0, "another claim's workload: untouched"
    wait_until(lambda: _running(api, "app=left", 1), 60, "its pod running")
