"""The local kubelet through the real ``kubernetes`` client: pod lifecycle, phases, exit codes,
termination messages, logs, environment, restarts, init containers, images and deletion."""

from __future__ import annotations

import json
import os
import sys

import pytest
from kubernetes.client.rest import ApiException

from localcluster.kubelet import Image, default_images
from localcluster.kubelet.testing import container_running, local_node, phase_in, pod_manifest, wait_pod, wait_until

FINISHED = phase_in("Succeeded", "Failed")


@pytest.fixture
def node(tmp_path):
    with local_node(tmp_path, backoff=(0.05, 0.4), grace_cap=3.0) as n:
        yield n


def status_of(call, *args, **kwargs) -> ApiException:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


def terminated(pod, index: int = 0):
    return pod.status.container_statuses[index].state.terminated


def test_node_registered_and_unscheduled_pods_bound(node):
    labels = node.core.read_node("local-node").metadata.labels
    assert labels["kubernetes.io/os"] == "linux" and labels["kubernetes.io/arch"]
    node.core.create_namespaced_pod("default", pod_manifest("p", ["python", "-c", "pass"]))
    pod = wait_pod(node.core, "p", FINISHED)
    assert pod.spec.node_name == "local-node" and pod.status.phase == "Succeeded"
    assert pod.status.pod_ip == "127.0.0.1" and pod.status.start_time is not None
    assert {c.type: c.status for c in pod.status.conditions}["PodScheduled"] == "True"


def test_exit_codes_phases_termination_messages_and_logs(node):
    core = node.core
    ok = (
        "import sys; print('out', flush=True); print('err', file=sys.stderr);"
        " open('/dev/termination-log', 'w').write('done')"
    )
    core.create_namespaced_pod("default", pod_manifest("ok", ["python", "-c", ok]))
    bad = "import sys; print('failing'); open('/var/log/why', 'w').write('no luck'); sys.exit(3)"
    core.create_namespaced_pod(
        "default", pod_manifest("bad", ["python", "-c", bad], terminationMessagePath="/var/log/why")
    )
    pod = wait_pod(core, "ok", FINISHED)
    assert pod.status.phase == "Succeeded"
    t = terminated(pod)
    assert (t.exit_code, t.reason, t.message) == (0, "Completed", "done")
    assert not pod.status.container_statuses[0].ready
    assert core.read_namespaced_pod_log("ok", "default") == "out\nerr\n"
    assert core.read_namespaced_pod_log("ok", "default", tail_lines=1) == "err\n"
    stamped = core.read_namespaced_pod_log("ok", "default", timestamps=True).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["out", "err"] and stamped[0][:2] == "20"
    assert core.read_namespaced_pod_log("ok", "default", limit_bytes=2) == "ou"

    pod = wait_pod(core, "bad", FINISHED)
    assert pod.status.phase == "Failed"
    t = terminated(pod)
    assert (t.exit_code, t.reason, t.message) == (3, "Error", "no luck")
    assert core.read_namespaced_pod_log("bad", "default") == "failing\n"
    assert not os.path.exists("/var/log/why") or open("/var/log/why").read() != "no luck"  # noqa: SIM115


def test_fallback_to_logs_on_error(node):
    script = "import sys\nfor i in range(100): print('line', i)\nsys.exit(1)"
    manifest = pod_manifest("p", ["python", "-c", script], terminationMessagePolicy="FallbackToLogsOnError")
    node.core.create_namespaced_pod("default", manifest)
    t = terminated(wait_pod(node.core, "p", FINISHED))
    lines = t.message.splitlines()
    assert t.exit_code == 1 and len(lines) == 80 and lines[-1] == "line 99"


def test_environment_from_secrets_config_maps_and_fields(node):
    core = node.core
    core.create_namespaced_secret(
        "default", {"metadata": {"name": "s"}, "stringData": {"password": "hunter2", "user": "me"}}
    )
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"mode": "fast"}})
    env = [
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
        {"name": "ABSENT", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope", "optional": True}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GREETING", "value": "hello $(POD) $$(POD)"},
    ]
    keys = ["PASSWORD", "MODE", "ABSENT", "POD", "NS", "NODE", "SA", "IP", "GREETING", "S_user", "HOSTNAME"]
    script = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {keys!r}}}), os.getcwd(), *__import__('sys').argv[1:])"  # noqa: E501
    manifest = pod_manifest(
        "envy",
        ["python", "-c", script],
        args=["$(MODE)", "$(UNKNOWN)"],
        env=env,
        envFrom=[{"secretRef": {"name": "s"}, "prefix": "S_"}],
        workingDir="/tmp",
    )
    core.create_namespaced_pod("default", manifest)
    assert wait_pod(core, "envy", FINISHED).status.phase == "Succeeded"
    text, cwd, *args = core.read_namespaced_pod_log("envy", "default").rsplit(" ", 3)
    assert json.loads(text) == {
        "PASSWORD": "hunter2",
        "MODE": "fast",
        "ABSENT": None,
        "POD": "envy",
        "NS": "default",
        "NODE": "local-node",
        "SA": "default",
        "IP": "127.0.0.1",
        "GREETING": "hello envy $(POD)",
        "S_user": "me",
        "HOSTNAME": "envy",
    }
    assert cwd == "/tmp" and args == ["fast", "$(UNKNOWN)\n"]


def test_missing_secret_waits_until_it_exists(node):
    core = node.core
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    core.create_namespaced_pod("default", pod_manifest("p", ["sh", "-c", "echo $TOKEN"], env=env))

    def waiting(pod):
        s = pod.status.container_statuses
        return bool(s) and s[0].state.waiting is not None and s[0].state.waiting.reason == "CreateContainerConfigError"

    pod = wait_pod(core, "p", waiting)
    assert pod.status.phase == "Pending"
    assert 'secret "later" not found' in pod.status.container_statuses[0].state.waiting.message
    core.create_namespaced_secret("default", {"metadata": {"name": "later"}, "stringData": {"token": "t0k"}})
    assert wait_pod(core, "p", FINISHED).status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("p", "default") == "t0k\n"


def test_restart_policy_on_failure_restarts_until_success(node):
    # the third attempt succeeds: a counter in an emptyDir survives restarts
    script = (
        "import os, sys\np = '/scratch/count'\nn = int(open(p).read()) if os.path.exists(p) else 0\n"
        "open(p, 'w').write(str(n + 1))\nprint('attempt', n)\nsys.exit(0 if n == 2 else 7)"
    )
    manifest = pod_manifest(
        "retry",
        ["python", "-c", script],
        restart_policy="OnFailure",
        volumeMounts=[{"name": "w", "mountPath": "/scratch"}],
    )
    manifest["spec"]["volumes"] = [{"name": "w", "emptyDir": {}}]
    node.core.create_namespaced_pod("default", manifest)
    pod = wait_pod(node.core, "retry", FINISHED)
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Succeeded" and status.restart_count == 2
    assert status.state.terminated.exit_code == 0 and status.last_state.terminated.exit_code == 7
    assert node.core.read_namespaced_pod_log("retry", "default") == "attempt 2\n"
    assert node.core.read_namespaced_pod_log("retry", "default", previous=True) == "attempt 1\n"


def test_restart_policy_always_and_never(node):
    core = node.core
    core.create_namespaced_pod("default", pod_manifest("always", ["python", "-c", "pass"], restart_policy="Always"))
    pod = wait_pod(
        core, "always", lambda p: p.status.container_statuses and p.status.container_statuses[0].restart_count >= 2
    )
    assert pod.status.phase == "Running"
    core.create_namespaced_pod("default", pod_manifest("never", ["python", "-c", "raise SystemExit(2)"]))
    pod = wait_pod(core, "never", FINISHED)
    assert pod.status.phase == "Failed" and pod.status.container_statuses[0].restart_count == 0


def test_init_containers_run_in_order_before_the_containers(node):
    mount = [{"name": "shared", "mountPath": "/shared"}]
    manifest = pod_manifest("init", ["sh", "-c", "cat /shared/order"], volumeMounts=mount)
    manifest["spec"]["initContainers"] = [
        {
            "name": f"i{n}",
            "image": "busybox",
            "command": ["sh", "-c", f"echo i{n} >> /shared/order"],
            "volumeMounts": mount,
        }
        for n in (1, 2)
    ]
    manifest["spec"]["volumes"] = [{"name": "shared", "emptyDir": {}}]
    node.core.create_namespaced_pod("default", manifest)
    pod = wait_pod(node.core, "init", FINISHED)
    assert pod.status.phase == "Succeeded"
    assert [s.state.terminated.reason for s in pod.status.init_container_statuses] == ["Completed", "Completed"]
    assert node.core.read_namespaced_pod_log("init", "default") == "i1\ni2\n"
    assert node.core.read_namespaced_pod_log("init", "default", container="i2") == ""

    failing = pod_manifest("init-fails", ["sh", "-c", "echo never"])
    failing["spec"]["initContainers"] = [{"name": "i", "image": "busybox", "command": ["sh", "-c", "exit 4"]}]
    node.core.create_namespaced_pod("default", failing)
    pod = wait_pod(node.core, "init-fails", FINISHED)
    assert pod.status.phase == "Failed" and pod.status.init_container_statuses[0].state.terminated.exit_code == 4
    assert pod.status.container_statuses[0].state.waiting.reason == "PodInitializing"


def test_deletion_kills_the_processes(node):
    core, kubelet = node.core, node.kubelet
    core.create_namespaced_pod("default", pod_manifest("sleeper", ["sleep", "60"]))
    ignores = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    manifest = pod_manifest("stubborn", ["python", "-c", ignores])
    manifest["spec"]["terminationGracePeriodSeconds"] = 1
    core.create_namespaced_pod("default", manifest)
    wait_pod(core, "sleeper", container_running("main"))
    wait_pod(core, "stubborn", container_running("main"))
    wait_until(lambda: core.read_namespaced_pod_log("stubborn", "default"))  # SIGTERM is ignored from here on
    pids = {name: kubelet.container_pid("default", name, "main") for name in ("sleeper", "stubborn")}
    pod_dir = kubelet.pod_dir("default", "sleeper")
    assert all(pids.values()) and pod_dir.is_dir()
    for name in pids:
        core.delete_namespaced_pod(name, "default")
    wait_until(lambda: not os.path.exists(f"/proc/{pids['sleeper']}"), 5, "the sleeping process to end")
    wait_until(lambda: not os.path.exists(f"/proc/{pids['stubborn']}"), 5, "SIGKILL after the grace period")
    wait_until(lambda: not pod_dir.exists(), 5, "the pod's files to go")


def test_images_map_to_local_commands(tmp_path):
    images = {**default_images(), "example/greeter": Image((sys.executable, "-c"), ("print('default cmd')",))}
    with local_node(tmp_path, images=images) as n:
        core = n.core
        core.create_namespaced_pod("default", pod_manifest("mover", image="ghcr.io/x/cbt-mover:dev", args=["--help"]))
        core.create_namespaced_pod("default", pod_manifest("greeter", image="example/greeter:1"))
        core.create_namespaced_pod(
            "default", pod_manifest("greeter2", image="example/greeter:1", args=["print('args replace cmd')"])
        )
        core.create_namespaced_pod("default", pod_manifest("unknown", image="nowhere/nothing:1"))
        core.create_namespaced_pod("default", pod_manifest("noexec", ["no-such-binary-anywhere"]))
        assert wait_pod(core, "mover", FINISHED).status.phase == "Succeeded"
        assert core.read_namespaced_pod_log("mover", "default").startswith("usage: cbt-mover")
        wait_pod(core, "greeter", FINISHED)
        wait_pod(core, "greeter2", FINISHED)
        assert core.read_namespaced_pod_log("greeter", "default") == "default cmd\n"
        assert core.read_namespaced_pod_log("greeter2", "default") == "args replace cmd\n"
        pod = wait_pod(
            core,
            "unknown",
            lambda p: (
                p.status.container_statuses and p.status.container_statuses[0].state.waiting.reason == "ErrImagePull"
            ),
        )
        assert pod.status.phase == "Pending"
        t = terminated(wait_pod(core, "noexec", FINISHED))
        assert (t.exit_code, t.reason) == (128, "StartError") and "executable file not found" in t.message
        err = status_of(core.read_namespaced_pod_log, "unknown", "default")
        assert err.status == 400 and "waiting to start: ErrImagePull" in err.body
