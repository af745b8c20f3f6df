"""A real Prefect cancellation of a running ``backup-app`` flow: the flow is served by a Prefect
runner in its own process, a run is started from the deployment and cancelled through the API while
the app is frozen. The runner kills the run's process and calls the flow's ``on_cancellation`` hook,
which must thaw the app and delete everything labelled with the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.kubelet.testing import wait_until
from tests.flowapp import HOOKS, SEL, any_run_objects, app_states, backup_params, deploy_app

REPO_ROOT = Path(__file__).resolve().parents[2]
NS = "cancelme"


@pytest.fixture(scope="module")
def api_url(prefect_api):
    return prefect_api


def _serve(params: dict, env: dict, log: Path) -> subprocess.Popen:
    code = (
        "import json, sys\nfrom flows.backup import backup_app\n"
        "backup_app.serve(name='cancel-test', parameters=json.loads(sys.argv[1]),"
        " print_starting_message=False)"
    )
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(params)],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_cancelled_run_thaws_the_app_and_cleans_up(local_cluster, api_url, monkeypatch, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    core = client.CoreV1Api(local_cluster.client)
    app = deploy_app(local_cluster, monkeypatch.setenv, NS, "flow-cancel")
    release = tmp_path / "release"  # the slow pre-hook waits for this file (created at the end, always)
    slow = {
        "name": "slow-flush",
        "pod_selector": SEL,
        "container": "app",
        "timeout": 300,
        "command": ["python", "-c", f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.1)"],
    }
    params = backup_params(local_cluster, app["repo"], NS, hooks={"pre": [*HOOKS["pre"], slow], "post": HOOKS["post"]})
    env = {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "PYTHONPATH": str(REPO_ROOT),
        **local_cluster.s3.env,
    }
    runner = _serve(params, env, tmp_path / "runner.log")
    try:
        with get_client(sync_client=True) as prefect:
            deployment = wait_until(lambda: _deployment(prefect), 60, "served deployment")
            run = prefect.create_flow_run_from_deployment(deployment.id)
            wait_until(lambda: app_states(core, NS)[-1:] == ["frozen"], 90, "app frozen by the run")
            assert prefect.read_flow_run(run.id).state.is_running()
            prefect.set_flow_run_state(run.id, Cancelling(), force=True)
            final = wait_until(lambda: _final(prefect, run.id), 90, "run cancelled")
        assert final.is_cancelled(), final
        # the run's process thaws on SIGTERM (its finally), the runner's hook thaws again (idempotent)
        wait_until(lambda: app_states(core, NS)[-1:] == ["thawed"], 60, "app thawed")
        wait_until(lambda: any_run_objects(local_cluster.client, NS) == {}, 60, "run objects deleted")
        # the runner called the flow's on_cancellation hook (it says so in a failed event), not only the
        # flow's own finally (which SIGTERM reaches; a SIGKILLed worker would leave it to the hook)
        wait_until(lambda: _hook_event(run.id), 30, "the on_cancellation hook's event")
    finally:
        release.touch()
        runner.terminate()
        try:
            runner.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(runner.pid, 9)
            runner.wait()
        print((tmp_path / "runner.log").read_text()[-6000:])  # shown when the test fails
    log = (tmp_path / "runner.log").read_text()
    assert "error was encountered while running hook" not in log, log[-3000:]


def _hook_event(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    from flows.backup import run_id_for

    with get_client(sync_client=True) as prefect:
        page = prefect.read_events(
            EventFilter(
                event=EventNameFilter(name=["cbt-mover.backup.failed"]),
                resource=EventResourceFilter(id=[f"cbt-mover.app.{NS}.{NS}"]),
            ),
            limit=50,
        )
    return [
        e
        for e in page.events
        if e.payload.get("error") == "flow run cancelled" and e.resource.get("cbt-mover.run") == run_id_for(flow_run_id)
    ]


def _deployment(prefect):
    try:
        return prefect.read_deployment_by_name("backup-app/cancel-test")
    except Exception:  # noqa: BLE001  (not registered yet)
        return None


def _final(prefect, run_id):
    state = prefect.read_flow_run(run_id).state
    return state if state is not None and state.is_final() else None
