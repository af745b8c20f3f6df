"""The assembled local cluster, driven like a real one: an application pod, a freeze by exec, a
snapshot, and the real mover in a pod reading the snapshot through CBT into S3 -- then the restored
volume passes the application's own consistency check. Also the harness's RBAC helpers: ``apply``,
``kubeconfig_for`` and the shipped mover RBAC copied per namespace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from demo.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, wait_pod, wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac, controller_objects
from movers.cbt.discovery import snapshot_metadata_service

NS = "shop"
MiB = 1 << 20


def block_pvc(name, size="32Mi", source=None):
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Block",
        "resources": {"requests": {"storage": size}},
        "storageClassName": "csi-hostpath-sc",
    }  # the app's class (WaitForFirstConsumer, bound by the pod)
    if source:
        spec["dataSource"] = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": source}
    return {"metadata": {"name": name}, "spec": spec}


def exec_in(core, pod, argv):
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        NS,
        command=argv,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    out = resp.read_stdout() if resp.peek_stdout() else ""
    return resp.returncode, out.strip()


def test_app_consistent_snapshot_backed_up_by_a_mover_pod(local_cluster, tmp_path):
    cluster = local_cluster
    core, custom = client.CoreV1Api(cluster.client), client.CustomObjectsApi(cluster.client)
    core.create_namespace({"metadata": {"name": NS}})
    apply_mover_rbac(cluster, [NS])  # the mover pod reads its snapshot and CBT service as cbt-mover
    core.create_namespaced_persistent_volume_claim(NS, block_pvc("data"))
    core.create_namespaced_pod(NS, demo_pod("app", {"data": "/dev/xvda"}))
    wait_pod(core, "app", phase_in("Running"), namespace=NS, timeout=30)
    wait_until(lambda: core.read_namespaced_pod_log("app", NS).count("write seq=") >= 20, 30, "app writes")

    assert exec_in(core, "app", ["python", "-m", "demo.demo_app", "freeze"]) == (0, "frozen")
    custom.create_namespaced_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        NS,
        "volumesnapshots",
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "snap-1"},
            "spec": {"source": {"persistentVolumeClaimName": "data"}},
        },
    )
    wait_until(
        lambda: (
            custom.get_namespaced_custom_object("snapshot.storage.k8s.io", "v1", NS, "volumesnapshots", "snap-1").get(
                "status"
            )
            or {}
        ).get("readyToUse"),
        30,
        "snapshot ready",
    )
    assert exec_in(core, "app", ["python", "-m", "demo.demo_app", "thaw"]) == (0, "thawed")
    wait_until(lambda: "thawed" in core.read_namespaced_pod_log("app", NS), 10, "thaw logged")
    log = core.read_namespaced_pod_log("app", NS)
    frozen_t = int(log.split("frozen t=")[1].split()[0])
    thawed_t = int(log.split("thawed t=")[1].split()[0])
    writes = [int(line.rsplit("t=", 1)[1]) for line in log.splitlines() if line.startswith("write ")]
    assert not [t for t in writes if frozen_t <= t <= thawed_t], "the app wrote while frozen"

    cluster.s3.client().create_bucket(Bucket="backups")
    env = {**cluster.env(), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [sys.executable, "-m", "movers", "init", "--insecure-no-encryption", "--repo", "s3://backups/repo"],
        check=True,
        env=env,
        capture_output=True,
    )
    core.create_namespaced_persistent_volume_claim(NS, block_pvc("snap-1-read", source="snap-1"))
    aws_env = [{"name": k, "value": v} for k, v in cluster.s3.env.items()]
    # the CBT token as the backup flow gives it: projected for the service's audience (the shipped mover role
    # grants no TokenRequest)
    audience = snapshot_metadata_service(cluster.client, "hostpath.csi.k8s.io").audience
    token = {"serviceAccountToken": {"audience": audience, "expirationSeconds": 600, "path": "token"}}
    core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "mover"},
            "spec": {
                "serviceAccountName": MOVER_SERVICE_ACCOUNT,
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "mover",
                        "image": "cbt-mover",
                        "env": aws_env,
                        "args": [
                            "backup",
                            "--repo",
                            "s3://backups/repo",
                            "--volume",
                            f"{NS}/data",
                            "--device",
                            "/dev/xvdb",
                            "--kube",
                            "--namespace",
                            NS,
                            "--snapshot",
                            "snap-1",
                            "--json",
                            "--cbt-token-file",
                            "/var/run/cbt/token",
                        ],
                        "volumeDevices": [{"name": "snap", "devicePath": "/dev/xvdb"}],
                        "volumeMounts": [{"name": "cbt-token", "mountPath": "/var/run/cbt", "readOnly": True}],
                    }
                ],
                "volumes": [
                    {"name": "snap", "persistentVolumeClaim": {"claimName": "snap-1-read"}},
                    {"name": "cbt-token", "projected": {"sources": [token]}},
                ],
            },
        },
    )
    pod = wait_pod(core, "mover", phase_in("Succeeded", "Failed"), namespace=NS, timeout=60)
    out = core.read_namespaced_pod_log("mover", NS)
    assert pod.status.phase == "Succeeded", out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["change_source"] == "cbt-allocated" and result["mode"] == "full"
    assert result["snapshot_handle"] and result["read_bytes"] <= 32 * MiB

    restored = tmp_path / "restored.img"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "movers",
            "restore",
            "--repo",
            "s3://backups/repo",
            "--volume",
            f"{NS}/data",
            "--device",
            str(restored),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    check = subprocess.run(
        [sys.executable, "-m", "demo.demo_app", "verify", "--device", str(restored)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["records"] > 0


def test_cluster_without_cbt_or_group_snapshots(make_local_cluster):
    cluster = make_local_cluster(s3=False, cbt=False, group_snapshot_versions=())
    custom = client.CustomObjectsApi(cluster.client)
    sms = custom.list_cluster_custom_object("cbt.storage.k8s.io", "v1beta1", "snapshotmetadataservices")
    assert sms["items"] == []
    groups = {g.name for g in client.ApisApi(cluster.client).get_api_versions().groups}
    assert "groupsnapshot.storage.k8s.io" not in groups and "snapshot.storage.k8s.io" in groups


def test_apply_and_a_service_account_kubeconfig(make_local_cluster):
    # its own cluster, not audited: the 403 below is wanted, the audit replay of
    # tests/cluster/test_shipped_rbac.py is not
    cluster = make_local_cluster(s3=False, audit_log=None)
    created = cluster.apply(controller_objects())  # `cbt-mover install controller` unchanged, as the admin
    kinds = ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ClusterRole"]
    assert [o["kind"] for o in created] == kinds
    replaced = cluster.apply(controller_objects())  # present: replaced in place
    assert replaced[2]["metadata"]["uid"] == created[2]["metadata"]["uid"]
    path = cluster.kubeconfig_for("cbt-mover-system", "cbt-mover-controller")
    api_client = config.new_client_from_config(str(path))
    try:
        assert api_client.configuration.host.startswith("https://")  # kubectl sends no token over plain HTTP
        core = client.CoreV1Api(api_client)
        assert isinstance(core.list_pod_for_all_namespaces().items, list)  # granted by the ClusterRole
        with pytest.raises(ApiException) as info:
            core.list_namespaced_secret("default")
        assert info.value.status == 403 and json.loads(info.value.body)["message"] == (
            'secrets is forbidden: User "system:serviceaccount:cbt-mover-system:cbt-mover-controller" cannot list'
            ' resource "secrets" in API group "" in the namespace "default"'
        )
        who = client.AuthenticationV1Api(api_client).create_self_subject_review({}).status.user_info
        assert who.username == "system:serviceaccount:cbt-mover-system:cbt-mover-controller"
    finally:
        api_client.close()
