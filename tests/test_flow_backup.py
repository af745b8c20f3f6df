"""The ``backup-app`` flow end to end on the local cluster with Prefect's test harness: a two-PVC demo
app, a full backup, more writes, a CBT incremental; the app is thawed, the run leaves nothing behind,
and each volume restored through the CLI passes the demo app's ``verify``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT
from movers.kube import apply as k
from movers.kube import manifests as m
from tests.flowapp import HOOKS, REPO_SECRET, SEL, app_states, backup_params, deploy_app, flow_kubeconfig

NS = "flowapp"


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def app(local_cluster):
    with pytest.MonkeyPatch.context() as mp:  # the flow reads the repository (latest backup) itself
        yield deploy_app(local_cluster, mp.setenv, NS, "flow-backups")


def _backup(cluster, repo, NS=NS):  # noqa: N803
    from flows.backup import backup_app

    return backup_app(**backup_params(cluster, repo, NS))


def _app_state(core):
    return app_states(core, NS)


def test_full_then_cbt_incremental_and_restore(local_cluster, app, harness, tmp_path):
    api = local_cluster.client
    core = client.CoreV1Api(api)

    first = _backup(local_cluster, app["repo"])
    assert [(r["volume"], r["mode"], r["change_source"]) for r in first["volumes"]] == [
        (f"{NS}/data", "full", "cbt-allocated"), (f"{NS}/logs", "full", "cbt-allocated")], first  # fmt: skip

    seq = core.read_namespaced_pod_log("app", NS).count("write seq=")
    wait_until(lambda: core.read_namespaced_pod_log("app", NS).count("write seq=") >= seq + 20, 20, "more writes")
    second = _backup(local_cluster, app["repo"])
    incremental = [(f"{NS}/{pvc}", "incremental-cbt", "cbt-delta") for pvc in ("data", "logs")]
    assert [(r["volume"], r["mode"], r["change_source"]) for r in second["volumes"]] == incremental, second

    states = _app_state(core)
    assert states == ["frozen", "thawed", "frozen", "thawed"], states
    for run in (first["run_id"], second["run_id"]):
        for kind in ("Pod", "PersistentVolumeClaim", "VolumeSnapshot", "VolumeGroupSnapshot"):
            assert k.list_objects(api, kind, NS, f"{m.RUN_LABEL}={run}") == [], (run, kind)
    assert sorted(p.metadata.name for p in core.list_namespaced_persistent_volume_claim(NS).items) == ["data", "logs"]

    for pvc in ("data", "logs"):
        image = tmp_path / f"{pvc}.img"
        subprocess.run([sys.executable, "-m", "movers", "restore", "--repo", app["repo"], "--volume", f"{NS}/{pvc}",
                        "--device", str(image)], check=True, env=app["env"], capture_output=True)  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "localcluster.demo_app", "verify", "--device", str(image)],
                             check=False, capture_output=True, text=True)  # fmt: skip
        assert out.returncode == 0, (pvc, out.stdout, out.stderr)
        print(pvc, out.stdout.strip())

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as prefect:
        keys = {a.key for a in prefect.read_artifacts()}
    assert {f"backup-{NS}", f"backup-{NS}-restore"} <= keys, keys
    _assert_progress_done(NS, ("data", "logs"), runs=2)


def _assert_progress_done(ns, pvcs, runs):
    """Each volume's progress artifact (one version per run) exists and ended at 100."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from tasks.kube import progress_key

    for pvc in pvcs:
        key = progress_key(ns, pvc)
        assert key == f"progress-{ns}-{pvc}", key
        with get_client(sync_client=True) as prefect:
            found = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
        assert len(found) == runs, (key, found)
        assert all(a.type == "progress" and float(a.data) == 100.0 for a in found), (key, [a.data for a in found])


def test_on_cancellation_thaws_and_deletes_the_run(local_cluster, app, harness):
    import uuid
    from types import SimpleNamespace

    from flows.backup import on_cancellation, run_id_for
    from movers.hooks import hookset_from_policy, run_hooks

    api = local_cluster.client
    core = client.CoreV1Api(api)
    flow_run = SimpleNamespace(id=uuid.uuid4(), parameters={
        "namespace": NS, "selector": SEL, "repo": app["repo"], "repo_secret": REPO_SECRET, "hooks": HOOKS,
        "image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT,
        "kubeconfig": flow_kubeconfig(local_cluster)})  # fmt: skip
    run_id = run_id_for(flow_run.id)
    k.create(api, m.block_pvc("leftover", NS, "16Mi", None, m.run_labels(run_id)))
    assert k.list_objects(api, "PersistentVolumeClaim", NS, f"{m.RUN_LABEL}={run_id}")
    run_hooks(api, NS, hookset_from_policy(HOOKS).pre)
    wait_until(lambda: _app_state(core)[-1:] == ["frozen"], 10, "app frozen")

    on_cancellation(flow=None, flow_run=flow_run, state=None)

    wait_until(lambda: _app_state(core)[-2:] == ["frozen", "thawed"], 10, "app thawed")
    assert k.list_objects(api, "PersistentVolumeClaim", NS, f"{m.RUN_LABEL}={run_id}") == []
    assert sorted(p.metadata.name for p in core.list_namespaced_persistent_volume_claim(NS).items) == ["data", "logs"]


def test_plan_is_said_and_selector_syntax():
    from prefect.logging import disable_run_logger

    from tasks.kube import selector_string
    from tasks.repo import plan_member

    def plan(*args):
        with disable_run_logger():
            return plan_member.fn(*args)

    delta, full = {"handle": "h1", "reason": "delta since b1"}, {"handle": None, "reason": "another volume"}
    assert plan("ns/a", delta, "aud") == {"change_source": "cbt-delta", "base_handle": "h1", "audience": "aud",
                                          "why": "delta since b1"}  # fmt: skip
    assert plan("ns/a", full, "aud")["change_source"] == "cbt-allocated"
    assert plan("ns/a", full, "aud")["why"] == "another volume"
    assert plan("ns/a", delta, None, "CBT disabled") == {"change_source": "scan", "base_handle": None,
                                                        "audience": None, "why": "CBT disabled"}  # fmt: skip
    assert selector_string({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [
        {"key": "t", "operator": "In", "values": ["x", "y"]}, {"key": "g", "operator": "DoesNotExist"}]}) == (
        "a=1,b=2,t in (x,y),!g")  # fmt: skip


def test_without_group_snapshots_one_snapshot_per_pvc_while_frozen(make_local_cluster, harness, monkeypatch):
    cluster = make_local_cluster(group_snapshot_versions=())  # no group snapshot CRDs served
    ns = "nogroups"
    deployed = deploy_app(cluster, monkeypatch.setenv, ns, "flow-nogroups")
    first = _backup(cluster, deployed["repo"], ns)
    second = _backup(cluster, deployed["repo"], ns)
    assert [(r["mode"], r["change_source"]) for r in first["volumes"]] == [("full", "cbt-allocated")] * 2, first
    assert [(r["mode"], r["change_source"]) for r in second["volumes"]] == [("incremental-cbt", "cbt-delta")] * 2
    for kind in ("Pod", "PersistentVolumeClaim", "VolumeSnapshot"):
        assert k.list_objects(cluster.client, kind, ns, f"{m.RUN_LABEL}={second['run_id']}") == [], kind
    kept = k.list_objects(cluster.client, "VolumeSnapshot", ns, "cbt-mover.io/kept-for")
    assert sorted(s["metadata"]["name"] for s in kept) == [f"{second['run_id']}-{p}" for p in ("data", "logs")]
