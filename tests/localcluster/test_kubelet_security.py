"""Who the local kubelet's containers run as, and the volume ownership a pod's fsGroup asks for: runAsUser,
runAsGroup, fsGroup and supplementalGroups make the process's uid, gid and groups (kubectl exec too);
runAsNonRoot stops a container that would run as root (CreateContainerConfigError, the kubelet's message); a
Filesystem claim (driver without a CSIDriver: ReadWriteOnceWithFSType, the PV has an fsType) and a secret volume
get the fsGroup (group read-write, setgid directories; read-only for the secret), so a non-root pod writes the
claim only with it."""

from __future__ import annotations

import pytest

from localcluster.kubelet import namespaces_available
from localcluster.kubelet.testing import container_running, local_node, phase_in, pod_manifest, wait_pod, wait_until
from localcluster.storage import loop_devices_available
from tests.localcluster.test_kubelet_volumes import exec_out, make_claim

FINISHED = phase_in("Succeeded", "Failed")


def run(node, name, script, pod_security=None, **container):
    manifest = pod_manifest(name, ["sh", "-c", script], **container)
    if pod_security is not None:
        manifest["spec"]["securityContext"] = pod_security
    return manifest


def test_the_process_runs_as_the_pods_user_and_groups_also_in_exec(tmp_path):
    security = {"runAsUser": 10001, "runAsGroup": 10002, "fsGroup": 3000, "supplementalGroups": [20]}
    with local_node(tmp_path) as node:
        node.core.create_namespaced_pod("default", run(node, "who", "id -u; id -g; id -G; sleep 30", security))
        wait_pod(node.core, "who", container_running("main"))
        wait_until(lambda: node.core.read_namespaced_pod_log("who", "default").count("\n") >= 3, 10, "its ids")
        assert node.core.read_namespaced_pod_log("who", "default").split("\n")[:3] == [
            "10001",
            "10002",
            "10002 20 3000",  # setgroups(2) keeps them sorted
        ]
        assert exec_out(node.core, "who", ["id", "-u"]).strip() == "10001"
        root = run(node, "root", "id -u")
        node.core.create_namespaced_pod("default", root)
        assert wait_pod(node.core, "root", FINISHED).status.phase == "Succeeded"
        assert node.core.read_namespaced_pod_log("root", "default") == "0\n"


@pytest.mark.parametrize(
    ("security", "message"),
    [
        ({"runAsNonRoot": True}, "container has runAsNonRoot and image will run as root"),
        ({"runAsNonRoot": True, "runAsUser": 0}, "container's runAsUser breaks non-root policy"),
    ],
)
def test_run_as_non_root_stops_a_container_that_would_run_as_root(tmp_path, security, message):
    with local_node(tmp_path) as node:
        node.core.create_namespaced_pod("default", run(node, "p", "true", security))

        def waiting():
            statuses = node.core.read_namespaced_pod("p", "default").status.container_statuses or []
            return (
                statuses
                and statuses[0].state.waiting
                and statuses[0].state.waiting.reason == "CreateContainerConfigError"
            )

        wait_until(waiting, 30, "CreateContainerConfigError")
        state = node.core.read_namespaced_pod("p", "default").status.container_statuses[0].state.waiting
        uid = node.core.read_namespaced_pod("p", "default").metadata.uid
        assert state.message == f'{message} (pod: "p_default({uid})", container: main)'


@pytest.mark.skipif(
    not (namespaces_available() and loop_devices_available()), reason="needs mount namespaces and loops"
)
def test_fs_group_gives_a_non_root_pod_its_filesystem_claim_and_secret(tmp_path):
    with local_node(tmp_path, isolation="namespace") as node:
        make_claim(node, "fs", 16 << 20, mode="Filesystem", fs_type="ext4")
        node.core.create_namespaced_secret("default", {"metadata": {"name": "key"}, "stringData": {"password": "pw"}})
        volumes = [
            {"name": "v", "persistentVolumeClaim": {"claimName": "fs"}},
            {"name": "k", "secret": {"secretName": "key", "defaultMode": 0o400}},
        ]
        mounts = [{"name": "v", "mountPath": "/mnt/fsdata"}, {"name": "k", "mountPath": "/mnt/key", "readOnly": True}]
        script = (
            "touch /mnt/fsdata/new && stat -c '%g %a' /mnt/fsdata /mnt/fsdata/new /mnt/key/password"
            " && cat /mnt/key/password"
        )
        outcomes = {}
        for name, security in (("plain", {"runAsUser": 10001}), ("grouped", {"runAsUser": 10001, "fsGroup": 3000})):
            manifest = run(node, name, script, security, volumeMounts=mounts)
            manifest["spec"]["volumes"] = volumes
            node.core.create_namespaced_pod("default", manifest)
            outcomes[name] = wait_pod(node.core, name, FINISHED).status.phase
        assert outcomes == {"plain": "Failed", "grouped": "Succeeded"}
        assert "Permission denied" in node.core.read_namespaced_pod_log("plain", "default")
        log = node.core.read_namespaced_pod_log("grouped", "default").split("\n")
        # the volume's root: setgid, group rw+x; the new file: the group (setgid dir); the secret: group-readable
        assert log[:4] == ["3000 2775", "3000 644", "3000 440", "pw"], log
