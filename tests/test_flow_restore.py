"""The ``restore-app`` flow end to end on the local cluster with Prefect's test harness: a two-PVC demo app and
a Filesystem volume are backed up by ``backup-app``, then restored: the whole app into a new namespace
(byte-identical to the backed-up snapshots), one PVC by backup id, a refused and an allowed overwrite, a
Filesystem hand-over a pod mounts, a missing backup and a failing writer; no writer pod is ever left."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from kubernetes import client

from localcluster.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, pod_manifest, wait_pod, wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac
from movers.errors import NotFoundError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import volumes
from movers.kube.restore import RestoreRefused
from tests.flowapp import APP, HOOKS, REPO_SECRET, SEL, flow_kubeconfig

SRC = "shop"
MOVER = {"image": "cbt-mover", "service_account": MOVER_SERVICE_ACCOUNT, "repo_secret": REPO_SECRET}


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def backed_up(local_cluster, harness):
    """The demo app in SRC (Block PVCs data and logs, and a Filesystem PVC files with a file), backed up once."""
    from flows.backup import backup_app

    cluster, api = local_cluster, local_cluster.client
    core = client.CoreV1Api(api)
    cluster.s3.client().create_bucket(Bucket="flow-restore")
    repo = "s3://flow-restore/repo"
    subprocess.run([sys.executable, "-m", "movers", "init", "--repo", repo], check=True, capture_output=True,
                   env={**cluster.env(), "PATH": "/usr/bin:/bin"})  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:  # the flows read the repository themselves
        for key, value in cluster.s3.env.items():
            mp.setenv(key, value)
        _namespace(cluster, SRC, repo)
        for pvc, mode in (("data", "Block"), ("logs", "Block"), ("files", "Filesystem")):
            claim = m.block_pvc(pvc, SRC, "16Mi", None, {"app": "demo"})
            claim["spec"]["volumeMode"] = mode
            k.create(api, claim)
        _run_pod(core, SRC, "writer", "echo kept > /mnt/files/hello && sync", "files")
        core.create_namespaced_pod(SRC, demo_pod("app", {"data": "/dev/xvda", "logs": "/dev/xvdb"},
                                                 labels={"app": "demo"}, interval=0.02))  # fmt: skip
        wait_pod(core, "app", phase_in("Running"), namespace=SRC, timeout=30)
        wait_until(lambda: core.read_namespaced_pod_log("app", SRC).count("write seq=") >= 5, 30, "app writes")
        app = backup_app(
            namespace=SRC,
            selector=SEL,
            repo=repo,
            repo_secret=REPO_SECRET,
            hooks=HOOKS,
            image="cbt-mover",
            service_account=MOVER_SERVICE_ACCOUNT,
            parallelism=3,
            kubeconfig=flow_kubeconfig(cluster),
        )
        yield {"repo": repo, "app": app, "backups": {r["volume"].split("/")[1]: r["backup_id"] for r in app["volumes"]}}


def _namespace(cluster, name, repo, secret=None):
    core = client.CoreV1Api(cluster.client)
    core.create_namespace({"metadata": {"name": name}})
    apply_mover_rbac(cluster, [name])
    data = secret or {**cluster.s3.env, "CBT_MOVER_REPO": repo}
    core.create_namespaced_secret(name, {"metadata": {"name": REPO_SECRET}, "stringData": data})


def _run_pod(core, ns, name, script, claim):
    pod = pod_manifest(name, ["sh", "-c", script], volumeMounts=[{"name": "v", "mountPath": f"/mnt/{claim}"}])
    pod["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
    core.create_namespaced_pod(ns, pod)
    done = wait_pod(core, name, phase_in("Succeeded", "Failed"), namespace=ns, timeout=30)
    log = core.read_namespaced_pod_log(name, ns)
    core.delete_namespaced_pod(name, ns)
    wait_until(lambda: not k.find(core.api_client, "Pod", ns, name), 20, f"pod {ns}/{name} gone")
    assert done.status.phase == "Succeeded", log
    return log


def _restore(cluster, repo, **kw):
    from flows.restore import restore_app

    return restore_app(repo=repo, namespace=kw.pop("namespace", SRC), image=MOVER["image"],
                       service_account=MOVER["service_account"], repo_secret=MOVER["repo_secret"],
                       kubeconfig=flow_kubeconfig(cluster), **kw)  # fmt: skip


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _volume_image(cluster, ns, pvc):
    claim = k.get(cluster.client, "PersistentVolumeClaim", ns, pvc)
    pv = k.get(cluster.client, "PersistentVolume", None, claim["spec"]["volumeName"])
    return cluster.store.volume_path(pv["spec"]["csi"]["volumeHandle"]), claim, pv


def _snapshot_image(cluster, repo, ns, pvc, backup_id):
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    manifest = Repository.open(open_store(repo)).read_manifest(f"{ns}/{pvc}", backup_id)
    return cluster.store.snapshot_path(manifest.snapshot.snapshot_handle)


def _assert_identical(cluster, repo, row, ns, src_ns=SRC):
    restored, claim, _pv = _volume_image(cluster, ns, row["pvc"])
    snapshot = _snapshot_image(cluster, repo, src_ns, row["pvc"], row["backup_id"])
    assert _sha(restored) == _sha(snapshot), f"{ns}/{row['pvc']} differs from the snapshot it was backed up from"
    annotations = claim["metadata"]["annotations"]
    assert annotations[m.RESTORED_FROM] == f"{src_ns}/{row['pvc']}@{row['backup_id']}"
    return restored


def _run_objects(cluster, ns, run_id):
    found = {}
    for kind, where in (("Pod", ns), ("PersistentVolumeClaim", ns), ("PersistentVolume", None)):
        found[kind] = [o["metadata"]["name"] for o in k.list_objects(cluster.client, kind, where,
                                                                      f"{m.RUN_LABEL}={run_id}")]  # fmt: skip
    return found


def _no_writer_pods(cluster, *namespaces):
    for ns in namespaces:
        left = [p["metadata"]["name"] for p in k.list_objects(cluster.client, "Pod", ns, m.RUN_LABEL)
                if p["metadata"]["labels"][m.RUN_LABEL].startswith("restore-")]  # fmt: skip
        assert left == [], (ns, left)


def _recorded_mode(repo, pvc, backup_id):
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    return Repository.open(open_store(repo)).read_manifest(f"{SRC}/{pvc}", backup_id).volume.volume_mode


def test_whole_app_into_a_new_namespace_is_byte_identical(local_cluster, backed_up):
    repo = backed_up["repo"]
    _namespace(local_cluster, "shop-copy", repo)
    out = _restore(local_cluster, repo, target_namespace="shop-copy", parallelism=3)

    assert {r["pvc"]: r["backup_id"] for r in out["volumes"]} == backed_up["backups"]
    for row in out["volumes"]:
        image = _assert_identical(local_cluster, repo, row, "shop-copy")
        recorded = _recorded_mode(repo, row["pvc"], row["backup_id"])
        assert row["volume_mode"] == ("Filesystem" if recorded == "Filesystem" else "Block"), (row, recorded)
        assert row["written_bytes"] > 0 and not row["replaced"]
        if row["pvc"] != "files":
            check = subprocess.run([*APP, "verify", "--device", str(image)], capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr
    assert _run_objects(local_cluster, "shop-copy", out["run_id"])["Pod"] == []
    _assert_artifacts("shop-copy", ("data", "logs", "files"))
    _assert_events("cbt-mover.restore.completed", [f"cbt-mover.volume.shop-copy/{p}" for p in ("data", "logs")])


def _assert_artifacts(ns, pvcs):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        keys = {a.key for a in prefect.read_artifacts()}
        assert {f"restore-{ns}", f"restore-{ns}-report"} <= keys, keys
        for pvc in pvcs:
            key = f"restore-progress-{ns}-{pvc}"
            found = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            assert found and all(a.type == "progress" and float(a.data) == 100.0 for a in found), (key, found)


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
    _assert_identical(local_cluster, repo, out["volumes"][0], "logs-only")

    claims = sorted(p["metadata"]["name"] for p in k.list_objects(local_cluster.client, "PersistentVolumeClaim", SRC))
    with pytest.raises(RestoreRefused, match=f"PersistentVolumeClaim {SRC}/data exists: pass overwrite"):
        _restore(local_cluster, repo)  # into the source namespace, where the app's claims exist
    with pytest.raises(RestoreRefused, match="is used by pod.s. app"):
        _restore(local_cluster, repo, pvcs=["data", "logs"], overwrite=True)  # the demo app still runs on them
    after = sorted(p["metadata"]["name"] for p in k.list_objects(local_cluster.client, "PersistentVolumeClaim", SRC))
    assert claims == after == ["data", "files", "logs"]
    _no_writer_pods(local_cluster, SRC, "logs-only")
    _assert_events("cbt-mover.restore.failed", [f"cbt-mover.volume.{SRC}/*"])


def test_overwrite_replaces_the_claim_only_with_complete_data(local_cluster, backed_up):
    repo, api = backed_up["repo"], local_cluster.client
    _namespace(local_cluster, "overwrite", repo)
    k.create(api, m.block_pvc("data", "overwrite", "16Mi"))  # what the app has now
    wait_until(lambda: k.get(api, "PersistentVolumeClaim", "overwrite", "data")["status"].get("phase") == "Bound",
               20, "the existing claim is bound")  # fmt: skip
    old_image, _, old_pv = _volume_image(local_cluster, "overwrite", "data")

    out = _restore(local_cluster, repo, pvcs=["data"], target_namespace="overwrite", overwrite=True)

    assert out["volumes"][0]["replaced"]
    _assert_identical(local_cluster, repo, out["volumes"][0], "overwrite")
    _, claim, pv = _volume_image(local_cluster, "overwrite", "data")
    assert pv["metadata"]["name"] != old_pv["metadata"]["name"] and claim["spec"]["volumeMode"] == "Block"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    wait_until(lambda: not old_image.exists(), 20, "the replaced claim's volume is reclaimed (policy Delete)")
    assert [p["metadata"]["name"] for p in k.list_objects(api, "PersistentVolumeClaim", "overwrite")] == ["data"]


def test_filesystem_volume_is_handed_to_a_filesystem_claim_a_pod_mounts(local_cluster, backed_up):
    repo = backed_up["repo"]
    _namespace(local_cluster, "files-copy", repo)
    out = _restore(local_cluster, repo, pvcs=["files"], target_namespace="files-copy", hand_over=True)

    (row,) = out["volumes"]
    assert (row["pvc"], row["volume_mode"]) == ("files", "Filesystem")
    _assert_identical(local_cluster, repo, row, "files-copy")
    claim = k.get(local_cluster.client, "PersistentVolumeClaim", "files-copy", "files")
    assert claim["spec"]["volumeMode"] == "Filesystem" and claim["status"]["phase"] == "Bound"
    names = [p["metadata"]["name"] for p in k.list_objects(local_cluster.client, "PersistentVolumeClaim", "files-copy")]
    assert names == ["files"], "the temporary Block claim is gone"
    if local_cluster.store.use_loop:  # the fallback kubelet gives Filesystem claims a directory, not the image
        core = client.CoreV1Api(local_cluster.client)
        assert _run_pod(core, "files-copy", "reader", "cat /mnt/files/hello", "files") == "kept\n"


def test_missing_backup_creates_nothing_and_a_failing_writer_leaves_nothing(local_cluster, backed_up):
    repo, api = backed_up["repo"], local_cluster.client
    _namespace(local_cluster, "broken", repo, secret={**local_cluster.s3.env, "CBT_MOVER_REPO": "s3://flow-restore/x"})
    with pytest.raises(NotFoundError, match="has no backup 20990101T000000000000Z-abcdef"):
        _restore(local_cluster, repo, pvcs=["data"], backup="20990101T000000000000Z-abcdef", target_namespace="broken")
    assert k.list_objects(api, "PersistentVolumeClaim", "broken") == []

    with pytest.raises(Exception, match="writer pod broken/restore-.* failed .exit 3."):
        _restore(local_cluster, repo, pvcs=["data", "logs"], target_namespace="broken")  # its Secret: another repo
    assert k.list_objects(api, "PersistentVolumeClaim", "broken") == []
    wait_until(lambda: not [pv for pv in k.list_objects(api, "PersistentVolume", None)
                            if (pv["spec"].get("claimRef") or {}).get("namespace") == "broken"],
               20, "the volumes of the deleted claims are reclaimed")  # fmt: skip
    _no_writer_pods(local_cluster, "broken", "shop-copy", "overwrite", "files-copy")
    _assert_events("cbt-mover.restore.failed", ["cbt-mover.volume.broken/data", "cbt-mover.volume.broken/logs"])


def test_on_cancellation_deletes_what_the_run_created(local_cluster, backed_up):
    import uuid
    from types import SimpleNamespace

    from flows.restore import on_cancellation, run_id_for

    api = local_cluster.client
    _namespace(local_cluster, "cancelled", backed_up["repo"])
    flow_run = SimpleNamespace(id=uuid.uuid4(), parameters={"namespace": SRC, "target_namespace": "cancelled",
                                                            "kubeconfig": flow_kubeconfig(local_cluster)})  # fmt: skip
    run_id = run_id_for(flow_run.id)
    labels = m.run_labels(run_id, **{"cbt-mover.io/pvc": "data"})
    k.create(api, m.block_pvc(f"data-{run_id}", "cancelled", "16Mi", None, labels))
    k.create(api, m.block_pvc("unrelated", "cancelled", "16Mi"))
    claim = volumes.wait_claim_bound(api, "cancelled", f"data-{run_id}", timeout=20)
    k.merge_patch(api, "PersistentVolume", None, claim["spec"]["volumeName"], {"metadata": {"labels": labels}})

    on_cancellation(flow=None, flow_run=flow_run, state=None)

    assert _run_objects(local_cluster, "cancelled", run_id) == {"Pod": [], "PersistentVolumeClaim": [],
                                                                "PersistentVolume": []}  # fmt: skip
    assert [p["metadata"]["name"] for p in k.list_objects(api, "PersistentVolumeClaim", "cancelled")] == ["unrelated"]
