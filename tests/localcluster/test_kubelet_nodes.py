"""Kubelets of the strict cluster's nodes (pods placed with ``spec.nodeName``, no scheduler): the Windows
node's refusals (Linux images, Block volumes) and NTFS volumes, Filesystem volumes by the PV's fsType
with SafeFormatAndMount semantics (xfs and ext4 formatted when blank, another filesystem refused with
FailedMount), and read-only devices and mounts.

The Filesystem cases need loop devices and mount namespaces (root); mkfs.xfs and mkntfs/ntfs-3g are
required (Debian xfsprogs and ntfs-3g, installed by make test: .ci/deps): a missing tool fails these
tests, with a FailedMount Warning naming it."""

from __future__ import annotations

import itertools
import subprocess

import pytest

from localcluster.kubelet import namespaces_available
from localcluster.kubelet.testing import local_nodes, phase_in, pod_manifest, wait_pod, wait_until
from localcluster.storage import loop_devices_available

FINISHED = phase_in("Succeeded", "Failed")
MOUNTS = pytest.mark.skipif(
    not (namespaces_available() and loop_devices_available()),
    reason="Filesystem volumes need loop devices and mount namespaces (root)",
)
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_nodes(
        tmp_path_factory.mktemp("nodes"),
        scheduler=False,
        in_cluster_endpoint=False,
        backoff=(0.05, 0.4),
        sync_interval=0.2,
    ) as nodes:
        yield nodes


@pytest.fixture
def ns(cluster):
    name = f"k{next(_names)}"
    cluster.core.create_namespace({"metadata": {"name": name}})
    return name


def on(node: str, manifest: dict) -> dict:
    manifest["spec"]["nodeName"] = node
    return manifest


def static_claim(
    cluster,
    ns: str,
    name: str,
    size: int,
    *,
    mode: str = "Filesystem",
    fs_type: str | None = None,
    handle: str | None = None,
) -> str:
    """A PV (the volume ``handle``, made when new) and a claim bound to it, as the PV controller binds."""
    handle = handle or f"vol-{ns}-{name}"
    if not cluster.store.volume_path(handle).exists():
        cluster.store.create_volume(handle, size)
    csi = {"driver": "disk.csi.local", "volumeHandle": handle}
    if fs_type is not None:
        csi["fsType"] = fs_type
    core = cluster.core
    core.create_persistent_volume(
        {
            "metadata": {"name": f"pv-{ns}-{name}"},
            "spec": {
                "capacity": {"storage": str(size)},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": mode,
                "persistentVolumeReclaimPolicy": "Retain",
                "claimRef": {"namespace": ns, "name": name},
                "csi": csi,
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": mode,
                "storageClassName": "",
                "resources": {"requests": {"storage": str(size)}},
                "volumeName": f"pv-{ns}-{name}",
            },
        },
    )
    core.patch_namespaced_persistent_volume_claim_status(name, ns, {"status": {"phase": "Bound"}})
    return handle


def mounted(manifest: dict, claim: str, path: str, read_only: bool = False) -> dict:
    source = {"claimName": claim, **({"readOnly": True} if read_only else {})}
    manifest["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": source}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": path}]
    return manifest


def events(core, ns: str, name: str, reason: str) -> list:
    return [e for e in core.list_namespaced_event(ns).items if e.involved_object.name == name and e.reason == reason]


def waiting(pod) -> dict:
    state = pod.status.container_statuses[0].state.waiting if pod.status.container_statuses else None
    return {"reason": state.reason, "message": state.message} if state else {}


def blkid(path) -> str:
    return subprocess.run(
        ["blkid", "-p", "-o", "value", "-s", "TYPE", str(path)], capture_output=True, text=True
    ).stdout.strip()


def test_images_of_another_os_are_not_pulled(cluster, ns):
    core = cluster.core
    core.create_namespaced_pod(ns, on("win-a", pod_manifest("linux-app", ["true"], image="python:3-slim")))
    core.create_namespaced_pod(ns, on("node-a", pod_manifest("win-app", ["true"], image="localcluster-winapp:1")))
    for name, reference in (
        ("linux-app", "docker.io/library/python:3-slim"),
        ("win-app", "docker.io/library/localcluster-winapp:1"),
    ):
        message = (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{reference}": no match for'
            " platform in manifest: not found"
        )
        pod = wait_pod(core, name, lambda p: waiting(p).get("reason") == "ImagePullBackOff", namespace=ns)
        assert pod.status.phase == "Pending"
        image = pod.spec.containers[0].image
        assert waiting(pod)["message"] == f'Back-off pulling image "{image}": ErrImagePull: {message}'
        failed = {e.message for e in events(core, ns, name, "Failed")}
        assert {f'Failed to pull image "{image}": {message}', "Error: ErrImagePull"} <= failed
    core.create_namespaced_pod(
        ns, on("win-a", pod_manifest("win", ["python", "-c", "print(1)"], image="localcluster-winapp"))
    )
    assert wait_pod(core, "win", FINISHED, namespace=ns).status.phase == "Succeeded"


def test_windows_node_refuses_block_volumes(cluster, ns):
    core = cluster.core
    static_claim(cluster, ns, "raw", 1 << 20, mode="Block")
    manifest = on("win-a", pod_manifest("raw", ["true"], image="localcluster-winapp"))
    manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "raw"}}]
    manifest["spec"]["containers"][0]["volumeDevices"] = [{"name": "d", "devicePath": "/dev/xvda"}]
    core.create_namespaced_pod(ns, manifest)
    (event,) = wait_until(lambda: events(core, ns, "raw", "FailedMapVolume"), 10, "a FailedMapVolume event")
    assert event.type == "Warning" and event.message.startswith(
        f'MapVolume.SetUpDevice failed for volume "pv-{ns}-raw" : kubernetes.io/csi: blockMapper.stageVolumeForBlock'
        " failed: rpc error: code = InvalidArgument desc = raw block volumes are not supported on Windows"
    )
    pod = core.read_namespaced_pod("raw", ns)
    assert pod.status.phase == "Pending" and waiting(pod)["reason"] == "ContainerCreating"


@MOUNTS
def test_ntfs_volume_on_windows_and_linux(cluster, ns):
    core = cluster.core
    handle = static_claim(cluster, ns, "win-data", 16 << 20, fs_type="")  # empty: NTFS on Windows
    write = "open('/data/hello.txt', 'w').write('from windows')"
    core.create_namespaced_pod(
        ns,
        on(
            "win-a",
            mounted(
                pod_manifest("writer", ["python", "-c", write], image="localcluster-winapp"), "win-data", "C:\\data"
            ),
        ),
    )
    assert wait_pod(core, "writer", FINISHED, namespace=ns).status.phase == "Succeeded"
    image = cluster.store.volume_path(handle)
    assert blkid(image) == "ntfs"
    # the ntfs-3g daemon unmounted and flushed before the volume was released
    assert subprocess.run(["ntfscat", str(image), "hello.txt"], capture_output=True).stdout == b"from windows"
    static_claim(cluster, ns, "as-ntfs", 16 << 20, fs_type="ntfs", handle=handle)
    core.create_namespaced_pod(
        ns, on("node-a", mounted(pod_manifest("reader", ["cat", "/mnt/w/hello.txt"]), "as-ntfs", "/mnt/w"))
    )
    assert wait_pod(core, "reader", FINISHED, namespace=ns).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("reader", ns) == "from windows"
    # only NTFS exists on Windows
    static_claim(cluster, ns, "ext4-on-win", 16 << 20, fs_type="ext4")
    core.create_namespaced_pod(
        ns, on("win-a", mounted(pod_manifest("ext4", ["true"], image="localcluster-winapp"), "ext4-on-win", "C:\\data"))
    )
    (event,) = wait_until(lambda: events(core, ns, "ext4", "FailedMount"), 10, "a FailedMount event")
    assert 'The argument "ext4" does not belong to the set "FAT,FAT32,exFAT,NTFS,ReFS"' in event.message


@MOUNTS
def test_xfs_formatted_when_blank_and_refused_as_ext4(cluster, ns):
    core = cluster.core
    handle = static_claim(cluster, ns, "db", 320 << 20, fs_type="xfs")  # mkfs.xfs wants 300 MB at least
    core.create_namespaced_pod(
        ns, on("node-a", mounted(pod_manifest("db", ["sh", "-c", "echo rows > /var/db/t"]), "db", "/var/db"))
    )
    assert wait_pod(core, "db", FINISHED, namespace=ns).status.phase == "Succeeded"
    image = cluster.store.volume_path(handle)
    assert blkid(image) == "xfs"
    # the same data handed over as an ext4 PV: the mount fails, nothing is formatted
    static_claim(cluster, ns, "as-ext4", 320 << 20, fs_type="ext4", handle=handle)
    core.create_namespaced_pod(
        ns, on("node-b", mounted(pod_manifest("wrong", ["cat", "/var/db/t"]), "as-ext4", "/var/db"))
    )
    (event,) = wait_until(lambda: events(core, ns, "wrong", "FailedMount"), 10, "a FailedMount event")
    assert event.type == "Warning"
    assert event.message.startswith(
        f'MountVolume.MountDevice failed for volume "pv-{ns}-as-ext4" : rpc error: code'
        ' = Internal desc = could not format "/dev/loop'
    )
    assert (
        "mount failed: exit status 32\nMounting command: mount\nMounting arguments: -t ext4 -o defaults"
        in (event.message)
        and "wrong fs type" in event.message
    )
    pod = core.read_namespaced_pod("wrong", ns)
    assert pod.status.phase == "Pending" and waiting(pod)["reason"] == "ContainerCreating"
    assert blkid(image) == "xfs"
    core.delete_namespaced_pod("wrong", ns, grace_period_seconds=0)


@pytest.mark.skipif(not loop_devices_available(), reason="read-only loop devices need root")
def test_read_only_block_device(cluster, ns):
    core = cluster.core
    handle = static_claim(cluster, ns, "ro", 1 << 20, mode="Block")
    with open(cluster.store.volume_path(handle), "r+b") as f:
        f.write(b"original")
    script = (
        "import errno, os\nfd = os.open('/dev/xvda', os.O_RDWR)\nprint(os.pread(fd, 8, 0).decode())\n"
        "try:\n    os.pwrite(fd, b'changed!', 0)\n    os.fsync(fd)\n    print('written')\n"
        "except OSError as err:\n    print(errno.errorcode[err.errno])"
    )
    manifest = on("node-a", pod_manifest("reader", ["python", "-c", script]))
    manifest["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "ro", "readOnly": True}}]
    manifest["spec"]["containers"][0]["volumeDevices"] = [{"name": "d", "devicePath": "/dev/xvda"}]
    core.create_namespaced_pod(ns, manifest)
    assert wait_pod(core, "reader", FINISHED, namespace=ns).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("reader", ns) == "original\nEPERM\n"
    with open(cluster.store.volume_path(handle), "rb") as f:
        assert f.read(8) == b"original"


@MOUNTS
def test_read_only_filesystem_mount(cluster, ns):
    core = cluster.core
    static_claim(cluster, ns, "fs", 16 << 20)  # no fsType: ext4 on Linux
    core.create_namespaced_pod(
        ns, on("node-b", mounted(pod_manifest("w", ["sh", "-c", "echo v1 > /srv/f"]), "fs", "/srv"))
    )
    assert wait_pod(core, "w", FINISHED, namespace=ns).status.phase == "Succeeded"
    script = "cat /srv/f; (echo v2 > /srv/f) 2>&1 | grep -o 'Read-only file system'"
    core.create_namespaced_pod(
        ns, on("node-b", mounted(pod_manifest("r", ["sh", "-c", script]), "fs", "/srv", read_only=True))
    )
    assert wait_pod(core, "r", FINISHED, namespace=ns).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("r", ns) == "v1\nRead-only file system\n"
