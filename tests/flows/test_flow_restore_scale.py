"""``restore-app`` in place with ``scale_down`` on the local cluster, as the shipped identities: a two-claim app run
by a Deployment that mounts both Block claims is backed up; its volumes then drift. In place without
``scale_down`` is refused naming the pod and its Deployment; with it the Deployment is scaled to 0, both claims are
rewritten bit-exact with the backup, and the Deployment is back at its replicas, its pod running, the annotation
gone; a restore that fails after scaling down scales back all the same and its failure report says so; a
Deployment a crashed run left at 0 (its annotation still on it) is found and returned to the recorded replicas; a
StatefulSet's claim (of its claim template) is restored with the set scaled down and back."""

from __future__ import annotations

import hashlib
import os

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube.workloads import SCALED_DOWN_FROM
from movers.restore.plan import RestoreRefused
from tests.flowapp import (
    APP_CLASS,
    REPO_SECRET,
    artifact,
    backup_params,
    flow_kubeconfig,
    init_repo,
    repo_secret,
)

NS = "scaled-shop"
APP = "shop-db"
LABELS = {"app": "demo"}  # what the backup's selector picks
CLAIMS = ("data", "logs")
WAL = "wal-db-0"  # the StatefulSet db's claim of its template wal
MOVER = {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT, "repo_secret": REPO_SECRET}
REPO = "s3://flow-restore-scale/repo"


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def backed_up(local_cluster, harness, module_env):
    """The app in NS (a Deployment of 1 pod mounting both claims as Block devices, data written on them), backed up
    once; the images' digests at backup."""
    from flows.backup import backup_app

    cluster, api = local_cluster, local_cluster.client
    core = client.CoreV1Api(api)
    cluster.s3.client().create_bucket(Bucket="flow-restore-scale")
    init_repo(cluster, REPO)
    for key, value in cluster.s3.env.items():
        module_env.setenv(key, value)
    core.create_namespace({"metadata": {"name": NS}})
    apply_mover_rbac(cluster, [NS])
    core.create_namespaced_secret(NS, repo_secret(cluster, REPO))
    for pvc in CLAIMS:
        k.create(api, m.block_pvc(pvc, NS, "16Mi", APP_CLASS, LABELS))
    client.AppsV1Api(api).create_namespaced_deployment(NS, _deployment())
    client.AppsV1Api(api).create_namespaced_stateful_set(NS, _stateful_set())
    wait_until(lambda: _app_running(core, 1), 60, "the app's pod running")
    wait_until(lambda: _running(core, "role=db", 1), 60, "the StatefulSet's pod running")
    for pvc in (*CLAIMS, WAL):  # something to restore: data at a few places of each volume
        with open(_image(cluster, pvc), "r+b") as f:
            for off in (0, 3 << 20, 9 << 20):
                os.pwrite(f.fileno(), os.urandom(16384), off)
    out = backup_app(**backup_params(cluster, REPO, NS, parallelism=2, hooks={"pre": [], "post": []}))
    assert sorted(r["volume"] for r in out["volumes"]) == [f"{NS}/data", f"{NS}/logs", f"{NS}/{WAL}"], out
    return {"cluster": cluster, "shas": {pvc: _sha(_image(cluster, pvc)) for pvc in (*CLAIMS, WAL)}}


def _deployment() -> dict:
    devices = [{"name": pvc, "devicePath": f"/dev/xvd{c}"} for pvc, c in zip(CLAIMS, "ab", strict=True)]
    container = {"name": "app", "image": "python:3-slim", "command": ["sleep", "3600"], "volumeDevices": devices}
    volumes = [{"name": pvc, "persistentVolumeClaim": {"claimName": pvc}} for pvc in CLAIMS]
    template = {"metadata": {"labels": LABELS}, "spec": {"containers": [container], "volumes": volumes}}
    spec = {"replicas": 1, "selector": {"matchLabels": LABELS}, "template": template}
    return {"metadata": {"name": APP}, "spec": spec}


def _stateful_set() -> dict:
    """A StatefulSet of 1 pod whose claim template ``wal`` (Block, labelled for the backup) gives ``wal-db-0``."""
    container = {"name": "db", "image": "python:3-slim", "command": ["sleep", "3600"]}
    container["volumeDevices"] = [{"name": "wal", "devicePath": "/dev/xvdc"}]
    template = {"metadata": {"labels": {"role": "db"}}, "spec": {"containers": [container]}}
    claim = {
        "metadata": {"name": "wal", "labels": LABELS},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Block",
            "storageClassName": APP_CLASS,
            "resources": {"requests": {"storage": "16Mi"}},
        },
    }
    spec = {"replicas": 1, "selector": {"matchLabels": {"role": "db"}}, "template": template}
    return {"metadata": {"name": "db"}, "spec": spec | {"volumeClaimTemplates": [claim]}}


def _app_pods(core) -> list:
    return core.list_namespaced_pod(NS, label_selector="app=demo").items


def _running(core, selector: str, n: int):
    pods = core.list_namespaced_pod(NS, label_selector=selector).items
    running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return running if len(running) == n == len(pods) else None


def _app_running(core, n: int):
    return _running(core, "app=demo", n)


def _image(cluster, pvc: str) -> str:
    claim = k.get(cluster.client, "PersistentVolumeClaim", NS, pvc)
    pv = k.get(cluster.client, "PersistentVolume", None, claim["spec"]["volumeName"])
    return cluster.store.volume_path(pv["spec"]["csi"]["volumeHandle"])


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _drift(cluster, shas: dict[str, str]) -> None:
    """The live volumes drift from the backup: 2 x 8 KiB each."""
    for pvc in CLAIMS:
        with open(_image(cluster, pvc), "r+b") as f:
            for off in (4096, 7 << 20):
                os.pwrite(f.fileno(), os.urandom(8192), off)
        assert _sha(_image(cluster, pvc)) != shas[pvc]


def _restore(cluster, **asked):
    from flows.restore import restore_app

    request = {"repo": REPO, "namespace": NS, "pvcs": list(CLAIMS), "in_place": True, **MOVER, **asked}
    return restore_app(request=request, kubeconfig=flow_kubeconfig(cluster))


def _assert_back_at(api, replicas: int) -> None:
    core = client.CoreV1Api(api)
    d = client.AppsV1Api(api).read_namespaced_deployment(APP, NS)
    assert d.spec.replicas == replicas and SCALED_DOWN_FROM not in (d.metadata.annotations or {}), d.metadata
    wait_until(lambda: _app_running(core, replicas), 60, f"{replicas} app pod(s) running again")


def test_in_place_is_refused_while_the_deployment_runs_and_names_its_pod_and_the_deployment(local_cluster, backed_up):
    core = client.CoreV1Api(local_cluster.client)
    (pod,) = _app_running(core, 1)
    with pytest.raises(RestoreRefused) as refused:
        _restore(local_cluster)
    text = str(refused.value)
    assert (
        f"PersistentVolumeClaim {NS}/data is used by pod(s) {pod.metadata.name} (run by Deployment {NS}/{APP})" in text
    )
    assert f"or pass scale_down to scale Deployment {NS}/{APP} down and back" in text
    assert f"PersistentVolumeClaim {NS}/logs is used by pod(s)" in text
    assert _app_running(core, 1)[0].metadata.uid == pod.metadata.uid, "nothing was touched"


def test_scale_down_restores_both_claims_bit_exact_and_brings_the_app_back(local_cluster, backed_up):
    api = local_cluster.client
    pvs = {pvc: k.get(api, "PersistentVolumeClaim", NS, pvc)["spec"]["volumeName"] for pvc in CLAIMS}
    _drift(local_cluster, backed_up["shas"])

    out = _restore(local_cluster, scale_down=True)

    assert [r["source"] for r in out["volumes"]] == ["in place", "in place"], out["volumes"]
    for pvc in CLAIMS:
        assert _sha(_image(local_cluster, pvc)) == backed_up["shas"][pvc], f"{pvc} is bit-exact with the backup"
        assert k.get(api, "PersistentVolumeClaim", NS, pvc)["spec"]["volumeName"] == pvs[pvc], "the same PV"
    assert out["scaled_workloads"] == [
        {"workload": f"Deployment {NS}/{APP}", "replicas": 1, "scaled_back": True, "error": None}
    ]
    _assert_back_at(api, 1)
    doc = artifact(f"restore-{NS}-report").data
    assert f"scaled down for the restore and back up: Deployment {NS}/{APP} to 1" in doc, doc


def test_a_restore_failing_after_the_scale_down_still_scales_back_and_says_so(local_cluster, backed_up):
    """The writers cannot open the repository (the namespace's Secret names another one): the run fails in step
    write, after the Deployment was scaled down; it is scaled back and the failure report says so."""
    api = local_cluster.client
    core = client.CoreV1Api(api)
    core.patch_namespaced_secret(REPO_SECRET, NS, {"stringData": {"CBT_MOVER_REPO": "s3://flow-restore-scale/x"}})
    try:
        with pytest.raises(Exception, match=f"writer pod {NS}/restore-.* failed .exit 3."):
            _restore(local_cluster, scale_down=True)
    finally:
        core.patch_namespaced_secret(REPO_SECRET, NS, {"stringData": {"CBT_MOVER_REPO": REPO}})
    _assert_back_at(api, 1)
    report = artifact(f"restore-{NS}-failure").data
    assert "step `write`" in report and f"scaled down for the restore and back up: Deployment {NS}/{APP} to 1" in report


def test_a_deployment_a_crashed_run_left_scaled_down_is_returned_to_its_recorded_replicas(local_cluster, backed_up):
    """As a crashed run leaves it: the annotation records 2 replicas, the Deployment is at 0 (no pod uses the
    claims). The next run finds it by its annotation and returns it to 2."""
    api = local_cluster.client
    apps = client.AppsV1Api(api)
    apps.patch_namespaced_deployment(APP, NS, {"metadata": {"annotations": {SCALED_DOWN_FROM: "2"}}})
    apps.patch_namespaced_deployment_scale(
        APP, NS, {"spec": {"replicas": 0}}, _content_type="application/merge-patch+json"
    )
    wait_until(lambda: _app_pods(client.CoreV1Api(api)) == [], 60, "the app's pods gone")

    out = _restore(local_cluster, scale_down=True)

    assert out["scaled_workloads"] == [
        {"workload": f"Deployment {NS}/{APP}", "replicas": 2, "scaled_back": True, "error": None}
    ]
    _assert_back_at(api, 2)
    for pvc in CLAIMS:
        assert _sha(_image(local_cluster, pvc)) == backed_up["shas"][pvc]


def test_a_stateful_sets_claim_is_restored_with_the_set_scaled_down_and_back(local_cluster, backed_up):
    api = local_cluster.client
    core = client.CoreV1Api(api)
    with open(_image(local_cluster, WAL), "r+b") as f:
        os.pwrite(f.fileno(), os.urandom(8192), 1 << 20)
    (before,) = _running(core, "role=db", 1)

    out = _restore(local_cluster, pvcs=[WAL], scale_down=True)

    assert out["scaled_workloads"] == [
        {"workload": f"StatefulSet {NS}/db", "replicas": 1, "scaled_back": True, "error": None}
    ]
    assert _sha(_image(local_cluster, WAL)) == backed_up["shas"][WAL]
    sts = client.AppsV1Api(api).read_namespaced_stateful_set("db", NS)
    assert sts.spec.replicas == 1 and SCALED_DOWN_FROM not in (sts.metadata.annotations or {})
    (after,) = wait_until(lambda: _running(core, "role=db", 1), 60, "db-0 running again")
    assert after.metadata.name == "db-0" and after.metadata.uid != before.metadata.uid, "a new pod of the set"
    assert _app_running(core, 2), "the Deployment, which uses other claims, was not touched"


def test_overwrite_with_scale_down_replaces_the_claims_and_brings_the_app_back(local_cluster, backed_up):
    """``overwrite`` replaces the claims with new volumes written from the backup: refused while the Deployment's
    pods use them (offering ``scale_down``); with it the Deployment is down while the volumes are written and the
    claims replaced, then back at its replicas on the new volumes."""
    api = local_cluster.client
    replicas = client.AppsV1Api(api).read_namespaced_deployment(APP, NS).spec.replicas
    pvs = {pvc: k.get(api, "PersistentVolumeClaim", NS, pvc)["spec"]["volumeName"] for pvc in CLAIMS}
    _drift(local_cluster, backed_up["shas"])
    with pytest.raises(RestoreRefused, match="stop them before overwriting it, or pass scale_down to scale Deployment"):
        _restore(local_cluster, in_place=False, overwrite=True)

    out = _restore(local_cluster, in_place=False, overwrite=True, scale_down=True)

    assert [r["replaced"] for r in out["volumes"]] == [True, True], out["volumes"]
    for pvc in CLAIMS:
        assert k.get(api, "PersistentVolumeClaim", NS, pvc)["spec"]["volumeName"] != pvs[pvc], "a new volume"
        assert _sha(_image(local_cluster, pvc)) == backed_up["shas"][pvc], f"{pvc} is the backup's"
    assert out["scaled_workloads"] == [
        {"workload": f"Deployment {NS}/{APP}", "replicas": replicas, "scaled_back": True, "error": None}
    ]
    _assert_back_at(api, replicas)
