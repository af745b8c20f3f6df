"""The ``backup-app`` flow when things go wrong, on the local cluster with Prefect's local API:
a rejected CBT base, a failing mover, a failing pre-hook, a mover pod killed half-way, no CBT
service, and a run driven by a policy file with retention. In every outcome the app is thawed,
nothing labelled with the run is left, and the previous base snapshot survives a failed run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import snapshots
from tests.flowapp import (
    HOOKS,
    PASSPHRASE,
    REPO_SECRET,
    SEL,
    any_run_objects,
    app_states,
    artifact,
    audited_creations,
    backup_params,
    deploy_app,
    flow_kubeconfig,
    freeze_windows,
    no_traceback_above_debug,
    open_repo,
    policy_file,
    pvc_events,
    run_logs,
)

KEPT = "cbt-mover.io/kept-for"


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


def _backup(cluster, repo, ns, **overrides):
    from flows.backup import backup_app

    return backup_app(**backup_params(cluster, repo, ns, **overrides))


def _failed_run(cluster, repo, ns, **overrides):
    """Run the flow expecting failure; returns (the failed state's message, the flow run id)."""
    from flows.backup import backup_app

    state = backup_app(**backup_params(cluster, repo, ns, **overrides), return_state=True)
    assert state.is_failed(), state
    return state.message or "", state.state_details.flow_run_id


def _events(name: str, resource_id: str):
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    with get_client(sync_client=True) as prefect:
        page = prefect.read_events(
            EventFilter(event=EventNameFilter(name=[name]), resource=EventResourceFilter(id=[resource_id])), limit=50
        )
    return page.events


def _task_runs(flow_run_id, name: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, TaskRunFilter, TaskRunFilterName

    with get_client(sync_client=True) as prefect:
        return prefect.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=name)),
        )


def _restore_verifies(env, repo, volume, tmp_path):
    image = tmp_path / (volume.replace("/", "-") + ".img")
    subprocess.run(
        [sys.executable, "-m", "movers", "restore", "--repo", repo, "--volume", volume, "--device", str(image)],
        check=True,
        env=env,
        capture_output=True,
    )
    out = subprocess.run(
        [sys.executable, "-m", "demo.demo_app", "verify", "--device", str(image)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, (volume, out.stdout, out.stderr)


def _kept(api, ns):
    return sorted(o["metadata"]["name"] for o in k.list_objects(api, "VolumeGroupSnapshot", ns, KEPT))


def test_rejected_base_falls_back_to_scan_then_a_failing_mover_keeps_the_base(
    local_cluster, harness, monkeypatch, tmp_path
):
    ns, api = "rejbase", local_cluster.client
    core = client.CoreV1Api(api)
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-rejbase")
    first = _backup(local_cluster, app["repo"], ns)
    [kept] = _kept(api, ns)
    assert kept == first["run_id"]

    # the storage loses the base snapshots behind the cluster's back (their objects still name them): the plan asks
    # for a delta, the service rejects the recorded handle (a base whose VolumeSnapshot is gone is not planned:
    # test_after_a_partial_run_the_next_delta_is_since_the_previous_kept_base)
    for x in _members(api, ns, kept):
        local_cluster.store.delete_snapshot(x["handle"])
    second = _backup(local_cluster, app["repo"], ns)
    got = [(r["planned"], r["change_source"], r["mode"]) for r in second["volumes"]]
    assert got == [("cbt-delta", "cbt-allocated", "full")] * 2, second  # a refused base: full from allocated
    for volume in (f"{ns}/data", f"{ns}/logs"):
        _restore_verifies(app["env"], app["repo"], volume, tmp_path)

    # a mover whose credentials the repository's endpoint rejects (the flow's own pass its preflight): exit 6 is
    # not retried; the run cleans up and thaws
    with _rejecting_s3() as endpoint:
        core.patch_namespaced_secret(REPO_SECRET, ns, {"stringData": {"AWS_ENDPOINT_URL": endpoint}})
        try:
            message, run = _failed_run(local_cluster, app["repo"], ns)
        finally:
            core.patch_namespaced_secret(REPO_SECRET, ns, {"stringData": local_cluster.s3.env})
    assert "exit 6" in message and "\n" not in message, message
    moves = _task_runs(run, f"move {ns}/")
    failed_counts = [t.run_count for t in moves if t.state.is_failed()]
    assert failed_counts and set(failed_counts) == {1}, ("a permanent mover error is not retried", failed_counts)
    assert any_run_objects(api, ns) == {}
    assert app_states(core, ns)[-2:] == ["frozen", "thawed"]
    assert _kept(api, ns) == [second["run_id"]], "a failed run must keep the previous base"
    resource = f"cbt-mover.app.{ns}.{ns}"
    failed = wait_until(lambda: _events("cbt-mover.backup.failed", resource), 20, "failed event")
    assert "exit 6" in failed[0].payload["error"], failed[0].payload
    assert local_cluster.s3.env["AWS_SECRET_ACCESS_KEY"] not in json.dumps(failed[0].payload)
    from flows.backup import run_id_for

    for pvc in ("data", "logs"):  # what `kubectl describe pvc` shows: the two backups, then the failure
        (warning,) = pvc_events(core, ns, pvc, "BackupFailed")
        assert warning.type == "Warning" and warning.source.component == "cbt-mover", warning
        assert warning.message.startswith(f"backup run {run_id_for(run)} of {ns}/{pvc} to {app['repo']} failed: ")
        assert "exit 6" in warning.message and local_cluster.s3.env["AWS_SECRET_ACCESS_KEY"] not in warning.message
        assert [e.message.split(" ")[2] for e in pvc_events(core, ns, pvc, "BackedUp")] == [
            r["backup_id"] for run_ in (first, second) for r in run_["volumes"] if r["volume"] == f"{ns}/{pvc}"
        ]
    done = wait_until(lambda: _events("cbt-mover.backup.completed", resource), 20, "completed events")
    assert {e.resource["cbt-mover.run"] for e in done} == {first["run_id"], second["run_id"]}
    _assert_failure_said_once(run, ns, failed[0])


def test_after_a_partial_run_the_next_delta_is_since_the_previous_kept_base(
    local_cluster, harness, monkeypatch, tmp_path
):
    """A run whose logs mover fails (its pods deleted, the retry's too) commits data and deletes its group snapshot;
    the previous kept base stays, and the next run's deltas of both volumes are since that base's backups (the
    partial run's data backup, whose snapshot is gone, is passed over and said so), not full reads."""
    from flows.backup import run_id_for
    from movers.repo.manifest import RUN_TAG

    ns, api = "partial", local_cluster.client
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-partial")
    first = _backup(local_cluster, app["repo"], ns)
    base = {r["volume"]: r["backup_id"] for r in first["volumes"]}
    assert _kept(api, ns) == [first["run_id"]]
    with _deleting_movers(api, ns, "logs") as deleted:
        message, run = _failed_run(local_cluster, app["repo"], ns)
    assert len(deleted) == 2, ("the mover and its retry", deleted)
    assert "disappeared" in message and "\n" not in message, message
    repo = open_repo(app["repo"])
    [partial] = [
        ref.backup_id
        for ref in repo.list_backups(f"{ns}/data")
        if repo.read_manifest(f"{ns}/data", ref.backup_id).tags.get(RUN_TAG) == run_id_for(run)
    ]
    assert [r.backup_id for r in repo.list_backups(f"{ns}/logs")] == [base[f"{ns}/logs"]]
    assert _kept(api, ns) == [first["run_id"]] and any_run_objects(api, ns) == {}

    third = _backup(local_cluster, app["repo"], ns)
    rows = {r["volume"]: r for r in third["volumes"]}
    for volume, row in rows.items():
        assert (row["planned"], row["change_source"], row["mode"]) == ("cbt-delta", "cbt-delta", "incremental-cbt")
        assert row["base_backup"] == base[volume] and row["cbt_fallback"] is None, row
        assert row["why"].startswith(f"delta since backup {base[volume]} "), row["why"]
    assert f"the newer backup {partial} is no base: VolumeSnapshot {ns}/" in rows[f"{ns}/data"]["why"]
    assert rows[f"{ns}/data"]["why"].endswith(" no longer exists"), rows[f"{ns}/data"]["why"]
    assert rows[f"{ns}/data"]["read_bytes"] < 16 << 20, "a delta reads the changes, not every allocated block"
    assert _kept(api, ns) == [third["run_id"]]
    for volume in rows:
        _restore_verifies(app["env"], app["repo"], volume, tmp_path)


def test_a_v1alpha1_service_gets_the_delta_by_the_base_snapshot_name_while_it_exists(
    make_local_cluster, harness, monkeypatch, tmp_path
):
    """The v0.1.0 sidecar (a v1alpha1 SnapshotMetadataService; GetMetadataDelta field 3 is base_snapshot_name):
    the delta names the base by its VolumeSnapshot (the handle would be looked up as a name and refused); once
    that snapshot is gone the plan says so and no delta is asked for at all."""
    cluster = make_local_cluster(metadata_sidecar="v0.1.0")
    ns, api, server = "legacy", cluster.client, cluster.controllers.metadata.server
    app = deploy_app(cluster, monkeypatch.setenv, ns, "flow-legacy")
    first = _backup(cluster, app["repo"], ns)
    base = {r["volume"]: r["backup_id"] for r in first["volumes"]}
    names = {f"{ns}/{x['pvc']}": x["snapshot"] for x in _members(api, ns, first["run_id"])}
    second = _backup(cluster, app["repo"], ns)
    for row in second["volumes"]:
        assert (row["planned"], row["change_source"], row["mode"]) == ("cbt-delta", "cbt-delta", "incremental-cbt")
        assert row["base_backup"] == base[row["volume"]] and row["cbt_fallback"] is None, row
        assert f"asked by its VolumeSnapshot name {names[row['volume']]} (a v1alpha1" in row["why"], row["why"]
    deltas = [r for r in server.requests if r.method == "GetMetadataDelta"]
    assert sorted(r.base_snapshot_id for r in deltas) == sorted(names.values()), "names, not handles"
    for volume in names:
        _restore_verifies(app["env"], app["repo"], volume, tmp_path)

    [kept] = _kept(api, ns)
    k.delete(api, "VolumeGroupSnapshot", ns, kept, k.served_group_snapshot_version(api))
    wait_until(lambda: not k.list_objects(api, "VolumeSnapshot", ns), 30, "the kept base's snapshots gone")
    asked = len(server.requests)
    third = _backup(cluster, app["repo"], ns)
    for row in third["volumes"]:
        assert (row["planned"], row["change_source"], row["mode"]) == ("cbt-allocated", "cbt-allocated", "full")
        last = next(r["backup_id"] for r in second["volumes"] if r["volume"] == row["volume"])
        assert f"has its snapshot in the cluster any more (backup {last}: VolumeSnapshot {ns}/" in row["why"]
        assert row["why"].endswith(" no longer exists; 1 older one(s) likewise): full backup"), row["why"]
    assert [r.method for r in server.requests[asked:]] == ["GetMetadataAllocated"] * 2


@contextlib.contextmanager
def _deleting_movers(api, ns: str, pvc: str):
    """Delete every mover pod of ``pvc`` as soon as the API has it (before it can run); yields the deleted names."""
    from kubernetes import watch

    core, deleted, seen, stop = client.CoreV1Api(api), [], set(), threading.Event()

    def run():
        while not stop.is_set():
            w = watch.Watch()
            for event in w.stream(
                core.list_namespaced_pod, ns, label_selector=f"{m.PVC_LABEL}={pvc}", timeout_seconds=1
            ):
                pod = event["object"]
                if event["type"] == "ADDED" and pod.metadata.uid not in seen:  # a retry's pod has the same name
                    seen.add(pod.metadata.uid)
                    core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
                    deleted.append(pod.metadata.name)
                if stop.is_set():
                    w.stop()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield deleted
    finally:
        stop.set()
        thread.join(10)


def _assert_failure_said_once(flow_run_id, ns, event):
    """A failed run, read back through the Prefect client: one ERROR line of the flow saying what failed, no
    traceback above DEBUG, a failure artifact (what failed, what was committed and cleaned up, the app thawed),
    the failed event with the same."""
    import logging

    logs = run_logs(flow_run_id)
    no_traceback_above_debug(logs)
    errors = [r.message for r in logs if r.level >= logging.ERROR and r.task_run_id is None]
    assert len(errors) == 1, errors
    assert errors[0].startswith("backup backup-") and "failed in step move: MoverPodFailed: " in errors[0], errors
    assert "exit 6" in errors[0] and "\n" not in errors[0], errors
    report = artifact(f"backup-{ns}-failure")
    assert report is not None and report.flow_run_id == flow_run_id, report
    for said in ("FAILED", "step `move`", "exit 6", "## Committed before the failure", "- nothing", "## Cleaned up"):
        assert said in report.data, (said, report.data)
    assert "PersistentVolumeClaim" in report.data and "thawed after the snapshots were cut" in report.data
    assert event.payload["step"] == "move" and event.payload["committed"] == {}, event.payload
    assert event.payload["thawed"].startswith("thawed") and event.payload["cleaned_up"]["Pod"], event.payload


@contextlib.contextmanager
def _rejecting_s3():
    """An S3 endpoint (``http://127.0.0.1:PORT``) that refuses every request: 403 InvalidAccessKeyId."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access'
        b" Key Id you provided does not exist in our records.</Message></Error>"
    )

    class Refuse(BaseHTTPRequestHandler):
        def refuse(self):
            self.send_response(403)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = refuse

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _members(api, ns, group):
    from movers.backup.snapshots import member

    vgs = k.get(api, "VolumeGroupSnapshot", ns, group, k.served_group_snapshot_version(api))
    return [member(api, ns, x.snapshot) for x in snapshots.group_members(api, vgs)]


def test_failing_pre_hook_thaws_and_snapshots_nothing(local_cluster, harness, monkeypatch):
    ns, api = "badhook", local_cluster.client
    core = client.CoreV1Api(api)
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-badhook")
    hooks = {
        "pre": [
            *HOOKS["pre"],
            {
                "name": "flush",
                "pod_selector": SEL,
                "container": "app",
                "timeout": 10,
                "command": ["python", "-c", "import sys; sys.exit(3)"],
            },
        ],
        "post": HOOKS["post"],
    }
    message, _ = _failed_run(local_cluster, app["repo"], ns, hooks=hooks)
    assert "flush" in message, message
    assert app_states(core, ns)[-2:] == ["frozen", "thawed"]
    assert any_run_objects(api, ns) == {}
    assert k.list_objects(api, "VolumeGroupSnapshot", ns) == []
    assert k.list_objects(api, "VolumeSnapshot", ns) == []


def _fill_random(cluster, ns, pvc, size):
    """Incompressible data on the PVC's volume (written to its backing image, as an app would)."""
    claim = client.CoreV1Api(cluster.client).read_namespaced_persistent_volume_claim(pvc, ns)
    pv = client.CoreV1Api(cluster.client).read_persistent_volume(claim.spec.volume_name)
    with open(cluster.store.volume_path(pv.spec.csi.volume_handle), "r+b") as f:
        for _ in range(size // (8 << 20)):
            f.write(os.urandom(8 << 20))


SIZE = 384 << 20  # the mover reports progress every 0.2 s (policy mover.progress_interval), twice or more by half-way


def test_mover_pod_killed_half_way_is_retried_and_reuses_the_upload(local_cluster, harness, monkeypatch, tmp_path):
    ns, api = "killed", local_cluster.client
    core = client.CoreV1Api(api)
    # no app pod (the data stays as filled): a class that binds without a consumer
    app = deploy_app(
        local_cluster,
        monkeypatch.setenv,
        ns,
        "flow-killed",
        pvcs=("big",),
        size=f"{SIZE >> 20}Mi",
        app_pod=False,
        storage_class="csi-hostpath-immediate",
    )
    wait_until(lambda: core.read_namespaced_persistent_volume_claim("big", ns).spec.volume_name, 30, "PVC bound")
    _fill_random(local_cluster, ns, "big", SIZE)
    killed: list[str] = []
    stop = threading.Event()

    def kill_half_way():
        """Delete the first mover pod once its log reports progress short of the total."""
        while not stop.is_set() and not killed:
            for pod in core.list_namespaced_pod(ns, label_selector="cbt-mover.io/pvc=big").items:
                try:
                    log = core.read_namespaced_pod_log(pod.metadata.name, ns)
                except client.exceptions.ApiException:  # 400 until the container starts
                    continue
                for line in log.splitlines():
                    if line.startswith("progress done="):  # the total is "?" while extents still arrive
                        done = int(line.split()[1].split("=")[1])
                        if (64 << 20) <= done <= SIZE // 2:
                            core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
                            killed.append(line)
                            return
            stop.wait(0.05)

    import yaml

    policy = tmp_path / "killed.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "name": "killed",
                "namespace": ns,
                "pvc_selector": SEL,
                "repository": {"url": app["repo"], "credentials_secret": REPO_SECRET},
                "mover": {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT, "progress_interval": 0.2},
            }
        )
    )
    killer = threading.Thread(target=kill_half_way, daemon=True)
    killer.start()
    try:
        from flows.backup import backup_app

        state = backup_app(policy_path=str(policy), kubeconfig=flow_kubeconfig(local_cluster), return_state=True)
    finally:
        stop.set()
        killer.join(10)
    assert killed, "the mover finished before it could be killed half-way"
    assert state.is_completed(), state
    result = state.result()
    [row] = result["volumes"]
    assert row["mode"] == "full" and row["read_bytes"] == SIZE, row
    [move] = _task_runs(state.state_details.flow_run_id, f"move {ns}/")
    assert move.run_count == 2, move
    assert row["reused_packs"] > 0, ("the retry must reuse the packs the killed pod uploaded", killed, row)
    assert any_run_objects(api, ns) == {}


def test_without_a_cbt_service_every_backup_scans(make_local_cluster, harness, monkeypatch, tmp_path):
    cluster = make_local_cluster(cbt=False)
    ns = "nocbt"
    app = deploy_app(cluster, monkeypatch.setenv, ns, "flow-nocbt")
    first = _backup(cluster, app["repo"], ns)
    second = _backup(cluster, app["repo"], ns)
    assert [(r["planned"], r["change_source"], r["mode"]) for r in first["volumes"]] == [("scan", "scan", "full")] * 2
    assert [(r["change_source"], r["mode"]) for r in second["volumes"]] == [("scan", "incremental-scan")] * 2
    for volume in (f"{ns}/data", f"{ns}/logs"):
        _restore_verifies(app["env"], app["repo"], volume, tmp_path)


def test_policy_file_drives_the_run_and_its_retention(local_cluster, harness, monkeypatch, tmp_path):
    import yaml

    ns, api = "bypolicy", local_cluster.client
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-policy")
    policy = tmp_path / "bypolicy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "name": "bypolicy",
                "namespace": ns,
                "pvc_selector": SEL,
                "hooks": HOOKS,
                "parallelism": 1,
                "repository": {"url": app["repo"], "credentials_secret": REPO_SECRET},
                "mover": {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT},
                "cbt": {"max_results": 512},
                "retention": {"keep_last": 1, "keep_daily": 0, "keep_weekly": 0, "keep_monthly": 0},
            }
        )
    )
    from flows.backup import backup_app

    first = backup_app(policy_path=str(policy), kubeconfig=flow_kubeconfig(local_cluster))
    second = backup_app(policy_path=str(policy), kubeconfig=flow_kubeconfig(local_cluster))
    assert first["app"] == second["app"] == "bypolicy"
    movers = [o for o in audited_creations(local_cluster, ns) if o.get("kind") == "Pod"]
    assert len(movers) == 4 and all(_request(p).changes.cbt_max_results == 512 for p in movers), "cbt.max_results"
    ls = subprocess.run(
        [sys.executable, "-m", "movers", "ls", "--repo", app["repo"], "--json"],
        check=True,
        env=app["env"],
        capture_output=True,
        text=True,
    )
    ids = sorted(b["backup_id"] for b in json.loads(ls.stdout)["backups"])
    assert ids == sorted(r["backup_id"] for r in second["volumes"]), (ids, second["expired"])
    assert sorted(
        o["metadata"]["name"] for o in k.list_objects(api, "VolumeGroupSnapshot", ns, f"{KEPT}=bypolicy")
    ) == [second["run_id"]]
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        table = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["backup-bypolicy"])))
    assert len(table) == 2 and all(a.type == "table" for a in table)
    rows = json.loads(table[0].data)
    assert {"dedup", "compression", "throughput", "uploaded"} <= set(rows[0]), rows


def _request(pod: dict):
    """The mover pod's BackupRequest, read back from its env value by the class that wrote it."""
    from tests.unit.backup.test_backup_plan import _request as request_of

    return request_of(pod)


def test_a_hook_without_its_own_timeout_is_bounded_by_timeouts_hook(local_cluster, harness, monkeypatch, tmp_path):
    from flows.backup import backup_app

    ns = "slowhook"
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-slowhook", pvcs=("data",))
    slow = {
        "name": "slow",
        "pod_selector": SEL,
        "container": "app",
        "command": ["python", "-c", "import time; time.sleep(20)"],
    }
    policy = policy_file(
        tmp_path / "slow.yaml", "slowhook", ns, app["repo"], hooks={"pre": [slow]}, timeouts={"hook": "1s"}
    )
    started = time.monotonic()
    state = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster), return_state=True)
    assert state.is_failed(), state
    assert "slow" in state.message and "timed out after 1s" in state.message, state.message
    assert time.monotonic() - started < 15, "the hook's default timeout is the policy's timeouts.hook"
    assert any_run_objects(local_cluster.client, ns) == {}


def test_a_mover_no_node_takes_fails_within_timeouts_pvc_bound(local_cluster, harness, monkeypatch, tmp_path):
    """A mover pod no node takes (here: a node selector no node matches) fails the run once
    ``timeouts.pvc_bound`` is over, naming the scheduler's reason, not after ``timeouts.mover``."""
    from flows.backup import backup_app

    ns = "nowhere"
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-nowhere", pvcs=("data",))
    nowhere = {"node_selector": {"pool": "none"}}
    policy = policy_file(
        tmp_path / "nowhere.yaml",
        "nowhere",
        ns,
        app["repo"],
        mover=nowhere,
        timeouts={"pvc_bound": "3s", "mover": "1h"},
    )
    started = time.monotonic()
    state = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster), return_state=True)
    assert state.is_failed(), state
    _one_line(state.message, "mover pod nowhere/", "not scheduled after 3 s: FailedScheduling: 0/3 nodes are available")
    assert time.monotonic() - started < 60, "bounded by timeouts.pvc_bound (the mover's claim is not retried)"
    assert any_run_objects(local_cluster.client, ns) == {}


def test_a_mover_whose_volume_cannot_attach_fails_within_timeouts_start_naming_the_event_once(
    local_cluster, harness, monkeypatch, tmp_path
):
    """A mover pod that is scheduled but whose volume the storage will not attach (the local storage's
    ``attach_fault``: the attach-detach controller's FailedAttachVolume) fails the run once ``timeouts.start``
    is over, in one line naming that Event, with one pod and one wait: not retried, never after
    ``timeouts.mover``."""
    from flows.backup import backup_app

    ns = "fenced"
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-fenced", pvcs=("data",))
    policy = policy_file(
        tmp_path / "fenced.yaml", "fenced", ns, app["repo"], timeouts={"pvc_bound": "60s", "start": "3s", "mover": "1h"}
    )
    started = time.monotonic()
    with local_cluster.store.attach_fault("the array fenced this disk off"):
        state = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster), return_state=True)
    took = time.monotonic() - started
    assert state.is_failed(), state
    _one_line(
        state.message,
        f"mover pod {ns}/",
        "not running after 3 s (ContainerCreating): FailedAttachVolume: AttachVolume.Attach failed for volume",
        "rpc error: code = Internal desc = the array fenced this disk off",
    )
    assert took < 60, f"bounded by timeouts.start, not timeouts.mover: {took:.0f} s"
    movers = [o for o in audited_creations(local_cluster, ns) if o.get("kind") == "Pod"]
    assert len(movers) == 1, [o["metadata"]["name"] for o in movers]
    (move,) = _task_runs(state.state_details.flow_run_id, "move ")
    assert move.run_count == 1 and move.state.is_failed(), (move.run_count, move.state)
    assert any_run_objects(local_cluster.client, ns) == {}


def _one_line(message: str, *expected: str) -> None:
    assert "\n" not in message and all(e in message for e in expected), (expected, message)


def test_preflight_refuses_before_anything_is_frozen(local_cluster, harness, monkeypatch):
    """A permission the flow's identity lacks, a missing ServiceAccount, repository or Secret: the run fails
    with one line before the app is frozen or anything is created, and says so in its failed event."""
    ns, api = "preflight", local_cluster.client
    core = client.CoreV1Api(api)
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-preflight", pvcs=("data",))
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "shop-creds"}, "stringData": {**local_cluster.s3.env, "CBT_MOVER_REPO": app["repo"]}}
    )
    cases = [
        # the shipped controller role may read the Secret cbt-mover-repo only
        ({"repo_secret": "shop-creds"}, 'cannot get secrets "shop-creds" in namespace preflight', "resourceNames"),
        ({"service_account": "nobody"}, "the movers' ServiceAccount preflight/nobody", "does not exist"),
        ({"repo": "s3://flow-preflight/elsewhere"}, "no cbt-mover repository at s3://flow-preflight/elsewhere"),
        ({"repo": "s3://no-such-bucket/repo"}, "bucket no-such-bucket does not exist"),
    ]
    for overrides, *expected in cases:
        repo = overrides.pop("repo", app["repo"])
        message, _ = _failed_run(local_cluster, repo, ns, **overrides)
        _one_line(message, "PreflightError", *expected)
    core.delete_namespaced_secret(REPO_SECRET, ns)
    message, _ = _failed_run(local_cluster, app["repo"], ns)
    _one_line(message, f"the credentials Secret {ns}/{REPO_SECRET} (repository.credentials_secret) does not exist")
    core.create_namespaced_secret(ns, {"metadata": {"name": REPO_SECRET}, "stringData": {**local_cluster.s3.env}})
    message, _ = _failed_run(local_cluster, app["repo"], ns)
    _one_line(message, f"the credentials Secret {ns}/{REPO_SECRET} lacks the key(s) CBT_MOVER_REPO")
    # a claim of the app no pod uses yet, in a WaitForFirstConsumer class: nothing to snapshot
    k.create(api, m.block_pvc("pending", ns, "16Mi", "standard", {"app": "demo"}))
    message, _ = _failed_run(local_cluster, app["repo"], ns)
    _one_line(message, f"PVC {ns}/pending is not bound to a volume (phase Pending)")
    assert app_states(core, ns) == [], "frozen before the preflight passed"
    assert any_run_objects(api, ns) == {}
    failed = wait_until(lambda: len(_events("cbt-mover.backup.failed", f"cbt-mover.app.{ns}.{ns}")) >= 7, 20, "events")
    assert failed


def test_a_wrong_or_missing_key_in_the_secret_fails_the_run_at_once(local_cluster, harness, monkeypatch):
    """The repository Secret holds a wrong passphrase, then none: the run fails in its preflight with one line
    naming the Secret and its key (exit code 6), never the key, before the app is frozen or a mover created,
    and the check is not retried (a wrong key stays wrong)."""
    ns, api = "wrongkey", local_cluster.client
    core = client.CoreV1Api(api)
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-wrongkey", pvcs=("data",))
    wrong = "not the passphrase of this repository 3b7e"
    core.patch_namespaced_secret(REPO_SECRET, ns, {"stringData": {"password": wrong}})
    message, run = _failed_run(local_cluster, app["repo"], ns)
    _one_line(message, "PreflightError", "no key slot of", f"(Secret {ns}/{REPO_SECRET} key password)")
    assert wrong not in message and PASSPHRASE not in message
    [check] = _task_runs(run, "check-repository")
    assert check.run_count == 1 and check.state.is_failed(), check.state
    core.patch_namespaced_secret(REPO_SECRET, ns, [{"op": "remove", "path": "/data/password"}])
    message, _ = _failed_run(local_cluster, app["repo"], ns)
    _one_line(message, "PreflightError", f"is encrypted and the repository Secret {ns}/{REPO_SECRET} holds no key")
    assert app_states(core, ns) == [], "frozen before the preflight passed"
    assert any_run_objects(api, ns) == {}
    assert [o for o in audited_creations(local_cluster, ns) if o["kind"] == "Pod"] == [], "a mover pod was created"


def test_snapshot_classes_the_cluster_lacks(make_local_cluster, harness, monkeypatch):
    """No default VolumeSnapshotClass, or two: per-PVC snapshots (the disk driver has no groups) fail the
    preflight with one line naming the classes and the fix, nothing frozen; a group's members (which name no
    class) are scanned with that reason instead of failing late in the metadata service."""
    cluster = make_local_cluster(default_snapshot_class="none")
    api = cluster.client
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = "nodefault"
    disk = deploy_app(cluster, monkeypatch.setenv, ns, "flow-nodefault", pvcs=("data",), storage_class="standard")
    message, _ = _failed_run(cluster, disk["repo"], ns)
    _one_line(
        message,
        "CSI driver disk.csi.local has no default VolumeSnapshotClass (its classes: disk-snapclass)",
        "set snapshot_class in the policy",
    )
    default = {"snapshot.storage.kubernetes.io/is-default-class": "true"}
    custom.patch_cluster_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotclasses",
        "disk-snapclass",
        {"metadata": {"annotations": default}},
    )
    custom.create_cluster_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotclasses",
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "driver": "disk.csi.local",
            "deletionPolicy": "Delete",
            "metadata": {"name": "disk-snapclass-b", "annotations": default},
        },
    )
    message, _ = _failed_run(cluster, disk["repo"], ns)
    _one_line(
        message, "CSI driver disk.csi.local has 2 default VolumeSnapshotClasses (disk-snapclass, disk-snapclass-b)"
    )
    assert app_states(core, ns) == [] and any_run_objects(api, ns) == {}

    ns = "groupnoclass"
    app = deploy_app(cluster, monkeypatch.setenv, ns, "flow-groupnoclass", pvcs=("data",))
    result = _backup(cluster, app["repo"], ns)
    assert result["snapshots"]["path"] == "group", result["snapshots"]
    [row] = result["volumes"]
    assert (row["planned"], row["change_source"], row["mode"]) == ("scan", "scan", "full"), row
    assert "CSI driver hostpath.csi.k8s.io has no default VolumeSnapshotClass" in row["why"], row


BOUND = 4.0  # group_snapshot.freeze_timeout of the tests below, seconds
THAW_SLACK = 0.5  # how much longer than the freeze the thaw hook may take on a loaded machine, seconds


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"group_snapshots": "unprocessed"}, "has no status: nothing processed it"),
        ({"hostpath_group_capability": False}, "Unimplemented"),
    ],
    ids=["unprocessed", "no-group-capability"],
)
def test_group_not_cut_in_time_thaws_then_falls_back_to_one_snapshot_per_pvc(
    make_local_cluster, harness, monkeypatch, tmp_path, request, settings, why
):
    """The group API is served and the class exists, but nothing cuts the group (the snapshot controller's
    feature gate off, or a driver without the capability): the app is thawed within the bound and the group
    deleted; on_timeout fail fails with one line, per-pvc backs up from one VolumeSnapshot per PVC taken under
    a new bounded freeze, and says so in the summary and the table."""
    from flows.backup import backup_app
    from movers.kube.names import derived_name

    cluster = make_local_cluster(**settings)
    ns, api = "stuckgroup", cluster.client
    core = client.CoreV1Api(api)
    app = deploy_app(cluster, monkeypatch.setenv, ns, "flow-stuckgroup")
    kubeconfig, name = flow_kubeconfig(cluster), f"stuck-{request.node.callspec.id}"  # name: the artifacts' keys
    bounded = {"freeze_timeout": BOUND, "on_timeout": "fail"}
    fail = policy_file(tmp_path / "fail.yaml", name, ns, app["repo"], group_snapshot=bounded)
    state = backup_app(policy_path=fail, kubeconfig=kubeconfig, return_state=True)
    assert state.is_failed(), state
    _one_line(state.message, f"was not cut within group_snapshot.freeze_timeout {BOUND:g} s", why, "on_timeout: fail")
    assert app_states(core, ns) == ["frozen", "thawed"]
    assert _group_leftovers(api, ns) == ([], [])

    policy = policy_file(tmp_path / "per-pvc.yaml", name, ns, app["repo"], group_snapshot={"freeze_timeout": BOUND})
    result = backup_app(policy_path=policy, kubeconfig=kubeconfig)
    snaps = result["snapshots"]
    assert (snaps["path"], snaps["kind"]) == ("per-pvc", "VolumeSnapshot") and why in snaps["fallback"], snaps
    assert [(r["mode"], r["change_source"]) for r in result["volumes"]] == [("full", "cbt-allocated")] * 2, result
    assert all(
        r["snapshot"].startswith("per-pvc (fallback: the VolumeGroupSnapshot was not cut") for r in result["volumes"]
    )
    assert app_states(core, ns) == ["frozen", "thawed"] * 3  # the failed run's, the group's, the per-PVC one's
    windows = freeze_windows(core, ns)
    # the cut's deadline sets aside the pre hooks' time for the thaw (movers.backup.snapshots: "about
    # freeze_timeout"); on a loaded machine the thaw can take a little longer than the freeze did (4.0016 s seen)
    assert len(windows) == 3 and max(windows) < BOUND + THAW_SLACK, windows
    assert _group_leftovers(api, ns) == ([], [])
    assert any_run_objects(api, ns) == {}
    kept = k.list_objects(api, "VolumeSnapshot", ns, KEPT)
    assert sorted(s["metadata"]["name"] for s in kept) == [derived_name(result["run_id"], p) for p in ("data", "logs")]
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        [table] = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[f"backup-{name}"])))
    assert all(row["snapshot"].startswith("per-pvc (fallback:") for row in json.loads(table.data)), table.data


def _group_leftovers(api, ns):
    """The VolumeGroupSnapshots of ``ns`` and every VolumeGroupSnapshotContent of the cluster."""
    version = k.served_group_snapshot_version(api)
    return (
        [o["metadata"]["name"] for o in k.list_objects(api, "VolumeGroupSnapshot", ns, version=version)],
        [o["metadata"]["name"] for o in k.list_objects(api, "VolumeGroupSnapshotContent", None, version=version)],
    )
