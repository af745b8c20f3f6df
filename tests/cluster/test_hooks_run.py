"""Quiesce hooks run by exec in a demo-app pod on the local cluster: the pod log proves the freeze
window (no write between ``frozen`` and ``thawed``) and that post hooks run after the body, also
when it raises or a pre hook fails; failing, timed-out and pod-less hooks."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from demo.demo_app import pod_manifest as demo_pod
from localcluster.kubelet.testing import phase_in, wait_pod, wait_until
from movers.hooks.run import HookError, _exit_code, annotation_hooks, quiesced, run_hooks
from movers.policy.hooks import Hook, HookSet, hookset_from_annotations

NS = "hooks"
APP = ["python", "-m", "demo.demo_app"]
SEL = {"app": "demo"}
FREEZE = Hook(name="freeze", pod_selector=SEL, command=[*APP, "freeze"], timeout_s=10)
THAW = Hook(name="thaw", pod_selector=SEL, command=[*APP, "thaw"], timeout_s=10)


def py(name, code, **kw):
    return Hook(name=name, pod_selector=SEL, command=["python", "-c", code], **kw)


@pytest.fixture(scope="module")
def cluster(local_cluster):
    core = client.CoreV1Api(local_cluster.client)
    core.create_namespace({"metadata": {"name": NS}})
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Block",
        "resources": {"requests": {"storage": "16Mi"}},
        "storageClassName": "csi-hostpath-sc",
    }  # the demo app's class
    core.create_namespaced_persistent_volume_claim(NS, {"metadata": {"name": "data"}, "spec": spec})
    annotations = {
        "pre.hook.backup.velero.io/command": '["python", "-m", "demo.demo_app", "freeze"]',
        "pre.hook.backup.velero.io/timeout": "10s",
        "post.hook.backup.velero.io/command": "python -m demo.demo_app thaw",
        "post.hook.backup.velero.io/container": "app",
    }
    core.create_namespaced_pod(NS, demo_pod("app", {"data": "/dev/xvda"}, labels=SEL, annotations=annotations))
    wait_pod(core, "app", phase_in("Running"), namespace=NS, timeout=30)
    wait_until(lambda: core.read_namespaced_pod_log("app", NS).count("write seq=") >= 5, 30, "app writes")
    return local_cluster


class AppLog:
    """The demo app's log lines since this object was made: writes, freezes and thaws with times (ns)."""

    def __init__(self, core):
        self.core = core
        self.skip = len(self._lines())

    def _lines(self):
        return self.core.read_namespaced_pod_log("app", NS).splitlines()

    def events(self):
        out = []
        for line in self._lines()[self.skip :]:
            kind = line.split(" ", 1)[0]
            if kind in ("write", "frozen", "thawed"):
                out.append((kind, int(line.rsplit("t=", 1)[1])))
        return out

    def wait_writes_after_thaw(self):
        def ready():
            ev = self.events()
            kinds = [k for k, _ in ev]
            return ev if "thawed" in kinds and kinds[-1] == "write" else None

        return wait_until(ready, 10, "writes after the thaw")


def assert_no_write_while_frozen(events):
    frozen = [t for k, t in events if k == "frozen"]
    thawed = [t for k, t in events if k == "thawed"]
    assert len(frozen) == 1 and len(thawed) == 1 and frozen[0] < thawed[0], events
    writes = [t for k, t in events if k == "write"]
    assert not [t for t in writes if frozen[0] <= t <= thawed[0]], "the app wrote while frozen"
    assert any(t > thawed[0] for t in writes), "no write after the thaw"
    return frozen[0], thawed[0]


def test_freeze_window_has_no_writes(cluster):
    core = client.CoreV1Api(cluster.client)
    applog = AppLog(core)
    with quiesced(cluster.client, NS, HookSet([FREEZE], [THAW])) as q:
        body_start = time.time_ns()
        time.sleep(0.3)  # the app would write ~30 times here
        body_end = time.time_ns()
    frozen, thawed = assert_no_write_while_frozen(applog.wait_writes_after_thaw())
    assert frozen <= body_start and body_end <= thawed
    assert q.freeze_start * 1e9 <= frozen and thawed <= q.freeze_end * 1e9
    assert q.freeze_start <= q.frozen_at <= q.thaw_start <= q.freeze_end and 0.3 <= q.freeze_s < 10
    assert [(r.hook.name, r.pod, r.exit_code, r.ok) for r in q.pre_results + q.post_results] == [
        ("freeze", "app", 0, True),
        ("thaw", "app", 0, True),
    ]
    assert q.pre_results[0].stdout_tail.strip() == "frozen"


def test_post_runs_after_a_raising_body_and_the_body_error_wins(cluster):
    applog = AppLog(client.CoreV1Api(cluster.client))
    failing_post = py("post-fails", "import sys; sys.exit(3)")
    with pytest.raises(ValueError, match="snapshot failed") as err:
        with quiesced(cluster.client, NS, HookSet([FREEZE], [THAW, failing_post])):
            raised = time.time_ns()
            raise ValueError("snapshot failed")
    _, thawed = assert_no_write_while_frozen(applog.wait_writes_after_thaw())
    assert thawed > raised  # reverse order: post-fails ran first, failed, and the thaw still ran
    assert any("post hooks failed too" in note for note in err.value.__notes__)


def test_annotation_hooks_of_the_pod(cluster):
    core = client.CoreV1Api(cluster.client)
    pod = core.read_namespaced_pod("app", NS)
    hooks = hookset_from_annotations(pod.metadata.name, pod.metadata.annotations)
    assert annotation_hooks(cluster.client, NS, "app=demo") == hooks
    assert annotation_hooks(cluster.client, NS, "app=absent") == HookSet()
    applog = AppLog(core)
    with quiesced(cluster.client, NS, hooks) as q:
        time.sleep(0.1)
    assert_no_write_while_frozen(applog.wait_writes_after_thaw())
    assert [r.pod for r in q.pre_results + q.post_results] == ["app", "app"]


def test_failing_hook_fail_vs_continue(cluster):
    exit3 = py("exit3", "import sys; print('bad', file=sys.stderr); sys.exit(3)")
    marker = py("after", "print('ran')")
    with pytest.raises(HookError, match="exit3.*exit code 3: bad") as err:
        run_hooks(cluster.client, NS, [exit3, marker])
    assert [(r.hook.name, r.exit_code, r.ok) for r in err.value.results] == [("exit3", 3, False)]
    assert err.value.results[0].stderr_tail.strip() == "bad"

    results = run_hooks(cluster.client, NS, [Hook(**{**exit3.__dict__, "on_error": "continue"}), marker])
    assert [(r.hook.name, r.exit_code, r.ok) for r in results] == [("exit3", 3, False), ("after", 0, True)]
    assert results[1].stdout_tail.strip() == "ran"


def test_pre_hook_failure_midway_still_thaws(cluster):
    applog = AppLog(client.CoreV1Api(cluster.client))
    body_ran = []
    with pytest.raises(HookError, match="exit3") as err:
        with quiesced(cluster.client, NS, HookSet([FREEZE, py("exit3", "raise SystemExit(3)")], [THAW])):
            body_ran.append(True)
    assert not body_ran
    assert assert_no_write_while_frozen(applog.wait_writes_after_thaw())
    assert [r.hook.name for r in err.value.results] == ["freeze", "exit3"]
    assert [(r.hook.name, r.ok) for r in err.value.post_results] == [("thaw", True)]


def test_post_failure_is_raised_after_all_post_hooks(cluster):
    applog = AppLog(client.CoreV1Api(cluster.client))
    with pytest.raises(HookError, match="post-fails") as err:
        with quiesced(cluster.client, NS, HookSet([FREEZE], [THAW, py("post-fails", "raise SystemExit(3)")])):
            pass
    assert [(r.hook.name, r.ok) for r in err.value.results] == [("post-fails", False), ("thaw", True)]
    assert_no_write_while_frozen(applog.wait_writes_after_thaw())
    ok = HookSet([FREEZE], [THAW, py("post-warns", "raise SystemExit(3)", on_error="continue")])
    with quiesced(cluster.client, NS, ok) as q:
        pass
    assert [(r.hook.name, r.ok) for r in q.post_results] == [("post-warns", False), ("thaw", True)]


def test_timeout_fails_within_the_timeout(cluster):
    sleeper = py("sleeper", "import time; time.sleep(60)", timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(HookError, match="sleeper.*timed out after 1.5s") as err:
        run_hooks(cluster.client, NS, [sleeper])
    assert time.monotonic() - started < 4
    (res,) = err.value.results
    assert res.exit_code is None and not res.ok and 1.5 <= res.duration_s < 3

    # closing the stream at the deadline ends the command in the pod: it never gets to write
    late = py("late", "import time; time.sleep(2); open('/run/demo/late', 'w').close()", timeout_s=0.5)
    with pytest.raises(HookError, match="timed out"):
        run_hooks(cluster.client, NS, [late])
    time.sleep(2.5)
    control = py("control", "open('/run/demo/control', 'w').close()")
    check = py("check", "import os; print(*(os.path.exists(f'/run/demo/{n}') for n in ('control', 'late')))")
    assert run_hooks(cluster.client, NS, [control, check])[1].stdout_tail.strip() == "True False"


def test_selector_matching_no_pod(cluster):
    nobody = Hook(name="nobody", pod_selector={"app": "absent"}, command=["true"])
    with pytest.raises(HookError, match="no Running pod matches pods app=absent in namespace hooks"):
        run_hooks(cluster.client, NS, [nobody])
    results = run_hooks(cluster.client, NS, [Hook(**{**nobody.__dict__, "on_error": "continue"})])
    assert [(r.pod, r.exit_code, r.ok) for r in results] == [(None, None, False)]
    gone = Hook(name="gone", pod_name="no-such-pod", command=["true"])
    with pytest.raises(HookError, match="no Running pod matches pod no-such-pod"):
        run_hooks(cluster.client, NS, [gone])


def test_exit_code_from_the_error_channel():
    assert _exit_code('{"status": "Success"}') == (0, "")
    failure = (
        '{"status": "Failure", "reason": "NonZeroExitCode", "details": {"causes": '
        '[{"reason": "ExitCode", "message": "3"}]}}'
    )
    assert _exit_code(failure) == (3, "")
    code, error = _exit_code("")
    assert code is None and "no exit status" in error
    code, error = _exit_code('{"status": "Failure", "reason": "InternalError", "message": "no such file"}')
    assert code is None and "InternalError" in error and "no such file" in error
    assert _exit_code("not json")[0] is None


def test_command_that_cannot_start_or_unknown_container(cluster):
    missing = Hook(name="missing", pod_selector=SEL, command=["no-such-program-xyz"])
    with pytest.raises(HookError, match="missing") as err:
        run_hooks(cluster.client, NS, [missing])
    assert not err.value.results[0].ok and err.value.results[0].exit_code != 0
    wrong = Hook(name="wrong-container", pod_selector=SEL, container="nope", command=["true"])
    with pytest.raises(HookError, match=r"wrong-container.*exec refused \(400\): container nope is not valid"):
        run_hooks(cluster.client, NS, [wrong])
