"""``movers.backup.bases.SnapshotCheck``: whether a backup's recorded snapshot can still be a delta's base, read from
the API emulator (the VolumeSnapshot of the recorded name, bound to a content with the recorded handle)."""

from __future__ import annotations

from localcluster.kubeapi.testing import serve
from movers.backup.bases import SnapshotCheck
from movers.repo.manifest import SnapshotIdentity
from tests.cluster.test_cbt_kube import GROUP, NS, VERSION, add_snapshot, set_ready


def _recorded(name: str | None, handle: str | None = "h-1", namespace: str | None = NS) -> SnapshotIdentity:
    return SnapshotIdentity(volume_snapshot=name, namespace=namespace, snapshot_handle=handle)


def test_a_recorded_snapshot_is_a_base_only_while_it_is_the_one_recorded(tmp_path):
    with serve(tmp_path) as kube:
        kube.core.create_namespace({"metadata": {"name": NS}})
        add_snapshot(kube, "s1", "h-1")
        add_snapshot(kube, "s2", "h-2", ready=False)
        check = SnapshotCheck(kube.client)
        assert check.missing(_recorded("s1")) is None
        assert check.missing(_recorded("s1", "h-0")) == (
            f"VolumeSnapshot {NS}/s1 is another snapshot now (handle h-1, the backup recorded h-0)"
        )
        assert check.missing(_recorded("gone")) == f"VolumeSnapshot {NS}/gone no longer exists"
        assert check.missing(_recorded("s2", "h-2")) == f"VolumeSnapshot {NS}/s2 is not ready"
        assert "recorded no VolumeSnapshot for handle h-1" in check.missing(_recorded(None))
        assert "recorded no VolumeSnapshot" in check.missing(_recorded("s1", namespace=None))
        assert check.missing(_recorded("s1", None)) == "it recorded no snapshot handle"

        # the content deleted behind the snapshot's back (a fresh check: one lists each namespace once)
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", "snapcontent-s1")
        assert SnapshotCheck(kube.client).missing(_recorded("s1")) == (
            f"VolumeSnapshot {NS}/s1's VolumeSnapshotContent snapcontent-s1 no longer exists"
        )

        # a snapshot being deleted (a finalizer holds it) is no base either
        add_snapshot(kube, "s3", "h-3")
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", "s3", {"metadata": {"finalizers": ["test/hold"]}}
        )
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", "s3")
        assert SnapshotCheck(kube.client).missing(_recorded("s3", "h-3")) == f"VolumeSnapshot {NS}/s3 is being deleted"
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", "s3", {"metadata": {"finalizers": None}}
        )
        set_ready(kube, "s2", "h-2", True)
        assert SnapshotCheck(kube.client).missing(_recorded("s2", "h-2")) is None


def test_a_restore_takes_the_kept_snapshot_only_while_it_holds_the_backup(tmp_path):
    """``movers.restore.source.snapshot_source`` passes the same check: a snapshot of the recorded name that holds
    another handle (a later run's, under a reused name) sends the restore to the repository, saying why."""
    from movers.restore.source import snapshot_source
    from tests.cluster.test_cbt_kube import DRIVER

    with serve(tmp_path) as kube:
        kube.core.create_namespace({"metadata": {"name": NS}})
        add_snapshot(kube, "s1", "h-1")
        check, cls = SnapshotCheck(kube.client), {"provisioner": DRIVER}
        kept = snapshot_source(check, NS, vars(_recorded("s1", "h-1")), cls)
        assert (kept.source, kept.snapshot, kept.content) == ("snapshot", "s1", "snapcontent-s1")
        other = snapshot_source(check, NS, vars(_recorded("s1", "h-0")), cls)
        assert (other.source, other.snapshot) == ("repository", None)
        assert other.reason == f"VolumeSnapshot {NS}/s1 is another snapshot now (handle h-1, the backup recorded h-0)"
        elsewhere = snapshot_source(check, "other", vars(_recorded("s1", "h-1")), cls)
        assert elsewhere.source == "repository" and "in another namespace than other" in elsewhere.reason
        foreign = snapshot_source(check, NS, vars(_recorded("s1", "h-1")), {"provisioner": "other.csi.example"})
        assert foreign.source == "repository" and "the StorageClass's is other.csi.example" in foreign.reason
