"""The local cluster's CSI-like driver, snapshot controller and CBT service, driven through the real client."""

from __future__ import annotations

import os
import random
import time

import pytest

from localcluster.controllers import names as n
from localcluster.controllers.kube import (
    CSI_DRIVER,
    PV,
    PVC,
    SMS,
    STORAGE_CLASS,
    VGS_CLASS,
    VS,
    VS_CLASS,
    VSC,
    format_quantity,
    parse_quantity,
)
from movers.cbt import discovery
from movers.cbt.client import SnapshotMetadataClient
from movers.cbt.tokens import TokenRequestToken
from movers.errors import CbtAuthError, CbtUnavailableError
from tests.localcluster.test_controllers_helpers import (
    DISK,
    DRIVER,
    NS,
    SC,
    MiB,
    bound,
    gone,
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

BLOCK = 4096


@pytest.fixture
def cluster(tmp_path):
    with local_cluster(tmp_path) as c:
        yield c


def test_quantities():
    assert [parse_quantity(q) for q in ("1Gi", "16Mi", "1G", "1500", "1.5Ki", "2e3", 7)] == [
        1 << 30,
        16 << 20,
        10**9,
        1500,
        1536,
        2000,
        7,
    ]
    assert [format_quantity(b) for b in (1 << 30, 16 << 20, 1536, 10**9)] == ["1Gi", "16Mi", "1536", "1000000000"]
    with pytest.raises(ValueError):
        parse_quantity("lots")


def test_two_drivers_with_the_plan_s_classes(cluster):
    c = cluster
    classes = {sc["metadata"]["name"]: sc for sc in c.kube.list(STORAGE_CLASS)[0]}
    table = {
        name: (
            sc["provisioner"],
            sc["volumeBindingMode"],
            (sc.get("parameters") or {}).get("csi.storage.k8s.io/fstype"),
            (sc["metadata"].get("annotations") or {}).get(n.ANN_DEFAULT_STORAGE_CLASS),
            sc["reclaimPolicy"],
        )
        for name, sc in classes.items()
    }
    wffc = "WaitForFirstConsumer"
    assert table == {
        "standard": (DISK, wffc, "ext4", "true", "Delete"),
        "disk-ntfs": (DISK, wffc, "ntfs", None, "Delete"),
        "disk-immediate": (DISK, "Immediate", None, None, "Delete"),
        "csi-hostpath-sc": (DRIVER, wffc, "ext4", None, "Delete"),
        "csi-hostpath-xfs": (DRIVER, wffc, "xfs", None, "Delete"),
        "csi-hostpath-immediate": (DRIVER, "Immediate", None, None, "Delete"),
    }
    snapclasses = {v["metadata"]["name"]: v for v in c.kube.list(VS_CLASS)[0]}
    assert {
        name: (v["driver"], v["deletionPolicy"], v["metadata"]["annotations"][n.ANN_DEFAULT_SNAPSHOT_CLASS])
        for name, v in snapclasses.items()
    } == {"csi-hostpath-snapclass": (DRIVER, "Delete", "true"), "disk-snapclass": (DISK, "Delete", "true")}
    groupclasses = c.kube.list(VGS_CLASS)[0]
    assert [(g["metadata"]["name"], g["driver"]) for g in groupclasses] == [("csi-hostpath-groupsnapclass", DRIVER)]
    assert {d["metadata"]["name"] for d in c.kube.list(CSI_DRIVER)[0]} == {DRIVER, DISK}
    assert [s["metadata"]["name"] for s in c.kube.list(SMS)[0]] == [DRIVER], "CBT only for hostpath"


def test_block_and_filesystem_claims_bind_with_node_affinity_and_fstype(cluster):
    c = cluster
    block, block_pv = make_bound_claim(c, "block", size="8Mi", node="node-b")
    fs, fs_pv = make_bound_claim(c, "fs", size="12Mi", mode="Filesystem", storage_class="csi-hostpath-xfs")
    for claim, pv, mode, size in ((block, block_pv, "Block", "8Mi"), (fs, fs_pv, "Filesystem", "12Mi")):
        md = claim["metadata"]
        assert pv["metadata"]["name"] == f"pvc-{md['uid']}" == claim["spec"]["volumeName"]
        assert claim["status"]["capacity"] == {"storage": size} and claim["status"]["accessModes"] == ["ReadWriteOnce"]
        assert (
            md["annotations"][n.ANN_BIND_COMPLETED] == "yes" and md["annotations"][n.ANN_STORAGE_PROVISIONER] == DRIVER
        )
        assert n.FIN_PVC_PROTECTION in md["finalizers"]
        spec = pv["spec"]
        assert spec["csi"]["driver"] == DRIVER and spec["volumeMode"] == mode and spec["capacity"] == {"storage": size}
        assert spec["claimRef"]["uid"] == md["uid"] and spec["claimRef"]["name"] == md["name"]
        assert spec["persistentVolumeReclaimPolicy"] == "Delete"
        assert pv["status"]["phase"] == "Bound" and pv["metadata"]["annotations"][n.ANN_PROVISIONED_BY] == DRIVER
        assert set(pv["metadata"]["finalizers"]) == {n.FIN_PV_PROTECTION, n.FIN_PROVISIONER}
        assert c.store.volume_size(spec["csi"]["volumeHandle"]) == parse_quantity(size)
    assert block_pv["spec"]["storageClassName"] == SC and fs_pv["spec"]["storageClassName"] == "csi-hostpath-xfs"
    assert "fsType" not in block_pv["spec"]["csi"] and fs_pv["spec"]["csi"]["fsType"] == "xfs"
    assert node_affinity(block_pv) == ("topology.hostpath.csi/node", ["node-b"])
    assert node_affinity(fs_pv) == ("topology.hostpath.csi/node", ["node-a"])
    with open(c.store.volume_path(fs_pv["spec"]["csi"]["volumeHandle"]), "rb") as f:
        assert not f.read(1 << 16).strip(b"\0"), (
            "the node formats a Filesystem volume at its first mount, not the driver"
        )
    events = [
        (e.source.component, e.reason)
        for e in c.core.list_namespaced_event(NS, field_selector="involvedObject.name=fs").items
    ]
    assert sorted(events) == sorted(
        [
            ("persistentvolume-controller", "ExternalProvisioning"),
            (f"{DRIVER}_csi-provisioner", "Provisioning"),
            (f"{DRIVER}_csi-provisioner", "ProvisioningSucceeded"),
        ]
    )


def test_claims_of_other_provisioners_are_left_alone(cluster):
    c = cluster
    c.kube.create(STORAGE_CLASS, {"metadata": {"name": "other"}, "provisioner": "other.csi.example"})
    c.kube.create(PVC, pvc("theirs", storage_class="other"), NS)
    make_bound_claim(c, "ours")  # queued after "theirs": by now "theirs" was looked at
    theirs = c.kube.get(PVC, "theirs", NS)
    assert theirs["status"]["phase"] == "Pending" and not theirs["spec"].get("volumeName")
    assert not theirs["metadata"].get("finalizers")


def test_claim_deletion_follows_the_reclaim_policy_and_pod_protection(cluster):
    c = cluster
    c.kube.create(STORAGE_CLASS, {"metadata": {"name": "keep"}, "provisioner": DRIVER, "reclaimPolicy": "Retain"})
    _, gone_pv = make_bound_claim(c, "scratch")
    _, kept_pv = make_bound_claim(c, "kept", storage_class="keep")
    assert n.FIN_PROVISIONER not in kept_pv["metadata"]["finalizers"]
    c.core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "user"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "demo", "volumeDevices": [{"name": "d", "devicePath": "/dev/xvda"}]}
                ],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "scratch"}}],
            },
        },
    )
    c.core.delete_namespaced_persistent_volume_claim("scratch", NS)
    c.core.delete_namespaced_persistent_volume_claim("kept", NS)
    make_bound_claim(c, "later")  # queued after both deletions
    in_use = c.kube.get(PVC, "scratch", NS)
    assert in_use["metadata"]["deletionTimestamp"] and n.FIN_PVC_PROTECTION in in_use["metadata"]["finalizers"]
    assert c.store.volume_path(gone_pv["spec"]["csi"]["volumeHandle"]).exists()

    c.core.patch_namespaced_pod_status("user", NS, {"status": {"phase": "Succeeded"}})
    wait_for(c.kube, PVC, "scratch", gone)
    wait_for(c.kube, PV, gone_pv["metadata"]["name"], gone, namespace=None)
    assert not c.store.volume_path(gone_pv["spec"]["csi"]["volumeHandle"]).exists()

    released = wait_for(
        c.kube, PV, kept_pv["metadata"]["name"], lambda o: o["status"]["phase"] == "Released", namespace=None
    )
    assert c.store.volume_path(released["spec"]["csi"]["volumeHandle"]).exists()
    c.core.delete_persistent_volume(released["metadata"]["name"])  # a Released PV may go; its storage stays
    wait_for(c.kube, PV, released["metadata"]["name"], gone, namespace=None)
    assert c.store.volume_path(released["spec"]["csi"]["volumeHandle"]).exists()


def test_snapshot_readiness_transition_and_upstream_fields(tmp_path):
    from kubernetes import watch

    with local_cluster(tmp_path, ready_delay=0.3) as c:
        claim, pv = make_bound_claim(c, "data")
        handle = pv["spec"]["csi"]["volumeHandle"]
        write_volume(c, handle, [(0, b"x" * BLOCK)])
        _, rv = c.kube.list(VS, NS)
        created = time.monotonic()
        vs = c.kube.create(VS, snapshot("snap", "data"), NS)
        seen = []
        w = watch.Watch(return_type="object")
        fn, args = c.kube.watch_call(VS)
        for event in w.stream(fn, *args, resource_version=rv, timeout_seconds=10):
            status = event["raw_object"].get("status") or {}
            if "readyToUse" in status and (not seen or seen[-1] != status["readyToUse"]):
                seen.append(status["readyToUse"])
            if status.get("readyToUse"):
                w.stop()
        assert seen == [False, True] and time.monotonic() - created >= 0.3

        vs = c.kube.get(VS, "snap", NS)
        uid = vs["metadata"]["uid"]
        assert vs["spec"]["volumeSnapshotClassName"] == "csi-hostpath-snapclass"
        assert set(vs["metadata"]["finalizers"]) == {n.FIN_VS_AS_SOURCE, n.FIN_VS_BOUND}
        status = vs["status"]
        assert status["boundVolumeSnapshotContentName"] == f"snapcontent-{uid}" and status["restoreSize"] == "16Mi"
        assert (
            status["creationTime"].endswith("Z") and "error" not in status and "volumeGroupSnapshotName" not in status
        )
        vsc = c.kube.get(VSC, f"snapcontent-{uid}")
        spec, cstatus = vsc["spec"], vsc["status"]
        assert spec["driver"] == DRIVER and spec["source"] == {"volumeHandle": handle}
        assert spec["sourceVolumeMode"] == "Block" and spec["deletionPolicy"] == "Delete"
        assert spec["volumeSnapshotClassName"] == "csi-hostpath-snapclass"
        ref = spec["volumeSnapshotRef"]
        assert (ref["kind"], ref["name"], ref["namespace"], ref["uid"]) == ("VolumeSnapshot", "snap", NS, uid)
        assert cstatus["readyToUse"] is True and cstatus["restoreSize"] == 16 * MiB
        assert isinstance(cstatus["creationTime"], int) and cstatus["snapshotHandle"]
        assert vsc["metadata"]["finalizers"] == [n.FIN_VSC_BOUND]
        with open(c.store.snapshot_path(cstatus["snapshotHandle"]), "rb") as f:
            assert f.read(BLOCK) == b"x" * BLOCK
        source = wait_for(c.kube, PVC, "data", lambda o: n.FIN_PVC_AS_SOURCE not in o["metadata"]["finalizers"])
        assert source["metadata"]["finalizers"] == [n.FIN_PVC_PROTECTION]


def test_snapshot_of_a_missing_claim_reports_then_recovers(cluster):
    c = cluster
    c.kube.create(VS, snapshot("early", "later"), NS)
    failed = wait_for(c.kube, VS, "early", lambda o: (o.get("status") or {}).get("error"))
    message = (
        "Failed to set default snapshot class with error failed to retrieve PVC later from the lister:"
        ' "persistentvolumeclaim \\"later\\" not found"'
    )
    assert failed["status"]["error"]["message"] == message and "readyToUse" not in failed["status"]
    event = wait_event(c.kube, "early", "SetDefaultSnapshotClassFailed")
    assert (event["type"], event["message"], event["source"]["component"]) == (
        "Warning",
        message,
        "snapshot-controller",
    )
    make_bound_claim(c, "later")
    done = wait_for(c.kube, VS, "early", ready)
    assert "error" not in done["status"]


def test_snapshot_deletion_policies(cluster):
    c = cluster
    c.kube.create(VS_CLASS, {"metadata": {"name": "retain"}, "driver": DRIVER, "deletionPolicy": "Retain"})
    make_bound_claim(c, "data")
    c.kube.create(VS, snapshot("doomed", "data"), NS)
    c.kube.create(VS, snapshot("kept", "data", "retain"), NS)
    doomed, kept = wait_for(c.kube, VS, "doomed", ready), wait_for(c.kube, VS, "kept", ready)
    doomed_vsc = c.kube.get(VSC, doomed["status"]["boundVolumeSnapshotContentName"])
    # upstream: every bound content gets the content finalizer (whatever its policy), the snapshot gets the bound
    # finalizer only when its content's policy is Delete
    kept_vsc = wait_for(
        c.kube, VSC, kept["status"]["boundVolumeSnapshotContentName"], lambda o: o["metadata"].get("finalizers"), None
    )
    assert kept_vsc["spec"]["deletionPolicy"] == "Retain" and kept_vsc["metadata"]["finalizers"] == [n.FIN_VSC_BOUND]
    assert kept["metadata"]["finalizers"] == [n.FIN_VS_AS_SOURCE], kept["metadata"]
    assert set(doomed["metadata"]["finalizers"]) == {n.FIN_VS_AS_SOURCE, n.FIN_VS_BOUND}

    c.kube.delete(VS, "doomed", NS)
    c.kube.delete(VS, "kept", NS)
    wait_for(c.kube, VS, "doomed", gone)
    wait_for(c.kube, VSC, doomed_vsc["metadata"]["name"], gone, namespace=None)
    assert not c.store.snapshot_path(doomed_vsc["status"]["snapshotHandle"]).exists()
    wait_for(c.kube, VS, "kept", gone)
    retained = c.kube.get(VSC, kept_vsc["metadata"]["name"])
    assert retained["metadata"]["annotations"][n.ANN_VS_BEING_DELETED] == "yes"
    assert retained["metadata"]["finalizers"] == [n.FIN_VSC_BOUND]
    assert c.store.snapshot_path(retained["status"]["snapshotHandle"]).exists()


def test_retained_content_deleted_later_keeps_or_removes_the_snapshot_by_its_policy_then(cluster):
    """Upstream's csi-snapshotter: a content whose snapshot was deleted (annotation volumesnapshot-being-deleted)
    is deleted by whoever deletes it; its policy at that moment says whether the storage snapshot goes."""
    c = cluster
    c.kube.create(VS_CLASS, {"metadata": {"name": "retain"}, "driver": DRIVER, "deletionPolicy": "Retain"})
    make_bound_claim(c, "data")
    contents = {}
    for name in ("as-is", "patched"):
        c.kube.create(VS, snapshot(name, "data", "retain"), NS)
        vs = wait_for(c.kube, VS, name, ready)
        contents[name] = c.kube.get(VSC, vs["status"]["boundVolumeSnapshotContentName"])
        c.kube.delete(VS, name, NS)
        wait_for(c.kube, VS, name, gone)
    c.kube.patch(VSC, contents["patched"]["metadata"]["name"], {"spec": {"deletionPolicy": "Delete"}})
    for vsc in contents.values():
        c.kube.delete(VSC, vsc["metadata"]["name"])
        wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
    assert c.store.snapshot_path(contents["as-is"]["status"]["snapshotHandle"]).exists()
    assert not c.store.snapshot_path(contents["patched"]["status"]["snapshotHandle"]).exists()


def test_content_patched_to_delete_before_its_snapshot_is_deleted_goes_with_its_storage_snapshot(cluster):
    """external-snapshotter's documented way to delete a Retain snapshot: patch the content's deletionPolicy to
    Delete, then delete the VolumeSnapshot."""
    c = cluster
    c.kube.create(VS_CLASS, {"metadata": {"name": "retain"}, "driver": DRIVER, "deletionPolicy": "Retain"})
    make_bound_claim(c, "data")
    c.kube.create(VS, snapshot("snap", "data", "retain"), NS)
    vs = wait_for(c.kube, VS, "snap", ready)
    vsc = c.kube.get(VSC, vs["status"]["boundVolumeSnapshotContentName"])
    c.kube.patch(VSC, vsc["metadata"]["name"], {"spec": {"deletionPolicy": "Delete"}})
    c.kube.delete(VS, "snap", NS)
    wait_for(c.kube, VS, "snap", gone)
    wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
    assert not c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()


def test_restore_from_snapshot_copies_data_and_checks_size(cluster):
    c = cluster
    _, pv = make_bound_claim(c, "data")
    payload = random.Random(7).randbytes(3 * BLOCK)
    write_volume(c, pv["spec"]["csi"]["volumeHandle"], [(5 * MiB, payload)])
    c.kube.create(VS, snapshot("snap", "data"), NS)
    wait_for(c.kube, VS, "snap", ready)

    _, restored_pv = make_bound_claim(c, "restored", size="32Mi", snapshot="snap")
    path = c.store.volume_path(restored_pv["spec"]["csi"]["volumeHandle"])
    assert path.stat().st_size == 32 * MiB and restored_pv["spec"]["capacity"] == {"storage": "32Mi"}
    with open(path, "rb") as f:
        assert os.pread(f.fileno(), len(payload), 5 * MiB) == payload

    c.kube.create(PVC, pvc("small", size="8Mi", snapshot="snap", node="node-b"), NS)
    event = wait_event(c.kube, "small", "ProvisioningFailed")
    assert (
        f"requested volume size {8 * MiB} is less than the size {16 * MiB} for the source snapshot snap"
        in event["message"]
    )
    assert c.kube.get(PVC, "small", NS)["status"]["phase"] == "Pending"
    # the snapshot cannot go while a claim is being restored from it
    c.kube.delete(VS, "snap", NS)
    wait_event(c.kube, "snap", "SnapshotDeletePending")
    c.kube.delete(PVC, "small", NS)
    wait_for(c.kube, VS, "snap", gone)


def test_volume_mode_change_needs_the_content_annotation(cluster):
    c = cluster
    make_bound_claim(c, "fsdata", mode="Filesystem")
    c.kube.create(VS, snapshot("fssnap", "fsdata"), NS)
    vs = wait_for(c.kube, VS, "fssnap", ready)
    content = vs["status"]["boundVolumeSnapshotContentName"]
    assert c.kube.get(VSC, content)["spec"]["sourceVolumeMode"] == "Filesystem"

    c.kube.create(PVC, pvc("asblock", mode="Block", snapshot="fssnap", node="node-a"), NS)
    event = wait_event(c.kube, "asblock", "ProvisioningFailed")
    assert event["type"] == "Warning"
    assert (
        f"requested volume {NS}/asblock modifies the mode of the source volume but does not have permission to"
        f" do so. {n.ANN_ALLOW_MODE_CHANGE} annotation is not present on snapshotcontent {content}"
    ) in event["message"]
    claim = c.kube.get(PVC, "asblock", NS)
    assert claim["status"]["phase"] == "Pending" and not claim["spec"].get("volumeName")

    c.kube.patch(VSC, content, {"metadata": {"annotations": {n.ANN_ALLOW_MODE_CHANGE: "true"}}})
    claim = wait_for(c.kube, PVC, "asblock", bound)
    assert c.kube.get(PV, claim["spec"]["volumeName"])["spec"]["volumeMode"] == "Block"


def test_cbt_delta_through_the_product_client(cluster):
    c = cluster
    sms = c.kube.get(SMS, DRIVER)
    service = discovery.snapshot_metadata_service(c.served.client, DRIVER)
    assert (service.address, service.audience, sms["spec"]["audience"]) == (
        c.ctl.metadata.address,
        "snapshot-metadata",
        "snapshot-metadata",
    )
    assert service.ca_pem == c.ctl.metadata.ca_pem
    c.core.create_namespaced_service_account(NS, {"metadata": {"name": "mover"}})
    # what the metadata server's SubjectAccessReview checks for the mover's token
    c.served.grant(
        NS,
        f"{NS}/mover",
        [{"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get"]}],
    )
    _, pv = make_bound_claim(c, "data", size="8Mi")
    handle = pv["spec"]["csi"]["volumeHandle"]
    rng = random.Random(3)
    first = [(0, rng.randbytes(BLOCK)), (MiB, rng.randbytes(2 * BLOCK))]
    write_volume(c, handle, first)
    c.kube.create(VS, snapshot("snap-1", "data"), NS)
    base = discovery.wait_snapshot_ready(c.served.client, NS, "snap-1", timeout=10)
    second = [(BLOCK, rng.randbytes(BLOCK)), (MiB + BLOCK, rng.randbytes(BLOCK)), (8 * MiB - BLOCK, b"\1" * BLOCK)]
    write_volume(c, handle, second)
    c.kube.create(VS, snapshot("snap-2", "data"), NS)
    target = discovery.wait_snapshot_ready(c.served.client, NS, "snap-2", timeout=10)
    assert (base.driver, target.restore_size) == (DRIVER, 8 * MiB)

    tokens = TokenRequestToken(c.core, NS, "mover", service.audience)
    with SnapshotMetadataClient(service.address, service.ca_pem, tokens) as client:
        assert list(client.allocated(NS, "snap-1")) == [(0, BLOCK), (MiB, 2 * BLOCK)]
        assert list(client.delta(NS, base.handle, "snap-2")) == [
            (BLOCK, BLOCK),
            (MiB + BLOCK, BLOCK),
            (8 * MiB - BLOCK, BLOCK),
        ]
    wrong = TokenRequestToken(c.core, NS, "mover", "another-audience")
    with SnapshotMetadataClient(service.address, service.ca_pem, wrong, retries=0) as client:
        with pytest.raises(CbtAuthError):
            list(client.delta(NS, base.handle, "snap-2"))


def test_cbt_and_group_snapshots_can_be_turned_off(tmp_path):
    from localcluster.controllers.kube import VGS, VGSC

    with local_cluster(tmp_path, cbt=False, group_snapshots=False) as c:
        assert c.ctl.metadata is None and c.ctl.groups is None and c.ctl.group_version == "v1"
        assert c.kube.get(SMS, DRIVER) is None
        assert c.kube.get(VGS_CLASS, "csi-hostpath-groupsnapclass") is not None, "the CRDs and classes are installed"
        with pytest.raises(CbtUnavailableError):
            discovery.snapshot_metadata_service(c.served.client, DRIVER)
        make_bound_claim(c, "data", labels={"app": "db"})
        c.kube.create(
            VGS, {"metadata": {"name": "group"}, "spec": {"source": {"selector": {"matchLabels": {"app": "db"}}}}}, NS
        )
        c.kube.create(VS, snapshot("single", "data"), NS)
        wait_for(c.kube, VS, "single", ready)  # the other controllers run
        assert "status" not in c.kube.get(VGS, "group", NS) and c.kube.list(VGSC)[0] == []


def test_work_queue_keeps_one_pending_entry_per_key_and_the_earliest_time():
    from localcluster.controllers.runtime import WorkQueue

    q = WorkQueue()
    q.add(("vs", NS, "a"), 60)
    q.add(("vs", NS, "b"))
    q.add(("vs", NS, "a"))  # earlier than the pending entry: wins
    q.add(("vs", NS, "b"), 60)  # later than the pending entry: ignored
    assert [q.get(), q.get()] == [("vs", NS, "b"), ("vs", NS, "a")]  # in due order, neither after 60 s
    q.close()
    assert q.get() is None


def test_a_controller_that_cannot_list_stops_cleanly(tmp_path):
    import threading
    from types import SimpleNamespace

    from localcluster.controllers import Kube, LocalControllers, SnapshotController, api_client_for
    from localcluster.kubeapi import KubeAPI
    from localcluster.storage import VolumeStore

    store = VolumeStore(tmp_path / "storage")
    with KubeAPI(require_auth=True) as api:
        wrong = SimpleNamespace(url=api.url, token="not-a-token")
        with pytest.raises(Exception, match="401"):
            LocalControllers(wrong, store).start()
        api_client = api_client_for(wrong)
        try:
            controller = SnapshotController(Kube(api_client))
            with pytest.raises(TimeoutError, match="listing volumesnapshots"):
                controller.start(timeout=0.3)
        finally:
            api_client.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(("snapshot-controller", "csi-volumes"))]
