"""Static, pre-bound volumes in the local cluster's driver, and ``movers.kube.volumes.rebind_volume`` handing a
restored Block volume to a Filesystem claim of another name: same storage, no copy, nothing deleted early."""

from __future__ import annotations

import pytest

from localcluster.controllers import names as n
from localcluster.controllers.kube import PV, PVC
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import volumes
from tests.localcluster.test_controllers_helpers import (
    NS,
    bound,
    gone,
    local_cluster,
    make_bound_claim,
    wait_event,
    wait_for,
    write_volume,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("static")) as c:
        yield c


def test_rebind_hands_the_storage_to_a_filesystem_claim_and_honours_the_policy_after(cluster):
    c = cluster
    claim, pv = make_bound_claim(c, "restored-tmp")
    handle = pv["spec"]["csi"]["volumeHandle"]
    write_volume(c, handle, [(4096, b"restored bytes")])
    labels = m.run_labels("restore-1")

    got = volumes.rebind_volume(
        c.served.client,
        NS,
        "restored-tmp",
        m.Handover("data", "Filesystem"),
        labels=labels,
        annotations={"note": "x"},
        timeout=20,
    )

    assert (got.claim, got.volume_handle, got.replaced) == ("data", handle, False)
    new_claim = c.kube.get(PVC, "data", NS)
    assert bound(new_claim) and new_claim["spec"]["volumeName"] == got.volume
    assert new_claim["spec"]["volumeMode"] == "Filesystem" and new_claim["metadata"]["annotations"]["note"] == "x"
    new_pv = c.kube.get(PV, got.volume)
    assert new_pv["spec"]["volumeMode"] == "Filesystem" and new_pv["spec"]["csi"]["fsType"] == "ext4"
    assert new_pv["spec"]["claimRef"]["uid"] == new_claim["metadata"]["uid"]
    assert new_pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete", "the original policy is restored"
    assert new_pv["metadata"]["labels"][m.RUN_LABEL] == "restore-1"
    assert n.FIN_PV_PROTECTION in new_pv["metadata"]["finalizers"]
    assert c.kube.get(PV, pv["metadata"]["name"]) is None and c.kube.get(PVC, "restored-tmp", NS) is None
    with open(c.store.volume_path(handle), "rb") as f:
        f.seek(4096)
        assert f.read(14) == b"restored bytes"

    c.core.delete_namespaced_persistent_volume_claim("data", NS)  # Delete again: the storage goes with the claim
    wait_for(c.kube, PV, got.volume, gone, namespace=None)
    assert not c.store.volume_path(handle).exists()


def test_rebind_refuses_an_existing_claim_unless_replacing(cluster):
    c = cluster
    make_bound_claim(c, "old-data")
    _, pv = make_bound_claim(c, "new-tmp")
    with pytest.raises(k.ConflictError, match="already exists"):
        volumes.rebind_volume(c.served.client, NS, "new-tmp", m.Handover("old-data", "Block"), timeout=20)
    assert c.kube.get(PV, pv["metadata"]["name"])["spec"]["persistentVolumeReclaimPolicy"] == "Delete", "untouched"

    got = volumes.rebind_volume(
        c.served.client, NS, "new-tmp", m.Handover("old-data", "Block", replace_existing=True), timeout=20
    )
    assert got.replaced and got.volume_handle == pv["spec"]["csi"]["volumeHandle"]
    assert c.kube.get(PVC, "old-data", NS)["spec"]["volumeName"] == got.volume


def test_retain_drops_the_provisioner_finalizer_and_mismatched_static_claims_wait(cluster):
    c = cluster
    _, pv = make_bound_claim(c, "kept")
    name = pv["metadata"]["name"]
    assert n.FIN_PROVISIONER in pv["metadata"]["finalizers"]
    k.merge_patch(c.served.client, "PersistentVolume", None, name, m.reclaim_policy_patch("Retain"))
    wait_for(c.kube, PV, name, lambda o: n.FIN_PROVISIONER not in o["metadata"]["finalizers"], namespace=None)

    c.kube.create(PVC, m.prebound_pvc("thief", NS, m.ClaimedVolume(name, "16Mi", "csi-hostpath-sc", "Block")), NS)
    assert "already bound to a different claim" in wait_event(c.kube, "thief", "FailedBinding")["message"]

    static = m.rebound_pv("static-fs", pv, NS, m.Handover("wrong-mode", "Filesystem"))
    c.kube.create(PV, {k_: v for k_, v in static.items() if k_ not in ("apiVersion", "kind")})
    c.kube.create(
        PVC, m.prebound_pvc("wrong-mode", NS, m.ClaimedVolume("static-fs", "16Mi", "csi-hostpath-sc", "Block")), NS
    )
    assert "volumeMode" in wait_event(c.kube, "wrong-mode", "VolumeMismatch")["message"]
    assert c.kube.get(PVC, "wrong-mode", NS)["status"].get("phase") != "Bound"
    # the PV controller marks a new PV Available on its own sync, not before it reports the claim's mismatch
    wait_for(
        c.kube,
        PV,
        "static-fs",
        lambda o: o is not None and (o.get("status") or {}).get("phase") == "Available",
        namespace=None,
    )
