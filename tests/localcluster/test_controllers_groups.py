"""The local cluster's group snapshot controller: members named and linked exactly as upstream, per served version."""

from __future__ import annotations

import hashlib

import pytest

from localcluster.controllers import names as n
from localcluster.controllers.kube import PV, VGS, VGS_CLASS, VGSC, VS, VSC
from tests.localcluster.test_controllers_helpers import (
    DRIVER,
    NS,
    MiB,
    gone,
    local_cluster,
    make_bound_claim,
    ready,
    wait_event,
    wait_for,
)

SERVED = {"v1": ("v1beta1", "v1beta2", "v1"), "v1beta2": ("v1beta1", "v1beta2"), "v1beta1": ("v1beta1",)}


def group(name: str, **labels) -> dict:
    return {"metadata": {"name": name}, "spec": {"source": {"selector": {"matchLabels": labels}}}}


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_group_members_named_linked_and_deleted_as_upstream(tmp_path, version):
    with local_cluster(tmp_path, api={"group_snapshot_versions": SERVED[version]}) as c:
        assert c.ctl.group_version == version
        vgs_res, vgsc_res = VGS.at(version), VGSC.at(version)
        assert c.kube.get(VGS_CLASS.at(version), "csi-hostpath-groupsnapclass")["metadata"]["annotations"] == {
            n.ANN_DEFAULT_GROUP_CLASS: "true"
        }
        _, db_pv = make_bound_claim(c, "db", labels={"app": "shop"})
        _, log_pv = make_bound_claim(c, "log", mode="Filesystem", size="8Mi", labels={"app": "shop"})
        make_bound_claim(c, "other", labels={"app": "else"})
        c.kube.create(vgs_res, group("shop", app="shop"), NS)
        vgs = wait_for(c.kube, vgs_res, "shop", ready)

        uid = vgs["metadata"]["uid"]
        assert vgs["spec"]["volumeGroupSnapshotClassName"] == "csi-hostpath-groupsnapclass"
        assert vgs["metadata"]["finalizers"] == [n.FIN_VGS_BOUND]
        assert set(vgs["status"]) == {"boundVolumeGroupSnapshotContentName", "readyToUse", "creationTime"}
        vgsc = c.kube.get(vgsc_res, vgs["status"]["boundVolumeGroupSnapshotContentName"])
        assert vgsc["metadata"]["name"] == f"groupsnapcontent-{uid}"
        handles = {pv["spec"]["csi"]["volumeHandle"]: pv for pv in (db_pv, log_pv)}
        spec, cstatus = vgsc["spec"], vgsc["status"]
        assert sorted(spec["source"]["volumeHandles"]) == sorted(handles)
        assert (spec["driver"], spec["deletionPolicy"], spec["volumeGroupSnapshotClassName"]) == (
            DRIVER,
            "Delete",
            "csi-hostpath-groupsnapclass",
        )
        assert spec["volumeGroupSnapshotRef"]["uid"] == uid and cstatus["readyToUse"] is True
        if version == "v1beta1":
            assert "volumeSnapshotInfoList" not in cstatus
            entries = cstatus["volumeSnapshotHandlePairList"]
            assert all(set(e) == {"volumeHandle", "snapshotHandle"} for e in entries)
        else:
            assert "volumeSnapshotHandlePairList" not in cstatus
            entries = cstatus["volumeSnapshotInfoList"]
            assert all(e["readyToUse"] is True and isinstance(e["creationTime"], int) for e in entries)
            assert {e["volumeHandle"]: e["restoreSize"] for e in entries} == {
                db_pv["spec"]["csi"]["volumeHandle"]: 16 * MiB,
                log_pv["spec"]["csi"]["volumeHandle"]: 8 * MiB,
            }
        assert {e["volumeHandle"] for e in entries} == set(handles)

        members = {}
        for entry in entries:
            volume = entry["volumeHandle"]
            digest = hashlib.sha256((uid + volume).encode()).hexdigest()
            vs = wait_for(c.kube, VS, f"snapshot-{digest}", ready)
            vsc = wait_for(c.kube, VSC, f"snapcontent-{digest}", ready, namespace=None)
            pv = handles[volume]
            owner = vs["metadata"]["ownerReferences"]
            assert [(o["kind"], o["name"], o["uid"], o["apiVersion"]) for o in owner] == [
                ("VolumeGroupSnapshot", "shop", uid, f"groupsnapshot.storage.k8s.io/{version}")
            ]
            assert n.FIN_VS_IN_GROUP in vs["metadata"]["finalizers"]
            assert vs["spec"] == {"source": {"persistentVolumeClaimName": pv["spec"]["claimRef"]["name"]}}
            assert vs["status"]["volumeGroupSnapshotName"] == "shop"
            assert vs["status"]["boundVolumeSnapshotContentName"] == f"snapcontent-{digest}"
            assert vs["status"]["restoreSize"] == pv["spec"]["capacity"]["storage"]
            vspec, vstatus = vsc["spec"], vsc["status"]
            assert vsc["metadata"]["annotations"][n.ANN_GROUP_HANDLE] == cstatus["volumeGroupSnapshotHandle"]
            assert vstatus["volumeGroupSnapshotHandle"] == cstatus["volumeGroupSnapshotHandle"]
            assert vstatus["snapshotHandle"] == entry["snapshotHandle"]
            assert vspec["source"] == {"volumeHandle": volume} and vspec["sourceVolumeMode"] == pv["spec"]["volumeMode"]
            assert (vspec["driver"], vspec["deletionPolicy"]) == (DRIVER, "Delete")
            assert "volumeSnapshotClassName" not in vspec and "volumeSnapshotClassName" not in vs["spec"]
            ref = vspec["volumeSnapshotRef"]
            assert (ref["name"], ref["namespace"], ref["uid"]) == (vs["metadata"]["name"], NS, vs["metadata"]["uid"])
            assert c.store.snapshot_path(vstatus["snapshotHandle"]).exists()
            members[vs["metadata"]["name"]] = vsc
        assert len({m["status"]["creationTime"] for m in members.values()}) == 1  # one instant for the group

        # a member cannot be deleted on its own
        member = sorted(members)[0]
        c.kube.delete(VS, member, NS)
        event = wait_event(c.kube, member, "SnapshotDeletePending")
        assert (
            f"deletion of the individual volume snapshot {NS}/{member} is not allowed as it belongs to group"
            f" snapshot {NS}/shop" in event["message"]
        )
        pending = c.kube.get(VS, member, NS)
        assert pending["metadata"]["deletionTimestamp"] and n.FIN_VS_IN_GROUP in pending["metadata"]["finalizers"]
        assert c.kube.get(VSC, members[member]["metadata"]["name"]) is not None

        # deleting the group removes everything (policy Delete)
        c.kube.delete(vgs_res, "shop", NS)
        wait_for(c.kube, vgs_res, "shop", gone)
        wait_for(c.kube, vgsc_res, vgsc["metadata"]["name"], gone, namespace=None)
        for name, vsc in members.items():
            wait_for(c.kube, VS, name, gone)
            wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
            assert not c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()
        assert c.kube.get(PV, db_pv["metadata"]["name"]) is not None  # the volumes stay


def _as_delete(c, res, objs: list[dict]) -> None:
    """Patch each content of ``objs`` to ``deletionPolicy: Delete`` (what the product does before a deletion)."""
    for obj in objs:
        c.kube.patch(res, obj["metadata"]["name"], {"spec": {"deletionPolicy": "Delete"}})


def _retain_group(c, name: str = "kept") -> tuple[dict, list[dict], list[dict]]:
    """A ready group of claims a and b in a Retain class: (its content, its members, their contents)."""
    if c.kube.get(VGS_CLASS, "keep") is None:
        c.kube.create(VGS_CLASS, {"metadata": {"name": "keep"}, "driver": DRIVER, "deletionPolicy": "Retain"})
        make_bound_claim(c, "a", labels={"app": "x"})
        make_bound_claim(c, "b", labels={"app": "x"})
    body = group(name, app="x")
    body["spec"]["volumeGroupSnapshotClassName"] = "keep"
    c.kube.create(VGS, body, NS)
    vgs = wait_for(c.kube, VGS, name, ready)
    uid = vgs["metadata"]["uid"]
    # upstream: the common controller puts the content finalizer on every bound content, whatever its policy
    vgsc = wait_for(
        c.kube,
        VGSC,
        vgs["status"]["boundVolumeGroupSnapshotContentName"],
        lambda o: o["metadata"].get("finalizers"),
        None,
    )
    assert vgsc["metadata"]["finalizers"] == [n.FIN_VGSC_BOUND] and vgs["metadata"]["finalizers"] == [n.FIN_VGS_BOUND]
    members = [
        vs for vs in c.kube.list(VS, NS)[0] if any(r["uid"] == uid for r in vs["metadata"].get("ownerReferences") or [])
    ]
    contents = [
        wait_for(c.kube, VSC, vs["status"]["boundVolumeSnapshotContentName"], ready, namespace=None) for vs in members
    ]
    assert len(members) == 2 and {v["spec"]["deletionPolicy"] for v in contents} == {"Retain"}
    for vs in members:  # no bound finalizer on a snapshot whose content is Retain
        member = wait_for(
            c.kube, VS, vs["metadata"]["name"], lambda o: n.FIN_VS_AS_SOURCE in o["metadata"]["finalizers"]
        )
        assert n.FIN_VS_BOUND not in member["metadata"]["finalizers"], member["metadata"]
    return vgsc, members, contents


def test_group_with_retain_policy_keeps_contents_and_snapshots_until_deleted_as_delete(tmp_path):
    with local_cluster(tmp_path) as c:
        vgsc, members, contents = _retain_group(c)
        c.kube.delete(VGS, "kept", NS)
        wait_for(c.kube, VGS, "kept", gone)
        for vs in members:
            wait_for(c.kube, VS, vs["metadata"]["name"], gone)
        retained = c.kube.get(VGSC, vgsc["metadata"]["name"])
        assert retained["metadata"]["annotations"][n.ANN_VGS_BEING_DELETED] == "yes"
        assert retained["metadata"]["finalizers"] == [n.FIN_VGSC_BOUND]
        for vsc in contents:
            kept = c.kube.get(VSC, vsc["metadata"]["name"])
            assert kept["metadata"]["annotations"][n.ANN_VS_BEING_DELETED] == "yes"
            assert kept["metadata"]["finalizers"] == [n.FIN_VSC_BOUND]
            assert c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()

        # the member contents, deleted as Delete: gone, but a member's snapshot goes with its group content only
        for vsc in contents:
            c.kube.patch(VSC, vsc["metadata"]["name"], {"spec": {"deletionPolicy": "Delete"}})
            c.kube.delete(VSC, vsc["metadata"]["name"])
            wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
            assert c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()
        # the group content, deleted as Delete: DeleteVolumeGroupSnapshot removes every member's snapshot
        c.kube.patch(VGSC, vgsc["metadata"]["name"], {"spec": {"deletionPolicy": "Delete"}})
        c.kube.delete(VGSC, vgsc["metadata"]["name"])
        wait_for(c.kube, VGSC, vgsc["metadata"]["name"], gone, namespace=None)
        for vsc in contents:
            assert not c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()


def test_group_content_deleted_as_retain_keeps_the_snapshots(tmp_path):
    with local_cluster(tmp_path) as c:
        vgsc, members, contents = _retain_group(c)
        c.kube.delete(VGS, "kept", NS)
        wait_for(c.kube, VGS, "kept", gone)
        c.kube.delete(VGSC, vgsc["metadata"]["name"])
        wait_for(c.kube, VGSC, vgsc["metadata"]["name"], gone, namespace=None)
        for vsc in contents:
            assert c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()


def test_retain_group_patched_to_delete_before_deletion_leaves_nothing(tmp_path):
    """What the product does (external-snapshotter's documented way): the group content and the member contents
    patched to Delete, then the group deleted: contents and snapshots go; patching the members only is not enough."""
    with local_cluster(tmp_path) as c:
        vgsc, members, contents = _retain_group(c)
        _as_delete(c, VGSC, [vgsc])
        _as_delete(c, VSC, contents)
        c.kube.delete(VGS, "kept", NS)
        wait_for(c.kube, VGS, "kept", gone)
        wait_for(c.kube, VGSC, vgsc["metadata"]["name"], gone, namespace=None)
        for vs, vsc in zip(members, contents, strict=True):
            wait_for(c.kube, VS, vs["metadata"]["name"], gone)
            wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
            assert not c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()

        vgsc, members, contents = _retain_group(c, "members-only")
        _as_delete(c, VSC, contents)
        c.kube.delete(VGS, "members-only", NS)
        wait_for(c.kube, VGS, "members-only", gone)
        for vsc in contents:
            wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
            assert c.store.snapshot_path(vsc["status"]["snapshotHandle"]).exists()
        assert c.kube.get(VGSC, vgsc["metadata"]["name"]) is not None


def test_stale_deletion_policy_keeps_contents_patched_right_before_the_deletion(tmp_path):
    """The switch: the controller decides by the policy it first saw (upstream's informer cache missing the patch),
    so the patched contents stay (marked being-deleted); deleting them then removes them and the snapshots."""
    with local_cluster(tmp_path, stale_deletion_policy=True) as c:
        vgsc, members, contents = _retain_group(c)
        _as_delete(c, VGSC, [vgsc])
        _as_delete(c, VSC, contents)
        c.kube.delete(VGS, "kept", NS)
        wait_for(c.kube, VGS, "kept", gone)
        for vs in members:
            wait_for(c.kube, VS, vs["metadata"]["name"], gone)
        kept = c.kube.get(VGSC, vgsc["metadata"]["name"])
        assert (
            kept["metadata"]["annotations"][n.ANN_VGS_BEING_DELETED] == "yes"
            and "deletionTimestamp" not in kept["metadata"]
        )
        assert all(c.store.snapshot_path(v["status"]["snapshotHandle"]).exists() for v in contents)
        c.kube.delete(VGSC, vgsc["metadata"]["name"])
        for vsc in contents:
            c.kube.delete(VSC, vsc["metadata"]["name"])
            wait_for(c.kube, VSC, vsc["metadata"]["name"], gone, namespace=None)
        wait_for(c.kube, VGSC, vgsc["metadata"]["name"], gone, namespace=None)
        assert not any(c.store.snapshot_path(v["status"]["snapshotHandle"]).exists() for v in contents)


def test_group_selecting_nothing_reports_then_recovers(tmp_path):
    with local_cluster(tmp_path) as c:
        c.kube.create(VGS, group("waiting", app="late"), NS)
        failed = wait_for(c.kube, VGS, "waiting", lambda o: (o.get("status") or {}).get("error"))
        message = (
            "Failed to set default group snapshot class with error label selector app=late for group snapshot not"
            " applied to any PVC"
        )
        assert failed["status"]["error"]["message"] == message and "readyToUse" not in failed["status"]
        assert wait_event(c.kube, "waiting", "SetDefaultGroupSnapshotClassFailed")["message"] == message
        make_bound_claim(c, "late", labels={"app": "late"})
        done = wait_for(c.kube, VGS, "waiting", ready)
        assert "error" not in done["status"]


def test_no_group_snapshot_crds(tmp_path):
    with local_cluster(tmp_path, api={"group_snapshot_versions": ()}) as c:
        assert c.ctl.group_version is None and c.ctl.groups is None
        make_bound_claim(c, "data")
        c.kube.create(VS, {"metadata": {"name": "s"}, "spec": {"source": {"persistentVolumeClaimName": "data"}}}, NS)
        wait_for(c.kube, VS, "s", ready)
