"""The ``backup-app`` flow end to end on the local cluster with Prefect's test harness: a two-PVC demo
app, a full backup, more writes, a CBT incremental; the app is thawed, the run leaves nothing behind,
and each volume restored through the CLI passes the demo app's ``verify``."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import time

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube.names import derived_name
from movers.values import human_bytes
from tests.flowapp import (
    APP_CLASS,
    HOOKS,
    PASSPHRASE,
    REPO_SECRET,
    app_states,
    audited_creations,
    backup_params,
    deploy_app,
    flow_kubeconfig,
    flow_run_of,
    identities_sent,
    no_traceback_above_debug,
    policy_file,
    prefect_record,
    pvc_events,
    run_events,
    run_logs,
    start_app_pod,
    task_run_names,
)
from tests.functional.test_no_secrets_in_logs import forms

NS = "flowapp"


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def app(local_cluster, module_env):  # the flow reads the repository (latest backup) itself
    return deploy_app(local_cluster, module_env.setenv, NS, "flow-backups")


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
        (f"{NS}/data", "full", "cbt-allocated"),
        (f"{NS}/logs", "full", "cbt-allocated"),
    ], first

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

    restore_doc = _assert_backup_artifacts(second)
    for pvc in ("data", "logs"):
        image = tmp_path / f"{NS}-{pvc}.img"
        _run_as_printed(local_cluster, restore_doc, pvc, tmp_path)
        out = subprocess.run(
            [sys.executable, "-m", "demo.demo_app", "verify", "--device", str(image)],
            check=False,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, (pvc, out.stdout, out.stderr)
        print(pvc, out.stdout.strip())

    _assert_progress_done(NS, ("data", "logs"), runs=2)
    _assert_backed_up_events(core, app["repo"], [first, second])
    _assert_run_is_findable_and_says_why(second)
    assert all(r["why"].startswith("delta since backup") for r in second["volumes"]), second["volumes"]
    assert second["snapshots"]["path"] == "group" and second["snapshots"]["fallback"] is None, second["snapshots"]

    # lineage: "logs" deleted and re-created (a new PV): its next backup is full, never a delta across volumes
    since = _recreate_claim(core, "logs")
    third = _backup(local_cluster, app["repo"])
    rows = {r["volume"]: r for r in third["volumes"]}
    assert (rows[f"{NS}/data"]["planned"], rows[f"{NS}/data"]["mode"]) == ("cbt-delta", "incremental-cbt"), rows
    logs = rows[f"{NS}/logs"]
    _assert_backed_up_events(core, app["repo"], [third], pvcs=("logs",))  # the new claim: none of the old one's
    assert (logs["planned"], logs["change_source"], logs["mode"]) == ("cbt-allocated", "cbt-allocated", "full"), logs
    assert "bound to another volume" in logs["why"] and logs["why"].endswith("full backup"), logs["why"]
    pv = core.read_persistent_volume(core.read_namespaced_persistent_volume_claim("logs", NS).spec.volume_name)
    recorded = _listed(app, f"{NS}/logs")[logs["backup_id"]]
    assert (recorded["pv_name"], recorded["pv_uid"], recorded["pv_volume_handle"]) == (
        pv.metadata.name,
        pv.metadata.uid,
        pv.spec.csi.volume_handle,
    ), recorded
    assert recorded["run_pvcs"] == ["data", "logs"], recorded
    image = tmp_path / "logs-recreated.img"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "movers",
            "restore",
            "--repo",
            app["repo"],
            "--volume",
            f"{NS}/logs",
            "--backup",
            logs["backup_id"],
            "--device",
            str(image),
        ],
        check=True,
        env=app["env"],
        capture_output=True,
    )
    records = demo_records(image)
    assert records and all(t >= since for _device, t in records), "the restored logs hold the old volume's records"

    # a run that takes one VolumeSnapshot per PVC (the policy names a group class that does not exist) keeps those
    # as the next bases and deletes the group kept before
    from flows.backup import backup_app

    policy = policy_file(tmp_path / "p.yaml", NS, NS, app["repo"], group_snapshot={"class": "no-such-class"})
    fourth = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster))
    assert fourth["snapshots"]["path"] == "per-pvc" and "no-such-class does not exist" in fourth["snapshots"]["reason"]
    assert [r["change_source"] for r in fourth["volumes"]] == ["cbt-delta"] * 2, fourth["volumes"]
    assert _kept(api) == {"VolumeSnapshot": sorted(derived_name(fourth["run_id"], p) for p in ("data", "logs"))}
    _assert_the_key_stayed_secret(local_cluster)


def _assert_backed_up_events(core, repo, runs, pvcs=("data", "logs")):
    """``kubectl describe pvc`` shows one Normal BackedUp Event per run, naming the mode, backup id, repository,
    changed bytes and run."""
    for pvc in pvcs:
        found = pvc_events(core, NS, pvc, "BackedUp")
        expected = []
        for run in runs:
            r = next(r for r in run["volumes"] if r["volume"] == f"{NS}/{pvc}")
            expected.append(
                f"{r['mode']} backup {r['backup_id']} of {NS}/{pvc} to {repo}"
                f" ({human_bytes(r['changed_bytes'])} changed, run {run['run_id']})"
            )
        assert [e.message for e in found] == expected, (pvc, [e.message for e in found])
        assert {(e.type, e.source.component, e.count) for e in found} == {("Normal", "cbt-mover", 1)}


def _assert_run_is_findable_and_says_why(summary):
    """The run, read back through the Prefect client: named and tagged by app, namespace, run id and kind, task
    runs named by volume, one INFO line per volume for its plan and its outcome (with the mover's numbers), events
    started and completed with every volume's complete numbers."""
    run_id = summary["run_id"]
    run = flow_run_of(run_id)
    assert run.name == f"{run_id} {NS}/{NS}", run.name
    assert {"cbt-mover", "kind:backup", f"run:{run_id}", f"namespace:{NS}", f"app:{NS}"} <= set(run.tags), run.tags
    names = task_run_names(run.id)
    assert {f"move {NS}/data", f"move {NS}/logs", f"plan {NS}/data", f"plan {NS}/logs"} <= set(names), names
    logs = run_logs(run.id)
    info = [r.message for r in logs if r.level == logging.INFO]
    for row in summary["volumes"]:
        plan = [m for m in info if m.startswith(f"{row['volume']}: plan incremental from the CBT delta of snapshot ")]
        assert len(plan) == 1 and "delta since backup" in plan[0], info
        done = [m for m in info if m.startswith(f"{row['volume']}: incremental-cbt done (cbt-delta): changed ")]
        assert len(done) == 1 and done[0].endswith(f"backup id {row['backup_id']}"), info
    no_traceback_above_debug(logs)
    [started] = wait_until(lambda: run_events("cbt-mover.backup.started", run_id), 20, "started event")
    [completed] = wait_until(lambda: run_events("cbt-mover.backup.completed", run_id), 20, "completed event")
    for event in (started, completed):
        assert event.resource.id == f"cbt-mover.app.{NS}.{NS}" and event.resource["cbt-mover.kind"] == "backup"
    assert {r.id for r in completed.related if r.role == "volume"} == {
        f"cbt-mover.volume.{NS}/{p}" for p in ("data", "logs")
    }
    for row in summary["volumes"]:
        got = completed.payload["volumes"][row["volume"]]
        want = ("backup_id", "change_source", "changed_bytes", "read_bytes", "uploaded_bytes", "duration_s", "why")
        assert {k: got[k] for k in want} == {k: row[k] for k in want}, got
        assert "cbt_fallback" in got, got


def _assert_the_key_stayed_secret(cluster):
    """The repository is encrypted, its passphrase is in the Secret the movers mount: it is in none of the flow
    runs' parameters, task inputs, logs, artifacts or events, nor in anything the flows or movers sent to the API
    server (the mover pods' specs carry the path of its file only)."""
    record, sent = prefect_record(), identities_sent(cluster)
    assert f"opened with the key of Secret {NS}/{REPO_SECRET}" in record, "the scan reads the runs' logs"
    assert f"{m.REPO_KEY_DIR}/password" in sent, "the scan reads the mover pods the flows created"
    for form in forms(PASSPHRASE) | forms(PASSPHRASE + "\n"):
        assert form not in record, f"{form!r} is in the Prefect API"
        assert form not in sent, f"{form!r} was sent to the API server"


def _kept(api) -> dict[str, list[str]]:
    """The snapshots kept as bases in NS, by kind."""
    kept = {
        kind: sorted(o["metadata"]["name"] for o in k.list_objects(api, kind, NS, "cbt-mover.io/kept-for"))
        for kind in ("VolumeGroupSnapshot", "VolumeSnapshot")
    }
    return {kind: names for kind, names in kept.items() if names}


def _recreate_claim(core, pvc: str) -> int:
    """Delete the app pod and claim ``pvc`` (its PV goes), create the claim anew, start the app again; the
    time (ns) from which the new volume exists."""
    core.delete_namespaced_pod("app", NS, grace_period_seconds=0)
    wait_until(lambda: _gone(core.read_namespaced_pod, "app", NS), 30, "app pod gone")
    old = core.read_namespaced_persistent_volume_claim(pvc, NS).spec.volume_name
    core.delete_namespaced_persistent_volume_claim(pvc, NS)
    wait_until(lambda: _gone(core.read_persistent_volume, old), 30, "old PV gone")
    since = time.time_ns()
    k.create(core.api_client, m.block_pvc(pvc, NS, "16Mi", APP_CLASS, {"app": "demo"}))
    start_app_pod(core, NS, ("data", "logs"))
    return since


def _gone(read, *args) -> bool:
    try:
        read(*args)
    except client.exceptions.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def _listed(app, volume: str) -> dict[str, dict]:
    """``movers ls --json`` of ``volume``: backup id -> what it records."""
    out = subprocess.run(
        [sys.executable, "-m", "movers", "ls", "--repo", app["repo"], "--volume", volume, "--json"],
        check=True,
        env=app["env"],
        capture_output=True,
        text=True,
    )
    return {b["backup_id"]: b for b in json.loads(out.stdout)["backups"]}


def demo_records(image) -> list[tuple[int, int]]:
    """(device index, write time ns) of every intact demo app record on ``image``."""
    from demo.demo_app import _HEAD, MAGIC, RECORD, check_record

    found = []
    with open(image, "rb") as f:
        while block := f.read(RECORD):
            if block.startswith(MAGIC) and check_record(block):
                _magic, _seq, t, device, _crc = _HEAD.unpack_from(block)
                found.append((device, t))
    return found


def _artifacts(key):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        found = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return sorted(found, key=lambda a: a.created)


def _assert_progress_done(ns, pvcs, runs):
    """Each volume's progress artifact (one version per run) exists, ended at 100 and says the bytes, rate, time and
    mode (full from the allocated blocks, then an incremental CBT delta)."""
    import re

    from reporting.progress import progress_key

    for pvc in pvcs:
        key = progress_key(ns, pvc)
        assert key == f"progress-{ns}-{pvc}", key
        found = _artifacts(key)
        assert len(found) == runs, (key, found)
        assert all(a.type == "progress" and float(a.data) == 100.0 for a in found), (key, [a.data for a in found])
        first, second = (a.description for a in found)
        assert re.match(
            rf"backup of {ns}/{pvc} \(backup-\w+\): ([\d.]+ [KMG]?i?B) of \1, [\d.]+ [KMG]?i?B/s, done in ", first
        )
        assert first.endswith(f"; mode full (planned cbt-allocated: no earlier backup of {ns}/{pvc}: full backup)")
        assert "; mode incremental-cbt (planned cbt-delta: delta since backup " in second, second


def _assert_backup_artifacts(run):
    """The table of ``run`` reconciles (read = zero + new + already stored; uploaded = data + metadata, on the
    numbers and as shown), with its reason, freeze window, base backup and full backup id; the restore markdown
    names every full backup id, has no Prefect form (no restore-app deployment here) and wraps its commands.
    Returns the markdown."""
    import re

    from reporting.tables import size

    [table] = [a for a in _artifacts(f"backup-{NS}") if run["run_id"] in (a.description or "")]
    shown = {r["volume"]: r for r in json.loads(table.data)}
    assert f"freeze window {run['freeze_s']:.1f} s" in table.description, table.description
    for row in run["volumes"]:
        assert row["read_bytes"] == row["zero_bytes"] + row["new_bytes"] + row["already_stored_bytes"], row
        assert row["uploaded_bytes"] == row["data_bytes"] + row["metadata_bytes"] > row["metadata_bytes"] > 0, row
        cells = shown[row["volume"]]
        assert {k: cells[k] for k in ("zero", "new", "already stored", "uploaded", "metadata")} == {
            "zero": size(row["zero_bytes"]),
            "new": size(row["new_bytes"]),
            "already stored": size(row["already_stored_bytes"]),
            "uploaded": size(row["uploaded_bytes"]),
            "metadata": size(row["metadata_bytes"]),
        }, cells
        assert cells["backup id"] == row["backup_id"] and re.fullmatch(r"\d{8}T\d{12}Z-[0-9a-f]{6}", row["backup_id"])
        assert cells["base backup"] == row["base_backup"] != "-" and cells["reason"].startswith("delta since backup")
        assert cells["freeze window"] == f"{run['freeze_s']:.1f} s" and all("_" not in h for h in cells), cells
    [doc] = [a.data for a in _artifacts(f"backup-{NS}-restore") if run["run_id"] in a.data]
    assert all(f"| {r['backup_id']} |" in doc for r in run["volumes"]), doc
    assert "prefect deployment run" not in doc and "has no `restore-app` deployment" in doc, doc
    blocks = re.findall(r"```sh\n(.*?)```", doc, re.S)
    assert blocks and all(len(line) <= 100 for b in blocks for line in b.splitlines()), blocks
    return doc


def _run_as_printed(cluster, doc, pvc, tmp_path):
    """Run the restore markdown's credentials block and its CLI block for ``pvc`` as printed (in ``tmp_path``, with
    kubectl on the flows' kubeconfig and ``cbt-mover`` this checkout's CLI): the image it writes."""
    import re

    blocks = re.findall(r"```sh\n(.*?)```", doc, re.S)
    [creds] = [b for b in blocks if b.startswith("secret() {")]
    [restore] = [b for b in blocks if f"--volume {NS}/{pvc} " in b]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "cbt-mover"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m movers "$@"\n')
    shim.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": flow_kubeconfig(cluster),
        "PYTHONPATH": os.getcwd(),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(["sh", "-ec", creds + restore], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (creds + restore, done.stderr)
    return tmp_path / f"{NS}-{pvc}.img"


def test_on_cancellation_thaws_and_deletes_the_run(local_cluster, app, harness):
    import uuid
    from types import SimpleNamespace

    from flows.backup import on_cancellation, run_id_for
    from movers.hooks import hookset_from_policy, run_hooks

    api = local_cluster.client
    core = client.CoreV1Api(api)
    flow_run = SimpleNamespace(
        id=uuid.uuid4(),
        parameters=backup_params(local_cluster, app["repo"], NS),
    )
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

    from movers.backup.plan import VolumePlan
    from movers.repo.lineage import BaseChoice
    from movers.values import selector_string
    from tasks.repository import plan_member

    def plan(*args):
        with disable_run_logger():
            return plan_member.fn(*args)

    delta, full = BaseChoice("h1", "delta since b1"), BaseChoice(None, "another volume")
    assert plan("ns/a", delta, "aud") == VolumePlan("cbt-delta", "delta since b1", "h1", "aud", 4096)
    assert plan("ns/a", full, "aud") == VolumePlan("cbt-allocated", "another volume", None, "aud", 4096)
    assert plan("ns/a", delta, None, "CBT disabled") == VolumePlan("scan", "CBT disabled")
    assert selector_string(
        {
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [
                {"key": "t", "operator": "In", "values": ["x", "y"]},
                {"key": "g", "operator": "DoesNotExist"},
            ],
        }
    ) == ("a=1,b=2,t in (x,y),!g")


def test_without_group_snapshots_one_snapshot_per_pvc_while_frozen(make_local_cluster, harness, monkeypatch):
    """...into an UNENCRYPTED repository (still possible): its Secret holds no key, the movers mount none."""
    cluster = make_local_cluster(group_snapshot_versions=())  # no group snapshot CRDs served
    ns = "nogroups"
    deployed = deploy_app(cluster, monkeypatch.setenv, ns, "flow-nogroups", encrypted=False)
    first = _backup(cluster, deployed["repo"], ns)
    second = _backup(cluster, deployed["repo"], ns)
    assert [(r["mode"], r["change_source"]) for r in first["volumes"]] == [("full", "cbt-allocated")] * 2, first
    assert [(r["mode"], r["change_source"]) for r in second["volumes"]] == [("incremental-cbt", "cbt-delta")] * 2
    for kind in ("Pod", "PersistentVolumeClaim", "VolumeSnapshot"):
        assert k.list_objects(cluster.client, kind, ns, f"{m.RUN_LABEL}={second['run_id']}") == [], kind
    kept = k.list_objects(cluster.client, "VolumeSnapshot", ns, "cbt-mover.io/kept-for")
    assert sorted(s["metadata"]["name"] for s in kept) == [f"{second['run_id']}-{p}" for p in ("data", "logs")]
    movers = [o for o in audited_creations(cluster, ns) if o["kind"] == "Pod"]
    assert len(movers) == 4 and not [v for p in movers for v in p["spec"]["volumes"] if v["name"] == m.REPO_KEY_VOLUME]


# two claims whose names share their first 39 characters, a '.' the 39th: "<run id>-<name>"[:63] ended in '.' and
# named both claims' mover claim and pod alike
LONG_PREFIX = "shop.primary-database.volume-for-table"
LONG = (f"{LONG_PREFIX}.wal-segments-archive-of-1", f"{LONG_PREFIX}.wal-segments-archive-of-2")
TAINT = {"key": "dedicated", "value": "backup", "effect": "NoSchedule"}
BACKUP_POOL = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["backup"]}]}]
        }
    }
}


def test_disk_app_backed_up_per_pvc_on_a_tainted_backup_node_with_long_claim_names(
    local_cluster, harness, monkeypatch, tmp_path
):
    """disk.csi.local has no group snapshots (and no CBT): one VolumeSnapshot per claim under one freeze, scans.
    The policy's toleration and required node affinity put every mover on the tainted node-b; every object the
    run creates carries the app.kubernetes.io labels; names derived from long dotted claim names are valid and
    distinct, so each volume's backup holds its own data."""
    from flows.backup import backup_app

    ns, api = "diskapp", local_cluster.client
    core = client.CoreV1Api(api)
    assert len(LONG_PREFIX) == 38 and all(len(n) > 60 for n in LONG)
    core.patch_node("node-b", {"metadata": {"labels": {"pool": "backup"}}, "spec": {"taints": [TAINT]}})
    try:
        pvcs = ("data", *LONG)
        app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-diskapp", pvcs=pvcs, storage_class="standard")
        mover = {"tolerations": [{**TAINT, "operator": "Equal"}], "affinity": BACKUP_POOL}
        policy = policy_file(tmp_path / "disk.yaml", "disk-shop", ns, app["repo"], mover=mover)
        result = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster))
    finally:
        core.patch_node("node-b", {"metadata": {"labels": {"pool": None}}, "spec": {"taints": None}})
    run = result["run_id"]
    assert result["snapshots"]["path"] == "per-pvc", result["snapshots"]
    assert "disk.csi.local has no VolumeGroupSnapshotClass" in result["snapshots"]["reason"], result["snapshots"]
    assert [(r["mode"], r["change_source"]) for r in result["volumes"]] == [("full", "scan")] * 3, result
    assert all("disk.csi.local has no SnapshotMetadataService" in r["why"] for r in result["volumes"])
    assert app_states(core, ns) == ["frozen", "thawed"]

    created = audited_creations(local_cluster, ns)
    notes = [o for o in created if o["kind"] == "Event"]  # no labels: an Event names its claim (involvedObject)
    assert sorted((e["reason"], e["involvedObject"]["name"]) for e in notes) == [("BackedUp", p) for p in sorted(pvcs)]
    created = [o for o in created if o["kind"] != "Event"]
    assert sorted(o["kind"] for o in created) == ["PersistentVolumeClaim"] * 3 + ["Pod"] * 3 + ["VolumeSnapshot"] * 3
    for obj in created:
        meta = obj["metadata"]
        assert {
            k_: meta["labels"].get(k_) for k_ in (m.NAME_LABEL, m.MANAGED_BY_LABEL, m.INSTANCE_LABEL, m.PART_OF_LABEL)
        } == {
            m.NAME_LABEL: "cbt-mover",
            m.MANAGED_BY_LABEL: "cbt-mover",
            m.INSTANCE_LABEL: run,
            m.PART_OF_LABEL: "disk-shop",
        }, meta
        assert meta["labels"][m.COMPONENT_LABEL] in m.COMPONENTS and len(meta["name"]) <= 63, meta
    names = {o["kind"]: sorted(x["metadata"]["name"] for x in created if x["kind"] == o["kind"]) for o in created}
    assert all(len(set(v)) == 3 for v in names.values()), names
    movers = [o["metadata"]["name"] for o in created if o["kind"] == "Pod"]
    assert _scheduled_to(core, ns, movers) == {pod: "node-b" for pod in movers}

    for index, pvc in enumerate(pvcs):
        image = tmp_path / f"{index}.img"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "movers",
                "restore",
                "--repo",
                app["repo"],
                "--volume",
                f"{ns}/{pvc}",
                "--device",
                str(image),
            ],
            check=True,
            env=app["env"],
            capture_output=True,
        )
        devices = {device for device, _t in demo_records(image)}
        assert devices == {index}, (pvc, devices)


def _scheduled_to(core, ns: str, pods: list[str]) -> dict[str, str]:
    """Pod -> the node the scheduler bound it to (its ``Scheduled`` events: the pods are gone)."""
    found = {}
    for event in core.list_namespaced_event(ns).items:
        if event.reason == "Scheduled" and event.involved_object.name in pods:
            found[event.involved_object.name] = event.message.rsplit(" to ", 1)[1]
    return found


def test_key_rotation_as_documented_keeps_backups_working(local_cluster, harness, monkeypatch, tmp_path):
    """docs/real-cluster.md, "Rotating the key": a slot for a new key file, the Secret's passphrase replaced by
    that key file, the old slot removed; a backup runs at every step, on the key the Secret holds then."""
    ns = "rotation"
    core = client.CoreV1Api(local_cluster.client)
    app = deploy_app(local_cluster, monkeypatch.setenv, ns, "flow-rotation", pvcs=("data",))
    first = _backup(local_cluster, app["repo"], ns)

    def cli(*args: str, env=app["env"]) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "movers", *args, "--repo", app["repo"]], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    new = tmp_path / "repo.key.new"
    new.write_bytes(os.urandom(32))
    cli("key", "add", "--new-key-file", str(new))
    patch = [
        {"op": "remove", "path": "/data/password"},
        {"op": "add", "path": "/data/keyfile", "value": base64.b64encode(new.read_bytes()).decode()},
    ]
    core.patch_namespaced_secret(REPO_SECRET, ns, patch)
    second = _backup(local_cluster, app["repo"], ns)
    by_key_file = {k: v for k, v in app["env"].items() if k != "CBT_MOVER_PASSWORD"}
    slots = json.loads(cli("key", "list", "--key-file", str(new), "--json", env=by_key_file))["slots"]
    [old] = [s["slot"] for s in slots if s["kind"] == "passphrase"]
    cli("key", "remove", "--key-file", str(new), old, env=by_key_file)
    third = _backup(local_cluster, app["repo"], ns)
    modes = [r["mode"] for run in (first, second, third) for r in run["volumes"]]
    assert modes == ["full", "incremental-cbt", "incremental-cbt"], modes
    broken = subprocess.run(
        [sys.executable, "-m", "movers", "ls", "--repo", app["repo"]], env=app["env"], capture_output=True, text=True
    )
    assert broken.returncode == 6 and "no key slot" in broken.stderr, "the old passphrase opens nothing any more"


RETAIN_GROUP_CLASS = "csi-hostpath-groupsnapclass-retain"


def _retain_group_class(api) -> str:
    """A VolumeGroupSnapshotClass of the hostpath driver with deletionPolicy Retain (not the default); its version."""
    version = k.served_group_snapshot_version(api)
    if k.find(api, "VolumeGroupSnapshotClass", None, RETAIN_GROUP_CLASS, version) is None:
        body = {"metadata": {"name": RETAIN_GROUP_CLASS}, "driver": "hostpath.csi.k8s.io", "deletionPolicy": "Retain"}
        client.CustomObjectsApi(api).create_cluster_custom_object(
            "groupsnapshot.storage.k8s.io", version, "volumegroupsnapshotclasses", body
        )
    return version


def _group_contents(api, ns: str, group: str, version: str) -> list[tuple[str, str, str]]:
    """(kind, name, storage snapshot handle) of a group's content and its members' contents."""
    from movers.kube.snapshots import group_members

    vgs = k.get(api, "VolumeGroupSnapshot", ns, group, version)
    vgsc = k.get(api, "VolumeGroupSnapshotContent", None, vgs["status"]["boundVolumeGroupSnapshotContentName"], version)
    assert vgsc["spec"]["deletionPolicy"] == "Retain", vgsc["spec"]
    found = [("VolumeGroupSnapshotContent", vgsc["metadata"]["name"], vgsc["status"]["volumeGroupSnapshotHandle"])]
    members = group_members(api, vgs)
    assert len(members) == 2 and all(m.content and m.handle for m in members), members
    return found + [("VolumeSnapshotContent", m.content, m.handle) for m in members]


@pytest.mark.parametrize("setting", ["remove", "remove-stale", "keep"])
def test_retired_base_group_of_a_retain_class_leaves_nothing_behind_or_is_reported(
    local_cluster, make_local_cluster, harness, monkeypatch, tmp_path, setting
):
    """KEP-3476's Retain: deleting the group the next run replaces as the base would leave its group content, the
    members' contents and the storage snapshots; the run removes them with it (retained_snapshots: remove, the
    default), also when the snapshot-controller decided on a copy that had not seen the patch to Delete
    (remove-stale: the run deletes the contents left), or leaves them and reports them (keep)."""
    from flows.backup import backup_app
    from movers.kube import retained

    if setting == "remove-stale":
        local_cluster = make_local_cluster(stale_deletion_policy=True)
        setting = "remove"
    api, ns = local_cluster.client, f"retain-{setting}"
    version = _retain_group_class(api)
    deployed = deploy_app(local_cluster, monkeypatch.setenv, ns, f"flow-retain-{setting}")
    fields = {"group_snapshot": {"class": RETAIN_GROUP_CLASS}}
    if setting == "keep":
        fields["retained_snapshots"] = "keep"
    policy = policy_file(tmp_path / "p.yaml", ns, ns, deployed["repo"], **fields)
    first = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster))
    assert first["snapshots"]["path"] == "group" and first["retained"] == [], first
    old = _group_contents(api, ns, first["run_id"], version)
    second = backup_app(policy_path=policy, kubeconfig=flow_kubeconfig(local_cluster))
    assert [r["change_source"] for r in second["volumes"]] == ["cbt-delta"] * 2, second["volumes"]
    wait_until(
        lambda: k.find(api, "VolumeGroupSnapshot", ns, first["run_id"], version) is None, 30, "the old base group gone"
    )

    def content_of(kind: str, name: str):
        return k.find(api, kind, None, name, version if kind == "VolumeGroupSnapshotContent" else "v1")

    try:
        if setting == "remove":
            assert second["retained"] == [], second["retained"]
            for kind, name, _ in old:
                wait_until(lambda kind=kind, name=name: content_of(kind, name) is None, 30, f"{kind} {name} gone")
            wait_until(
                lambda: not any(local_cluster.store.snapshot_path(h).exists() for _, _, h in old[1:]),
                30,
                "the storage snapshots gone",
            )
        else:
            left_by = f"VolumeGroupSnapshot {ns}/{first['run_id']}"
            assert sorted(second["retained"], key=lambda c: c["name"]) == sorted(
                ({"kind": kind, "name": name, "handle": handle, "left_by": left_by} for kind, name, handle in old),
                key=lambda c: c["name"],
            ), second["retained"]
            for kind, name, _ in old:
                assert content_of(kind, name) is not None, (kind, name)
            assert all(local_cluster.store.snapshot_path(h).exists() for _, _, h in old[1:])
            warnings = [
                r.message
                for r in run_logs(flow_run_of(second["run_id"]).id)
                if r.level == logging.WARNING and "left behind (retained_snapshots: keep)" in r.message
            ]
            table = _artifacts(f"backup-{ns}")[-1]
            assert "; left behind (retained_snapshots: keep): " in table.description, table.description
            assert all(f"{kind} {name} ({handle})" in table.description for kind, name, handle in old)
            said = [retained.RetainedContent(kind, name, handle, left_by).describe() for kind, name, handle in old]
            assert sorted(warnings) == sorted(f"left behind (retained_snapshots: keep): {x}" for x in said), warnings
    finally:  # undo: what is left of the Retain class goes as Delete (the new base with its contents, the kept ones)
        for kept in k.list_objects(api, "VolumeGroupSnapshot", ns, "cbt-mover.io/kept-for", version):
            retained.delete(api, ns, "VolumeGroupSnapshot", kept["metadata"]["name"], version)
        for kind, name, _ in old:
            cversion = version if kind == "VolumeGroupSnapshotContent" else "v1"
            if content_of(kind, name) is not None:
                k.merge_patch(api, kind, None, name, {"spec": {"deletionPolicy": "Delete"}}, cversion)
                k.delete(api, kind, None, name, cversion)
        wait_until(
            lambda: not any(local_cluster.store.snapshot_path(h).exists() for _, _, h in old[1:]),
            30,
            "the storage snapshots gone",
        )
        wait_until(lambda: not k.list_objects(api, "VolumeSnapshot", ns), 30, "the namespace's snapshots gone")
