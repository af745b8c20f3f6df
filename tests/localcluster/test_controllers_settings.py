"""The settings of poorer clusters, each with the status and events upstream gives: contents without restoreSize,
no default VolumeSnapshotClass or two, group snapshots served but unprocessed, a driver without the group
capability, and a group of a driver that has no group class."""

from __future__ import annotations

import hashlib

import pytest

from localcluster.controllers import names as n
from localcluster.controllers.kube import PVC, VGS, VGS_CLASS, VGSC, VS, VS_CLASS, VSC
from movers.cbt.client import SnapshotMetadataClient
from movers.cbt.tokens import TokenRequestToken
from movers.errors import CbtTransientError
from tests.localcluster.test_controllers_helpers import (
    DISK,
    DRIVER,
    NS,
    MiB,
    local_cluster,
    make_bound_claim,
    pvc,
    ready,
    snapshot,
    wait_event,
    wait_for,
)


def group(name: str, cls: str | None = None, **labels) -> dict:
    spec = {"source": {"selector": {"matchLabels": labels}}}
    if cls:
        spec["volumeGroupSnapshotClassName"] = cls
    return {"metadata": {"name": name}, "spec": spec}


def members(c, vgs: dict) -> list[dict]:
    """The group's member VolumeSnapshots, ready."""
    vgsc = c.kube.get(VGSC, vgs["status"]["boundVolumeGroupSnapshotContentName"])
    uid = vgs["metadata"]["uid"]
    names = [
        f"snapshot-{hashlib.sha256((uid + e['volumeHandle']).encode()).hexdigest()}"
        for e in vgsc["status"]["volumeSnapshotInfoList"]
    ]
    return [wait_for(c.kube, VS, name, ready) for name in names]


def allocated(c, name: str) -> list:
    """GetMetadataAllocated for VolumeSnapshot ``name`` through the product's client (no retries)."""
    service, account = c.ctl.metadata, f"mover-{name}"[:60]
    c.core.create_namespaced_service_account(NS, {"metadata": {"name": account}})
    # what the metadata server's SubjectAccessReview checks for the mover's token
    rules = [{"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get"]}]
    c.served.grant(NS, f"{NS}/{account}", rules, name=account)
    tokens = TokenRequestToken(c.core, NS, account, "snapshot-metadata")
    with SnapshotMetadataClient(service.address, service.ca_pem, tokens, retries=0) as client:
        return list(client.allocated(NS, name))


def test_without_restore_size_contents_snapshots_and_group_lists_have_none(tmp_path):
    with local_cluster(tmp_path, restore_size=False) as c:
        make_bound_claim(c, "data", labels={"app": "db"})
        make_bound_claim(c, "wal", size="8Mi", labels={"app": "db"})
        c.kube.create(VS, snapshot("single", "data"), NS)
        c.kube.create(VGS, group("both", app="db"), NS)
        vs = wait_for(c.kube, VS, "single", ready)
        vgs = wait_for(c.kube, VGS, "both", ready)
        assert "restoreSize" not in vs["status"]
        assert "restoreSize" not in c.kube.get(VSC, vs["status"]["boundVolumeSnapshotContentName"])["status"]
        vgsc = c.kube.get(VGSC, vgs["status"]["boundVolumeGroupSnapshotContentName"])
        entries = vgsc["status"]["volumeSnapshotInfoList"]
        assert len(entries) == 2 and not [e for e in entries if "restoreSize" in e]
        for member in members(c, vgs):
            assert "restoreSize" not in member["status"]
            assert "restoreSize" not in c.kube.get(VSC, member["status"]["boundVolumeSnapshotContentName"])["status"]

        # without a restoreSize the provisioner cannot check the size: the driver refuses a smaller volume
        c.kube.create(PVC, pvc("small", size="8Mi", snapshot="single", node="node-a"), NS)
        event = wait_event(c.kube, "small", "ProvisioningFailed")
        assert event["message"].startswith(
            "Volume provisioning failed with infeasible error. Retries will be delayed. rpc error: code ="
            " InvalidArgument desc = snapshot "
        ) and event["message"].endswith(f" size {16 * MiB} is greater than requested volume size {8 * MiB}")
        _, restored = make_bound_claim(c, "big-enough", size="16Mi", snapshot="single")
        assert restored["spec"]["capacity"] == {"storage": "16Mi"}


@pytest.mark.parametrize(
    ("setting", "error", "sidecar"),
    [
        (
            "none",
            "cannot find default snapshot class",
            f"no default VolumeSnapshotClass is set for the CSI driver '{DRIVER}'",
        ),
        (
            "two",
            "2 default snapshot classes were found",
            f"multiple default VolumeSnapshotClasses are set for the CSI driver '{DRIVER}'",
        ),
    ],
)
def test_default_snapshot_class_none_or_two(tmp_path, setting, error, sidecar):
    with local_cluster(tmp_path, default_snapshot_class=setting) as c:
        defaults = sorted(
            (v["metadata"]["name"], v["driver"], v["deletionPolicy"])
            for v in c.kube.list(VS_CLASS)[0]
            if (v["metadata"].get("annotations") or {}).get(n.ANN_DEFAULT_SNAPSHOT_CLASS) == "true"
        )
        if setting == "none":
            assert defaults == [] and {v["metadata"]["name"] for v in c.kube.list(VS_CLASS)[0]} == {
                "csi-hostpath-snapclass",
                "disk-snapclass",
            }
        else:
            assert defaults == [
                ("csi-hostpath-snapclass", DRIVER, "Delete"),
                ("csi-hostpath-snapclass-retain", DRIVER, "Retain"),
                ("disk-snapclass", DISK, "Delete"),
                ("disk-snapclass-retain", DISK, "Retain"),
            ]
        make_bound_claim(c, "data", labels={"app": "db"})
        c.kube.create(VS, snapshot("unnamed", "data"), NS)
        failed = wait_for(c.kube, VS, "unnamed", lambda o: (o.get("status") or {}).get("error"))
        message = f"Failed to set default snapshot class with error {error}"
        assert failed["status"] == {"error": {"message": message, "time": failed["status"]["error"]["time"]}}
        event = wait_event(c.kube, "unnamed", "SetDefaultSnapshotClassFailed")
        assert (event["type"], event["message"]) == ("Warning", message)
        assert "volumeSnapshotClassName" not in c.kube.get(VS, "unnamed", NS)["spec"]

        # a snapshot naming its class is fine, and so is CBT on it
        c.kube.create(VS, snapshot("named", "data", "csi-hostpath-snapclass"), NS)
        wait_for(c.kube, VS, "named", ready)
        assert allocated(c, "named") == []
        # group members name no class: the metadata sidecar looks for the driver's default and answers UNAVAILABLE
        c.kube.create(VGS, group("grp", app="db"), NS)
        member = members(c, wait_for(c.kube, VGS, "grp", ready))[0]
        with pytest.raises(CbtTransientError, match=f"UNAVAILABLE: {sidecar}"):
            allocated(c, member["metadata"]["name"])


def test_group_snapshots_served_but_unprocessed(tmp_path):
    with local_cluster(tmp_path, group_snapshots="unprocessed") as c:
        assert c.ctl.groups is None and c.ctl.group_version == "v1"
        assert c.kube.get(VGS_CLASS, "csi-hostpath-groupsnapclass")["driver"] == DRIVER
        make_bound_claim(c, "data", labels={"app": "db"})
        c.kube.create(VGS, group("frozen", app="db"), NS)
        c.kube.create(VS, snapshot("later", "data"), NS)
        wait_for(c.kube, VS, "later", ready)  # created after the group: by now the group would have been seen
        vgs = c.kube.get(VGS, "frozen", NS)
        assert "status" not in vgs and "volumeGroupSnapshotClassName" not in vgs["spec"]
        assert not vgs["metadata"].get("finalizers") and c.kube.list(VGSC)[0] == []
        assert [e for e in c.kube.list(VS, NS)[0] if e["metadata"].get("ownerReferences")] == []


def test_a_driver_without_the_group_capability_fails_the_content(tmp_path):
    with local_cluster(tmp_path, hostpath_group_capability=False) as c:
        _, a = make_bound_claim(c, "a", labels={"app": "db"})
        _, b = make_bound_claim(c, "b", labels={"app": "db"})
        c.kube.create(VGS, group("grp", app="db"), NS)
        failed = wait_for(c.kube, VGS, "grp", lambda o: (o.get("status") or {}).get("error"))
        content = failed["status"]["boundVolumeGroupSnapshotContentName"]
        vgsc = c.kube.get(VGSC, content)
        handles = " ".join(pv["spec"]["csi"]["volumeHandle"] for pv in (a, b))
        message = (
            f"Failed to create group snapshot: failed to take group snapshot of the volumes [{handles}]:"
            ' "rpc error: code = Unimplemented desc = unknown service csi.v1.GroupController"'
        )
        assert vgsc["spec"]["volumeGroupSnapshotClassName"] == "csi-hostpath-groupsnapclass"
        assert vgsc["status"]["readyToUse"] is False and vgsc["status"]["error"]["message"] == message
        assert "volumeGroupSnapshotHandle" not in vgsc["status"]
        assert failed["status"]["readyToUse"] is False and failed["status"]["error"]["message"] == message
        event = wait_event(c.kube, content, "GroupSnapshotCreationFailed", namespace="default")
        assert (event["type"], event["message"], event["involvedObject"]["kind"]) == (
            "Warning",
            message,
            "VolumeGroupSnapshotContent",
        )
        assert wait_event(c.kube, "grp", "CreatingGroupSnapshot")["type"] == "Normal"
        assert [e for e in c.kube.list(VS, NS)[0] if e["metadata"].get("ownerReferences")] == [], "no members"


def test_a_group_of_a_driver_without_group_snapshots(tmp_path):
    with local_cluster(tmp_path) as c:
        make_bound_claim(c, "disk-a", storage_class=None, labels={"app": "win"})  # standard: disk.csi.local
        c.kube.create(VGS, group("no-class", app="win"), NS)
        failed = wait_for(c.kube, VGS, "no-class", lambda o: (o.get("status") or {}).get("error"))
        message = "Failed to set default group snapshot class with error cannot find default group snapshot class"
        assert failed["status"]["error"]["message"] == message and "readyToUse" not in failed["status"]
        assert wait_event(c.kube, "no-class", "SetDefaultGroupSnapshotClassFailed")["message"] == message

        # a class made by hand does not give the driver the capability
        c.kube.create(VGS_CLASS, {"metadata": {"name": "disk-groups"}, "driver": DISK, "deletionPolicy": "Delete"})
        c.kube.create(VGS, group("by-hand", "disk-groups", app="win"), NS)
        refused = wait_for(c.kube, VGS, "by-hand", lambda o: (o.get("status") or {}).get("error"))
        assert refused["status"]["error"]["message"].endswith(
            '"rpc error: code = Unimplemented desc = unknown service csi.v1.GroupController"'
        )
