"""``movers.kube`` on the local cluster: the builders' manifests are accepted, a group snapshot's
members map back to their PVCs, a mover pod built by ``mover_pod`` backs a snapshot up into S3 and
reports through its termination message, and ``cleanup.delete_by_label`` removes what a run made."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from localcluster.shipped_rbac import MOVER_SERVICE_ACCOUNT, apply_mover_rbac
from movers.backup.request import REQUEST_ENV, BackupRequest
from movers.cbt.discovery import snapshot_metadata_service
from movers.kube import apply as k
from movers.kube import cleanup, pods, podspec, repokey, snapshots
from movers.kube import manifests as m
from movers.kube.snapshots import resolve_snapshot
from movers.restore.request import RestoreRequest

MiB = 1 << 20
APP_CLASS = "csi-hostpath-sc"  # WaitForFirstConsumer: for claims a pod uses
IMMEDIATE = "csi-hostpath-immediate"  # for claims snapshotted before (or without) any pod using them


@pytest.fixture
def ns(local_cluster, request):
    name = request.node.name.replace("_", "-").lower()[:50].strip("-")
    core = client.CoreV1Api(local_cluster.client)
    core.create_namespace({"metadata": {"name": name}})
    apply_mover_rbac(local_cluster, [name])  # the mover pods run as the shipped cbt-mover identity
    return name


def _labels(run, app="shop"):
    return {**m.run_labels(run), "app": app}


def test_manifests_accepted_and_cleaned_up(local_cluster, ns):
    api = local_cluster.client
    version = k.served_group_snapshot_version(api)
    assert version == "v1"
    labels = _labels("r1")
    k.create(api, m.block_pvc("data", ns, "8Mi", IMMEDIATE, labels))
    vs = k.create(api, m.volume_snapshot("snap", ns, "data", None, labels))
    assert vs["spec"]["source"]["persistentVolumeClaimName"] == "data"
    vs = snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "snap", timeout=20)
    k.create(api, m.pvc_from_snapshot("read", ns, "snap", "8Mi", IMMEDIATE, labels))
    content = vs["status"]["boundVolumeSnapshotContentName"]
    patched = snapshots.patch_content_annotation(api, content)
    assert patched["metadata"]["annotations"][m.ALLOW_VOLUME_MODE_CHANGE] == "true"
    k.create(api, m.volume_group_snapshot("group", ns, {"matchLabels": {"app": "shop"}}, None, version, labels))
    pod = m.mover_pod(
        "mover",
        ns,
        profile=podspec.MoverProfile(image="cbt-mover", service_account=MOVER_SERVICE_ACCOUNT),
        task=podspec.MoverTask(args=["--help"], pvc="read", cbt_audience="aud", active_deadline_seconds=60),
        repo=podspec.RepoAccess("absent"),
        labels=labels,
    )
    k.create(api, pod)
    assert k.create(api, pod)["metadata"]["name"] == "mover", "the same run's object is reused"
    with pytest.raises(k.ConflictError):
        k.create(api, m.block_pvc("data", ns, "8Mi", None, _labels("other-run")))
    with pytest.raises(k.ConflictError):
        k.create(api, m.block_pvc("data", ns, "8Mi", None, None))

    deleted = cleanup.delete_by_label(api, ns, f"{m.RUN_LABEL}=r1", wait=True, timeout=30)
    assert deleted == {
        "Pod": ["mover"],
        "PersistentVolumeClaim": ["data", "read"],
        "VolumeGroupSnapshot": ["group"],
        "VolumeSnapshot": ["snap"],
    }
    for kind in ("Pod", "PersistentVolumeClaim", "VolumeSnapshot"):
        assert k.list_objects(api, kind, ns) == [], kind


def test_group_snapshot_members_map_to_pvcs(local_cluster, ns):
    api = local_cluster.client
    version = k.served_group_snapshot_version(api)
    for pvc in ("db", "logs"):
        k.create(api, m.block_pvc(pvc, ns, "8Mi", IMMEDIATE, {"app": "shop"}))
    k.create(api, m.block_pvc("other", ns, "8Mi", IMMEDIATE, {"app": "unrelated"}))
    # an application's PVCs are bound before anyone snapshots them; under load binding can lag creation
    core = client.CoreV1Api(api)
    wait_until(
        lambda: all(
            core.read_namespaced_persistent_volume_claim(p, ns).status.phase == "Bound" for p in ("db", "logs")
        ),
        30,
        "PVCs bound",
    )
    k.create(api, m.volume_group_snapshot("g1", ns, {"matchLabels": {"app": "shop"}}, None, version, _labels("r2")))
    vgs = snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", ns, "g1", timeout=30)
    members = snapshots.group_members(api, vgs)
    assert [x.pvc for x in members] == ["db", "logs"]
    assert all(x.ready and x.handle and x.content and x.volume_handle for x in members)
    assert members[0].restore_size == 8 * MiB and len({x.handle for x in members}) == 2
    for x in members:  # the handle is what resolve_snapshot (the mover's view) records too
        assert resolve_snapshot(api, ns, x.snapshot).handle == x.handle

    with pytest.raises(k.SnapshotNotReadyError, match="not ready after"):
        k.create(api, m.volume_snapshot("nosource", ns, "missing-pvc", None, _labels("r2")))
        snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "nosource", timeout=1)
    cleanup.delete_by_label(api, ns, f"{m.RUN_LABEL}=r2", wait=True, timeout=30)
    assert snapshots.group_members(api, vgs) == []


def test_mover_pod_backs_up_a_snapshot_into_s3(local_cluster, ns, tmp_path):
    """...of an encrypted repository whose key file is in the repository Secret (mounted as a file); a writer
    pod given a wrong key file exits 6 with one line naming the file, never its content, and is not retried."""
    cluster, api = local_cluster, local_cluster.client
    core = client.CoreV1Api(api)
    labels = _labels("r3")
    k.create(api, m.block_pvc("data", ns, "16Mi", APP_CLASS, {"app": "shop"}))
    pvc_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "writer", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "w",
                    "image": "busybox",
                    "command": [
                        sys.executable,
                        "-c",
                        "import os; f=os.open('/dev/xvda', os.O_WRONLY); "
                        "os.pwrite(f, b'x'*(1<<20), 4<<20); os.close(f)",
                    ],
                    "volumeDevices": [{"name": "d", "devicePath": "/dev/xvda"}],
                }
            ],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    assert pods.run_pod_to_completion(api, pvc_pod, timeout=30).succeeded
    k.create(api, m.volume_snapshot("snap", ns, "data", None, labels))
    snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "snap", timeout=20)
    ref = resolve_snapshot(api, ns, "snap")
    audience = snapshot_metadata_service(api, ref.driver).audience
    k.create(api, m.pvc_from_snapshot("snap-read", ns, "snap", "16Mi", APP_CLASS, labels))

    bucket = f"backups-{ns}"[:63]
    cluster.s3.client().create_bucket(Bucket=bucket)
    repo = f"s3://{bucket}/repo"
    env = {**cluster.env(), "PATH": "/usr/bin:/bin"}
    key = os.urandom(32)
    (tmp_path / "repo.key").write_bytes(key)
    subprocess.run(
        [sys.executable, "-m", "movers", "init", "--key-file", str(tmp_path / "repo.key"), "--repo", repo],
        check=True,
        env=env,
        capture_output=True,
    )
    secret = {
        "metadata": {"name": "repo", "labels": labels},
        "stringData": {**cluster.s3.env, "CBT_MOVER_REPO": repo},
        "data": {"keyfile": base64.b64encode(key).decode()},
    }
    core.create_namespaced_secret(ns, secret)
    assert repokey.key_names(k.get(api, "Secret", ns, "repo")) == ["keyfile"]

    request = BackupRequest(
        volume={"id": f"{ns}/data", "namespace": ns, "pvc": "data"},
        snapshot={"volume_snapshot": "snap", "namespace": ns},
        changes={"source": "cbt"},
        device=podspec.DEVICE_PATH,
    )
    args = m.backup_args(request_env=REQUEST_ENV, cbt=True, extra=["--progress-interval", "0"])
    pod = m.mover_pod(
        "mover",
        ns,
        profile=podspec.MoverProfile(image="cbt-mover", service_account=MOVER_SERVICE_ACCOUNT),
        task=podspec.MoverTask(
            args=args,
            pvc="snap-read",
            env={REQUEST_ENV: request.model_dump_json()},
            cbt_audience=audience,
            active_deadline_seconds=120,
        ),
        repo=podspec.RepoAccess("repo", ["keyfile"]),
        labels=labels,
    )
    seen: list[str] = []
    res = pods.run_pod_to_completion(api, pod, timeout=60, on_log_line=seen.append)
    assert res.succeeded, (res.message, res.log_tail)
    assert res.result["change_source"] == "cbt-allocated" and res.result["mode"] == "full"
    assert res.result["snapshot_handle"] == ref.handle and res.result["volume"] == f"{ns}/data"
    assert 1 * MiB <= res.result["read_bytes"] <= 16 * MiB
    assert any(line.startswith("progress done=") for line in seen), seen
    assert any(line.startswith("progress done=") for line in res.log_tail)

    wrong = os.urandom(32)
    core.patch_namespaced_secret("repo", ns, {"data": {"keyfile": base64.b64encode(wrong).decode()}})
    writer = m.mover_pod(
        "wrongkey",
        ns,
        profile=podspec.MoverProfile(image="cbt-mover", service_account=MOVER_SERVICE_ACCOUNT),
        task=podspec.MoverTask(
            args=m.restore_args(request_env=REQUEST_ENV),
            env={REQUEST_ENV: RestoreRequest(volume=f"{ns}/data", device=podspec.DEVICE_PATH).model_dump_json()},
            pvc="data",
            role=m.WRITER,
        ),
        repo=podspec.RepoAccess("repo", ["keyfile"]),
        labels=labels,
    )
    res = pods.run_pod_to_completion(api, writer, timeout=60)
    assert (res.phase, res.exit_code) == ("Failed", 6), (res.message, res.log_tail)
    assert res.message.startswith("cbt-mover: error: no key slot of") and "\n" not in res.message.strip()
    assert "CBT_MOVER_KEY_FILE" in res.message, res.message
    shown = res.message + "\n".join(res.log_tail) + core.read_namespaced_pod_log("wrongkey", ns)
    for secret_bytes in (key, wrong):
        for form in (secret_bytes.hex(), base64.b64encode(secret_bytes).decode(), secret_bytes.decode("latin-1")):
            assert form not in shown
    assert pods.PodFailed(res.message, res.exit_code).retriable is False, "a wrong key is not retried"

    deleted = cleanup.delete_by_label(api, ns, f"{m.RUN_LABEL}=r3", wait=True, timeout=30)
    assert deleted == {
        "Pod": ["mover", "wrongkey"],
        "PersistentVolumeClaim": ["snap-read"],
        "VolumeSnapshot": ["snap"],
    }
    assert [p.metadata.name for p in core.list_namespaced_persistent_volume_claim(ns).items] == ["data"]


def test_failed_pod_reports_exit_code_and_log_tail(local_cluster, ns):
    api = local_cluster.client
    k.create(api, m.block_pvc("data", ns, "8Mi", APP_CLASS, None))
    client.CoreV1Api(api).create_namespaced_secret(
        ns,
        {
            "metadata": {"name": "repo"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
                "CBT_MOVER_REPO": "s3://nowhere/repo",
            },
        },
    )
    args = m.restore_args(request_env=REQUEST_ENV, repo="file:///nonexistent/repo")
    pod = m.mover_pod(
        "bad",
        ns,
        profile=podspec.MoverProfile(image="cbt-mover", service_account=MOVER_SERVICE_ACCOUNT),
        task=podspec.MoverTask(
            args=args,
            env={REQUEST_ENV: RestoreRequest(volume="v", device=podspec.DEVICE_PATH).model_dump_json()},
            pvc="data",
        ),
        repo=podspec.RepoAccess("repo"),
        labels=_labels("r4"),
    )
    res = pods.run_pod_to_completion(api, pod, timeout=30)
    assert res.phase == "Failed" and res.exit_code not in (0, None) and not res.succeeded
    assert "cbt-mover: error" in res.message and res.result is None, res.message
    assert any("cbt-mover: error" in line for line in res.log_tail)
    with pytest.raises(pods.PodTimeoutError, match="CreateContainerConfigError"):
        pods.run_pod_to_completion(
            api,
            {
                **pod,
                "metadata": {**pod["metadata"], "name": "nosecret"},
                "spec": {**pod["spec"], "containers": [{**pod["spec"]["containers"][0], "env": m._repo_env("absent")}]},
            },
            timeout=3,
        )


def test_older_group_snapshot_version_is_detected_and_used(make_local_cluster):
    cluster = make_local_cluster(s3=False, cbt=False, group_snapshot_versions=("v1beta2", "v1beta1"))
    api, ns = cluster.client, "old"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    version = k.served_group_snapshot_version(api)
    assert version == "v1beta2"
    k.create(api, m.block_pvc("db", ns, "8Mi", IMMEDIATE, {"app": "shop"}))
    k.create(api, m.volume_group_snapshot("g", ns, {"matchLabels": {"app": "shop"}}, None, version, _labels("r5")))
    vgs = snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", ns, "g", timeout=30)
    assert vgs["apiVersion"].endswith("/v1beta2")
    assert [x.pvc for x in snapshots.group_members(api, vgs)] == ["db"]
    k.create(api, m.volume_snapshot("bad", ns, "missing-pvc", None, _labels("r5")))
    with pytest.raises(k.SnapshotNotReadyError) as info:
        snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "bad", timeout=1.5)
    assert "bad not ready after 1.5 s: " in str(info.value) and "missing-pvc" in str(info.value), "controller's error"
    assert info.value.retriable
    assert cleanup.delete_by_label(api, ns, f"{m.RUN_LABEL}=r5", wait=True, timeout=30) == {
        "VolumeGroupSnapshot": ["g"],
        "VolumeSnapshot": ["bad"],
    }
    assert k.list_objects(api, "VolumeSnapshot", ns) == []


def test_log_follower_reads_once_more_after_the_pod_finished():
    """A pod that ends before the follower's first successful read (the container was still being
    created) still has its log lines in the result: the follower reads once more after ``done``."""
    import threading

    from kubernetes.client.exceptions import ApiException

    class Logs:
        def __init__(self, lines):
            self.lines = lines

        def stream(self, _size):
            yield from self.lines

        def release_conn(self):
            pass

    class Core:  # answers like the API: 400 while the container is created, then the finished log
        calls = 0

        def read_namespaced_pod_log(self, name, namespace, follow, _preload_content):
            self.calls += 1
            if self.calls == 1:
                raise ApiException(status=400, reason="ContainerCreating")
            return Logs([b"progress done=0 total=?\n", b"cbt-mover: error: repository not found\n"])

    done, lines = threading.Event(), []
    done.set()  # the pod finished while the first read was refused
    pods._follow_log(Core(), "ns", "mover", lines, None, done)
    assert lines == ["progress done=0 total=?", "cbt-mover: error: repository not found"]


def test_a_retry_replaces_the_earlier_attempts_pod_finished_or_not(local_cluster, ns):
    """``backup.move_volume``'s first step on a retry: the run's pod of the same name left by the failed attempt is
    deleted even while it waits (here: Pending, no node takes it), so the retry waits on a fresh pod; a pod of that
    name from another run is left alone (``apply.create`` then refuses it)."""
    import logging

    from movers.backup.movers import _replace_earlier_pod

    api = local_cluster.client

    def mover(run: str) -> dict:
        return m.mover_pod(
            "mover",
            ns,
            profile=podspec.MoverProfile(
                image="cbt-mover",
                service_account=MOVER_SERVICE_ACCOUNT,
                placement=podspec.PodPlacement(node_selector={"pool": "none"}),
            ),
            task=podspec.MoverTask(args=["--help"], pvc="absent"),
            repo=podspec.RepoAccess("repo"),
            labels=_labels(run),
        )

    log = logging.getLogger("test")
    k.create(api, mover("r5"))
    _replace_earlier_pod(api, mover("r5"), log)
    assert k.find(api, "Pod", ns, "mover") is None
    k.create(api, mover("r6"))
    _replace_earlier_pod(api, mover("r5"), log)
    assert k.find(api, "Pod", ns, "mover")["metadata"]["labels"][m.RUN_LABEL] == "r6"
    with pytest.raises(k.ConflictError):
        k.create(api, mover("r5"))
    k.delete_and_wait(api, "Pod", ns, "mover")


def test_cleanup_removes_retain_contents(local_cluster, ns):
    _retain_cleanup(local_cluster, ns, keep=False)


def test_cleanup_reports_retain_contents_when_kept(local_cluster, ns):
    _retain_cleanup(local_cluster, ns, keep=True)


def _retain_cleanup(local_cluster, ns: str, keep: bool) -> None:
    """A run's snapshot and group of Retain classes: deleted with their contents and storage snapshots, or (keep)
    deleted leaving them, each named under "retained"."""
    from movers.kube import retained

    api, co = local_cluster.client, client.CustomObjectsApi(local_cluster.client)
    version = k.served_group_snapshot_version(api)
    driver, vs_class, vgs_class = "hostpath.csi.k8s.io", f"retain-{ns}", f"retain-group-{ns}"
    body = {"driver": driver, "deletionPolicy": "Retain"}
    co.create_cluster_custom_object("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", {
        "metadata": {"name": vs_class}, **body})  # fmt: skip
    co.create_cluster_custom_object("groupsnapshot.storage.k8s.io", version, "volumegroupsnapshotclasses", {
        "metadata": {"name": vgs_class}, **body})  # fmt: skip
    core = client.CoreV1Api(api)
    for pvc in ("db", "logs"):
        k.create(api, m.block_pvc(pvc, ns, "8Mi", IMMEDIATE, {"app": "shop"}))
    wait_until(
        lambda: all(
            core.read_namespaced_persistent_volume_claim(p, ns).status.phase == "Bound" for p in ("db", "logs")
        ),
        30,
        "PVCs bound",
    )
    labels = _labels("r6")
    k.create(api, m.volume_snapshot("snap", ns, "db", vs_class, labels))
    k.create(api, m.volume_group_snapshot("group", ns, {"matchLabels": {"app": "shop"}}, vgs_class, version, labels))
    vs = snapshots.wait_snapshot_ready(api, "VolumeSnapshot", ns, "snap", timeout=30)
    vgs = snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", ns, "group", timeout=30)
    gc = k.get(api, "VolumeGroupSnapshotContent", None, vgs["status"]["boundVolumeGroupSnapshotContentName"], version)
    vsc = k.get(api, "VolumeSnapshotContent", None, vs["status"]["boundVolumeSnapshotContentName"])
    members = snapshots.group_members(api, vgs)
    contents = [
        ("VolumeGroupSnapshotContent", gc["metadata"]["name"], gc["status"]["volumeGroupSnapshotHandle"], vgs),
        *(("VolumeSnapshotContent", x.content, x.handle, vgs) for x in members),
        ("VolumeSnapshotContent", vsc["metadata"]["name"], vsc["status"]["snapshotHandle"], vs),
    ]
    files = [local_cluster.store.snapshot_path(h) for kind, _, h, _ in contents if kind == "VolumeSnapshotContent"]
    assert len(files) == 3 and all(f.exists() for f in files)

    def content(kind, name):
        return k.find(api, kind, None, name, version if kind == "VolumeGroupSnapshotContent" else "v1")

    deleted = cleanup.delete_by_label(api, ns, f"{m.RUN_LABEL}=r6", wait=True, timeout=30, keep_retained=keep)
    assert (deleted["VolumeGroupSnapshot"], deleted["VolumeSnapshot"]) == (["group"], ["snap"]), deleted
    try:
        if not keep:
            assert "retained" not in deleted, deleted
            for kind, name, _, _ in contents:
                wait_until(lambda kind=kind, name=name: content(kind, name) is None, 30, f"{kind} {name} gone")
            wait_until(lambda: not any(f.exists() for f in files), 30, "the storage snapshots gone")
        else:
            said = [
                retained.RetainedContent(kind, name, handle, f"{of['kind']} {ns}/{of['metadata']['name']}").describe()
                for kind, name, handle, of in contents
            ]
            assert sorted(deleted["retained"]) == sorted(said), deleted["retained"]
            assert all(content(kind, name) is not None for kind, name, _, _ in contents)
            assert all(f.exists() for f in files)
    finally:  # undo: the contents go as Delete (the group content takes the members' snapshots), the classes
        for kind, name, _, _ in contents:
            cversion = version if kind == "VolumeGroupSnapshotContent" else "v1"
            if content(kind, name) is not None:
                k.merge_patch(api, kind, None, name, {"spec": {"deletionPolicy": "Delete"}}, cversion)
                k.delete(api, kind, None, name, cversion)
        wait_until(lambda: not any(f.exists() for f in files), 30, "the storage snapshots gone")
        co.delete_cluster_custom_object("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses", vs_class)
        co.delete_cluster_custom_object(
            "groupsnapshot.storage.k8s.io", version, "volumegroupsnapshotclasses", vgs_class
        )


def test_a_group_removed_after_a_freeze_timeout_takes_its_retain_content(local_cluster, ns):
    """The group deleted because it was not cut in time waits for its content to go: with a Retain class that never
    happened (a KubeError after the timeout); now the content goes with it, and its storage snapshots."""
    from movers.backup import snapshots as snapshotset

    api, co = local_cluster.client, client.CustomObjectsApi(local_cluster.client)
    version = k.served_group_snapshot_version(api)
    body = {"metadata": {"name": f"retain-group-{ns}"}, "driver": "hostpath.csi.k8s.io", "deletionPolicy": "Retain"}
    co.create_cluster_custom_object("groupsnapshot.storage.k8s.io", version, "volumegroupsnapshotclasses", body)
    try:
        k.create(api, m.block_pvc("db", ns, "8Mi", IMMEDIATE, {"app": "shop"}))
        core = client.CoreV1Api(api)
        wait_until(lambda: core.read_namespaced_persistent_volume_claim("db", ns).status.phase == "Bound", 30, "bound")
        selector = {"matchLabels": {"app": "shop"}}
        k.create(api, m.volume_group_snapshot("g", ns, selector, body["metadata"]["name"], version, _labels("r7")))
        vgs = snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", ns, "g", timeout=30)
        [member] = snapshots.group_members(api, vgs)
        snapshotset._remove_group(api, ns, "g", version, 20)
        wait_until(lambda: k.find(api, "VolumeSnapshotContent", None, member.content) is None, 30, "member content")
        wait_until(lambda: not local_cluster.store.snapshot_path(member.handle).exists(), 30, "storage snapshot gone")
    finally:
        co.delete_cluster_custom_object(
            "groupsnapshot.storage.k8s.io", version, "volumegroupsnapshotclasses", body["metadata"]["name"]
        )
