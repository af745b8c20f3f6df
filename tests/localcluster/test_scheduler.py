"""The local scheduler over the real ``kubernetes`` client, on the strict cluster's three nodes (node-a,
node-b, the tainted Windows win-a, each with its kubelet): node selectors, affinity, taints and
tolerations, cordoned nodes, PV node affinity, WaitForFirstConsumer claims (selected-node, static
PVs, the provisioner's topology), unschedulable pods with upstream's condition and events, and
scheduling again when the cluster changes."""

from __future__ import annotations

import itertools

import pytest

from localcluster.kubelet.testing import local_nodes, phase_in, pod_manifest, wait_pod, wait_until
from localcluster.nodes import WINDOWS_TAINT_KEY

FINISHED = phase_in("Succeeded", "Failed")
PREEMPTION = "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
WINDOWS_TAINT = "1 node(s) had untolerated taint {node.kubernetes.io/os: windows}"
SELECTED = "volume.kubernetes.io/selected-node"
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_nodes(tmp_path_factory.mktemp("nodes"), in_cluster_endpoint=False, backoff=(0.05, 0.4)) as nodes:
        yield nodes


@pytest.fixture
def ns(cluster):
    name = f"s{next(_names)}"
    cluster.core.create_namespace({"metadata": {"name": name}})
    return name


def windows_pod(name: str, command: list[str], tolerations: list[dict] | None = None) -> dict:
    manifest = pod_manifest(name, command, image="localcluster-winapp")
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/os": "windows"}
    if tolerations is not None:
        manifest["spec"]["tolerations"] = tolerations
    return manifest


def with_claim(manifest: dict, claim: str, device: str = "/dev/xvda") -> dict:
    manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]
    manifest["spec"]["containers"][0]["volumeDevices"] = [{"name": "d", "devicePath": device}]
    return manifest


def scheduled_condition(pod) -> dict:
    return next(c for c in pod.status.conditions or [] if c.type == "PodScheduled").to_dict()


def unschedulable(message: str):
    def check(pod) -> bool:
        conditions = [c for c in (pod.status and pod.status.conditions) or [] if c.type == "PodScheduled"]
        return bool(conditions) and conditions[0].message == message

    return check


def events(core, ns: str, name: str, reason: str) -> list:
    return [e for e in core.list_namespaced_event(ns).items if e.involved_object.name == name and e.reason == reason]


def block_claim(core, ns: str, name: str, storage_class: str, size: str = "8Mi") -> dict:
    return core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Block",
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": size}},
            },
        },
    ).to_dict()


def storage_class(core_client, name: str, provisioner: str, mode: str = "WaitForFirstConsumer", **extra) -> None:
    from kubernetes import client

    client.StorageV1Api(core_client.api_client).create_storage_class(
        {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode, **extra}
    )


def provision(
    cluster,
    ns: str,
    claim: str,
    node_labels: dict[str, str],
    driver: str = "unserved.example.com",
    static: str | None = None,
) -> str:
    """Play the provisioner and PV controller: a volume, a PV pinned to ``node_labels``, both bound to the claim."""
    core = cluster.core
    pvc = core.read_namespaced_persistent_volume_claim(claim, ns)
    pv_name = static or f"pv-{ns}-{claim}"
    handle = core.read_persistent_volume(static).spec.csi.volume_handle if static else f"vol-{ns}-{claim}"
    cluster.store.create_volume(handle, 8 << 20)
    ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": claim, "uid": pvc.metadata.uid}
    if static is None:
        terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in node_labels.items()]}]
        core.create_persistent_volume(
            {
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": "8Mi"},
                    "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Block",
                    "storageClassName": pvc.spec.storage_class_name,
                    "claimRef": ref,
                    "nodeAffinity": {"required": {"nodeSelectorTerms": terms}},
                    "csi": {"driver": driver, "volumeHandle": handle},
                },
            }
        )
    core.patch_persistent_volume_status(pv_name, {"status": {"phase": "Bound"}})
    core.patch_namespaced_persistent_volume_claim(
        claim,
        ns,
        {"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}, "spec": {"volumeName": pv_name}},
    )
    core.patch_namespaced_persistent_volume_claim_status(claim, ns, {"status": {"phase": "Bound"}})
    return pv_name


def test_nodes_registered_by_their_kubelets(cluster):
    from kubernetes import client

    core = cluster.core
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(nodes) == {"node-a", "node-b", "win-a"}
    a, win = nodes["node-a"], nodes["win-a"]
    assert a.metadata.labels["topology.kubernetes.io/zone"] == "zone-a"
    assert a.metadata.labels["topology.hostpath.csi/node"] == "node-a"
    assert nodes["node-b"].metadata.labels["topology.disk.csi.local/zone"] == "zone-b"
    assert not a.spec.taints and a.status.node_info.operating_system == "linux"
    assert win.metadata.labels["kubernetes.io/os"] == "windows"
    assert win.metadata.labels["node.kubernetes.io/windows-build"] == "10.0.20348"
    assert "topology.hostpath.csi/node" not in win.metadata.labels
    assert [(t.key, t.value, t.effect) for t in win.spec.taints] == [(WINDOWS_TAINT_KEY, "windows", "NoSchedule")]
    assert win.status.node_info.operating_system == "windows"
    assert {c.type: c.status for c in win.status.conditions}["Ready"] == "True"
    assert int(a.status.allocatable["pods"]) == 110
    csinodes = {c.metadata.name: c for c in client.StorageV1Api(core.api_client).list_csi_node().items}
    assert [(d.name, d.topology_keys) for d in csinodes["win-a"].spec.drivers] == [
        ("disk.csi.local", ["topology.disk.csi.local/zone"])
    ]
    assert {d.name for d in csinodes["node-b"].spec.drivers} == {"disk.csi.local", "hostpath.csi.k8s.io"}
    assert '"hostpath.csi.k8s.io":"node-a"' in a.metadata.annotations["csi.volume.kubernetes.io/nodeid"]


def test_pods_spread_over_the_linux_nodes_never_on_windows(cluster, ns):
    core = cluster.core
    for i in range(4):
        core.create_namespaced_pod(ns, pod_manifest(f"p{i}", ["sleep", "60"]))
    pods = [wait_pod(core, f"p{i}", lambda p: p.spec.node_name, namespace=ns) for i in range(4)]
    assert sorted(p.spec.node_name for p in pods) == ["node-a", "node-a", "node-b", "node-b"]
    (event,) = events(core, ns, "p0", "Scheduled")
    assert event.message == f"Successfully assigned {ns}/p0 to {pods[0].spec.node_name}"
    assert event.source.component == "default-scheduler" and event.type == "Normal"
    running = wait_pod(core, "p1", phase_in("Running"), namespace=ns)
    assert scheduled_condition(running)["status"] == "True"
    for i in range(4):
        core.delete_namespaced_pod(f"p{i}", ns, grace_period_seconds=0)


def test_windows_pod_needs_the_toleration(cluster, ns):
    core = cluster.core
    core.create_namespaced_pod(ns, windows_pod("no-toleration", ["true"]))
    message = (
        f"0/3 nodes are available: {WINDOWS_TAINT}, 2 node(s) didn't match Pod's node affinity/selector. {PREEMPTION}"
    )
    pod = wait_pod(core, "no-toleration", unschedulable(message), namespace=ns)
    condition = scheduled_condition(pod)
    assert (condition["status"], condition["reason"], pod.status.phase) == ("False", "Unschedulable", "Pending")
    assert not pod.spec.node_name
    (event,) = events(core, ns, "no-toleration", "FailedScheduling")
    assert (event.type, event.message, event.source.component) == ("Warning", message, "default-scheduler")
    # a toleration of another effect does not help; the Windows taint's own (or Exists) does
    core.create_namespaced_pod(
        ns,
        windows_pod("soft", ["true"], [{"key": WINDOWS_TAINT_KEY, "operator": "Exists", "effect": "PreferNoSchedule"}]),
    )
    wait_pod(core, "soft", unschedulable(message), namespace=ns)
    tolerated = [{"key": WINDOWS_TAINT_KEY, "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]
    core.create_namespaced_pod(ns, windows_pod("win", ["python", "-c", "print('on windows')"], tolerated))
    pod = wait_pod(core, "win", FINISHED, namespace=ns)
    assert (pod.spec.node_name, pod.status.phase) == ("win-a", "Succeeded")
    assert core.read_namespaced_pod_log("win", ns) == "on windows\n"


def test_selector_affinity_and_preferences(cluster, ns):
    core = cluster.core
    by_selector = pod_manifest("zone-b", ["true"])
    by_selector["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-b"}
    by_fields = pod_manifest("not-a", ["true"])
    by_fields["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}
                ]
            }
        }
    }
    preferring = pod_manifest("prefers-b", ["true"])
    preferring["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}]
                    },
                }
            ]
        }
    }
    for manifest in (by_selector, by_fields, preferring):
        core.create_namespaced_pod(ns, manifest)
    for name in ("zone-b", "not-a", "prefers-b"):
        assert wait_pod(core, name, FINISHED, namespace=ns).spec.node_name == "node-b", name


def test_rescheduled_when_a_node_changes(cluster, ns):
    core = cluster.core
    ssd = pod_manifest("ssd", ["true"])
    ssd["spec"]["nodeSelector"] = {"disk": "ssd"}
    core.create_namespaced_pod(ns, ssd)
    wait_pod(
        core,
        "ssd",
        unschedulable(
            f"0/3 nodes are available: {WINDOWS_TAINT}, 2 node(s) didn't match Pod's"
            f" node affinity/selector. {PREEMPTION}"
        ),
        namespace=ns,
    )
    for node in ("node-a", "node-b"):
        core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        core.patch_node("node-b", {"metadata": {"labels": {"disk": "ssd"}}})
        core.create_namespaced_pod(ns, pod_manifest("plain", ["true"]))
        wait_pod(
            core,
            "plain",
            unschedulable(f"0/3 nodes are available: {WINDOWS_TAINT}, 2 node(s) were unschedulable. {PREEMPTION}"),
            namespace=ns,
        )
        core.patch_node("node-b", {"spec": {"unschedulable": False}})
        assert wait_pod(core, "ssd", FINISHED, namespace=ns).spec.node_name == "node-b"
        assert wait_pod(core, "plain", FINISHED, namespace=ns).spec.node_name == "node-b"
        assert len(events(core, ns, "plain", "FailedScheduling")) == 1
    finally:
        core.patch_node("node-a", {"spec": {"unschedulable": False}})
        core.patch_node("node-b", {"spec": {"unschedulable": False}, "metadata": {"labels": {"disk": None}}})


def test_bound_claims_pin_the_pod_to_the_pv_node_affinity(cluster, ns):
    core = cluster.core
    storage_class(core, f"static-{ns}", "unserved.example.com", "Immediate")
    for claim, zone in (("in-b", "zone-b"), ("in-c", "zone-c")):
        block_claim(core, ns, claim, f"static-{ns}")
        provision(cluster, ns, claim, {"topology.kubernetes.io/zone": zone})
    core.create_namespaced_pod(ns, with_claim(pod_manifest("b", ["true"]), "in-b"))
    core.create_namespaced_pod(ns, with_claim(pod_manifest("c", ["true"]), "in-c"))
    pod = wait_pod(core, "b", FINISHED, namespace=ns)
    assert (pod.spec.node_name, pod.status.phase) == ("node-b", "Succeeded")
    wait_pod(
        core,
        "c",
        unschedulable(
            f"0/3 nodes are available: {WINDOWS_TAINT}, 2 node(s) had volume node affinity conflict. {PREEMPTION}"
        ),
        namespace=ns,
    )


def test_unbound_immediate_claim(cluster, ns):
    core = cluster.core
    storage_class(core, f"immediate-{ns}", "unserved.example.com", "Immediate")
    block_claim(core, ns, "data", f"immediate-{ns}")
    core.create_namespaced_pod(ns, with_claim(pod_manifest("p", ["true"]), "data"))
    wait_pod(
        core,
        "p",
        unschedulable(f"0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. {PREEMPTION}"),
        namespace=ns,
    )


def test_wait_for_first_consumer_selects_the_pods_node(cluster, ns):
    core = cluster.core
    storage_class(core, f"wffc-{ns}", "unserved.example.com")
    block_claim(core, ns, "data", f"wffc-{ns}")
    assert SELECTED not in (core.read_namespaced_persistent_volume_claim("data", ns).metadata.annotations or {})
    consumer = with_claim(pod_manifest("consumer", ["true"]), "data")
    consumer["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-b"}
    core.create_namespaced_pod(ns, consumer)
    wait_until(
        lambda: (
            (core.read_namespaced_persistent_volume_claim("data", ns).metadata.annotations or {}).get(SELECTED)
            == "node-b"
        ),
        10,
        "the selected-node annotation",
    )
    assert not core.read_namespaced_pod("consumer", ns).spec.node_name  # bound only once its claim is
    assert cluster.scheduler.waiting()[(ns, "consumer")] == "assumed"
    provision(cluster, ns, "data", {"kubernetes.io/hostname": "node-b"})
    pod = wait_pod(core, "consumer", FINISHED, namespace=ns)
    assert (pod.spec.node_name, pod.status.phase) == ("node-b", "Succeeded")


def test_provisioning_failure_and_lost_node_reschedule(cluster, ns):
    core = cluster.core
    storage_class(core, f"wffc-{ns}", "unserved.example.com")
    block_claim(core, ns, "data", f"wffc-{ns}")
    for node in ("node-x", "node-y"):  # nodes without a kubelet, only this pod selects them
        core.create_node({"metadata": {"name": node, "labels": {"pool": f"extra-{ns}"}}})
    try:
        consumer = with_claim(pod_manifest("consumer", ["true"]), "data")
        consumer["spec"]["nodeSelector"] = {"pool": f"extra-{ns}"}
        core.create_namespaced_pod(ns, consumer)

        def selected():
            return (core.read_namespaced_persistent_volume_claim("data", ns).metadata.annotations or {}).get(SELECTED)

        assert wait_until(selected, 10, "a selected node") == "node-x"
        # the provisioner gives up on node-x (it removes the annotation): the pod is scheduled again
        core.patch_namespaced_persistent_volume_claim("data", ns, {"metadata": {"annotations": {SELECTED: None}}})
        failed = wait_until(lambda: events(core, ns, "consumer", "FailedScheduling"), 10, "the failed binding")
        assert (
            failed[0].message == 'running PreBind plugin "VolumeBinding": binding volumes: provisioning failed'
            ' for PVC "data"'
        )
        assert wait_until(selected, 10, "a node selected again") == "node-x"
        core.delete_node("node-x")  # the node goes: the scheduler takes its selection back and picks another
        assert wait_until(lambda: selected() == "node-y", 10, "node-y selected")
        messages = {e.message for e in events(core, ns, "consumer", "FailedScheduling")}
        assert (
            'running PreBind plugin "VolumeBinding": binding volumes: failed to get node "node-x": node "node-x"'
            " not found" in messages
        )
        assert not core.read_namespaced_pod("consumer", ns).spec.node_name
    finally:
        core.delete_namespaced_pod("consumer", ns, grace_period_seconds=0)
        for node in {"node-x", "node-y"} & {n.metadata.name for n in core.list_node().items}:
            core.delete_node(node)


def test_provisioner_topology_and_allowed_topologies(cluster, ns):
    from kubernetes import client

    core = cluster.core
    storage = client.StorageV1Api(core.api_client)
    for driver in ("hostpath.csi.k8s.io", "disk.csi.local"):
        if not any(d.metadata.name == driver for d in storage.list_csi_driver().items):
            storage.create_csi_driver({"metadata": {"name": driver}, "spec": {"attachRequired": False}})
    storage_class(core, f"hostpath-{ns}", "hostpath.csi.k8s.io")
    storage_class(core, f"disk-{ns}", "disk.csi.local")
    storage_class(
        core,
        f"zone-b-{ns}",
        "unserved.example.com",
        allowedTopologies=[{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["zone-b"]}]}],
    )
    tolerate = [{"operator": "Exists"}]
    block_claim(core, ns, "hostpath", f"hostpath-{ns}")
    core.create_namespaced_pod(ns, with_claim(windows_pod("win-hostpath", ["true"], tolerate), "hostpath"))
    wait_pod(
        core,
        "win-hostpath",
        unschedulable(  # no hostpath node plugin on Windows
            "0/3 nodes are available: 1 node(s) did not have enough free storage, 2 node(s) didn't match Pod's node"
            f" affinity/selector. {PREEMPTION}"
        ),
        namespace=ns,
    )
    block_claim(core, ns, "disk", f"disk-{ns}")
    core.create_namespaced_pod(ns, with_claim(windows_pod("win-disk", ["true"], tolerate), "disk"))
    wait_until(
        lambda: (
            (core.read_namespaced_persistent_volume_claim("disk", ns).metadata.annotations or {}).get(SELECTED)
            == "win-a"
        ),
        10,
        "win-a selected for the disk claim",
    )
    block_claim(core, ns, "zonal", f"zone-b-{ns}")
    core.create_namespaced_pod(ns, with_claim(pod_manifest("anywhere", ["true"]), "zonal"))
    wait_until(
        lambda: (
            (core.read_namespaced_persistent_volume_claim("zonal", ns).metadata.annotations or {}).get(SELECTED)
            == "node-b"
        ),
        10,
        "node-b selected by the class's allowed topology",
    )
    block_claim(core, ns, "zonal-a", f"zone-b-{ns}")
    in_a = with_claim(pod_manifest("in-a", ["true"]), "zonal-a")
    in_a["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-a"}
    core.create_namespaced_pod(ns, in_a)
    wait_pod(
        core,
        "in-a",
        unschedulable(
            "0/3 nodes are available: 1 node(s) didn't find available persistent volumes to bind, 1 node(s) didn't"
            f" match Pod's node affinity/selector, {WINDOWS_TAINT}. {PREEMPTION}"
        ),
        namespace=ns,
    )
    for pod in ("win-disk", "anywhere"):
        core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)


def test_static_volumes_for_a_wait_for_first_consumer_class(cluster, ns):
    core = cluster.core
    storage_class(core, f"local-{ns}", "kubernetes.io/no-provisioner")
    for node in ("node-a", "node-b"):
        terms = [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]
        core.create_persistent_volume(
            {
                "metadata": {"name": f"local-{ns}-{node}"},
                "spec": {
                    "capacity": {"storage": "8Mi"},
                    "accessModes": ["ReadWriteOnce"],
                    "volumeMode": "Block",
                    "storageClassName": f"local-{ns}",
                    "nodeAffinity": {"required": {"nodeSelectorTerms": terms}},
                    "csi": {"driver": "unserved.example.com", "volumeHandle": f"vol-{ns}-{node}"},
                },
            }
        )
        core.patch_persistent_volume_status(f"local-{ns}-{node}", {"status": {"phase": "Available"}})
    claim = block_claim(core, ns, "data", f"local-{ns}")
    consumer = with_claim(pod_manifest("consumer", ["true"]), "data")
    consumer["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-b"}
    core.create_namespaced_pod(ns, consumer)
    pv = wait_until(
        lambda: (v := core.read_persistent_volume(f"local-{ns}-node-b")).spec.claim_ref and v,
        10,
        "the PV pre-bound to the claim",
    )
    assert (pv.spec.claim_ref.name, pv.spec.claim_ref.uid) == ("data", claim["metadata"]["uid"])
    assert pv.metadata.annotations["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert not core.read_persistent_volume(f"local-{ns}-node-a").spec.claim_ref
    provision(cluster, ns, "data", {}, static=f"local-{ns}-node-b")  # the PV controller's part
    assert wait_pod(core, "consumer", FINISHED, namespace=ns).spec.node_name == "node-b"
    # no free local volume is left in zone-b's reach for a second claim there
    block_claim(core, ns, "more", f"local-{ns}")
    in_b = with_claim(pod_manifest("more", ["true"]), "more")
    in_b["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-b"}
    core.create_namespaced_pod(ns, in_b)
    wait_pod(
        core,
        "more",
        unschedulable(
            "0/3 nodes are available: 1 node(s) didn't find available persistent volumes to bind, 1 node(s) didn't"
            f" match Pod's node affinity/selector, {WINDOWS_TAINT}. {PREEMPTION}"
        ),
        namespace=ns,
    )
