"""Graceful deletion of pods in the local cluster, as a real cluster does it: the API answer and the object after
a DELETE, the grace period that may only shrink, watch events, finalizers, namespaces, and the kubelet completing
the deletion (grace 0, uid precondition) once the pod's processes are gone."""

from __future__ import annotations

import datetime
import os
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from localcluster.kubeapi.testing import serve
from localcluster.kubelet.testing import container_running, local_node, pod_manifest, wait_pod, wait_until


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        yield k


def bound(name: str, node: str | None = "node-x", **spec) -> dict:
    """A pod bound to ``node`` (no kubelet runs there: nothing completes its deletion)."""
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "mover"}], **spec}}
    if node:
        body["spec"]["nodeName"] = node
    return body


def gone(core, name: str, namespace: str = "default") -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def seconds_between(a: datetime.datetime, b: datetime.datetime) -> float:
    return (b - a).total_seconds()


def test_delete_of_a_bound_pod_marks_it_and_keeps_it(kube):
    core = kube.core
    created = core.create_namespaced_pod("default", bound("p", terminationGracePeriodSeconds=40))
    answer = core.delete_namespaced_pod("p", "default")
    assert isinstance(answer, client.V1Pod)  # 200 with the pod, not a Status
    md = answer.metadata
    assert md.deletion_grace_period_seconds == 40 and md.deletion_timestamp is not None
    assert 38 <= seconds_between(md.creation_timestamp, md.deletion_timestamp) <= 42
    assert int(md.resource_version) > int(created.metadata.resource_version)
    assert md.generation == created.metadata.generation + 1
    stored = core.read_namespaced_pod("p", "default")
    assert stored.metadata.deletion_timestamp == md.deletion_timestamp
    assert stored.metadata.resource_version == md.resource_version

    # a longer or equal grace period changes nothing; a shorter one moves deletionTimestamp by the difference
    again = core.delete_namespaced_pod("p", "default", grace_period_seconds=100)
    assert again.metadata.resource_version == md.resource_version and again.metadata.deletion_grace_period_seconds == 40
    again = core.delete_namespaced_pod("p", "default")
    assert again.metadata.resource_version == md.resource_version
    shorter = core.delete_namespaced_pod("p", "default", grace_period_seconds=10)
    assert shorter.metadata.deletion_grace_period_seconds == 10
    assert seconds_between(shorter.metadata.deletion_timestamp, md.deletion_timestamp) == 30
    assert shorter.metadata.generation == md.generation  # bumped once, by the first DELETE
    assert not gone(core, "p")

    final = core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert final.metadata.deletion_grace_period_seconds == 0
    assert gone(core, "p")


def test_dry_run_answers_the_marked_pod_and_stores_nothing(kube):
    core = kube.core
    rv = core.create_namespaced_pod("default", bound("p")).metadata.resource_version
    answer = core.delete_namespaced_pod("p", "default", dry_run="All")
    assert answer.metadata.deletion_grace_period_seconds == 30 and answer.metadata.deletion_timestamp is not None
    stored = core.read_namespaced_pod("p", "default")
    assert stored.metadata.resource_version == rv and stored.metadata.deletion_timestamp is None


def test_default_grace_and_the_uid_precondition(kube):
    core = kube.core
    core.create_namespaced_pod("default", bound("p"))
    assert core.delete_namespaced_pod("p", "default").metadata.deletion_grace_period_seconds == 30
    wrong = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid="not-it"))
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("p", "default", body=wrong)
    assert info.value.status == 409 and not gone(core, "p")
    uid = core.read_namespaced_pod("p", "default").metadata.uid
    right = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
    core.delete_namespaced_pod("p", "default", body=right)
    assert gone(core, "p")


@pytest.mark.parametrize(
    "body, grace",
    [
        (bound("p", node=None), None),  # unscheduled
        (bound("p"), 0),  # grace 0
    ],
    ids=["unscheduled", "grace-0"],
)
def test_removed_at_once(kube, body, grace):
    core = kube.core
    core.create_namespaced_pod("default", body)
    answer = core.delete_namespaced_pod("p", "default", grace_period_seconds=grace)
    assert answer.metadata.deletion_grace_period_seconds == 0
    assert gone(core, "p")


def test_terminal_pod_removed_at_once(kube):
    core = kube.core
    core.create_namespaced_pod("default", bound("p"))
    core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("p", "default")
    assert gone(core, "p")


def test_watch_sees_modified_then_deleted(kube):
    core = kube.core
    rv = core.create_namespaced_pod("default", bound("p")).metadata.resource_version
    core.delete_namespaced_pod("p", "default", grace_period_seconds=5)
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    events = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5):
        events.append((event["type"], event["object"].metadata.deletion_grace_period_seconds))
        if event["type"] == "DELETED":
            w.stop()
    assert events == [("MODIFIED", 5), ("MODIFIED", 0), ("DELETED", 0)]


def test_finalizers_and_grace_both_hold_a_pod(kube):
    core = kube.core
    core.create_namespaced_pod("default", bound("p", terminationGracePeriodSeconds=20) | {})
    core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": ["example.com/hold"]}})
    core.delete_namespaced_pod("p", "default")
    core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": None}})
    pod = core.read_namespaced_pod("p", "default")  # the grace period still runs: its kubelet removes it
    assert pod.metadata.deletion_grace_period_seconds == 20 and not pod.metadata.finalizers

    core.create_namespaced_pod("default", bound("q"))
    core.patch_namespaced_pod("q", "default", {"metadata": {"finalizers": ["example.com/hold"]}})
    core.delete_namespaced_pod("q", "default", grace_period_seconds=0)
    assert core.read_namespaced_pod("q", "default").metadata.deletion_grace_period_seconds == 0
    core.patch_namespaced_pod("q", "default", {"metadata": {"finalizers": None}})
    assert gone(core, "q")


def test_namespace_waits_for_its_pods_to_terminate(kube):
    core = kube.core
    core.create_namespace({"metadata": {"name": "ns"}})
    core.create_namespaced_pod("ns", bound("p"))
    core.delete_namespace("ns")
    assert core.read_namespace("ns").status.phase == "Terminating"
    assert core.read_namespaced_pod("p", "ns").metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("p", "ns", grace_period_seconds=0)
    with pytest.raises(ApiException) as info:
        core.read_namespace("ns")
    assert info.value.status == 404


# ---- with the kubelet --------------------------------------------------------------------------------------------


@pytest.fixture
def node(tmp_path):
    with local_node(tmp_path, grace_cap=1.0) as n:
        yield n


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kubelet_completes_the_deletion_once_the_process_exits(node):
    core = node.core
    core.create_namespaced_pod("default", pod_manifest("p", ["python", "-c", "import time; time.sleep(600)"]))
    wait_pod(core, "p", container_running("main"))
    pid = node.kubelet.container_pid("default", "p", "main")
    pod_dir = node.kubelet.pod_dir("default", "p")
    assert pid is not None and pod_dir is not None and pod_dir.exists()
    answer = core.delete_namespaced_pod("p", "default")
    assert answer.metadata.deletion_timestamp is not None and answer.metadata.deletion_grace_period_seconds == 30
    wait_until(lambda: gone(core, "p"), 10, "the kubelet to delete the pod")
    assert not alive(pid)
    wait_until(lambda: not pod_dir.exists(), 10, "the pod's files to go")


def test_grace_cap_bounds_a_pod_that_ignores_sigterm(node):
    core = node.core
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True);"
        " time.sleep(600)"
    )
    core.create_namespaced_pod("default", pod_manifest("p", ["python", "-c", stubborn]))
    wait_pod(core, "p", container_running("main"))
    wait_until(lambda: core.read_namespaced_pod_log("p", "default") == "ready\n", 20, "the pod to ignore SIGTERM")
    pid = node.kubelet.container_pid("default", "p", "main")
    started = time.monotonic()
    core.delete_namespaced_pod("p", "default")
    assert not gone(core, "p")  # Terminating while the process lives on
    wait_until(lambda: gone(core, "p"), 10, "the kubelet to delete the pod")
    took = time.monotonic() - started
    assert 0.9 <= took < 8, took  # SIGKILL after grace_cap (1 s), not the pod's 30 s
    assert not alive(pid)


def test_a_pod_deleted_before_it_runs_is_deleted_by_its_kubelet(node):
    core = node.core
    body = pod_manifest("p", ["python", "-c", "pass"])
    body["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "missing"}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/data"}]
    body["spec"]["nodeName"] = "local-node"
    core.create_namespaced_pod("default", body)  # waits for its claim: ContainerCreating
    core.delete_namespaced_pod("p", "default")
    wait_until(lambda: gone(core, "p"), 10, "the kubelet to delete the pod")


def test_namespace_deletion_completes_once_the_kubelet_finishes_its_pods(node):
    core = node.core
    core.create_namespace({"metadata": {"name": "ns"}})
    core.create_namespaced_pod("ns", pod_manifest("p", ["python", "-c", "import time; time.sleep(600)"]))
    wait_pod(core, "p", container_running("main"), namespace="ns")
    pid = node.kubelet.container_pid("ns", "p", "main")
    core.delete_namespace("ns")
    assert core.read_namespace("ns").status.phase == "Terminating"
    wait_until(lambda: "ns" not in {n.metadata.name for n in core.list_namespace().items}, 10, "the namespace to go")
    assert not alive(pid)


def test_a_stopped_kubelets_pod_stays_terminating_and_the_next_kubelet_finishes_it(tmp_path):
    with local_node(tmp_path, grace_cap=1.0) as n:
        core = n.core
        n.kubelet.stop()  # its node is gone: nothing runs its pods, nobody completes their deletion
        body = pod_manifest("p", ["python", "-c", "import time; time.sleep(600)"])
        body["spec"]["nodeName"] = "local-node"
        core.create_namespaced_pod("default", body)
        core.delete_namespaced_pod("p", "default")
        assert core.read_namespaced_pod("p", "default").metadata.deletion_timestamp is not None
        n.kubelet.start()
        wait_until(lambda: gone(core, "p"), 10, "the restarted kubelet to delete the pod")
