"""Golden files of the manifest builders (``UPDATE_GOLDEN=1`` rewrites them) and their contracts."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from movers.backup.request import REQUEST_ENV, BackupRequest, SourceVolume
from movers.kube import manifests as m
from movers.kube import podspec
from movers.kube.volumes import PvIdentity, source_identity
from movers.repo.manifest import VolumeIdentity
from movers.restore.request import CbtDelta, RestoreRequest
from tests import k8svalidate

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
LABELS = m.run_labels("run-1", app="shop")
TOLERATIONS = [{"key": "node-role.example.com/backup", "operator": "Exists", "effect": "NoSchedule"}]
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}
            ]
        }
    }
}


def _cases() -> dict[str, dict]:
    backup = m.backup_args(request_env=REQUEST_ENV, cbt=True)
    return {
        "volume_group_snapshot_v1": m.volume_group_snapshot(
            "vgs-run-1", "shop", {"matchLabels": {"app": "shop"}}, "local-groupclass", "v1", LABELS
        ),
        "volume_group_snapshot_v1beta1_default_class": m.volume_group_snapshot(
            "vgs-run-1",
            "shop",
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["shop"]}]},
            None,
            "v1beta1",
            LABELS,
        ),
        "volume_snapshot": m.volume_snapshot("snap-data", "shop", "data", "local-snapclass", LABELS),
        "pvc_from_snapshot": m.pvc_from_snapshot("read-data", "shop", "snap-data", "32Mi", "local-block", LABELS),
        "block_pvc": m.block_pvc("data", "restored", "32Mi", None, LABELS),
        "allow_volume_mode_change_patch": m.allow_volume_mode_change_patch(),
        "backup_args": {"args": backup},
        "restore_args": {"args": m.restore_args(request_env=REQUEST_ENV)},
        "mover_pod_backup": m.mover_pod(
            "mover-data",
            "shop",
            profile=podspec.MoverProfile(
                image="ghcr.io/example/cbt-mover:1.0",
                service_account="cbt-mover",
                placement=podspec.PodPlacement(tolerations=TOLERATIONS, affinity=AFFINITY),
            ),
            task=podspec.MoverTask(
                args=backup,
                pvc="read-data",
                env={REQUEST_ENV: BACKUP_REQUEST.model_dump_json()},
                cbt_audience="cbt.example",
                active_deadline_seconds=3600,
            ),
            repo=podspec.RepoAccess("backup-repo", ["password"]),
            labels=LABELS,
        ),
        "mover_pod_restore": m.mover_pod(
            "writer-data",
            "restored",
            profile=podspec.MoverProfile(
                image="ghcr.io/example/cbt-mover:1.0",
                service_account="cbt-mover",
                resources={"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                placement=podspec.PodPlacement(node_selector={"kubernetes.io/os": "linux", "pool": "backup"}),
            ),
            task=podspec.MoverTask(
                args=m.restore_args(request_env=REQUEST_ENV),
                env={REQUEST_ENV: RESTORE_REQUEST.model_dump_json()},
                pvc="data",
            ),
            repo=podspec.RepoAccess("backup-repo", ["keyfile", "password"]),
            labels=LABELS,
        ),
        "mover_pod_restore_in_place_by_cbt": m.mover_pod(
            "writer-data",
            "shop",
            profile=podspec.MoverProfile(image="ghcr.io/example/cbt-mover:1.0", service_account="cbt-mover"),
            task=podspec.MoverTask(
                args=m.restore_args(request_env=REQUEST_ENV, cbt=True),
                env={REQUEST_ENV: RESTORE_IN_PLACE_BY_CBT.model_dump_json()},
                pvc="data",
                cbt_audience="cbt.example",
            ),
            repo=podspec.RepoAccess("backup-repo"),
            labels=LABELS,
        ),
        "rebound_pv_filesystem": m.rebound_pv(
            "pvc-1234-filesystem", SOURCE_PV, "restored", m.Handover("data", "Filesystem"), labels=LABELS
        ),
        "prebound_pvc": m.prebound_pvc(
            "data",
            "restored",
            m.ClaimedVolume("pvc-1234-filesystem", "32Mi", "local-block"),
            labels=LABELS,
            annotations={"note": "x"},
        ),
        "restored_patch": m.restored_patch("prod/shop/data", "20260101T000000000000Z-abcdef", "restore-1"),
    }


SOURCE_PV = {
    "metadata": {
        "name": "pvc-1234",
        "annotations": {m.PROVISIONED_BY: "hostpath.csi.k8s.io", "other": "dropped"},
        "finalizers": ["kubernetes.io/pv-protection"],
    },
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "32Mi"},
        "volumeMode": "Block",
        "persistentVolumeReclaimPolicy": "Delete",
        "storageClassName": "local-block",
        "mountOptions": ["noatime"],
        "claimRef": {"name": "data-restore-1", "namespace": "restored", "uid": "u-1"},
        "csi": {
            "driver": "hostpath.csi.k8s.io",
            "volumeHandle": "vol-1",
            "volumeAttributes": {"a": "b"},
            "nodeStageSecretRef": {"name": "s", "namespace": "kube-system"},
        },
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}
                ]
            }
        },
    },
}


def _backup_request() -> BackupRequest:
    """The request of the golden mover pod: what its argv said before it became one env value."""
    pv = dataclasses.replace(source_identity(SOURCE_PV), fs_type="xfs")
    return BackupRequest(
        volume={
            "id": "prod/shop/data", "cluster": "prod", "namespace": "shop", "pvc": "data",
            "pv_volume_handle": pv.pv_volume_handle, "csi_driver": pv.csi_driver, "storage_class": "local-block",
            "volume_mode": "Filesystem", "pv_name": pv.pv_name, "pv_uid": pv.pv_uid, "fs_type": pv.fs_type,
            "node_affinity": pv.node_affinity,
        },
        snapshot={"volume_snapshot": "snap-data", "namespace": "shop", "group_snapshot": "vgs-run-1"},
        changes={"source": "cbt", "base_handle": "snap-handle-0"},
        device=podspec.DEVICE_PATH,
        tags={"cbt-mover.io/run": "run-1", "cbt-mover.io/app": "shop"},
        run_pvcs=["wal", "data"],
    )  # fmt: skip


BACKUP_REQUEST = _backup_request()
RESTORE_REQUEST = RestoreRequest(volume="prod/shop/data", device=podspec.DEVICE_PATH, verify_device=True)
RESTORE_IN_PLACE_BY_CBT = RestoreRequest(
    volume="prod/shop/data",
    device=podspec.DEVICE_PATH,
    verify_device=True,
    overwrite="if-changed",
    cbt=CbtDelta(namespace="shop", snapshot="writer-data", base_handle="snap-0001"),
)


def test_rebound_pv_and_quantities_contract():
    block = m.rebound_pv("pv-b", SOURCE_PV, "ns", m.Handover("c", "Block"))
    assert "fsType" not in block["spec"]["csi"] and "mountOptions" not in block["spec"]
    assert block["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "c",
    }, "no uid: the claim that names the PV binds it"
    assert block["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and "finalizers" not in block["metadata"]
    with pytest.raises(ValueError):
        m.rebound_pv("x", {"spec": {"csi": {"driver": "d"}}}, "ns", m.Handover("c", "Block"))
    with pytest.raises(ValueError):
        m.rebound_pv("x", SOURCE_PV, "ns", m.Handover("c", "Raw"))
    with pytest.raises(ValueError):
        m.reclaim_policy_patch("Keep")
    assert [m.quantity(n) for n in (16 << 20, 1 << 30, 3 << 10, 1000)] == ["16Mi", "1Gi", "3Ki", "1000"]


@pytest.mark.parametrize("name", sorted(_cases()))
def test_golden(name):
    got = json.dumps(_cases()[name], indent=2, sort_keys=True) + "\n"
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(got)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{name} differs from {path} (UPDATE_GOLDEN=1 rewrites it)"


def test_builders_are_pure():
    selector = {"matchLabels": {"app": "shop"}}
    a = m.volume_group_snapshot("g", "ns", selector, None, "v1beta2", LABELS)
    a["spec"]["source"]["selector"]["matchLabels"]["app"] = "other"
    a["metadata"]["labels"]["x"] = "y"
    assert selector == {"matchLabels": {"app": "shop"}} and "x" not in LABELS
    pod = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["backup"], pvc="c"),
        repo=podspec.RepoAccess("r"),
    )
    pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = "9Gi"
    assert m.DEFAULT_RESOURCES["limits"]["memory"] == "1Gi"
    assert _cases() == _cases()


def test_mover_pod_contract():
    pod = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["backup", "--cbt-token-file", "/t"], pvc="c", cbt_audience="aud"),
        repo=podspec.RepoAccess("r"),
    )
    c = pod["spec"]["containers"][0]
    assert c["args"].count("--cbt-token-file") == 1, "an explicit token file is kept"
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert c["securityContext"]["privileged"] is False
    optional = {e["name"] for e in c["env"] if e["valueFrom"]["secretKeyRef"].get("optional")}
    assert {"AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"} <= optional and "AWS_ACCESS_KEY_ID" not in optional
    no_token = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["restore"], pvc="c"),
        repo=podspec.RepoAccess("r"),
    )
    assert "volumeMounts" not in no_token["spec"]["containers"][0]
    assert no_token["spec"]["containers"][0]["args"] == ["restore"]


def test_the_repository_key_is_a_read_only_file_of_the_secret_named_by_path_only():
    pod = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["backup"], pvc="c"),
        repo=podspec.RepoAccess("r", ["password"]),
    )
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    [volume] = [v for v in spec["volumes"] if "secret" in v]
    assert volume == {
        "name": m.REPO_KEY_VOLUME,
        "secret": {
            "secretName": "r",
            "items": [{"key": "password", "path": "password", "mode": 0o400}],
            "defaultMode": 0o400,
            "optional": True,
        },
    }
    assert c["volumeMounts"] == [{"name": m.REPO_KEY_VOLUME, "mountPath": m.REPO_KEY_DIR, "readOnly": True}]
    literal = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert literal == {"CBT_MOVER_PASSWORD_FILE": f"{m.REPO_KEY_DIR}/password"}
    both = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["restore"], pvc="c"),
        repo=podspec.RepoAccess("r", ["keyfile", "password"]),
    )
    files = {e["name"]: e["value"] for e in both["spec"]["containers"][0]["env"] if "value" in e}
    assert files == {
        "CBT_MOVER_PASSWORD_FILE": f"{m.REPO_KEY_DIR}/password",
        "CBT_MOVER_KEY_FILE": f"{m.REPO_KEY_DIR}/keyfile",
    }
    none = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["backup"], pvc="c"),
        repo=podspec.RepoAccess("r"),
    )
    assert [v["name"] for v in none["spec"]["volumes"]] == ["data"], "no key volume for an unencrypted repository"
    with pytest.raises(ValueError, match="passphrase"):
        m.mover_pod(
            "p",
            "ns",
            profile=podspec.MoverProfile(image="i", service_account="s"),
            task=podspec.MoverTask(args=["x"], pvc="c"),
            repo=podspec.RepoAccess("r", ["passphrase"]),
        )


def test_invalid_arguments():
    with pytest.raises(ValueError):
        m.volume_group_snapshot("g", "ns", {}, None, "v1alpha1")
    with pytest.raises(ValueError):
        m.volume_group_snapshot("g", "ns", {}, "", "v1")


def test_args_parse_with_the_cli():
    from movers.cli import build_parser

    args = build_parser().parse_args(m.backup_args(request_env=REQUEST_ENV, cbt=True, repo="s3://b/r"))
    assert (args.command, args.request_env, args.kube, args.repo, args.json) == (
        "backup",
        REQUEST_ENV,
        True,
        "s3://b/r",
        True,
    )
    assert args.result_file == "/dev/termination-log" and args.volume is None and args.device is None
    args = build_parser().parse_args(m.backup_args(request_env=REQUEST_ENV, cbt=False))
    assert not args.kube and not args.scan, "a scan is the request's change source, not a flag"
    args = build_parser().parse_args(m.restore_args(request_env=REQUEST_ENV, repo="s3://b/r"))
    assert (args.command, args.request_env, args.repo, args.json) == ("restore", REQUEST_ENV, "s3://b/r", True)
    assert args.result_file == "/dev/termination-log" and args.volume is None and args.device is None


def test_the_mover_and_writer_pods_carry_their_request_whole():
    """The golden mover and writer pods' requests, each read back from its one env value by the class that wrote it."""
    pod = _cases()["mover_pod_backup"]
    [value] = [e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == REQUEST_ENV]
    assert BackupRequest.model_validate_json(value) == BACKUP_REQUEST
    assert BACKUP_REQUEST.run_pvcs == ["data", "wal"] and BACKUP_REQUEST.volume.node_affinity is not None
    pod = _cases()["mover_pod_restore"]
    [value] = [e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == REQUEST_ENV]
    assert RestoreRequest.model_validate_json(value) == RESTORE_REQUEST, "the writer pod's, the same way"


@pytest.mark.parametrize("name", sorted(_cases()))
def test_built_in_kinds_pass_strict_validation(name):
    manifest = _cases()[name]
    if "kind" not in manifest or not k8svalidate.has_schema(manifest):
        pytest.skip("a patch, an argv or a custom resource (the API emulator checks those by their CRD schema)")
    assert k8svalidate.validate(manifest) == []


def test_every_object_of_a_run_carries_the_recommended_labels():
    cases = _cases()
    components = {
        "volume_group_snapshot_v1": "snapshot",
        "volume_snapshot": "snapshot",
        "pvc_from_snapshot": "reader-claim",
        "block_pvc": "restore-claim",
        "mover_pod_backup": "mover",
        "mover_pod_restore": "writer",
        "rebound_pv_filesystem": "restore-volume",
        "prebound_pvc": "restore-claim",
    }
    for name, component in components.items():
        labels = cases[name]["metadata"]["labels"]
        assert labels == {
            "cbt-mover.io/run": "run-1",
            "app.kubernetes.io/name": "cbt-mover",
            "app.kubernetes.io/managed-by": "cbt-mover",
            "app.kubernetes.io/instance": "run-1",
            "app.kubernetes.io/part-of": "shop",
            "app.kubernetes.io/component": component,
        }, name
    # a caller's component wins; objects that are not a run's (an app's own claim in a test) stay as given
    own = m.block_pvc("d", "ns", "1Gi", None, m.run_labels("r", component="custom"))
    assert own["metadata"]["labels"]["app.kubernetes.io/component"] == "custom"
    assert m.block_pvc("d", "ns", "1Gi", None, {"app": "demo"})["metadata"]["labels"] == {"app": "demo"}
    assert "labels" not in m.block_pvc("d", "ns", "1Gi")["metadata"]
    long_app = m.run_labels("r", app="An App/with spaces " + "x" * 80)
    assert all(m.label_value(v) == v for v in long_app.values())


@pytest.mark.parametrize("text", ["shop", "backup-0123456789abcdef", "a", "", "x" * 63, "A.b_c-9"])
def test_label_value_keeps_valid_values(text):
    assert m.label_value(text) == text


@pytest.mark.parametrize("text", ["x" * 64, "-leading", "trailing.", "a/b", "ns/pvc name", "ümlaut", "---", "_"])
def test_label_value_makes_a_valid_distinct_value(text):
    value = m.label_value(text)
    assert len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value), value
    assert value and value != text and m.label_value(text) == value
    assert m.label_value("a-b") != m.label_value("a/b") and m.label_value("y" * 64) != m.label_value("y" * 65)
    assert (
        k8svalidate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"k": value}}}
        )
        == []
    )


def test_reader_claim_size_never_says_none():
    assert m.reader_claim_size(16 << 20, "1Gi") == "16Mi", "restoreSize first"
    assert m.reader_claim_size("20Gi", None) == "20Gi"
    assert m.reader_claim_size(None, "1Gi") == "1Gi", "no restoreSize: the source claim's capacity"
    assert m.reader_claim_size("", 5000) == "5000"
    for bad in ((None, None), (None, "None"), ("None", None)):
        with pytest.raises(ValueError):
            m.reader_claim_size(*bad)
    with pytest.raises(ValueError, match="'None' is not a Kubernetes quantity"):
        m.pvc_from_snapshot("r", "ns", "s", "None")


def test_source_identity_of_a_pv():
    fs = {
        **SOURCE_PV,
        "metadata": {**SOURCE_PV["metadata"], "uid": "uid-1"},
        "spec": {**SOURCE_PV["spec"], "volumeMode": "Filesystem", "csi": {**SOURCE_PV["spec"]["csi"], "fsType": "xfs"}},
    }
    assert source_identity(fs) == PvIdentity(
        pv_name="pvc-1234",
        pv_uid="uid-1",
        pv_volume_handle="vol-1",
        csi_driver="hostpath.csi.k8s.io",
        fs_type="xfs",
        node_affinity=SOURCE_PV["spec"]["nodeAffinity"]["required"],
    )
    block = {**fs, "spec": {**fs["spec"], "volumeMode": "Block"}}
    assert source_identity(block).fs_type is None, "a Block volume has no filesystem"
    assert source_identity({"metadata": {"name": "p"}, "spec": {}}) == PvIdentity(pv_name="p")
    # the manifest's names: every field is one of the request's SourceVolume and of the manifest's VolumeIdentity
    fields = {f.name for f in dataclasses.fields(PvIdentity)}
    assert fields <= set(SourceVolume.model_fields) and fields <= {f.name for f in dataclasses.fields(VolumeIdentity)}


def test_the_key_files_a_pod_mounts_come_from_the_secrets_key_names():
    """The preflight reads the credentials Secret's key names once (``secret_key_names``: names, sorted); the mover
    pods mount the repository key files among them (``key_files``), as ``key_names`` of the Secret itself would."""
    from movers.kube import repokey

    secret = {"data": {"password": "x", "AWS_REGION": "y"}, "stringData": {"keyfile": "z"}}
    assert repokey.secret_key_names(secret) == ("AWS_REGION", "keyfile", "password")
    assert repokey.key_files(repokey.secret_key_names(secret)) == ["password", "keyfile"] == repokey.key_names(secret)
    assert repokey.key_files(("AWS_REGION",)) == [] and repokey.secret_key_names({}) == ()


def test_writer_and_mover_pods():
    writer = m.mover_pod(
        "w",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["restore", "--volume", "v"], pvc="c"),
        repo=podspec.RepoAccess("r"),
    )
    mover = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["backup"], pvc="c", cbt_audience="aud"),
        repo=podspec.RepoAccess("r"),
    )
    assert writer["spec"]["automountServiceAccountToken"] is False
    assert [v for v in writer["spec"]["volumes"] if "projected" in v] == []
    assert writer["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c"}
    assert mover["spec"]["automountServiceAccountToken"] is True
    assert mover["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c", "readOnly": True}
    by_cbt = m.mover_pod(  # in place by CBT: the writer asks the service as a mover does
        "w",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=m.restore_args(request_env="R", cbt=True), pvc="c", cbt_audience="aud"),
        repo=podspec.RepoAccess("r"),
    )
    assert by_cbt["spec"]["automountServiceAccountToken"] is True
    assert by_cbt["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "c"}, "written: not read-only"
    [token] = [v for v in by_cbt["spec"]["volumes"] if "projected" in v]
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "aud"
    args = by_cbt["spec"]["containers"][0]["args"]
    assert args[:4] == ["restore", "--request-env", "R", "--kube"] and m.CBT_TOKEN_FILE in args, args
    with pytest.raises(ValueError, match="role"):
        m.mover_pod(
            "w",
            "ns",
            profile=podspec.MoverProfile(image="i", service_account="s"),
            task=podspec.MoverTask(args=["x"], pvc="c", role="reader"),
            repo=podspec.RepoAccess("r"),
        )
    assert "tolerations" not in mover["spec"] and "affinity" not in mover["spec"]
    placed = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(
            image="i", service_account="s", placement=podspec.PodPlacement(tolerations=TOLERATIONS, affinity=AFFINITY)
        ),
        task=podspec.MoverTask(args=["backup"], pvc="c"),
        repo=podspec.RepoAccess("r"),
    )
    assert (placed["spec"]["tolerations"], placed["spec"]["affinity"]) == (TOLERATIONS, AFFINITY)
    placed["spec"]["tolerations"][0]["key"] = "changed"
    assert TOLERATIONS[0]["key"] == "node-role.example.com/backup"


def test_the_restored_patch_gives_the_claim_its_source_labels_but_keeps_the_runs_own():
    source = {"app": "db", m.NAME_LABEL: "postgres", m.RUN_LABEL: "backup-old", "cbt-mover.io/pvc": "x"}
    patch = m.restored_patch("ns/data", "b1", "restore-1", source)
    assert patch["metadata"]["labels"] == {"app": "db", m.NAME_LABEL: "postgres"}
    assert patch["metadata"]["annotations"] == {m.RESTORED_FROM: "ns/data@b1", m.RESTORED_BY: "restore-1"}
    assert "labels" not in m.restored_patch("ns/data", "b1", "restore-1", None)["metadata"]


def test_one_default_for_mover_and_writer_resources():
    """A policy without mover.resources and a restore without resources give the same pod resources."""
    from movers.policy.model import MoverSettings

    pod = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=["restore"], pvc="c", role=m.WRITER),
        repo=podspec.RepoAccess("r"),
    )
    assert MoverSettings().resources == m.DEFAULT_RESOURCES == pod["spec"]["containers"][0]["resources"]
