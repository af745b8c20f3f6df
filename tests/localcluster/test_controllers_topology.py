"""The two drivers side by side: WaitForFirstConsumer provisioning after the scheduler's selected node (set by
the tests, as no scheduler runs here), topology from the nodes' labels, its errors, and Immediate placement."""

from __future__ import annotations

import pytest

from localcluster.controllers import names as n
from localcluster.controllers.kube import CSI_NODE, NODE, PV, PVC, VS
from localcluster.nodes import NodeSpec
from tests.localcluster.test_controllers_helpers import (
    DISK,
    DRIVER,
    NS,
    add_node,
    bound,
    local_cluster,
    make_bound_claim,
    node_affinity,
    pvc,
    ready,
    snapshot,
    wait_event,
    wait_for,
    write_volume,
)

HOSTPATH_KEY = "topology.hostpath.csi/node"
DISK_KEY = "topology.disk.csi.local/zone"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("topology")) as c:
        yield c


def select(c, claim: str, node: str | None) -> None:
    """What the scheduler does for a pod that uses ``claim``: set (or, None, clear) the selected node."""
    c.kube.patch(PVC, claim, {"metadata": {"annotations": {n.ANN_SELECTED_NODE: node}}}, NS)


def events(c, name: str) -> list[tuple[str, str, str]]:
    items = c.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    return [(e.source.component, e.reason, e.message) for e in items]


def test_wait_for_first_consumer_then_provision_on_the_selected_node(cluster):
    c = cluster
    c.kube.create(PVC, pvc("app-data"), NS)  # csi-hostpath-sc
    c.kube.create(PVC, pvc("disk-data", storage_class=None, mode="Filesystem"), NS)  # the default class: standard
    for name in ("app-data", "disk-data"):
        event = wait_event(c.kube, name, "WaitForFirstConsumer")
        assert (event["type"], event["message"], event["source"]["component"]) == (
            "Normal",
            "waiting for first consumer to be created before binding",
            "persistentvolume-controller",
        )
    make_bound_claim(c, "marker")  # queued after both claims: by now they were looked at
    for name in ("app-data", "disk-data"):
        claim = c.kube.get(PVC, name, NS)
        assert claim["status"]["phase"] == "Pending" and not claim["spec"].get("volumeName")
        assert n.ANN_STORAGE_PROVISIONER not in (claim["metadata"].get("annotations") or {})
        assert c.kube.get(PV, f"pvc-{claim['metadata']['uid']}") is None

    select(c, "app-data", "node-b")
    select(c, "disk-data", "win-a")  # the disk driver's node plugin runs on Windows nodes too
    app = wait_for(c.kube, PVC, "app-data", bound)
    disk = wait_for(c.kube, PVC, "disk-data", bound)
    app_pv, disk_pv = c.kube.get(PV, app["spec"]["volumeName"]), c.kube.get(PV, disk["spec"]["volumeName"])
    assert node_affinity(app_pv) == (HOSTPATH_KEY, ["node-b"])  # node-local
    assert node_affinity(disk_pv) == (DISK_KEY, ["zone-a"])  # zonal: any node of win-a's zone
    assert (app_pv["spec"]["csi"]["driver"], disk_pv["spec"]["csi"]["driver"]) == (DRIVER, DISK)
    assert disk_pv["spec"]["storageClassName"] == "standard" and disk_pv["spec"]["csi"]["fsType"] == "ext4"
    assert disk["metadata"]["annotations"][n.ANN_STORAGE_PROVISIONER] == DISK
    assert sorted(e[1] for e in events(c, "disk-data") if e[0] == f"{DISK}_csi-provisioner") == [
        "Provisioning",
        "ProvisioningSucceeded",
    ]
    assert not [e for e in events(c, "disk-data") if e[0] == f"{DRIVER}_csi-provisioner"], "one driver per claim"


def test_fs_type_from_the_class_parameter_ext4_when_absent(cluster):
    c = cluster
    _, ntfs = make_bound_claim(c, "win-data", node="win-a", mode="Filesystem", storage_class="disk-ntfs")
    _, plain = make_bound_claim(c, "plain", mode="Filesystem", storage_class="csi-hostpath-immediate")
    assert (ntfs["spec"]["csi"]["fsType"], plain["spec"]["csi"]["fsType"]) == ("ntfs", "ext4")


def test_a_selected_node_without_the_driver_is_retried_and_a_missing_one_goes_back_to_the_scheduler(cluster):
    c = cluster
    c.kube.create(PVC, pvc("on-windows", node="win-a"), NS)  # hostpath has no node plugin on Windows nodes
    event = wait_event(c.kube, "on-windows", "ProvisioningFailed")
    assert event["type"] == "Warning" and event["source"]["component"] == f"{DRIVER}_csi-provisioner"
    assert event["message"] == "error generating accessibility requirements: no topology key found for node win-a"
    claim = c.kube.get(PVC, "on-windows", NS)
    assert claim["metadata"]["annotations"][n.ANN_SELECTED_NODE] == "win-a", "upstream keeps the node and retries"
    assert claim["status"]["phase"] == "Pending"
    select(c, "on-windows", "node-a")  # the scheduler's next choice
    assert node_affinity(c.kube.get(PV, wait_for(c.kube, PVC, "on-windows", bound)["spec"]["volumeName"])) == (
        HOSTPATH_KEY,
        ["node-a"],
    )

    for claim, node in (("on-gone", "gone"), ("on-new", "node-new")):  # no CSINode: no node, or not registered yet
        if node == "node-new":
            add_node(c.kube, NodeSpec(node, "linux", "zone-a", {HOSTPATH_KEY: node}), csinode=False)
        c.kube.create(PVC, pvc(claim, node=node), NS)
        unselected = wait_for(c.kube, PVC, claim, lambda o: n.ANN_SELECTED_NODE not in o["metadata"]["annotations"])
        assert unselected["status"]["phase"] == "Pending"
        assert wait_event(c.kube, claim, "ProvisioningFailed")["message"] == (
            f'failed to get selected CSINode {node}: csinode.storage.k8s.io "{node}" not found'
        )
    c.kube.delete(NODE, "node-new")  # the other tests of this cluster see the strict cluster's nodes


def test_immediate_classes_spread_claims_over_the_driver_s_nodes_by_name(cluster):
    c = cluster
    placed = {}
    for name in ("data-db-0", "data-db-1", "wal-db-0", "wal-db-1"):
        _, pv = make_bound_claim(c, name, node=None, storage_class="csi-hostpath-immediate")
        placed[name] = node_affinity(pv)
    assert {key for key, _ in placed.values()} == {HOSTPATH_KEY}
    nodes = {name: values[0] for name, (_, values) in placed.items()}
    assert set(nodes.values()) == {"node-a", "node-b"}, "never win-a: hostpath is not there"
    # upstream's StatefulSet spreading: replicas 0 and 1 apart, the claims of one replica together
    assert nodes["data-db-0"] == nodes["wal-db-0"] != nodes["data-db-1"] == nodes["wal-db-1"]
    _, zonal = make_bound_claim(c, "zonal", node=None, storage_class="disk-immediate")
    key, zones = node_affinity(zonal)
    assert key == DISK_KEY and zones[0] in ("zone-a", "zone-b")
    c.kube.delete(PVC, "zonal", NS)
    wait_for(c.kube, PV, zonal["metadata"]["name"], lambda o: o is None, namespace=None)
    _, again = make_bound_claim(c, "zonal", node=None, storage_class="disk-immediate")
    assert again["metadata"]["name"] != zonal["metadata"]["name"] and node_affinity(again) == (key, zones), "stable"


def test_immediate_topology_waits_for_a_node_with_the_driver(tmp_path):
    with local_cluster(tmp_path, nodes=False) as c:
        c.kube.create(PVC, pvc("early", storage_class="csi-hostpath-immediate"), NS)
        event = wait_event(c.kube, "early", "ProvisioningFailed")
        assert event["message"] == "error generating accessibility requirements: no available topology found"
        add_node(c.kube, NodeSpec("win-b", "windows", "zone-b", {DISK_KEY: "zone-b"}))  # no hostpath plugin there
        add_node(c.kube, NodeSpec("node-c", "linux", "zone-c", {HOSTPATH_KEY: "node-c", DISK_KEY: "zone-c"}))
        claim = wait_for(c.kube, PVC, "early", bound)
        assert node_affinity(c.kube.get(PV, claim["spec"]["volumeName"])) == (HOSTPATH_KEY, ["node-c"])
        assert c.kube.get(NODE, "win-b") is not None


def test_snapshots_restore_anywhere_but_only_with_their_own_driver(cluster):
    c = cluster
    _, source = make_bound_claim(c, "src", node="node-a")
    write_volume(c, source["spec"]["csi"]["volumeHandle"], [(0, b"from node-a")])
    c.kube.create(VS, snapshot("src-snap", "src"), NS)
    vs = wait_for(c.kube, VS, "src-snap", ready)

    _, restored = make_bound_claim(c, "src-copy", node="node-b", snapshot="src-snap")  # another node
    assert node_affinity(restored) == (HOSTPATH_KEY, ["node-b"])
    with open(c.store.volume_path(restored["spec"]["csi"]["volumeHandle"]), "rb") as f:
        assert f.read(11) == b"from node-a"

    # a claim of the cluster's default class (the other driver) cannot restore it
    c.kube.create(PVC, pvc("wrong-driver", storage_class=None, snapshot="src-snap", node="node-a"), NS)
    event = wait_event(c.kube, "wrong-driver", "ProvisioningFailed")
    content = vs["status"]["boundVolumeSnapshotContentName"]
    assert event["message"] == (
        "error getting handle for DataSource Type VolumeSnapshot by Name src-snap: snapshotcontent"
        f" {content} for snapshot src-snap is not handled by CSI driver of StorageClass standard"
    )
    assert c.kube.get(PVC, "wrong-driver", NS)["status"]["phase"] == "Pending"
    c.kube.delete(PVC, "wrong-driver", NS)


def test_a_csinode_with_keys_the_node_does_not_carry(cluster):
    c = cluster
    add_node(c.kube, NodeSpec("node-odd", "linux", "zone-b"), csinode=False)  # no driver labels
    c.kube.create(
        CSI_NODE,
        {
            "metadata": {"name": "node-odd"},
            "spec": {"drivers": [{"name": DRIVER, "nodeID": "node-odd", "topologyKeys": [HOSTPATH_KEY]}]},
        },
    )
    try:
        c.kube.create(PVC, pvc("on-odd", node="node-odd"), NS)
        event = wait_event(c.kube, "on-odd", "ProvisioningFailed")
        labels = " ".join(f"{k}:{v}" for k, v in sorted(c.kube.get(NODE, "node-odd")["metadata"]["labels"].items()))
        assert event["message"] == (
            f"error generating accessibility requirements: topology labels from selected node map[{labels}] does not"
            f" match topology keys from CSINode [{HOSTPATH_KEY}]"
        )
        assert c.kube.get(PVC, "on-odd", NS)["metadata"]["annotations"][n.ANN_SELECTED_NODE] == "node-odd"
    finally:
        c.kube.delete(PVC, "on-odd", NS)
        c.kube.delete(NODE, "node-odd")
        c.kube.delete(CSI_NODE, "node-odd")
