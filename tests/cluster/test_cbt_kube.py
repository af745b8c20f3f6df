"""The CBT path looked up from Kubernetes objects (``--kube``) on the local API emulator.

VolumeSnapshot -> VolumeSnapshotContent (driver, handle) -> SnapshotMetadataService (address,
audience, base64 CA) -> TokenRequest for that audience -> the SnapshotMetadata server, which
validates the token by a TokenReview against the same emulator.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from localcluster.kubeapi.testing import serve
from localcluster.snapshot_metadata import ImageSnapshot, InMemoryCatalog, SnapshotMetadataServer
from localcluster.snapshot_metadata.kube_auth import TokenReviewValidator
from movers.cbt import discovery
from movers.errors import CbtUnavailableError, MoverError
from movers.kube import snapshots
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
DRIVER = "hostpath.csi.k8s.io"
AUDIENCE = "sms-audience"
NS = "apps"
GROUP, VERSION = "snapshot.storage.k8s.io", "v1"


def add_snapshot(
    kube, name: str, handle: str, ready: bool = True, error: str | None = None, volume_handle: str = "vol-handle-1"
) -> None:
    custom = kube.custom
    content = f"snapcontent-{name}"
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "volumesnapshotcontents",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content},
            "spec": {
                "driver": DRIVER,
                "deletionPolicy": "Delete",
                "source": {"volumeHandle": volume_handle},
                "volumeSnapshotRef": {"name": name, "namespace": NS},
            },
        },
    )
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "volumesnapshots",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VolumeSnapshot",
            "metadata": {"name": name},
            "spec": {"source": {"persistentVolumeClaimName": "data"}},
        },
    )
    set_ready(kube, name, handle, ready, error)


def set_ready(kube, name: str, handle: str, ready: bool, error: str | None = None) -> None:
    custom = kube.custom
    content = f"snapcontent-{name}"
    cstatus = {"readyToUse": ready, "restoreSize": 16 * MiB, **({"snapshotHandle": handle} if ready else {})}
    custom.patch_cluster_custom_object_status(GROUP, VERSION, "volumesnapshotcontents", content, {"status": cstatus})
    status = {"boundVolumeSnapshotContentName": content, "readyToUse": ready, "restoreSize": "16Mi"}
    if error:
        status["error"] = {"message": error}
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, "volumesnapshots", name, {"status": status})


@pytest.fixture
def cluster(tmp_path):
    with _cluster(tmp_path) as found:
        yield found


@contextlib.contextmanager
def _cluster(tmp_path, sidecar: str = "v1"):
    """The emulator with two snapshots of one volume and a SnapshotMetadata server for them; ``sidecar="v0.1.0"``:
    the Kubernetes 1.33 alpha one (a v1alpha1 service, the delta's base named by VolumeSnapshot name)."""
    legacy = sidecar == "v0.1.0"
    cbt_version = "v1alpha1" if legacy else "v1beta1"
    with serve(tmp_path, served_versions={"cbt.storage.k8s.io": (cbt_version,)}) as kube:
        kube.core.create_namespace({"metadata": {"name": NS}})
        kube.core.create_namespace({"metadata": {"name": "backup"}})
        kube.core.create_namespaced_service_account("backup", {"metadata": {"name": "mover"}})
        # what the metadata server's SubjectAccessReview checks for the mover's token
        kube.grant(
            NS,
            "backup/mover",
            [{"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get"]}],
        )
        base_img, target_img = tmp_path / "base.img", tmp_path / "target.img"
        make_image(base_img, 16 * MiB, seed=31)
        shutil.copy(base_img, target_img)
        write_blocks(target_img, [4096 * 9, 7 * MiB, 16 * MiB - 4096], seed=32)
        catalog = InMemoryCatalog()
        catalog.add(ImageSnapshot(base_img, namespace=NS, name="snap-1", handle="handle-1", volume_id="v"))
        catalog.add(ImageSnapshot(target_img, namespace=NS, name="snap-2", handle="handle-2", volume_id="v"))
        server = SnapshotMetadataServer(catalog, TokenReviewValidator(kube.client, AUDIENCE), base_by_name=legacy)
        with server:
            kube.custom.create_cluster_custom_object(
                "cbt.storage.k8s.io",
                cbt_version,
                "snapshotmetadataservices",
                {
                    "apiVersion": f"cbt.storage.k8s.io/{cbt_version}",
                    "kind": "SnapshotMetadataService",
                    "metadata": {"name": DRIVER},
                    "spec": {
                        "address": server.address,
                        "audience": AUDIENCE,
                        "caCert": base64.b64encode(server.ca_pem).decode(),
                    },
                },
            )
            add_snapshot(kube, "snap-1", "handle-1")
            add_snapshot(kube, "snap-2", "handle-2")
            yield kube, server, base_img, target_img


def cli(kube, *args, check=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBERNETES_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "movers", *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == check, proc.stderr
    return proc


def kube_args(kube, snapshot):
    return [
        "--kube",
        "--kubeconfig",
        kube.kubeconfig,
        "--namespace",
        NS,
        "--snapshot",
        snapshot,
        "--service-account",
        "backup/mover",
    ]


def test_discovery_reads_the_service_and_snapshot(cluster):
    kube, server, *_ = cluster
    sms = discovery.snapshot_metadata_service(kube.client, DRIVER)
    assert (sms.address, sms.audience, sms.ca_pem, sms.version) == (server.address, AUDIENCE, server.ca_pem, "v1beta1")
    ref = snapshots.resolve_snapshot(kube.client, NS, "snap-2")
    assert (ref.driver, ref.handle, ref.ready, ref.source_pvc, ref.restore_size) == (
        DRIVER,
        "handle-2",
        True,
        "data",
        16 * MiB,
    )
    assert ref.source_volume_handle == "vol-handle-1"
    with pytest.raises(CbtUnavailableError, match="no SnapshotMetadataService"):
        discovery.snapshot_metadata_service(kube.client, "other.csi.example")


def test_wait_for_readiness(cluster):
    kube, *_ = cluster
    add_snapshot(kube, "snap-3", "handle-3", ready=False)
    timer = threading.Timer(0.3, set_ready, (kube, "snap-3", "handle-3", True))
    timer.start()
    try:
        ref = discovery.wait_snapshot_ready(kube.client, NS, "snap-3", timeout=20)
    finally:
        timer.cancel()
    assert ref.ready and ref.handle == "handle-3"
    add_snapshot(kube, "snap-4", "handle-4", ready=False, error="driver says: out of space")
    with pytest.raises(MoverError, match="not ready after 1 s: driver says: out of space"):
        discovery.wait_snapshot_ready(kube.client, NS, "snap-4", timeout=1)


def test_kube_backup_full_then_delta_restores_byte_identical(cluster, tmp_path):
    kube, server, base_img, target_img = cluster
    repo = f"file://{tmp_path}/repo"
    cli(kube, "init", "--insecure-no-encryption", "--repo", repo)
    common = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    full = json.loads(cli(kube, *common, "--device", base_img, *kube_args(kube, "snap-1")).stdout)
    assert full["change_source"] == "cbt-allocated" and full["snapshot_handle"] == "handle-1"
    assert full["pv_volume_handle"] == "vol-handle-1", "--kube records the content's source volume"
    inc = json.loads(
        cli(kube, *common, "--device", target_img, *kube_args(kube, "snap-2"), "--base-handle", "handle-1").stdout
    )
    assert (
        inc["mode"] == "incremental-cbt" and inc["snapshot_handle"] == "handle-2" and inc["changed_bytes"] == 3 * 4096
    )
    out = tmp_path / "restored.img"
    cli(kube, "restore", "--repo", repo, "--volume", "apps/data", "--device", out)
    assert sha256_file(out) == sha256_file(target_img)
    listing = json.loads(cli(kube, "ls", "--repo", repo, "--json").stdout)["backups"]
    assert [b["snapshot_handle"] for b in listing] == ["handle-1", "handle-2"]
    assert server.calls["GetMetadataAllocated"] == 1 and server.calls["GetMetadataDelta"] == 1


def test_a_v1alpha1_service_is_asked_for_the_delta_by_the_base_snapshot_name(tmp_path):
    """The v0.1.0 sidecar reads GetMetadataDelta field 3 as the base's VolumeSnapshot name: the mover sends
    --base-snapshot once that snapshot is checked to hold --base-handle; without a name, or when the name is another
    snapshot now, no delta is asked for and the backup is full from the allocated blocks, saying why."""
    with _cluster(tmp_path, "v0.1.0") as (kube, server, base_img, target_img):
        repo = f"file://{tmp_path}/repo"
        cli(kube, "init", "--insecure-no-encryption", "--repo", repo)
        common = ["backup", "--repo", repo, "--volume", "apps/data", "--json", "--device"]
        cli(kube, *common, base_img, *kube_args(kube, "snap-1"))
        since = [*common, target_img, *kube_args(kube, "snap-2"), "--base-handle", "handle-1"]
        inc = json.loads(cli(kube, *since, "--base-snapshot", "snap-1").stdout)
        assert (inc["mode"], inc["changed_bytes"], inc.get("cbt_fallback")) == ("incremental-cbt", 3 * 4096, None), inc
        assert server.last_request.base_snapshot_id == "snap-1", "the name, not the handle"
        asked = len(server.requests)
        for extra, why in (
            ([], "names a delta's base by VolumeSnapshot and none was given for base handle-1 (--base-snapshot)"),
            (["--base-snapshot", "snap-2"], f"VolumeSnapshot {NS}/snap-2 is another snapshot now (handle handle-2"),
            (["--base-snapshot", "gone"], f"the base VolumeSnapshot {NS}/gone no longer exists"),
        ):
            doc = json.loads(cli(kube, *since, *extra).stdout)
            assert (doc["mode"], doc["change_source"]) == ("full", "cbt-allocated"), doc
            assert why in doc["cbt_fallback"] and "v1alpha1" in doc["cbt_fallback"], doc["cbt_fallback"]
        assert [r.method for r in server.requests[asked:]] == ["GetMetadataAllocated"] * 3

        # extents: the lister's -p names the base, which is what this service reads; a handle alone is refused
        summary = json.loads(cli(kube, "extents", *kube_args(kube, "snap-2"), "-p", "snap-1").stdout.splitlines()[-1])
        assert summary["summary"]["extents"] == 3 and server.last_request.base_snapshot_id == "snap-1"
        bad = cli(kube, "extents", *kube_args(kube, "snap-2"), "--base-handle", "handle-1", check=9)
        assert "none was given for base handle-1 (--base-snapshot)" in bad.stderr, bad.stderr


def test_kube_extents_and_token_audience(cluster):
    kube, server, *_ = cluster
    out = cli(kube, "extents", *kube_args(kube, "snap-2"), "--base-handle", "handle-1").stdout
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert summary["extents"] == 3 and summary["bytes"] == 3 * 4096
    # a token the emulator issued for another audience is refused by the service's TokenReview
    body = {"spec": {"audiences": ["someone-else"], "expirationSeconds": 600}}
    token = kube.core.create_namespaced_service_account_token("mover", "backup", body).status.token
    tfile = kube.kubeconfig.parent / "wrong-token"
    tfile.write_text(token)
    bad = cli(kube, "extents", *kube_args(kube, "snap-2"), "--cbt-token-file", tfile, check=6)
    assert "UNAUTHENTICATED" in bad.stderr and token not in bad.stderr


def test_old_cluster_with_a_v1alpha1_service_is_found_with_the_caveat(tmp_path, caplog):
    with serve(tmp_path, served_versions={"cbt.storage.k8s.io": ("v1alpha1",)}) as kube:
        kube.custom.create_cluster_custom_object(
            "cbt.storage.k8s.io",
            "v1alpha1",
            "snapshotmetadataservices",
            {
                "apiVersion": "cbt.storage.k8s.io/v1alpha1",
                "kind": "SnapshotMetadataService",
                "metadata": {"name": DRIVER},
                "spec": {"address": "sms.example:6443", "audience": "aud", "caCert": base64.b64encode(b"PEM").decode()},
            },
        )
        sms = discovery.snapshot_metadata_service(kube.client, DRIVER)
    assert sms.version == "v1alpha1" and sms.legacy and sms.address == "sms.example:6443"
    assert "read the delta base as a snapshot name" in caplog.text


def test_a_refused_kubernetes_call_is_exit_code_6_with_the_apis_message(cluster, tmp_path):
    kube, *_ = cluster
    bad = tmp_path / "bad-kubeconfig"
    bad.write_text(kube.kubeconfig.read_text().replace(kube.api.token, "revoked-token"))
    args = ["--kube", "--kubeconfig", bad, "--namespace", NS, "--snapshot", "snap-1", "--service-account", "backup/m"]
    proc = cli(kube, "extents", *args, check=6)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("cbt-mover: error: VolumeSnapshot apps/snap-1: 401 "), line
    assert "revoked-token" not in proc.stderr


def test_kube_backup_of_a_snapshot_of_another_volume_is_full(cluster, tmp_path):
    """The PVC now bound to another volume (its snapshot's content names another source handle): the
    base of the last backup is not asked for a delta; a full backup from the allocated blocks."""
    kube, server, base_img, target_img = cluster
    repo = f"file://{tmp_path}/repo"
    cli(kube, "init", "--insecure-no-encryption", "--repo", repo)
    server.catalog.add(
        ImageSnapshot(target_img, namespace=NS, name="snap-new-volume", handle="handle-3", volume_id="w")
    )
    add_snapshot(kube, "snap-new-volume", "handle-3", volume_handle="vol-handle-2")
    common = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    cli(kube, *common, "--device", base_img, *kube_args(kube, "snap-1"))
    doc = json.loads(
        cli(
            kube, *common, "--device", target_img, *kube_args(kube, "snap-new-volume"), "--base-handle", "handle-1"
        ).stdout
    )
    assert (doc["mode"], doc["change_source"], doc["pv_volume_handle"]) == ("full", "cbt-allocated", "vol-handle-2")
    assert "volume handle vol-handle-2, the base's vol-handle-1" in doc["cbt_fallback"]
    assert server.calls.get("GetMetadataDelta", 0) == 0 and server.calls["GetMetadataAllocated"] == 2


def test_kube_backup_without_cbt_is_a_scan_that_records_the_snapshot(cluster, tmp_path):
    """A driver without a SnapshotMetadataService (no CBT): a scan, whose manifest still records the snapshot
    and source volume the mover looked up, like a CBT backup's (the next backup's lineage needs them)."""
    kube, server, base_img, _ = cluster
    kube.custom.delete_cluster_custom_object("cbt.storage.k8s.io", "v1beta1", "snapshotmetadataservices", DRIVER)
    repo = f"file://{tmp_path}/repo"
    cli(kube, "init", "--insecure-no-encryption", "--repo", repo)
    common = ["backup", "--repo", repo, "--volume", "apps/data", "--json", "--device", base_img]
    doc = json.loads(cli(kube, *common, *kube_args(kube, "snap-1")).stdout)
    assert (doc["change_source"], doc["mode"]) == ("scan", "full")
    assert "no SnapshotMetadataService" in doc["cbt_fallback"]
    assert (doc["snapshot_handle"], doc["pv_volume_handle"]) == ("handle-1", "vol-handle-1")
    (listed,) = json.loads(cli(kube, "ls", "--repo", repo, "--json").stdout)["backups"]
    assert listed["snapshot_handle"] == "handle-1"
    assert server.calls.get("GetMetadataAllocated", 0) == 0


def test_the_listers_own_command_line_works(cluster):
    """snapshot-metadata-lister's flags as its usage prints them: no --kube, no address (found from the cluster),
    the previous snapshot by name (-p, resolved to its handle) or by CSI handle (-P), Go's single-dash spellings."""
    kube, server, *_ = cluster
    who = ["-kubeconfig", kube.kubeconfig, "-service-account", "mover", "-service-account-namespace", "backup"]
    by_name = cli(kube, "extents", "-n", NS, "-s", "snap-2", "-p", "snap-1", *who, "-o", "json").stdout
    by_handle = cli(kube, "extents", "-n", NS, "-s", "snap-2", "-P", "handle-1", *who, "-o", "json").stdout
    assert by_name == by_handle
    tuples = [(t.get("byte_offset", 0), t["size_bytes"]) for r in json.loads(by_name) for t in r["block_metadata"]]
    assert tuples == [(4096 * 9, 4096), (7 * MiB, 4096), (16 * MiB - 4096, 4096)]
    assert server.calls["GetMetadataDelta"] == 2 and server.calls["GetMetadataAllocated"] == 0
    table = cli(kube, "extents", "--namespace", NS, "--snapshot", "snap-1", *who, "--output-format", "table").stdout
    assert table.splitlines()[0].split() == ["Record#", "VolCapBytes", "BlockMetadataType", "ByteOffset", "SizeBytes"]
    assert server.calls["GetMetadataAllocated"] == 1
    missing = cli(kube, "extents", "-n", NS, "-s", "snap-2", "-p", "gone", *who, check=3)
    assert missing.stderr == "cbt-mover: error: --previous-snapshot: reading VolumeSnapshot apps/gone not found\n"
    half = cli(
        kube,
        "extents",
        "-n",
        NS,
        "-s",
        "snap-2",
        "-kubeconfig",
        kube.kubeconfig,
        "--service-account-namespace",
        "backup",
        check=2,
    )
    assert "--service-account-namespace needs --service-account NAME" in half.stderr


def test_restore_in_place_by_a_cbt_delta_reads_only_its_ranges_and_falls_back_to_compare_when_refused(
    cluster, tmp_path
):
    """``restore --overwrite if-changed`` with the live volume's VolumeSnapshot and the backup's handle: the writer
    asks GetMetadataDelta as a mover does (``--kube``: the snapshot, the service, a TokenRequest) and reads, fetches
    and writes only its ranges; a delta the service refuses (a base of another volume: INVALID_ARGUMENT) makes it
    compare the whole device instead, saying why. Either way the device is bit-exact with the backup."""
    kube, server, base_img, target_img = cluster
    repo = f"file://{tmp_path}/repo"
    cli(kube, "init", "--insecure-no-encryption", "--repo", repo)
    backup = ["backup", "--repo", repo, "--volume", "apps/data", "--json", "--device", base_img]
    cli(kube, *backup, *kube_args(kube, "snap-1"))
    live = tmp_path / "live.img"
    shutil.copy(target_img, live)  # the live volume, as snap-2 took it: 3 blocks differ from the backup's snapshot
    restore = ["restore", "--repo", repo, "--volume", "apps/data", "--device", live, "--overwrite", "if-changed"]
    doc = json.loads(cli(kube, *restore, *kube_args(kube, "snap-2"), "--base-handle", "handle-1", "--json").stdout)
    assert (doc["path"], doc.get("cbt_fallback")) == ("cbt", None), doc
    assert doc["compared_bytes"] == doc["written_bytes"] + doc["zeroed_bytes"] == 3 * 4096, doc
    assert sha256_file(live) == sha256_file(base_img)
    assert server.calls["GetMetadataDelta"] == 1 and server.last_request.base_snapshot_id == "handle-1"

    server.catalog.add(ImageSnapshot(target_img, namespace=NS, name="snap-other", handle="handle-3", volume_id="w"))
    add_snapshot(kube, "snap-other", "handle-3", volume_handle="vol-handle-2")
    shutil.copy(target_img, live)
    proc = cli(kube, *restore, *kube_args(kube, "snap-other"), "--base-handle", "handle-1", "--json")
    doc = json.loads(proc.stdout)
    assert doc["path"] == "compare" and "INVALID_ARGUMENT" in doc["cbt_fallback"], doc
    assert doc["compared_bytes"] >= 16 * MiB and doc["written_bytes"] + doc["zeroed_bytes"] == 3 * 4096, doc
    assert sha256_file(live) == sha256_file(base_img)
    assert "comparing the device with the backup instead" in proc.stderr
