"""The assembled local cluster, driven like a real one: an application pod, a freeze by exec, a
snapshot, and the real mover in a pod reading the snapshot through CBT into S3 -- then the restored
volume passes the application's own consistency check."""

from __future__ import annotations

import json
import subprocess
import sys

from kubernetes import client
from kubernetes.stream import stream

from localcluster.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, wait_pod, wait_until

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
    resp = stream(core.connect_get_namespaced_pod_exec, pod, NS, command=argv, stderr=True, stdin=False,
                  stdout=True, tty=False, _preload_content=False)  # fmt: skip
    resp.run_forever(timeout=30)
    out = resp.read_stdout() if resp.peek_stdout() else ""
    return resp.returncode, out.strip()


def test_app_consistent_snapshot_backed_up_by_a_mover_pod(local_cluster, tmp_path):
    cluster = local_cluster
    core, custom = client.CoreV1Api(cluster.client), client.CustomObjectsApi(cluster.client)
    core.create_namespace({"metadata": {"name": NS}})
    core.create_namespaced_service_account(NS, {"metadata": {"name": "mover"}})
    core.create_namespaced_persistent_volume_claim(NS, block_pvc("data"))
    core.create_namespaced_pod(NS, demo_pod("app", {"data": "/dev/xvda"}))
    wait_pod(core, "app", phase_in("Running"), namespace=NS, timeout=30)
    wait_until(lambda: core.read_namespaced_pod_log("app", NS).count("write seq=") >= 20, 30, "app writes")

    assert exec_in(core, "app", ["python", "-m", "localcluster.demo_app", "freeze"]) == (0, "frozen")
    custom.create_namespaced_custom_object("snapshot.storage.k8s.io", "v1", NS, "volumesnapshots", {
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"name": "snap-1"},
        "spec": {"source": {"persistentVolumeClaimName": "data"}},
    })  # fmt: skip
    wait_until(lambda: (custom.get_namespaced_custom_object("snapshot.storage.k8s.io", "v1", NS, "volumesnapshots",
                                                            "snap-1").get("status") or {}).get("readyToUse"),
               30, "snapshot ready")  # fmt: skip
    assert exec_in(core, "app", ["python", "-m", "localcluster.demo_app", "thaw"]) == (0, "thawed")
    wait_until(lambda: "thawed" in core.read_namespaced_pod_log("app", NS), 10, "thaw logged")
    log = core.read_namespaced_pod_log("app", NS)
    frozen_t = int(log.split("frozen t=")[1].split()[0])
    thawed_t = int(log.split("thawed t=")[1].split()[0])
    writes = [int(line.rsplit("t=", 1)[1]) for line in log.splitlines() if line.startswith("write ")]
    assert not [t for t in writes if frozen_t <= t <= thawed_t], "the app wrote while frozen"

    cluster.s3.client().create_bucket(Bucket="backups")
    env = {**cluster.env(), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-m", "movers", "init", "--repo", "s3://backups/repo"], check=True, env=env,
                   capture_output=True)  # fmt: skip
    core.create_namespaced_persistent_volume_claim(NS, block_pvc("snap-1-read", source="snap-1"))
    aws_env = [{"name": k, "value": v} for k, v in cluster.s3.env.items()]
    core.create_namespaced_pod(NS, {
        "metadata": {"name": "mover"},
        "spec": {"serviceAccountName": "mover", "restartPolicy": "Never", "containers": [{
            "name": "mover", "image": "cbt-mover", "env": aws_env,
            "args": ["backup", "--repo", "s3://backups/repo", "--volume", f"{NS}/data", "--device", "/dev/xvdb",
                     "--kube", "--namespace", NS, "--snapshot", "snap-1", "--json"],
            "volumeDevices": [{"name": "snap", "devicePath": "/dev/xvdb"}],
        }], "volumes": [{"name": "snap", "persistentVolumeClaim": {"claimName": "snap-1-read"}}]},
    })  # fmt: skip
    pod = wait_pod(core, "mover", phase_in("Succeeded", "Failed"), namespace=NS, timeout=60)
    out = core.read_namespaced_pod_log("mover", NS)
    assert pod.status.phase == "Succeeded", out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["change_source"] == "cbt-allocated" and result["mode"] == "full"
    assert result["snapshot_handle"] and result["read_bytes"] <= 32 * MiB

    restored = tmp_path / "restored.img"
    subprocess.run([sys.executable, "-m", "movers", "restore", "--repo", "s3://backups/repo", "--volume",
                    f"{NS}/data", "--device", str(restored)], check=True, env=env, capture_output=True)  # fmt: skip
    check = subprocess.run([sys.executable, "-m", "localcluster.demo_app", "verify", "--device", str(restored)],
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["records"] > 0


def test_cluster_without_cbt_or_group_snapshots(make_local_cluster):
    cluster = make_local_cluster(s3=False, cbt=False, group_snapshot_versions=())
    custom = client.CustomObjectsApi(cluster.client)
    sms = custom.list_cluster_custom_object("cbt.storage.k8s.io", "v1beta1", "snapshotmetadataservices")
    assert sms["items"] == []
    groups = {g.name for g in client.ApisApi(cluster.client).get_api_versions().groups}
    assert "groupsnapshot.storage.k8s.io" not in groups and "snapshot.storage.k8s.io" in groups
