"""The node-slot gate of mover pods (``movers.kube.nodeslots``) on a local kubelet: the pod is scheduled and its gate
(an init container) runs, its main container waits until ``pods.grant_slot``; ``run_scheduled`` takes the node's
slot once the pod is scheduled, grants it inside the slot and holds the slot until the pod has finished."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

from localcluster.kubelet.testing import local_node, phase_in, pod_manifest, wait_pod
from movers.kube import manifests as m
from movers.kube import nodeslots, pods

SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def gated_pod(name: str, command: list[str]) -> dict:
    pod = pod_manifest(name, command, image="cbt-mover")
    pod |= {"apiVersion": "v1", "kind": "Pod"}
    pod["metadata"] |= {"namespace": "default", "labels": {m.RUN_LABEL: "run-1"}}
    pod["spec"]["initContainers"] = [nodeslots.gate_container("cbt-mover", "IfNotPresent", SECURITY)]
    pod["spec"]["volumes"] = [nodeslots.gate_volume()]
    return pod


def init_running(pod) -> bool:
    inits = pod.status.init_container_statuses or []
    return bool(inits) and inits[0].state.running is not None


def test_the_gate_holds_the_container_until_granted(tmp_path):
    with local_node(tmp_path, sync_interval=30) as node:  # no periodic sync in time: the grant comes with the update
        core = node.core
        core.create_namespaced_pod("default", gated_pod("gated", ["true"]))
        pod = wait_pod(core, "gated", init_running)
        assert pod.spec.node_name and pod.status.phase == "Pending", pod.status
        assert pod.status.container_statuses[0].state.waiting.reason == "PodInitializing", pod.status
        t0 = time.monotonic()
        pods.grant_slot(core.api_client, "default", "gated")
        done = wait_pod(core, "gated", phase_in("Succeeded"), timeout=10)
        assert time.monotonic() - t0 < 5, "the grant reaches the gate through the pod's update, not a periodic sync"
        assert done.status.init_container_statuses[0].state.terminated.exit_code == 0


def test_run_scheduled_takes_the_node_slot_once_scheduled_and_holds_it_to_the_end(tmp_path):
    with local_node(tmp_path, sync_interval=0.1) as node:
        api, held = node.core.api_client, []

        @contextmanager
        def slot(on: str):
            pod = node.core.read_namespaced_pod("gated", "default")
            assert pod.spec.active_deadline_seconds is None, "a gated pod's deadline starts when it is granted"
            held.append(("enter", on, pod.metadata.annotations or {}))
            time.sleep(1.5)  # the wait for the slot, which the pod's deadline must not count
            yield
            deadline = node.core.read_namespaced_pod("gated", "default").spec.active_deadline_seconds
            assert 60 + 2 <= deadline <= 60 + 10, deadline  # timeouts.total after what it waited
            phase = node.core.read_namespaced_pod("gated", "default").status.phase
            held.append(("exit", on, phase))

        timeouts = pods.PodTimeouts(start=20, total=60)
        res = pods.run_scheduled(api, gated_pod("gated", ["true"]), "none", timeouts, node_slot=slot)
        assert res.succeeded, res
        (enter, on, annotations), (leave, on_too, phase) = held
        assert (enter, leave, on, on_too) == ("enter", "exit", node.kubelet.node, node.kubelet.node), held
        assert nodeslots.SLOT_ANNOTATION not in annotations, "the slot is taken before the pod is granted"
        assert phase == "Succeeded", "the slot is held until the pod has finished"
        with pytest.raises(ValueError, match="needs node_slot"):
            pods.run_scheduled(api, gated_pod("other", ["true"]), "none", timeouts)


def test_mover_pods_with_a_node_slot_carry_the_gate():
    from movers.kube.podspec import MoverProfile, MoverTask, RepoAccess

    profile, repo = MoverProfile("cbt-mover", "cbt-mover"), RepoAccess("cbt-mover-repo")
    plain = m.mover_pod("p", "ns", profile=profile, task=MoverTask(["backup"], "claim"), repo=repo)
    gated = m.mover_pod("p", "ns", profile=profile, task=MoverTask(["backup"], "claim", node_slot=True), repo=repo)
    assert not nodeslots.gated(plain) and nodeslots.gated(gated)
    (gate,) = gated["spec"]["initContainers"]
    assert gate["securityContext"]["runAsNonRoot"] is True and "volumeDevices" not in gate
    task = MoverTask(["backup"], "claim", active_deadline_seconds=600)
    assert m.mover_pod("p", "ns", profile=profile, task=task, repo=repo)["spec"]["activeDeadlineSeconds"] == 600
    task = MoverTask(["backup"], "claim", active_deadline_seconds=600, node_slot=True)
    assert "activeDeadlineSeconds" not in m.mover_pod("p", "ns", profile=profile, task=task, repo=repo)["spec"]
    assert [v["name"] for v in gated["spec"]["volumes"]][-1] == nodeslots.SLOT_VOLUME
