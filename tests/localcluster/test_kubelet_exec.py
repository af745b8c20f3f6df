"""pods/exec over the websocket channel protocol (``kubernetes.stream``) and pods/log streaming,
through the real ``kubernetes`` client against the emulator with the local kubelet."""

from __future__ import annotations

import json
import os

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

from localcluster.kubelet import DEVICE_MAP_ENV, namespaces_available
from localcluster.kubelet.testing import container_running, local_node, phase_in, pod_manifest, wait_pod, wait_until

ISOLATIONS = [
    pytest.param("namespace", marks=pytest.mark.skipif(not namespaces_available(), reason="no mount namespaces here")),
    "rewrite",
]


@pytest.fixture
def node(tmp_path):
    with local_node(tmp_path, backoff=(0.05, 0.4), grace_cap=2.0) as n:
        yield n


@pytest.fixture
def running(node):
    return start_app(node)


def start_app(node):
    """A running pod ``app`` (one container ``main`` with an env var, a working directory and an emptyDir)."""
    manifest = pod_manifest(
        "app",
        ["sleep", "60"],
        env=[{"name": "COLOR", "value": "teal"}],
        workingDir="/srv/app",
        volumeMounts=[{"name": "scratch", "mountPath": "/var/lib/app-data"}],
    )
    manifest["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    node.core.create_namespaced_pod("default", manifest)
    wait_pod(node.core, "app", container_running("main"))
    return node


def run(core, command, name="app", **kwargs):
    """(stdout, stderr, exit code) of an exec."""
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        name,
        "default",
        command=command,
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
        _preload_content=False,
        **kwargs,
    )
    try:
        resp.run_forever(timeout=15)
        return resp.read_stdout(), resp.read_stderr(), resp.returncode
    finally:
        resp.close()


def exec_error(core, command, name="app", **kwargs) -> ApiException:
    with pytest.raises(ApiException) as info:
        stream(
            core.connect_get_namespaced_pod_exec,
            name,
            "default",
            command=command,
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
            **kwargs,
        )
    return info.value


def test_exec_exit_codes_stdout_and_stderr(running):
    core = running.core
    assert run(core, ["sh", "-c", "echo out; echo err >&2"]) == ("out\n", "err\n", 0)
    assert run(core, ["sh", "-c", "echo partial; exit 3"]) == ("partial\n", "", 3)
    assert run(core, ["python", "-c", "import os; os.kill(os.getpid(), 9)"])[2] == 137
    # the preloading form returns stdout and stderr together
    text = stream(
        core.connect_get_namespaced_pod_exec,
        "app",
        "default",
        command=["sh", "-c", "echo one; echo two"],
        stderr=True,
        stdout=True,
    )
    assert text == "one\ntwo\n"
    big = run(core, ["python", "-c", "print('x' * 300000)"])[0]
    assert big == "x" * 300000 + "\n"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_exec_runs_in_the_container_context(tmp_path, isolation):
    with local_node(tmp_path, isolation=isolation) as n:
        core = start_app(n).core
        script = "echo $COLOR $HOSTNAME; pwd; echo hi > /var/lib/app-data/f; cat /var/lib/app-data/f"
        out, _, code = run(core, ["sh", "-c", script])
        if isolation == "namespace":  # the mounts are the container's only
            assert (out, code) == ("teal app\n/srv/app\nhi\n", 0)
            assert not os.path.exists("/var/lib/app-data") and not os.path.exists("/srv/app")
        else:  # the paths are rewritten to real ones, in the map the container has
            mapping = json.loads(run(core, ["sh", "-c", f"echo ${DEVICE_MAP_ENV}"])[0])
            assert (out, code) == (f"teal app\n{mapping['/srv/app']}\nhi\n", 0)
            assert open(os.path.join(mapping["/var/lib/app-data"], "f")).read() == "hi\n"


def test_exec_stdin(running):
    resp = stream(
        running.core.connect_get_namespaced_pod_exec,
        "app",
        "default",
        command=["sh", "-c", "tr a-z A-Z"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    resp.write_stdin("hello\n")
    resp.write_stdin("stdin\n")
    resp.close_channel(0)  # v5.channel.k8s.io: the command sees the end of its input
    resp.run_forever(timeout=15)
    assert (resp.read_stdout(), resp.returncode) == ("HELLO\nSTDIN\n", 0)


def test_exec_errors(running):
    core = running.core
    # a command that cannot start: the kubelet's InternalError (the client's returncode cannot parse it)
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "app",
        "default",
        command=["no-such-command-here"],
        stderr=True,
        stdout=True,
        _preload_content=False,
    )
    resp.run_forever(timeout=15)
    error = json.loads(resp.read_channel(3))
    assert error["reason"] == "InternalError" and "executable file not found" in error["message"]

    err = exec_error(core, ["true"], container="nope")
    assert "400" in err.reason and "container nope is not valid for pod app" in err.reason
    err = exec_error(core, ["true"], name="missing")
    assert "404" in err.reason
    core.create_namespaced_pod("default", pod_manifest("done", ["true"]))
    wait_pod(core, "done", phase_in("Succeeded"))
    err = exec_error(core, ["true"], name="done")
    assert "400" in err.reason and "cannot exec into a container in a completed pod" in err.reason

    two = pod_manifest("two", ["sleep", "60"])
    two["spec"]["containers"].append({"name": "quick", "image": "busybox", "command": ["true"]})
    two["spec"]["restartPolicy"] = "Never"
    core.create_namespaced_pod("default", two)

    def quick_done(pod):
        return any(s.name == "quick" and s.state.terminated for s in pod.status.container_statuses or [])

    wait_pod(core, "two", lambda p: quick_done(p) and container_running("main")(p))
    err = exec_error(core, ["true"], name="two", container="quick")
    assert "400" in err.reason and 'container not found (\\"quick\\")' in err.reason
    err = exec_error(core, ["true"], name="two")
    assert "400" in err.reason and "a container name must be specified" in err.reason
    assert run(core, ["true"], name="two", container="main")[2] == 0


def test_exec_timeout_kills_the_command(tmp_path):
    with local_node(tmp_path, exec_timeout=0.5) as n:
        n.core.create_namespaced_pod("default", pod_manifest("app", ["sleep", "60"]))
        wait_pod(n.core, "app", container_running("main"))
        out, err, code = run(n.core, ["sh", "-c", "echo started; sleep 30"])
    assert (out, code) == ("started\n", 137) and "timed out" in err


def test_exec_processes_end_with_the_pod(running):
    core = running.core
    command = ["sh", "-c", "echo $$; exec sleep 60"]
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "app",
        "default",
        command=command,
        stderr=True,
        stdout=True,
        _preload_content=False,
    )
    pid = int(wait_until(lambda: (resp.update(timeout=1), resp.peek_stdout())[1], 10, "the exec to start"))
    assert os.path.exists(f"/proc/{pid}")
    core.delete_namespaced_pod("app", "default")
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 10, "the exec'd process to end")
    resp.run_forever(timeout=10)
    assert not resp.is_open()


def test_logs_follow_and_errors(node):
    core = node.core
    script = "import sys, time\nfor i in range(5):\n    print('tick', i, flush=True)\n    time.sleep(0.05)\nsys.exit(0)"
    core.create_namespaced_pod("default", pod_manifest("ticker", ["python", "-c", script]))
    wait_pod(
        core,
        "ticker",
        lambda p: (
            p.status.container_statuses and p.status.container_statuses[0].state.running or phase_in("Succeeded")(p)
        ),
    )
    lines = list(watch.Watch().stream(core.read_namespaced_pod_log, "ticker", "default"))
    assert lines == [f"tick {i}" for i in range(5)]  # follows until the container ends
    followed = core.read_namespaced_pod_log("ticker", "default", follow=True, tail_lines=2)
    assert followed == "tick 3\ntick 4\n"

    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod_log("ticker", "default", container="other")
    assert info.value.status == 400 and "container other is not valid for pod ticker" in info.value.body
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod_log("ticker", "default", previous=True)
    assert info.value.status == 400 and "previous terminated container" in info.value.body
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod_log("ghost", "default")
    assert info.value.status == 404
