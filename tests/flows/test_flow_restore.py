"""The ``restore-app`` flow end to end on the local cluster with Prefect's test harness, as the shipped
identities. The demo app runs on node-b (its WaitForFirstConsumer hostpath volumes are node-b's): Block
PVCs data, logs and one with a long name, and an xfs Filesystem PVC files with a file on it. It is backed
up twice by ``backup-app``; the second run then loses its backup of logs (what a failed mover leaves): the
newest run is partial. Restores: the whole app into a new namespace (the latest COMPLETE run,
byte-identical, on node-b again, files mounted as xfs), one PVC by backup id, a refused and an allowed
overwrite, a Filesystem hand-over into a class that says ext4, a partial run, writer settings from a
policy, a writer that cannot be scheduled, a missing permission, a missing backup and a failing writer;
no writer pod is ever left."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client

from demo.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, pod_manifest, wait_pod, wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac, controller_role
from movers.errors import NotFoundError, UsageError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import volumes
from movers.restore.plan import PVC_LABEL, PermissionsMissing, RestoreRefused
from movers.restore.writers import WriterNotScheduled
from tests.flowapp import (
    APP,
    APP_CLASS,
    KEY_ENV,
    REPO_SECRET,
    SEL,
    artifact,
    audited_creations,
    backup_params,
    flow_kubeconfig,
    flow_run_of,
    init_repo,
    no_traceback_above_debug,
    open_repo,
    pvc_events,
    repo_secret,
    run_events,
    run_logs,
    task_run_names,
)

SRC = "shop"
MOVER = {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT, "repo_secret": REPO_SECRET}
XFS_CLASS = "csi-hostpath-xfs"
IMMEDIATE = "csi-hostpath-immediate"  # for claims no pod uses (a WaitForFirstConsumer one would never bind)
NODE = "node-b"  # where the app and so its node-local volumes live
ON_NODE = {"kubernetes.io/hostname": NODE}
LONG = "orders.archive-kept-for-the-auditors-until-the-end-of-fiscal-year-2031"  # > 63: not a label value
CLAIMS = (
    ("data", "Block", "16Mi"),
    ("logs", "Block", "16Mi"),
    ("files", "Filesystem", "320Mi"),
)  # files: mkfs.xfs wants 300 MB at least (sparse)
# the app's claims' own labels (the backup's selector picks app=demo): a restored claim must get them back
CLAIM_LABELS = {"app": "demo", m.NAME_LABEL: "shop-db"}


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def backed_up(local_cluster, harness, module_env):
    """The app in SRC on node-b, backed up twice; the second run made partial (its logs backup forgotten)."""
    from flows.backup import backup_app

    cluster, api = local_cluster, local_cluster.client
    core = client.CoreV1Api(api)
    cluster.s3.client().create_bucket(Bucket="flow-restore")
    repo = "s3://flow-restore/repo"
    init_repo(cluster, repo)  # encrypted: PASSPHRASE, in every namespace's Secret
    for key, value in cluster.s3.env.items():  # the flows read the repository themselves
        module_env.setenv(key, value)
    _namespace(cluster, SRC, repo)
    for pvc, mode, size in CLAIMS:
        claim = m.block_pvc(pvc, SRC, size, XFS_CLASS if mode == "Filesystem" else APP_CLASS, CLAIM_LABELS)
        claim["spec"]["volumeMode"] = mode
        k.create(api, claim)
    _run_pod(core, SRC, "writer", "echo kept > /mnt/files/hello && sync", "files", ON_NODE)
    devices = {"data": "/dev/xvda", "logs": "/dev/xvdb"}
    core.create_namespaced_pod(
        SRC, demo_pod("app", devices, labels={"app": "demo"}, interval=0.02, node_selector=ON_NODE)
    )
    wait_pod(core, "app", phase_in("Running"), namespace=SRC, timeout=30)
    wait_until(lambda: core.read_namespaced_pod_log("app", SRC).count("write seq=") >= 5, 30, "app writes")
    params = backup_params(cluster, repo, SRC, parallelism=4)
    first = backup_app(**params)
    shas = _snapshot_shas(cluster, repo, first)  # the next run replaces these snapshots as its bases
    second = backup_app(**params)
    shas |= _snapshot_shas(cluster, repo, second)
    forgotten = next(r["backup_id"] for r in second["volumes"] if r["volume"] == f"{SRC}/logs")
    _forget(repo, f"{SRC}/logs", forgotten)  # as if the mover of logs had failed in the second run
    sources = {}
    for pvc, _, _ in CLAIMS:
        _, _, pv = _volume_image(cluster, SRC, pvc)
        sources[pvc] = pv["spec"]["nodeAffinity"]["required"]
    yield {
        "cluster": cluster,
        "repo": repo,
        "app": first,
        "partial": second["run_id"],
        "shas": shas,
        "sources": sources,
        "backups": {r["volume"].split("/", 1)[1]: r["backup_id"] for r in first["volumes"]},
    }


def _snapshot_shas(cluster, repo, app) -> dict[str, str]:
    return {
        r["backup_id"]: _sha(_snapshot_image(cluster, repo, SRC, r["volume"].split("/", 1)[1], r["backup_id"]))
        for r in app["volumes"]
    }


def _forget(repo, volume, backup_id):
    store = open_repo(repo)
    (ref,) = [ref for ref in store.list_backups(volume) if ref.backup_id == backup_id]
    store.store.delete(ref.key)


def _namespace(cluster, name, repo, **data):
    """Namespace ``name`` with the mover identity and the repository Secret (``data`` over its keys)."""
    core = client.CoreV1Api(cluster.client)
    core.create_namespace({"metadata": {"name": name}})
    apply_mover_rbac(cluster, [name])
    core.create_namespaced_secret(name, repo_secret(cluster, repo, **data))


def _run_pod(core, ns, name, script, claim, node_selector=None, device=None):
    attach = (
        {"volumeDevices": [{"name": "v", "devicePath": device}]}
        if device
        else {"volumeMounts": [{"name": "v", "mountPath": f"/mnt/{claim}"}]}
    )
    pod = pod_manifest(name, ["sh", "-c", script], **attach)
    pod["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
    if node_selector:
        pod["spec"]["nodeSelector"] = node_selector
    core.create_namespaced_pod(ns, pod)
    done = wait_pod(core, name, phase_in("Succeeded", "Failed"), namespace=ns, timeout=30)
    log = core.read_namespaced_pod_log(name, ns)
    core.delete_namespaced_pod(name, ns)
    wait_until(lambda: not k.find(core.api_client, "Pod", ns, name), 20, f"pod {ns}/{name} gone")
    assert done.status.phase == "Succeeded", log
    return log


def _restore(cluster, repo, kubeconfig=None, return_state=False, **asked):
    """A ``restore-app`` run of the request ``asked`` over the test's defaults (the source namespace, the mover's
    image, ServiceAccount and repository Secret)."""
    from flows.restore import restore_app

    defaults = {"namespace": SRC, "image": MOVER["image"], "service_account": MOVER["service_account"]}
    request = {"repo": repo, "repo_secret": MOVER["repo_secret"], **defaults, **asked}
    return restore_app(request=request, kubeconfig=kubeconfig or flow_kubeconfig(cluster), return_state=return_state)


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _volume_image(cluster, ns, pvc):
    claim = k.get(cluster.client, "PersistentVolumeClaim", ns, pvc)
    pv = k.get(cluster.client, "PersistentVolume", None, claim["spec"]["volumeName"])
    return cluster.store.volume_path(pv["spec"]["csi"]["volumeHandle"]), claim, pv


def _snapshot_image(cluster, repo, ns, pvc, backup_id):
    manifest = open_repo(repo).read_manifest(f"{ns}/{pvc}", backup_id)
    return cluster.store.snapshot_path(manifest.snapshot.snapshot_handle)


def _assert_identical(backed_up, row, ns, src_ns=SRC):
    restored, claim, _pv = _volume_image(backed_up["cluster"], ns, row["pvc"])
    expected = backed_up["shas"][row["backup_id"]]
    assert _sha(restored) == expected, f"{ns}/{row['pvc']} differs from the snapshot it was backed up from"
    annotations = claim["metadata"]["annotations"]
    assert annotations[m.RESTORED_FROM] == f"{src_ns}/{row['pvc']}@{row['backup_id']}"
    return restored


def _run_objects(cluster, ns, run_id):
    found = {}
    for kind, where in (("Pod", ns), ("PersistentVolumeClaim", ns), ("PersistentVolume", None)):
        found[kind] = [
            o["metadata"]["name"] for o in k.list_objects(cluster.client, kind, where, f"{m.RUN_LABEL}={run_id}")
        ]
    return found


def _no_writer_pods(cluster, *namespaces):
    for ns in namespaces:
        left = [
            p["metadata"]["name"]
            for p in k.list_objects(cluster.client, "Pod", ns, m.RUN_LABEL)
            if p["metadata"]["labels"][m.RUN_LABEL].startswith("restore-")
        ]
        assert left == [], (ns, left)


def _recorded_mode(repo, pvc, backup_id):
    return open_repo(repo).read_manifest(f"{SRC}/{pvc}", backup_id).volume.volume_mode


def test_whole_app_into_a_new_namespace_is_the_latest_complete_run_where_it_was(local_cluster, backed_up):
    repo, core = backed_up["repo"], client.CoreV1Api(local_cluster.client)
    _namespace(local_cluster, "shop-copy", repo)
    out = _restore(local_cluster, repo, target_namespace="shop-copy", parallelism=4)

    first = backed_up["app"]["run_id"]
    assert {r["pvc"]: r["backup_id"] for r in out["volumes"]} == backed_up["backups"], "the newest run is partial"
    assert first in out["selected"] and "latest complete run" in out["selected"], out["selected"]
    assert out["notes"] == [f"newer run {backed_up['partial']} is partial: no backup of PVC(s) logs"]
    for row in out["volumes"]:
        image = _assert_identical(backed_up, row, "shop-copy")
        recorded = _recorded_mode(repo, row["pvc"], row["backup_id"])
        assert row["volume_mode"] == ("Filesystem" if recorded == "Filesystem" else "Block"), (row, recorded)
        assert row["written_bytes"] > 0 and not row["replaced"]
        _, claim, pv = _volume_image(local_cluster, "shop-copy", row["pvc"])
        assert pv["spec"]["nodeAffinity"]["required"] == backed_up["sources"][row["pvc"]], "restored where it was"
        assert row["notes"] == [], row["notes"]
        labels = claim["metadata"]["labels"]
        assert (labels[m.PART_OF_LABEL], labels[PVC_LABEL]) == (SRC, m.label_value(row["pvc"])), labels
        assert {key: labels[key] for key in CLAIM_LABELS} == CLAIM_LABELS, "the source claim's labels win"
        if row["volume_mode"] == "Block":
            check = subprocess.run([*APP, "verify", "--device", str(image)], capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr
    assert next(r for r in out["volumes"] if r["pvc"] == "files")["fs_type"] == "xfs"
    selected = core.list_namespaced_persistent_volume_claim("shop-copy", label_selector="app=demo").items
    assert {c.metadata.name for c in selected} == {"data", "logs", "files"}, "the app's next backup takes them"
    if local_cluster.store.use_loop:  # the fallback kubelet gives Filesystem claims a directory, not the image
        assert _run_pod(core, "shop-copy", "reader", "cat /mnt/files/hello", "files") == "kept\n"
    assert _run_objects(local_cluster, "shop-copy", out["run_id"])["Pod"] == []
    _assert_artifacts("shop-copy", ("data", "logs", "files"))
    for row in out["volumes"]:  # what `kubectl describe pvc` shows on each new claim
        (event,) = pvc_events(core, "shop-copy", row["pvc"], "Restored")
        assert (event.type, event.source.component) == ("Normal", "cbt-mover"), event
        assert event.message.startswith(f"restored backup {row['backup_id']} of {SRC}/{row['pvc']} from {repo} ("), (
            event
        )
        assert event.message.endswith(f" written, run {out['run_id']})"), event.message
    _assert_linked_to_its_backup_run(out, first)


def _assert_linked_to_its_backup_run(out, backup_run):
    """The restore, read back through the Prefect client: named and tagged (kind, run, namespaces, the backup run),
    task runs named by volume, its report and events name the backup run and link its flow run (found by the
    backup's run: tag), the writers' outcome in one INFO line per volume."""
    import logging

    run_id, backup_flow_run = out["run_id"], flow_run_of(backup_run)
    assert out["backup_run"] == backup_run and out["backup_flow_run"]["id"] == str(backup_flow_run.id), out
    run = flow_run_of(run_id)
    assert run.name == f"{run_id} {SRC} from latest into shop-copy", run.name
    tags = {"kind:restore", f"run:{run_id}", "namespace:shop-copy", f"source-namespace:{SRC}"}
    assert tags | {f"backup-run:{backup_run}", f"app:{SRC}"} <= set(run.tags), run.tags
    names = set(task_run_names(run.id))
    assert {f"restore shop-copy/{p}" for p, _, _ in CLAIMS} <= names, names
    logs = run_logs(run.id)
    no_traceback_above_debug(logs)
    info = [r.message for r in logs if r.level == logging.INFO]
    for row in out["volumes"]:
        said = [m for m in info if m.startswith(f"shop-copy/{row['pvc']}: restored backup {row['backup_id']} of ")]
        assert len(said) == 1 and "read back identical" in said[0], info
    link = f"(backup flow run {backup_flow_run.name}: {out['backup_flow_run']['url']})"
    assert out["backup_flow_run"]["url"].endswith(f"/runs/flow-run/{backup_flow_run.id}"), out  # PREFECT_UI_URL
    assert any(link in m for m in info), info
    report = artifact("restore-shop-copy-report")
    assert f"Backup run `{backup_run}` {link}" in report.data, report.data
    [done] = wait_until(lambda: run_events("cbt-mover.restore.completed", run_id), 30, "completed event")
    assert done.resource.id == "cbt-mover.namespace.shop-copy", done.resource
    related = {(r.role, r.id) for r in done.related}
    assert {
        ("backup-run", f"cbt-mover.run.{backup_run}"),
        ("backup-flow-run", f"prefect.flow-run.{backup_flow_run.id}"),
    } <= related
    assert {("volume", f"cbt-mover.volume.shop-copy/{p}") for p, _, _ in CLAIMS} <= related, related
    assert set(done.payload["volumes"]) == {f"shop-copy/{p}" for p, _, _ in CLAIMS}, done.payload
    assert wait_until(lambda: run_events("cbt-mover.restore.started", run_id), 30, "started event")


def _refused_event_creations(cluster, service_account: str) -> list[str]:
    """The namespaces where the API refused (403) an Event of ``cbt-mover-system/<service_account>`` (audit log)."""
    import json

    user = f"system:serviceaccount:cbt-mover-system:{service_account}"
    with open(cluster.audit_log, encoding="utf-8") as f:
        entries = [json.loads(line) for line in f]
    return [
        e["authz"]["namespace"]
        for e in entries
        if e["user"] == user
        and e["method"] == "POST"
        and (e.get("authz") or {}).get("resource") == "events"
        and e["code"] == 403
    ]


def _warnings(flow_run_id, starting: str) -> list[str]:
    """The flow run's log messages (its tasks' too) at WARNING or above that start with ``starting``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, LogFilterLevel

    with get_client(sync_client=True) as prefect:
        logs = prefect.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]), level=LogFilterLevel(ge_=30))
        )
    return [log.message for log in logs if log.message.startswith(starting)]


def _assert_artifacts(ns, pvcs):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        wanted = [f"restore-{ns}", f"restore-{ns}-report"]
        keys = {
            a.key for a in prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=wanted)))
        }
        assert set(wanted) <= keys, keys
        for pvc in pvcs:
            key = f"restore-progress-{ns}-{pvc}"
            found = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            assert found and all(a.type == "progress" and float(a.data) == 100.0 for a in found), (key, found)
            assert all(
                re.search(
                    r": ([\d.]+ [KMG]?i?B) of \1, [\d.]+ [KMG]?i?B/s, done in .*; mode written, then read back",
                    a.description,
                )
                for a in found
            ), [a.description for a in found]
        [table] = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[f"restore-{ns}"])))
    rows = json.loads(table.data)
    assert sorted(r["volume"] for r in rows) == sorted(f"{ns}/{p}" for p in pvcs), rows
    for row in rows:  # the backup table's style: lower-case header words, human units
        assert all(re.fullmatch(r"[a-z ]+", h) for h in row) and {"backup id", "written", "throughput"} <= set(row)
        assert re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)", row["written"]) and row["duration"].endswith(" s"), row
        assert row["throughput"].endswith("/s") and row["replaced"] == "no", row


def _assert_events(name, resources):
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter

    def seen():
        with get_client(sync_client=True) as prefect:
            page = prefect.read_events(EventFilter(event=EventNameFilter(name=[name])), limit=50)
        return {e.resource.id for e in page.events}

    wait_until(lambda: set(resources) <= seen(), 30, f"{name} events for {resources}")


def test_one_pvc_by_backup_id_and_refusal_when_the_claim_exists(local_cluster, backed_up):
    repo, logs = backed_up["repo"], backed_up["backups"]["logs"]
    _namespace(local_cluster, "logs-only", repo)
    out = _restore(local_cluster, repo, pvcs=["logs"], backup=logs, target_namespace="logs-only")
    assert [(r["pvc"], r["backup_id"]) for r in out["volumes"]] == [("logs", logs)]
    _assert_identical(backed_up, out["volumes"][0], "logs-only")

    claims = sorted(p["metadata"]["name"] for p in k.list_objects(local_cluster.client, "PersistentVolumeClaim", SRC))
    with pytest.raises(RestoreRefused, match=f"PersistentVolumeClaim {SRC}/data exists: pass overwrite"):
        _restore(local_cluster, repo)  # into the source namespace, where the app's claims exist
    with pytest.raises(RestoreRefused, match="is used by pod.s. app"):
        _restore(local_cluster, repo, pvcs=["data", "logs"], overwrite=True)  # the demo app still runs on them
    core = client.CoreV1Api(local_cluster.client)
    for pvc in ("data", "logs"):  # the claims it would have replaced say why
        warnings = [w for w in pvc_events(core, SRC, pvc, "RestoreFailed") if "is used by pod(s) app" in w.message]
        assert len(warnings) == 1 and warnings[0].type == "Warning", warnings
        assert (
            warnings[0].message.startswith("restore run restore-")
            and f"into {SRC}/{pvc} failed: " in warnings[0].message
        )
    after = sorted(p["metadata"]["name"] for p in k.list_objects(local_cluster.client, "PersistentVolumeClaim", SRC))
    assert claims == after == sorted(pvc for pvc, _, _ in CLAIMS)
    _no_writer_pods(local_cluster, SRC, "logs-only")
    _assert_events("cbt-mover.restore.failed", [f"cbt-mover.namespace.{SRC}"])


def test_overwrite_replaces_the_claim_only_with_complete_data(local_cluster, backed_up):
    repo, api = backed_up["repo"], local_cluster.client
    _namespace(local_cluster, "overwrite", repo)
    k.create(api, m.block_pvc("data", "overwrite", "16Mi", IMMEDIATE))  # what the app has now
    wait_until(
        lambda: k.get(api, "PersistentVolumeClaim", "overwrite", "data")["status"].get("phase") == "Bound",
        20,
        "the existing claim is bound",
    )
    old_image, _, old_pv = _volume_image(local_cluster, "overwrite", "data")

    out = _restore(local_cluster, repo, pvcs=["data"], target_namespace="overwrite", overwrite=True)

    assert out["volumes"][0]["replaced"]
    _assert_identical(backed_up, out["volumes"][0], "overwrite")
    _, claim, pv = _volume_image(local_cluster, "overwrite", "data")
    assert pv["metadata"]["name"] != old_pv["metadata"]["name"] and claim["spec"]["volumeMode"] == "Block"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    wait_until(lambda: not old_image.exists(), 20, "the replaced claim's volume is reclaimed (policy Delete)")
    assert [p["metadata"]["name"] for p in k.list_objects(api, "PersistentVolumeClaim", "overwrite")] == ["data"]


def test_filesystem_volume_keeps_its_recorded_fs_type_in_a_class_that_says_ext4(local_cluster, backed_up):
    repo = backed_up["repo"]
    _namespace(local_cluster, "files-copy", repo)
    out = _restore(
        local_cluster, repo, pvcs=["files"], target_namespace="files-copy", hand_over=True, storage_class=APP_CLASS
    )

    (row,) = out["volumes"]
    assert (row["pvc"], row["volume_mode"], row["storage_class"]) == ("files", "Filesystem", APP_CLASS)
    _assert_identical(backed_up, row, "files-copy")
    _, claim, pv = _volume_image(local_cluster, "files-copy", "files")
    assert claim["spec"]["volumeMode"] == "Filesystem" and claim["status"]["phase"] == "Bound"
    assert pv["spec"]["csi"]["fsType"] == row["fs_type"] == "xfs", "recorded xfs, not the class's ext4"
    assert row["notes"] == [], "nothing was guessed"
    names = [p["metadata"]["name"] for p in k.list_objects(local_cluster.client, "PersistentVolumeClaim", "files-copy")]
    assert names == ["files"], "the temporary Block claim is gone"
    if local_cluster.store.use_loop:  # the fallback kubelet gives Filesystem claims a directory, not the image
        core = client.CoreV1Api(local_cluster.client)
        assert _run_pod(core, "files-copy", "reader", "cat /mnt/files/hello", "files") == "kept\n"


def test_missing_backup_creates_nothing_and_a_failing_writer_leaves_nothing(local_cluster, backed_up):
    repo, api = backed_up["repo"], local_cluster.client
    _namespace(local_cluster, "broken", repo, CBT_MOVER_REPO="s3://flow-restore/x")
    with pytest.raises(NotFoundError, match="has no backup 20990101T000000000000Z-abcdef"):
        _restore(local_cluster, repo, pvcs=["data"], backup="20990101T000000000000Z-abcdef", target_namespace="broken")
    assert k.list_objects(api, "PersistentVolumeClaim", "broken") == []

    with pytest.raises(Exception, match="writer pod broken/restore-.* failed .exit 3."):
        _restore(local_cluster, repo, pvcs=["data", "logs"], target_namespace="broken")  # its Secret: another repo
    assert k.list_objects(api, "PersistentVolumeClaim", "broken") == []
    wait_until(
        lambda: (
            not [
                pv
                for pv in k.list_objects(api, "PersistentVolume", None)
                if (pv["spec"].get("claimRef") or {}).get("namespace") == "broken"
            ]
        ),
        20,
        "the volumes of the deleted claims are reclaimed",
    )
    _no_writer_pods(local_cluster, "broken", "shop-copy", "overwrite", "files-copy")
    _assert_events("cbt-mover.restore.failed", ["cbt-mover.namespace.broken"])
    report = artifact("restore-broken-failure")
    assert "step `write`" in report.data and "exit 3" in report.data and "PersistentVolumeClaim" in report.data


def test_on_cancellation_deletes_what_the_run_created(local_cluster, backed_up):
    import uuid
    from types import SimpleNamespace

    from flows.restore import on_cancellation, run_id_for

    api = local_cluster.client
    _namespace(local_cluster, "cancelled", backed_up["repo"])
    flow_run = SimpleNamespace(
        id=uuid.uuid4(),
        parameters={
            "request": {"repo": backed_up["repo"], "namespace": SRC, "target_namespace": "cancelled"},
            "kubeconfig": flow_kubeconfig(local_cluster),
        },
    )
    run_id = run_id_for(flow_run.id)
    labels = m.run_labels(run_id, **{"cbt-mover.io/pvc": "data"})
    k.create(api, m.block_pvc(f"data-{run_id}", "cancelled", "16Mi", IMMEDIATE, labels))
    k.create(api, m.block_pvc("unrelated", "cancelled", "16Mi", IMMEDIATE))
    claim = volumes.wait_claim_bound(api, "cancelled", f"data-{run_id}", timeout=20)
    k.merge_patch(api, "PersistentVolume", None, claim["spec"]["volumeName"], {"metadata": {"labels": labels}})

    on_cancellation(flow=None, flow_run=flow_run, state=None)

    assert _run_objects(local_cluster, "cancelled", run_id) == {
        "Pod": [],
        "PersistentVolumeClaim": [],
        "PersistentVolume": [],
    }
    assert [p["metadata"]["name"] for p in k.list_objects(api, "PersistentVolumeClaim", "cancelled")] == ["unrelated"]


def test_a_partial_run_is_restored_only_when_allowed(local_cluster, backed_up):
    repo, api, partial = backed_up["repo"], local_cluster.client, backed_up["partial"]
    _namespace(local_cluster, "partial", repo)
    with pytest.raises(
        UsageError, match=rf"run {partial} of namespace {SRC} is partial: it has no backup of PVC\(s\) logs"
    ) as err:
        _restore(local_cluster, repo, backup=partial, target_namespace="partial")
    assert "allow_partial" in str(err.value) and "\n" not in str(err.value)
    assert k.list_objects(api, "PersistentVolumeClaim", "partial") == [], "refused before anything was created"

    # allowed, it restores the volumes the run has: here refused only because they exist in the source namespace
    with pytest.raises(RestoreRefused) as refused:
        _restore(local_cluster, repo, backup=partial, allow_partial=True)
    exists = sorted(p for p, _, _ in CLAIMS if f"PersistentVolumeClaim {SRC}/{p} exists" in str(refused.value))
    assert exists == sorted({p for p, _, _ in CLAIMS} - {"logs"}), str(refused.value)


def test_writer_settings_from_a_policy_place_the_writer_and_a_writer_nowhere_to_go_says_why(
    local_cluster, backed_up, tmp_path
):
    repo, api = backed_up["repo"], local_cluster.client
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "name": "shop",
                "namespace": SRC,
                "pvc_selector": SEL,
                "repository": {"url": repo},
                "mover": {
                    "image": "cbt-mover",
                    "service_account": MOVER_SERVICE_ACCOUNT,
                    "tolerations": [
                        {"key": "dedicated", "operator": "Equal", "value": "backup", "effect": "NoSchedule"}
                    ],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                },
            }
        )
    )
    _namespace(local_cluster, "elsewhere", repo)
    out = _restore(
        local_cluster,
        repo,
        pvcs=["logs"],
        backup=backed_up["backups"]["logs"],
        policy_path=str(policy),
        target_namespace="elsewhere",
    )
    (row,) = out["volumes"]
    _, _, pv = _volume_image(local_cluster, "elsewhere", "logs")
    on_a = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert on_a == ["node-a"], "the policy's required affinity wins over the source's preferred node-b"
    assert len(row["notes"]) == 1 and "not where the source volume was" in row["notes"][0], row["notes"]
    assert "[node-b]" in row["notes"][0]

    _namespace(local_cluster, "nowhere", repo)
    with pytest.raises(WriterNotScheduled, match=r"not scheduled after 5 s: FailedScheduling: 0/3 nodes are available"):
        _restore(
            local_cluster, repo, pvcs=["logs"], target_namespace="nowhere", node_selector={"pool": "backup"}, timeout=5
        )
    broken = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "two-fstypes"},
        "provisioner": "hostpath.csi.k8s.io",
        "volumeBindingMode": "WaitForFirstConsumer",
        "parameters": {"fstype": "ext4", "csi.storage.k8s.io/fstype": "xfs"},
    }
    local_cluster.apply([broken])
    try:
        with pytest.raises(WriterNotScheduled, match=r"; its claim logs: ProvisioningFailed: fstype specified"):
            _restore(
                local_cluster, repo, pvcs=["logs"], target_namespace="nowhere", storage_class="two-fstypes", timeout=10
            )
    finally:
        k.delete(api, "StorageClass", None, "two-fstypes")
    assert k.list_objects(api, "PersistentVolumeClaim", "nowhere") == []
    _no_writer_pods(local_cluster, "elsewhere", "nowhere")


def test_a_writer_whose_volume_cannot_attach_fails_within_its_start_timeout_naming_the_event_once(
    local_cluster, backed_up
):
    """A writer that is scheduled but whose new volume the storage will not attach (``attach_fault``: the
    attach-detach controller's FailedAttachVolume) fails once its start timeout (bounded by the flow's
    ``timeout``) is over, naming that Event: one writer pod, one wait, not retried; no writer pod is left."""
    from movers.kube.pods import PodNotStarted

    repo = backed_up["repo"]
    _namespace(local_cluster, "fenced", repo)
    started = time.monotonic()
    with (
        local_cluster.store.attach_fault("the array fenced this disk off"),
        pytest.raises(PodNotStarted) as failed,
    ):
        _restore(local_cluster, repo, pvcs=["data"], target_namespace="fenced", timeout=6)
    took = time.monotonic() - started
    said = str(failed.value)
    assert "\n" not in said and "writer pod fenced/" in said, said
    # its start timeout is what is left of the writer's 6 s once it is scheduled
    assert re.search(
        r"not running after [\d.]+ s \(ContainerCreating\): FailedAttachVolume: AttachVolume\.Attach", said
    )
    assert "rpc error: code = Internal desc = the array fenced this disk off" in said, said
    assert took < 45, f"one bounded wait, not retried: {took:.0f} s"
    writers = [o for o in audited_creations(local_cluster, "fenced") if o.get("kind") == "Pod"]
    assert len(writers) == 1, [o["metadata"]["name"] for o in writers]
    _no_writer_pods(local_cluster, "fenced")


def test_a_missing_permission_fails_the_restore_before_anything_is_created(local_cluster, backed_up):
    """An identity whose role lacks one verb the restore calls (here: creating the PV of a hand-over)."""
    repo, api = backed_up["repo"], local_cluster.client
    kubeconfig = _identity_without(local_cluster, "restorer-without-pv-create", "persistentvolumes", "create")
    _namespace(local_cluster, "preflight", repo)
    with pytest.raises(
        PermissionsMissing, match="^cannot restore into preflight: .*cannot create persistentvolumes cluster-wide"
    ) as err:
        _restore(local_cluster, repo, pvcs=["files"], target_namespace="preflight", kubeconfig=kubeconfig)
    assert "\n" not in str(err.value) and err.value.exit_code == 6
    for kind in ("PersistentVolumeClaim", "Pod"):
        assert k.list_objects(api, kind, "preflight") == [], kind


def _identity_without(cluster, name: str, resource: str, verb: str) -> str:
    """The kubeconfig of ServiceAccount ``cbt-mover-system/<name>``, bound to the shipped controller role minus
    ``verb`` on ``resource``."""
    role = controller_role()
    for rule in role["rules"]:
        if rule["resources"] == [resource]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    ns = "cbt-mover-system"
    cluster.apply(
        [
            {**role, "metadata": {"name": name}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
            },
        ]
    )
    return str(cluster.kubeconfig_for(ns, name))


def test_a_long_pvc_name_gives_valid_names_and_labels(local_cluster, backed_up, tmp_path):
    """A backup of a PVC whose name is no label value (made with the engine's CLI, as by hand: no class or
    mode recorded) restored into another namespace: writer pod, claim and labels valid, data identical."""
    repo = backed_up["repo"]
    image = tmp_path / "ledger.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
        f.seek(5 << 20)
        f.write(b"ledger entries " * 1000)
    backup = subprocess.run(
        [
            sys.executable,
            "-m",
            "movers",
            "backup",
            "--repo",
            repo,
            "--volume",
            f"ledger/{LONG}",
            "--namespace",
            "ledger",
            "--pvc",
            LONG,
            "--device",
            str(image),
            "--scan",
            "--tag",
            "cbt-mover.io/app=ledger",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**local_cluster.env(), "PATH": "/usr/bin:/bin", **KEY_ENV},
    )
    assert backup.returncode == 0, backup.stderr
    _namespace(local_cluster, "ledger-copy", repo)

    # as an identity that may not create Events: refused (403), the restore succeeds with one warning
    name = "restorer-without-events"
    kubeconfig = _identity_without(local_cluster, name, "events", "create")
    state = _restore(
        local_cluster,
        repo,
        namespace="ledger",
        target_namespace="ledger-copy",
        kubeconfig=kubeconfig,
        return_state=True,
    )
    out = state.result()
    assert pvc_events(client.CoreV1Api(local_cluster.client), "ledger-copy", LONG, "Restored") == []
    assert _refused_event_creations(local_cluster, name) == ["ledger-copy"]
    warned = wait_until(lambda: _warnings(state.state_details.flow_run_id, "Kubernetes Events"), 20, "the warning")
    assert len(warned) == 1 and "0 of 1 recorded" in warned[0] and " 403 " in warned[0], warned

    (row,) = out["volumes"]
    restored, claim, _ = _volume_image(local_cluster, "ledger-copy", LONG)
    assert _sha(restored) == _sha(image)
    labels = claim["metadata"]["labels"]
    assert labels[PVC_LABEL] == m.label_value(LONG) and labels[m.PART_OF_LABEL] == "ledger", labels
    assert row["storage_class"] == "standard" and any("cluster default standard" in n for n in row["notes"])
    _no_writer_pods(local_cluster, "ledger-copy")


def test_from_the_kept_snapshot_without_a_download_and_from_the_repository_once_it_is_gone(local_cluster, backed_up):
    """``source``: the newest run's kept VolumeSnapshot of data provisions the new claim (then compared with the
    backup by its digests: nothing to fetch or write); logs' latest backup is of the first run, whose snapshot the
    second run replaced: from the repository, saying why (``auto``), or refused (``snapshot``). Last in the module:
    it stops the app and replaces its claims."""
    repo, api = backed_up["repo"], local_cluster.client
    client.CoreV1Api(api).delete_namespaced_pod("app", SRC)
    wait_until(lambda: not k.find(api, "Pod", SRC, "app"), 30, "the app stopped")

    out = _restore(local_cluster, repo, pvcs=["data"], overwrite=True, source="snapshot")
    (row,) = out["volumes"]
    assert row["source"] == "snapshot" and "still holds the backup's snapshot" in row["source_reason"], row
    assert row["written_bytes"] == 0 and row["compared_bytes"] >= row["capacity_bytes"], row
    assert row["fetched_bytes"] < row["capacity_bytes"] // 4, row
    _assert_identical(backed_up, row, SRC)

    with pytest.raises(
        RestoreRefused, match="logs: cannot restore from the kept snapshot: VolumeSnapshot .* no longer"
    ):
        _restore(local_cluster, repo, pvcs=["logs"], overwrite=True, source="snapshot")
    out = _restore(local_cluster, repo, pvcs=["logs"], overwrite=True)
    (row,) = out["volumes"]
    assert row["source"] == "repository" and "no longer exists" in row["source_reason"], row
    assert row["fetched_bytes"] > 0 and row["compared_bytes"] == 0, row
    _assert_identical(backed_up, row, SRC)
    doc = artifact(f"restore-{SRC}-report").data
    assert "from the repository (VolumeSnapshot" in doc and "no longer exists" in doc, doc


DRIFT = {"data": (0, 5 << 20, 11 << 20), "logs": (4 << 20, 15 << 20)}  # offsets of 8 KiB of new data per claim


def _drift(cluster, pvcs=DRIFT) -> dict[str, tuple]:
    """The live volumes of ``pvcs`` drift (8 KiB of random data at each offset): ``{pvc: (image, sha before, PV)}``."""
    drifted = {}
    for pvc, offsets in pvcs.items():
        image, _claim, pv = _volume_image(cluster, SRC, pvc)
        want = _sha(image)
        with open(image, "r+b") as f:
            for off in offsets:
                os.pwrite(f.fileno(), os.urandom(8192), off)
        assert _sha(image) != want
        drifted[pvc] = (image, want, pv)
    return drifted


def _live_snapshots(cluster, run_id) -> list[str]:
    return [
        o["metadata"]["name"] for o in k.list_objects(cluster.client, "VolumeSnapshot", SRC, f"{m.RUN_LABEL}={run_id}")
    ]


def test_in_place_rewrites_only_what_differs_keeps_the_volume_and_the_next_backup_stays_a_cbt_delta(
    local_cluster, backed_up
):
    """``in_place``: onto the app's own Block claims, refused while a pod uses one (named); then, the backup's
    snapshots being kept and the driver serving CBT, each live claim is snapshotted and only the blocks
    GetMetadataDelta names are read, fetched and written (nothing else compared), the PVs stay the same, the live
    snapshots are gone, and the next backup is a CBT delta from the last base. After the kept-snapshot test (the app
    is stopped)."""
    from flows.backup import backup_app

    repo, api = backed_up["repo"], local_cluster.client
    core = client.CoreV1Api(api)
    params = backup_params(local_cluster, repo, SRC, parallelism=4, hooks={"pre": [], "post": []})  # app stopped
    base = backup_app(**params)  # the claims' volumes are the ones the previous test restored: a base of them
    backups = {r["volume"].split("/", 1)[1]: r["backup_id"] for r in base["volumes"]}
    drifted = _drift(local_cluster)

    user = pod_manifest("user", ["sleep", "600"], volumeDevices=[{"name": "v", "devicePath": "/dev/xvda"}])
    user["spec"] |= {
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
        "nodeSelector": ON_NODE,
    }
    core.create_namespaced_pod(SRC, user)  # holds the claim, writes nothing
    wait_pod(core, "user", phase_in("Running"), namespace=SRC, timeout=30)
    with pytest.raises(RestoreRefused, match="data is used by pod.s. user: stop them before restoring it in place"):
        _restore(local_cluster, repo, pvcs=["data"], in_place=True)
    core.delete_namespaced_pod("user", SRC, grace_period_seconds=0)
    wait_until(lambda: not k.find(api, "Pod", SRC, "user"), 30, "the user pod stopped")

    out = _restore(local_cluster, repo, pvcs=["data", "logs"], in_place=True)
    rows = {r["pvc"]: r for r in out["volumes"]}
    assert sorted(rows) == ["data", "logs"]
    for pvc, (image, want, pv) in drifted.items():
        row = rows[pvc]
        assert (row["source"], row["path"], row["backup_id"]) == ("in place", "cbt", backups[pvc]), row
        assert row["pv"] == pv["metadata"]["name"] and "serves CBT" in row["source_reason"], row
        changed = len(DRIFT[pvc]) * 8192
        # the device is read only inside the ranges CBT names (to write only the blocks that differ there)
        assert row["compared_bytes"] == changed and row["written_bytes"] == changed, (row, changed)
        assert row["fetched_bytes"] < row["capacity_bytes"] // 4, row  # holes of the backup are zeroed, not fetched
        assert _sha(image) == want, f"{pvc}: bit-exact with the backup, on the same volume"
        now = k.get(api, "PersistentVolume", None, pv["metadata"]["name"])
        assert now["metadata"]["uid"] == pv["metadata"]["uid"]
    assert _live_snapshots(local_cluster, out["run_id"]) == [], "the live claims' snapshots are deleted"
    doc = artifact(f"restore-{SRC}-report").data
    assert doc.count("in place by CBT (VolumeSnapshot") == 2 and "compared 24.0 KiB" in doc, doc

    after = backup_app(**params)
    for pvc in DRIFT:
        done = next(r for r in after["volumes"] if r["volume"] == f"{SRC}/{pvc}")
        assert (done["mode"], done["change_source"]) == ("incremental-cbt", "cbt-delta"), done


def test_in_place_without_the_backup_s_snapshot_compares_and_says_why(local_cluster, backed_up):
    """The backup's kept snapshots are gone: each claim is compared with the backup by the map's digests (no live
    snapshot is taken), the report says why, and the claims are bit-exact with the backup again. After the CBT
    in-place test (the app is stopped, its last backup the latest)."""
    from movers.kube import cleanup

    repo, api = backed_up["repo"], local_cluster.client
    cleanup.delete_by_label(api, SRC, "cbt-mover.io/kept-for", wait=True)
    drifted = _drift(local_cluster)

    out = _restore(local_cluster, repo, pvcs=["data", "logs"], in_place=True)
    rows = {r["pvc"]: r for r in out["volumes"]}
    for pvc, (image, want, _pv) in drifted.items():
        row = rows[pvc]
        assert (row["source"], row["path"]) == ("in place", "compare"), row
        assert "no longer exists: the claim's own volume compared" in row["source_reason"], row
        assert row["compared_bytes"] >= row["capacity_bytes"], row
        assert 0 < row["written_bytes"] <= 2 * len(DRIFT[pvc]) * 8192, row
        assert _sha(image) == want, f"{pvc}: bit-exact with the backup"
    assert _live_snapshots(local_cluster, out["run_id"]) == []
    doc = artifact(f"restore-{SRC}-report").data
    assert doc.count("in place by compare (VolumeSnapshot") == 2 and "no longer exists" in doc, doc


def test_a_failed_in_place_restore_leaves_the_claim_as_it_was_and_says_why(local_cluster, backed_up):
    """The writer cannot open the repository (its Secret names another one): the run fails in step write, the
    claim, its volume and its data stay as they were, and the failure report says why."""
    repo, api = backed_up["repo"], local_cluster.client
    ns = "broken-in-place"
    _namespace(local_cluster, ns, repo, CBT_MOVER_REPO="s3://flow-restore/x")
    k.create(api, m.block_pvc("data", ns, "16Mi", IMMEDIATE))
    wait_until(lambda: k.get(api, "PersistentVolumeClaim", ns, "data")["status"].get("phase") == "Bound", 20, "bound")
    image, _claim, pv = _volume_image(local_cluster, ns, "data")
    with open(image, "r+b") as f:
        os.pwrite(f.fileno(), b"live data " * 100, 4096)
    before = _sha(image)

    with pytest.raises(Exception, match=f"writer pod {ns}/restore-.* failed .exit 3."):
        _restore(local_cluster, repo, pvcs=["data"], target_namespace=ns, in_place=True)

    claim = k.get(api, "PersistentVolumeClaim", ns, "data")
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"] and _sha(image) == before
    assert m.RESTORED_FROM not in (claim["metadata"].get("annotations") or {})
    _no_writer_pods(local_cluster, ns)
    report = artifact(f"restore-{ns}-failure")
    assert "step `write`" in report.data and "exit 3" in report.data, report.data
