"""``movers.restore.live`` on the local cluster: which in-place volumes CBT can serve (and why not), and the
snapshot of a live claim, deleted in every outcome, also when it cannot be taken."""

from __future__ import annotations

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from movers.backup.bases import SnapshotCheck
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import snapshots
from movers.restore.live import CbtChooser, live_snapshot

IMMEDIATE = "csi-hostpath-immediate"  # claims no pod uses bind at once
RUN = "restore-0123456789abcdef"


@pytest.fixture
def ns(local_cluster, request):
    name = request.node.name.replace("_", "-").lower()[:50].strip("-")
    client.CoreV1Api(local_cluster.client).create_namespace({"metadata": {"name": name}})
    return name


def _bound(api, ns: str, pvc: str, storage_class: str = IMMEDIATE) -> dict:
    """Claim ``ns/pvc`` (8 MiB, Block), once bound; its PV."""
    k.create(api, m.block_pvc(pvc, ns, "8Mi", storage_class))
    bound = wait_until(lambda: k.get(api, "PersistentVolumeClaim", ns, pvc)["spec"].get("volumeName"), 20, "bound")
    return k.get(api, "PersistentVolume", None, bound)


def test_cbt_serves_a_volume_whose_backup_snapshot_holds_its_handle_and_says_why_not_otherwise(local_cluster, ns):
    api = local_cluster.client
    pv, other = _bound(api, ns, "data"), _bound(api, ns, "other")
    k.create(api, m.volume_snapshot("backup-snap", ns, "data"))
    snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "backup-snap", timeout=20)
    handle = snapshots.resolve_snapshot(api, ns, "backup-snap").handle
    recorded = {"volume_snapshot": "backup-snap", "namespace": ns, "snapshot_handle": handle}

    chosen = CbtChooser(api, SnapshotCheck(api)).choose(ns, recorded, pv)
    assert chosen.cbt is not None and chosen.cbt.base_handle == handle, chosen
    assert chosen.cbt.audience and chosen.cbt.snapshot_class and chosen.cbt.base_snapshot is None, chosen
    assert "still holds the backup's snapshot and CSI driver" in chosen.reason and "serves CBT" in chosen.reason

    for given, claim_pv, why in (
        ({**recorded, "snapshot_handle": "another"}, pv, "is another snapshot now"),
        ({**recorded, "volume_snapshot": "gone"}, pv, f"VolumeSnapshot {ns}/gone no longer exists"),
        (recorded, other, f"is of volume {pv['spec']['csi']['volumeHandle']}, not of the claim's"),
    ):
        chosen = CbtChooser(api, SnapshotCheck(api)).choose(ns, given, claim_pv)
        assert chosen.cbt is None and why in chosen.reason, chosen
        assert chosen.reason.endswith("the claim's own volume compared with the backup, only what differs written")

    disk = _bound(api, ns, "on-disk", "disk-immediate")  # a driver without a SnapshotMetadataService
    k.create(api, m.volume_snapshot("disk-snap", ns, "on-disk", "disk-snapclass"))
    snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "disk-snap", timeout=20)
    handle = snapshots.resolve_snapshot(api, ns, "disk-snap").handle
    recorded = {"volume_snapshot": "disk-snap", "namespace": ns, "snapshot_handle": handle}
    chosen = CbtChooser(api, SnapshotCheck(api)).choose(ns, recorded, disk)
    assert chosen.cbt is None and "CSI driver disk.csi.local has no SnapshotMetadataService" in chosen.reason


def test_the_live_claim_s_snapshot_is_ready_inside_and_gone_after_also_when_it_cannot_be_taken(local_cluster, ns):
    api = local_cluster.client
    _bound(api, ns, "data")
    labels = m.run_labels(RUN)
    classes = k.list_objects(api, "VolumeSnapshotClass", None)
    good = next(c["metadata"]["name"] for c in classes if c["driver"] == "hostpath.csi.k8s.io")
    with live_snapshot(api, ns, "live", "data", good, labels, timeout=20) as live:
        assert live.name == "live" and live.why is None
        snap = k.get(api, "VolumeSnapshot", ns, "live")
        assert snap["status"]["readyToUse"] and snap["metadata"]["labels"][m.RUN_LABEL] == RUN
        assert snap["metadata"]["labels"][m.COMPONENT_LABEL] == m.SNAPSHOT
        content = snap["status"]["boundVolumeSnapshotContentName"]
    assert k.find(api, "VolumeSnapshot", ns, "live") is None
    wait_until(lambda: k.find(api, "VolumeSnapshotContent", None, content) is None, 20, "the content gone")

    with pytest.raises(RuntimeError, match="the writer failed"):
        with live_snapshot(api, ns, "live", "data", good, labels, timeout=20) as live:
            raise RuntimeError("the writer failed")
    assert k.find(api, "VolumeSnapshot", ns, "live") is None, "deleted when the block fails too"

    with live_snapshot(api, ns, "live", "data", "no-such-class", labels, timeout=1) as live:
        assert live.name is None and "no-such-class" in live.why and "not found" in live.why, live
    assert k.find(api, "VolumeSnapshot", ns, "live") is None
