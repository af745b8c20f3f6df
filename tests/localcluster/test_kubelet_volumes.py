"""Volumes and devices of the local kubelet: Block PVCs at their devicePath, Filesystem PVCs,
projected service-account tokens (audience, refresh, TokenReview), secrets, config maps, the
downward API, the path-rewriting fallback, and cleanup in every outcome."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time

import pytest
from kubernetes.stream import stream

from localcluster.kubelet import DEVICE_MAP_ENV, LocalKubelet, namespaces_available
from localcluster.kubelet.testing import container_running, local_node, phase_in, pod_manifest, wait_pod, wait_until
from localcluster.storage import loop_devices_available

FINISHED = phase_in("Succeeded", "Failed")
NAMESPACES = namespaces_available()
ISOLATIONS = [
    pytest.param("namespace", marks=pytest.mark.skipif(not NAMESPACES, reason="no mount namespaces here")),
    "rewrite",
]


def make_claim(
    node, name: str, size: int, mode: str = "Block", content: bytes | None = None, fs_type: str | None = None
) -> str:
    """A volume in the VolumeStore with a PV (spec.csi.volumeHandle, and ``fs_type`` as its csi.fsType) and a PVC
    bound to it, by hand (as the PV controller binds: volumeName, the bind-completed annotation, phase Bound)."""
    handle = f"vol-{name}"
    node.store.create_volume(handle, size)
    if content is not None:
        with open(node.store.volume_path(handle), "r+b") as f:
            f.write(content)
    core = node.core
    core.create_persistent_volume(
        {
            "metadata": {"name": f"pv-{name}"},
            "spec": {
                "capacity": {"storage": str(size)},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": mode,
                "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"namespace": "default", "name": name},
                "csi": {
                    "driver": "local.csi.localcluster",
                    "volumeHandle": handle,
                    **({"fsType": fs_type} if fs_type else {}),
                },
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": mode,
                "storageClassName": "",
                "resources": {"requests": {"storage": str(size)}},
                "volumeName": f"pv-{name}",
            },
        },
    )
    core.patch_namespaced_persistent_volume_claim_status(name, "default", {"status": {"phase": "Bound"}})
    return handle


def exec_out(core, name: str, command: list[str]) -> str:
    return stream(
        core.connect_get_namespaced_pod_exec,
        name,
        "default",
        command=command,
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
    )


def loops_of(path) -> str:
    return subprocess.run(["losetup", "-j", str(path)], capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_block_volume_at_its_device_path(tmp_path, isolation):
    content = os.urandom(3 << 20)
    script = (
        "import hashlib, os, sys\ndev = sys.argv[1]\nwith open(dev, 'rb') as f: data = f.read(3 << 20)\n"
        "print(hashlib.sha256(data).hexdigest(), os.environ.get('LOCALCLUSTER_DEVICE_MAP') is not None)\n"
        "fd = os.open(dev, os.O_WRONLY)\nos.pwrite(fd, b'written by the pod', 4 << 20)\nos.fsync(fd)\n"
        "os.close(fd)"
    )
    with local_node(tmp_path, isolation=isolation) as node:
        handle = make_claim(node, "data", 8 << 20, content=content)
        manifest = pod_manifest(
            "reader",
            ["python", "-c", script],
            args=["/dev/xvda"],
            volumeDevices=[{"name": "d", "devicePath": "/dev/xvda"}],
        )
        manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        node.core.create_namespaced_pod("default", manifest)
        pod = wait_pod(node.core, "reader", FINISHED)
        assert pod.status.phase == "Succeeded", pod.status
        digest, mapped = node.core.read_namespaced_pod_log("reader", "default").split()
        assert digest == hashlib.sha256(content).hexdigest()
        assert mapped == str(isolation == "rewrite")
        image = node.store.volume_path(handle)
        with open(image, "rb") as f:
            f.seek(4 << 20)
            assert f.read(18) == b"written by the pod"
        assert not os.path.exists("/dev/xvda")  # never on the host
        if node.store.use_loop:  # released once the pod is done
            wait_until(lambda: not loops_of(image), 5, "the loop device to be detached")


def test_block_device_is_private_to_the_container(tmp_path):
    if not NAMESPACES:
        pytest.skip("no mount namespaces here")
    with local_node(tmp_path) as node:
        make_claim(node, "data", 1 << 20)
        manifest = pod_manifest("holder", ["sleep", "60"], volumeDevices=[{"name": "d", "devicePath": "/dev/xvdz"}])
        manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        node.core.create_namespaced_pod("default", manifest)
        wait_pod(node.core, "holder", container_running("main"))
        assert (
            exec_out(
                node.core, "holder", ["sh", "-c", "test -b /dev/xvdz && echo block; test -e /dev/null && echo null"]
            )
            == "block\nnull\n"
        )
        assert not os.path.exists("/dev/xvdz")
        pod = node.core.read_namespaced_pod("holder", "default")
        assert pod.status.container_statuses[0].ready


def test_missing_claim_leaves_the_pod_unscheduled_until_it_exists(tmp_path):
    with local_node(tmp_path) as node:
        manifest = pod_manifest("waiter", ["true"], volumeDevices=[{"name": "d", "devicePath": "/dev/xvda"}])
        manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "later"}}]
        node.core.create_namespaced_pod("default", manifest)
        events = wait_until(
            lambda: [e for e in node.core.list_namespaced_event("default").items if e.reason == "FailedScheduling"],
            10,
            "a FailedScheduling event",
        )
        assert events[0].message == (
            '0/1 nodes are available: persistentvolumeclaim "later" not found. preemption: 0/1 nodes are'
            " available: 1 Preemption is not helpful for scheduling."
        )
        pod = node.core.read_namespaced_pod("waiter", "default")
        assert pod.status.phase == "Pending" and not pod.spec.node_name
        make_claim(node, "later", 1 << 20)
        assert wait_pod(node.core, "waiter", FINISHED).status.phase == "Succeeded"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_filesystem_claim_keeps_its_files_across_pods(tmp_path, isolation):
    with local_node(tmp_path, isolation=isolation) as node:
        handle = make_claim(node, "fs", 16 << 20, mode="Filesystem")
        for name, command in (("writer", "echo kept > /mnt/fsdata/hello"), ("reader", "cat /mnt/fsdata/hello")):
            manifest = pod_manifest(
                name, ["sh", "-c", command], volumeMounts=[{"name": "v", "mountPath": "/mnt/fsdata"}]
            )
            manifest["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "fs"}}]
            node.core.create_namespaced_pod("default", manifest)
            assert wait_pod(node.core, name, FINISHED).status.phase == "Succeeded"
        assert node.core.read_namespaced_pod_log("reader", "default") == "kept\n"
        image = node.store.volume_path(handle)
        if isolation == "namespace" and node.store.use_loop:  # in the image, an ext4 filesystem
            probe = subprocess.run(
                ["blkid", "-p", "-o", "value", "-s", "TYPE", str(image)], capture_output=True, text=True
            )
            assert probe.stdout.strip() == "ext4"
        else:  # the documented fallback: a directory beside the images
            assert (node.store.root / "fs" / handle / "hello").read_text() == "kept\n"


def test_projected_service_account_token_with_audience(tmp_path):
    now = [time.time()]
    with local_node(tmp_path, api={"clock": lambda: now[0]}, sync_interval=0.05) as node:
        core, authn = node.core, node.kube.authn
        manifest = pod_manifest(
            "cbt", ["sleep", "60"], volumeMounts=[{"name": "token", "mountPath": "/var/run/secrets/cbt"}]
        )
        manifest["spec"]["volumes"] = [
            {
                "name": "token",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"audience": "cbt-audience", "expirationSeconds": 600, "path": "token"}}
                    ]
                },
            }
        ]
        core.create_namespaced_pod("default", manifest)
        wait_pod(core, "cbt", container_running("main"))
        token = exec_out(core, "cbt", ["cat", "/var/run/secrets/cbt/token"])

        def review(tok, audience):
            return authn.create_token_review({"spec": {"token": tok, "audiences": [audience]}}).status

        status = review(token, "cbt-audience")
        assert status.authenticated and status.audiences == ["cbt-audience"]
        assert status.user.username == "system:serviceaccount:default:default"
        assert status.user.extra["authentication.kubernetes.io/pod-name"] == ["cbt"]
        assert not review(token, "someone-else").authenticated
        # the automounted kube-api-access volume, as the admission plugin would add it
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        assert exec_out(core, "cbt", ["cat", f"{sa}/namespace"]) == "default"
        assert review(
            exec_out(core, "cbt", ["cat", f"{sa}/token"]), "https://kubernetes.default.svc.cluster.local"
        ).authenticated

        now[0] += 500  # past 80% of the token's 600 s: the kubelet mints a new one
        fresh = wait_until(
            lambda: (t := exec_out(core, "cbt", ["cat", "/var/run/secrets/cbt/token"])) != token and t,
            10,
            "the token to be refreshed",
        )
        assert review(fresh, "cbt-audience").authenticated
        now[0] += 200  # the first token has expired, the fresh one has not
        assert not review(token, "cbt-audience").authenticated and review(fresh, "cbt-audience").authenticated
        core.delete_namespaced_pod("cbt", "default")
        assert review(fresh, "cbt-audience").authenticated  # valid while the pod terminates
        wait_until(lambda: not core.list_namespaced_pod("default").items, 10, "the kubelet to delete the pod")
        assert not review(fresh, "cbt-audience").authenticated  # a token bound to a deleted pod is worthless


def test_secret_config_map_and_downward_volumes(tmp_path):
    with local_node(tmp_path, sync_interval=0.05) as node:
        core = node.core
        secret = {"metadata": {"name": "repo"}, "stringData": {"key": "s3cr3t", "other": "x"}}
        core.create_namespaced_secret("default", secret)
        core.create_namespaced_config_map("default", {"metadata": {"name": "conf"}, "data": {"level": "1"}})
        mounts = [
            {"name": "s", "mountPath": "/etc/repo"},
            {"name": "c", "mountPath": "/etc/conf"},
            {"name": "d", "mountPath": "/etc/podinfo"},
            {"name": "c", "mountPath": "/etc/level-only", "subPath": "level"},
        ]
        manifest = pod_manifest("vols", ["sleep", "60"], volumeMounts=mounts)
        manifest["metadata"]["labels"] = {"app": "vols"}
        manifest["spec"]["volumes"] = [
            {
                "name": "s",
                "secret": {"secretName": "repo", "items": [{"key": "key", "path": "sub/key", "mode": 0o400}]},
            },
            {"name": "c", "configMap": {"name": "conf"}},
            {
                "name": "d",
                "downwardAPI": {
                    "items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                    ]
                },
            },
        ]
        core.create_namespaced_pod("default", manifest)
        wait_pod(core, "vols", container_running("main"))
        script = (
            "ls /etc/repo; cat /etc/repo/sub/key; stat -c %a /etc/repo/sub/key;"
            " cat /etc/podinfo/labels /etc/podinfo/name"
        )
        assert exec_out(core, "vols", ["sh", "-c", script]) == 'sub\ns3cr3t400\napp="vols"vols'
        assert exec_out(core, "vols", ["cat", "/etc/level-only"]) == "1"
        if node.kubelet.isolation == "namespace":
            readonly = exec_out(core, "vols", ["sh", "-c", "(echo x > /etc/conf/new) 2>/dev/null || echo read-only"])
            assert readonly == "read-only\n"
        core.patch_namespaced_config_map("conf", "default", {"data": {"level": "2"}})
        wait_until(lambda: exec_out(core, "vols", ["cat", "/etc/conf/level"]) == "2", 10, "the config map update")


def _mount_events(core, pod: str) -> list[str]:
    return [
        e.message
        for e in core.list_namespaced_event("default").items
        if e.involved_object.name == pod and e.reason == "FailedMount" and e.type == "Warning"
    ]


def test_secret_volume_items_a_missing_key_fails_the_mount_unless_optional(tmp_path):
    """As upstream's secret volume plugin: an item whose key the Secret lacks (or a missing Secret) fails the
    volume, the pod waits in ContainerCreating with a FailedMount event naming the volume and the key, and
    starts once the key is there; with ``optional`` the missing item is left out and the pod runs."""
    with local_node(tmp_path, sync_interval=0.05) as node:
        core = node.core
        items = [{"key": "password", "path": "password", "mode": 0o400}, {"key": "keyfile", "path": "keyfile"}]
        mounts = [{"name": "key", "mountPath": "/etc/repo-key", "readOnly": True}]
        strict = pod_manifest("strict", ["sh", "-c", "ls /etc/repo-key; stat -c %a /etc/repo-key/password"])
        strict["spec"]["containers"][0]["volumeMounts"] = mounts
        strict["spec"]["volumes"] = [{"name": "key", "secret": {"secretName": "repo", "items": items}}]
        core.create_namespaced_pod("default", strict)
        [missing] = wait_until(lambda: _mount_events(core, "strict"), 10, "a FailedMount event")
        assert missing == 'MountVolume.SetUp failed for volume "key" : secret "repo" not found', missing

        core.create_namespaced_secret("default", {"metadata": {"name": "repo"}, "stringData": {"password": "pw"}})
        message = 'MountVolume.SetUp failed for volume "key" : references non-existent secret key: keyfile'
        wait_until(lambda: message in _mount_events(core, "strict"), 10, "the missing key's event")
        pod = core.read_namespaced_pod("strict", "default")
        assert pod.status.phase == "Pending", pod.status
        assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"

        optional = pod_manifest("optional", ["sh", "-c", "ls /etc/repo-key; stat -c %a /etc/repo-key/password"])
        optional["spec"]["containers"][0]["volumeMounts"] = mounts
        source = {"secretName": "repo", "items": items, "optional": True}
        optional["spec"]["volumes"] = [{"name": "key", "secret": source}]
        core.create_namespaced_pod("default", optional)
        assert wait_pod(core, "optional", FINISHED).status.phase == "Succeeded"
        assert core.read_namespaced_pod_log("optional", "default") == "password\n400\n"

        core.patch_namespaced_secret("repo", "default", {"stringData": {"keyfile": "k" * 32}})
        assert wait_pod(core, "strict", FINISHED).status.phase == "Succeeded"
        assert core.read_namespaced_pod_log("strict", "default") == "keyfile\npassword\n400\n"


def test_stop_undoes_everything(tmp_path):
    with local_node(tmp_path) as node:  # the API and store; a second kubelet stopped by hand below
        node.kubelet.stop()
        kubelet = LocalKubelet(node.kube.api, node.store, workdir=tmp_path / "second", grace_cap=1.0)
        kubelet.start()
        try:
            handle = make_claim(node, "data", 1 << 20)
            top = "/kubelet-test-top"
            assert not os.path.exists(top)
            manifest = pod_manifest(
                "busy",
                ["sleep", "60"],
                volumeDevices=[{"name": "d", "devicePath": "/dev/xvdb"}],
                volumeMounts=[{"name": "e", "mountPath": f"{top}/data"}],
            )
            manifest["spec"]["volumes"] = [
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "e", "emptyDir": {}},
            ]
            node.core.create_namespaced_pod("default", manifest)
            wait_pod(node.core, "busy", container_running("main"))
            pid = kubelet.container_pid("default", "busy", "main")
            command = ["sh", "-c", "echo $$; exec sleep 60"]
            resp = stream(
                node.core.connect_get_namespaced_pod_exec,
                "busy",
                "default",
                command=command,
                stdout=True,
                stderr=True,
                _preload_content=False,
            )
            exec_pid = int(wait_until(lambda: (resp.update(timeout=1), resp.peek_stdout())[1], 10, "the exec"))
            image = node.store.volume_path(handle)
            if node.store.use_loop:
                assert loops_of(image)
            if NAMESPACES:
                assert os.path.isdir(top)  # a top-level mount point is made on the host while it is needed
        finally:
            kubelet.stop()
        for p in (pid, exec_pid):  # SIGKILLed by stop(); on a loaded machine it may take a moment to die
            wait_until(lambda p=p: not _running(p), 10, f"process {p} killed by the kubelet's stop")
        assert not loops_of(image)
        assert not os.path.exists(top)
        assert not (tmp_path / "second" / "pods").exists() or not any((tmp_path / "second" / "pods").iterdir())
        with open("/proc/self/mountinfo") as f:
            assert str(tmp_path) not in f.read()
        assert node.core.read_node("local-node").status.conditions[0].status == "False"
        resp.close()


def test_rewrite_fallback_maps_paths(tmp_path):
    with local_node(tmp_path, isolation="rewrite") as node:
        node.core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
        script = "cat /etc/s/k; echo; echo $CONF; printf done > /dev/termination-log"
        manifest = pod_manifest(
            "rw",
            ["sh", "-c", script],
            env=[{"name": "CONF", "value": "/etc/s/k"}],
            volumeMounts=[{"name": "s", "mountPath": "/etc/s"}],
        )
        manifest["spec"]["volumes"] = [{"name": "s", "secret": {"secretName": "s"}}]
        node.core.create_namespaced_pod("default", manifest)
        pod = wait_pod(node.core, "rw", FINISHED)
        assert pod.status.container_statuses[0].state.terminated.message == "done"
        value, conf = node.core.read_namespaced_pod_log("rw", "default").splitlines()
        assert value == "v" and conf.endswith("/s/k") and conf != "/etc/s/k"
        # the map the container was given
        (plan,) = [p for p in (tmp_path / "kubelet").rglob("plan-0.json")]
        assert json.loads(plan.read_text())["argv"][2].startswith(f"cat {conf}")
        assert DEVICE_MAP_ENV == "LOCALCLUSTER_DEVICE_MAP"


def test_in_cluster_api_endpoint(tmp_path):
    """What ``load_incluster_config()`` needs: https at KUBERNETES_SERVICE_HOST/PORT, the token and ca.crt."""
    script = """
import os
from kubernetes import client, config
config.load_incluster_config()
api = client.ApiClient()
namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
pod = client.CoreV1Api(api).read_namespaced_pod(os.environ["HOSTNAME"], namespace)
print(api.configuration.host.startswith("https://"), pod.status.phase, pod.spec.node_name)
"""
    with local_node(tmp_path, api={"require_auth": True}) as node:
        node.kube.grant("default", "default/default", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
        node.core.create_namespaced_pod("default", pod_manifest("incluster", ["python", "-c", script]))
        pod = wait_pod(node.core, "incluster", FINISHED)
        assert node.core.read_namespaced_pod_log("incluster", "default") == "True Running local-node\n", pod.status


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs: it exists and is not a zombie (killed, not reaped yet by its parent,
    which may lag on a loaded machine)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _warnings(core, pod: str, reason: str) -> list:
    return [
        e
        for e in core.list_namespaced_event("default").items
        if e.involved_object.name == pod and e.reason == reason and e.type == "Warning"
    ]


def test_a_volume_the_storage_will_not_attach_is_a_failed_attach_volume_event(tmp_path):
    """As the attach-detach controller reports a failed ControllerPublishVolume: while the storage refuses
    (``VolumeStore.attach_fault``) the pod waits in ContainerCreating with a FailedAttachVolume Warning naming
    the PV and the driver's error, and a wait on it that times out prints that Event; once the storage
    attaches again, the kubelet's retry starts the pod."""
    with local_node(tmp_path, sync_interval=0.05) as node:
        core = node.core
        make_claim(node, "fenced", 1 << 20)
        manifest = pod_manifest("blocked", ["true"], volumeDevices=[{"name": "d", "devicePath": "/dev/xvda"}])
        manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "fenced"}}]
        with node.store.attach_fault("volume vol-fenced is fenced by the array"):
            core.create_namespaced_pod("default", manifest)
            [event] = wait_until(lambda: _warnings(core, "blocked", "FailedAttachVolume"), 10, "FailedAttachVolume")
            assert event.message == (
                'AttachVolume.Attach failed for volume "pv-fenced" : rpc error: code = Internal desc ='
                " volume vol-fenced is fenced by the array"
            )
            assert event.source.component == "attachdetach-controller"
            with pytest.raises(TimeoutError) as timed_out:
                wait_pod(core, "blocked", FINISHED, timeout=1)
            said = str(timed_out.value)
            assert "(phase Pending; main: ContainerCreating)" in said, said
            assert "Warning FailedAttachVolume" in said and "fenced by the array" in said, said
        assert wait_pod(core, "blocked", FINISHED).status.phase == "Succeeded"


@pytest.mark.skipif(
    not (NAMESPACES and loop_devices_available()), reason="Filesystem volumes need loop devices and mount namespaces"
)
def test_a_node_without_mkfs_fails_the_mount_naming_the_executable(tmp_path):
    """A node whose PATH lacks ``mkfs.ext4`` (the kubelet's ``mkfs_path`` pointed at an empty directory): the
    blank Filesystem volume cannot be formatted, the pod waits in ContainerCreating with FailedMount naming the
    executable as Go's exec does (a real kubelet's mount-utils), never silently."""
    empty = tmp_path / "no-tools"
    empty.mkdir()
    with local_node(tmp_path, mkfs_path=str(empty), sync_interval=0.05) as node:
        core = node.core
        handle = make_claim(node, "blank", 16 << 20, mode="Filesystem")
        manifest = pod_manifest("unformatted", ["true"], volumeMounts=[{"name": "v", "mountPath": "/mnt/blank"}])
        manifest["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "blank"}}]
        core.create_namespaced_pod("default", manifest)
        [event] = wait_until(lambda: _warnings(core, "unformatted", "FailedMount"), 10, "a FailedMount event")
        assert event.message.startswith('MountVolume.MountDevice failed for volume "pv-blank" : rpc error: code'), (
            event.message
        )
        assert 'errcode:(exec: "mkfs.ext4": executable file not found in $PATH)' in event.message, event.message
        pod = core.read_namespaced_pod("unformatted", "default")
        assert pod.status.phase == "Pending" and pod.status.container_statuses[0].state.waiting.reason == (
            "ContainerCreating"
        )
        probe = subprocess.run(
            ["blkid", "-p", "-o", "value", "-s", "TYPE", str(node.store.volume_path(handle))],
            capture_output=True,
            text=True,
        )
        assert probe.stdout.strip() == "", "nothing was formatted"
        core.delete_namespaced_pod("unformatted", "default", grace_period_seconds=0)
