"""A Windows workload end to end on the local cluster: the demo app as a Windows image on the tainted
Windows node win-a, writing records into a file on its NTFS volume (a Filesystem PVC of ``disk-ntfs``:
``disk.csi.local``, zonal, WaitForFirstConsumer, no group snapshots, no CBT), is backed up by
``backup-app`` (the freeze/thaw hooks exec'd into the Windows pod; Linux mover pods read the snapshot as a
Block device) and restored by ``restore-app`` into a new namespace, handed over as an NTFS Filesystem
claim in the source's zone, which a Windows pod mounts and the app's ``verify`` accepts.

One backup and one restore for the whole module (``scenario``); the tests read what they left."""

from __future__ import annotations

import hashlib
import json

import pytest
from kubernetes import client

from demo.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, wait_pod, wait_until
from localcluster.nodes import WINDOWS_TAINT_KEY
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, REPO_SECRET, apply_mover_rbac
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import podspec
from tests.flowapp import backup_params, flow_kubeconfig, freeze_hooks, init_repo, open_repo, repo_secret

NS, TARGET, CLASS, DRIVER = "winshop", "winshop-copy", "disk-ntfs", "disk.csi.local"
ZONE_KEY = "topology.disk.csi.local/zone"
WINAPP = "localcluster-winapp"
WINDOWS = {"kubernetes.io/os": "windows"}
TOLERATE_WINDOWS = [{"key": WINDOWS_TAINT_KEY, "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]
SEL = {"matchLabels": {"app": "winapp"}}
HOOKS = freeze_hooks(SEL)  # the Windows image runs the demo app too: the same freeze and thaw commands


def _namespace(cluster, name: str, repo: str) -> None:
    core = client.CoreV1Api(cluster.client)
    core.create_namespace({"metadata": {"name": name}})
    apply_mover_rbac(cluster, [name])
    core.create_namespaced_secret(name, repo_secret(cluster, repo))


def _claim(name: str, ns: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "winapp"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "storageClassName": CLASS,
            "resources": {"requests": {"storage": "16Mi"}},
        },
    }


def _windows_pod(name: str, **kw) -> dict:
    return demo_pod(
        name, {}, mounts={"data": "/data"}, image=WINAPP, node_selector=WINDOWS, tolerations=TOLERATE_WINDOWS, **kw
    )


def _log_times(core, ns: str, pod: str) -> list[tuple[str, int]]:
    """The app's state changes (``frozen``/``thawed``) with their times (ns, the machine's clock)."""
    lines = core.read_namespaced_pod_log(pod, ns).splitlines()
    return [
        (w[0], int(w[1].removeprefix("t="))) for w in (line.split() for line in lines) if w[0] in ("frozen", "thawed")
    ]


def _pv_of(api, ns: str, pvc: str) -> dict:
    claim = k.get(api, "PersistentVolumeClaim", ns, pvc)
    return k.get(api, "PersistentVolume", None, claim["spec"]["volumeName"])


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _scheduled(core, ns: str) -> dict[str, str]:
    """pod name -> the node the scheduler assigned it to (from its Scheduled events; the pods may be gone)."""
    out = {}
    for event in core.list_namespaced_event(ns).items:
        if event.reason == "Scheduled":
            out[event.involved_object.name] = event.message.rsplit(" to ", 1)[1]
    return out


@pytest.fixture(scope="module")
def scenario(local_cluster, prefect_api):
    """The Windows app on win-a, backed up once and restored once into TARGET (before any pod used it)."""
    from flows.backup import backup_app
    from flows.restore import restore_app
    from movers.restore.app_request import RestoreAppRequest

    cluster, api = local_cluster, local_cluster.client
    core = client.CoreV1Api(api)
    cluster.s3.client().create_bucket(Bucket="flow-windows")
    repo = "s3://flow-windows/repo"
    init_repo(cluster, repo)  # encrypted (tests.flowapp.PASSPHRASE), its key in the Secret
    _namespace(cluster, NS, repo)
    k.create(api, _claim("data", NS))
    core.create_namespaced_pod(NS, _windows_pod("app", labels={"app": "winapp"}, interval=0.02))
    wait_pod(core, "app", phase_in("Running"), namespace=NS, timeout=60)
    wait_until(lambda: core.read_namespaced_pod_log("app", NS).count("write seq=") >= 5, 30, "app writes")
    source_pv = _pv_of(api, NS, "data")
    with pytest.MonkeyPatch.context() as mp:  # the flows read the repository themselves
        for key, value in cluster.s3.env.items():
            mp.setenv(key, value)
        backup = backup_app(
            overrides=backup_params(cluster, repo, NS, selector=SEL, hooks=HOOKS, parallelism=1)["overrides"],
            kubeconfig=flow_kubeconfig(cluster),
        )
        (row,) = backup["volumes"]
        manifest = open_repo(repo).read_manifest(f"{NS}/data", row["backup_id"])
        snapshot = k.get(api, "VolumeSnapshot", NS, manifest.snapshot.volume_snapshot)  # kept as the next base
        content = k.get(api, "VolumeSnapshotContent", None, snapshot["status"]["boundVolumeSnapshotContentName"])
        _namespace(cluster, TARGET, repo)
        request = RestoreAppRequest(
            repo=repo,
            namespace=NS,
            target_namespace=TARGET,
            image="cbt-mover",
            service_account=MOVER_SERVICE_ACCOUNT,
            repo_secret=REPO_SECRET,
        )
        restore = restore_app(request, kubeconfig=flow_kubeconfig(cluster))
    restored_pv = _pv_of(api, TARGET, "data")
    yield {
        "repo": repo,
        "backup": backup,
        "manifest": manifest,
        "source_pv": source_pv,
        "snapshot_content": content,
        "restore": restore,
        "restored_pv": restored_pv,
        "restored_sha": _sha(cluster.store.volume_path(restored_pv["spec"]["csi"]["volumeHandle"])),
    }


def test_backup_scans_the_ntfs_volume_from_linux_movers(local_cluster, scenario):
    backup, manifest, pv = scenario["backup"], scenario["manifest"], scenario["source_pv"]
    (row,) = backup["volumes"]
    assert (row["volume"], row["mode"], row["change_source"]) == (f"{NS}/data", "full", "scan"), row
    vol = manifest.volume
    assert (vol.volume_mode, vol.storage_class, vol.fs_type) == ("Filesystem", CLASS, "ntfs")
    assert (vol.pv_name, vol.pv_uid, vol.pv_volume_handle, vol.csi_driver) == (
        pv["metadata"]["name"],
        pv["metadata"]["uid"],
        pv["spec"]["csi"]["volumeHandle"],
        DRIVER,
    )
    assert vol.node_affinity == pv["spec"]["nodeAffinity"]["required"]
    content = scenario["snapshot_content"]
    assert manifest.snapshot.snapshot_handle == content["status"]["snapshotHandle"]  # a scan records it too
    # the Filesystem snapshot was read through a Block claim: its content allows the volume mode change
    assert content["metadata"]["annotations"][m.ALLOW_VOLUME_MODE_CHANGE] == "true"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": ZONE_KEY, "operator": "In", "values": ["zone-a"]}
    ]
    core = client.CoreV1Api(local_cluster.client)
    movers = {pod: node for pod, node in _scheduled(core, NS).items() if pod.startswith(backup["run_id"])}
    assert len(movers) == 1 and set(movers.values()) <= {"node-a", "node-b"}, movers
    assert _scheduled(core, NS)["app"] == "win-a"


def test_the_windows_app_was_frozen_only_around_the_snapshot(local_cluster, scenario):
    api = local_cluster.client
    core = client.CoreV1Api(api)
    states = _log_times(core, NS, "app")
    assert [s for s, _ in states] == ["frozen", "thawed"], states
    (_, frozen), (_, thawed) = states
    content = scenario["snapshot_content"]
    assert frozen < int(content["status"]["creationTime"]) < thawed
    writes = [
        int(line.rsplit("t=", 1)[1])
        for line in core.read_namespaced_pod_log("app", NS).splitlines()
        if line.startswith("write seq=")
    ]
    assert not [t for t in writes if frozen < t < thawed], "the app wrote while frozen"
    assert [t for t in writes if t > thawed], "the app writes again after the thaw"


def test_restored_as_ntfs_in_the_source_zone_and_verified_by_a_windows_pod(local_cluster, scenario):
    api = local_cluster.client
    core = client.CoreV1Api(api)
    (row,) = scenario["restore"]["volumes"]
    assert (row["pvc"], row["volume_mode"]) == ("data", "Filesystem"), row
    pv = scenario["restored_pv"]
    assert pv["spec"]["csi"]["fsType"] == "ntfs" and pv["spec"]["volumeMode"] == "Filesystem"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": ZONE_KEY, "operator": "In", "values": ["zone-a"]}
    ]
    writers = {p: n for p, n in _scheduled(core, TARGET).items() if p.startswith(scenario["restore"]["run_id"])}
    assert writers and set(writers.values()) == {"node-a"}, writers  # Linux, in the source's zone
    snapshot = local_cluster.store.snapshot_path(scenario["snapshot_content"]["status"]["snapshotHandle"])
    assert scenario["restored_sha"] == _sha(snapshot), "the restored volume differs from the snapshot"

    pod = _windows_pod("verify")
    pod["spec"]["containers"][0]["args"] = ["verify", "--device", "/data/records.dat"]
    pod["spec"]["restartPolicy"] = "Never"
    core.create_namespaced_pod(TARGET, pod)
    done = wait_pod(core, "verify", phase_in("Succeeded", "Failed"), namespace=TARGET, timeout=60)
    log = core.read_namespaced_pod_log("verify", TARGET)
    assert done.status.phase == "Succeeded" and done.spec.node_name == "win-a", log
    result = json.loads(log.strip().splitlines()[-1])
    assert result["records"] >= 5 and result["damaged"] == 0, result


def _events(core, ns: str, name: str, reason: str) -> list[str]:
    return [
        e.message for e in core.list_namespaced_event(ns).items if e.involved_object.name == name and e.reason == reason
    ]


def _waiting(pod) -> tuple[str | None, str | None]:
    for status in (pod.status and pod.status.container_statuses) or []:
        if status.state and status.state.waiting:
            return status.state.waiting.reason, status.state.waiting.message
    return None, None


def test_the_double_is_strict_about_the_windows_node(local_cluster, scenario):
    """What keeps movers off Windows nodes is real here: a mover pod that nothing but the taint keeps off
    win-a never lands there; tolerated, its Block device is refused; a Linux image there fails to pull."""
    api = local_cluster.client
    core = client.CoreV1Api(api)
    snapshot = scenario["manifest"].snapshot.volume_snapshot
    k.create(api, m.pvc_from_snapshot("raw", NS, snapshot, "16Mi", CLASS))
    only_win_a = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["win-a"]}]}
                ]
            }
        }
    }
    mover = {
        "task": podspec.MoverTask(args=["backup", "--scan", "--volume", "x"], pvc="raw"),
        "repo": podspec.RepoAccess(REPO_SECRET),
    }

    def profile(tolerations=None) -> podspec.MoverProfile:
        placement = podspec.PodPlacement(node_selector={}, tolerations=tolerations, affinity=only_win_a)
        return podspec.MoverProfile(image="cbt-mover", service_account=MOVER_SERVICE_ACCOUNT, placement=placement)

    try:
        core.create_namespaced_pod(NS, m.mover_pod("untolerated", NS, profile=profile(), **mover))
        pending = wait_pod(
            core,
            "untolerated",
            lambda p: any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or []),
            namespace=NS,
        )
        (condition,) = [c for c in pending.status.conditions if c.type == "PodScheduled"]
        assert "1 node(s) had untolerated taint {node.kubernetes.io/os: windows}" in condition.message

        core.create_namespaced_pod(NS, m.mover_pod("tolerated", NS, profile=profile(TOLERATE_WINDOWS), **mover))
        refused = wait_until(lambda: _events(core, NS, "tolerated", "FailedMapVolume"), 30, "the Block refusal")
        assert "raw block volumes are not supported on Windows" in refused[0], refused
        tolerated = core.read_namespaced_pod("tolerated", NS)
        assert tolerated.spec.node_name == "win-a" and _waiting(tolerated)[0] == "ContainerCreating"
        assert core.read_namespaced_pod("untolerated", NS).spec.node_name is None  # still, with the volume there

        linux = demo_pod(
            "linux-image", {}, image="localcluster-demo-app", node_selector=WINDOWS, tolerations=TOLERATE_WINDOWS
        )
        core.create_namespaced_pod(NS, linux)
        pod = wait_pod(
            core,
            "linux-image",
            lambda p: _waiting(p)[0] in ("ErrImagePull", "ImagePullBackOff"),
            namespace=NS,
            timeout=30,
        )
        assert pod.spec.node_name == "win-a"
        assert "no match for platform in manifest: not found" in _waiting(pod)[1]
    finally:
        for name in ("untolerated", "tolerated", "linux-image"):
            if k.find(api, "Pod", NS, name):
                k.delete_and_wait(api, "Pod", NS, name, 30)
        k.delete_and_wait(api, "PersistentVolumeClaim", NS, "raw", 30)
