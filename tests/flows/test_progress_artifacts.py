"""A volume's progress artifact (``reporting.progress``) through Prefect's local API: fed the mover's progress lines,
it shows bytes done of the total in human units, the rate, the time left and the mode, moves while the total of a
CBT stream is not known yet (by the position on the volume), and is updated at most once per interval."""

from __future__ import annotations

import os

import pytest

from reporting.progress import ProgressArtifact, Reading, describe

MiB = 1 << 20


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read_back(artifact_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterId

    with get_client(sync_client=True) as prefect:
        found = prefect.read_artifacts(artifact_filter=ArtifactFilter(id=ArtifactFilterId(any_=[artifact_id])))
    [artifact] = found
    return float(artifact.data), artifact.description


def test_a_backup_stream_moves_by_position_then_ends_with_bytes_rate_and_mode(harness):
    clock = Clock()
    progress = ProgressArtifact(
        "progress-test-stream", "backup of ns/data (run-1)", "planned cbt-delta: delta since b1", clock=clock
    )
    assert read_back(progress.artifact_id) == (0.0, "backup of ns/data (run-1): starting")

    clock.now += 4
    progress.on_line(
        f"progress done={16 * MiB} total=? position={256 * MiB} capacity={1024 * MiB} mode=incremental-cbt"
    )
    value, text = read_back(progress.artifact_id)
    assert value == 25.0, value
    assert text == (
        "backup of ns/data (run-1): 16.0 MiB read, at 25% of the 1.0 GiB volume (total not known yet), 4.0 MiB/s,"
        " 12.0 s left; mode incremental-cbt (planned cbt-delta: delta since b1)"
    ), text

    clock.now += 0.5  # within the interval: not sent
    progress.on_line(
        f"progress done={20 * MiB} total=? position={512 * MiB} capacity={1024 * MiB} mode=incremental-cbt"
    )
    assert read_back(progress.artifact_id)[0] == 25.0

    clock.now += 3.5
    progress.on_line(
        f"progress done={40 * MiB} total={40 * MiB} position={1024 * MiB} capacity={1024 * MiB} mode=incremental-cbt"
    )
    progress.finish()
    value, text = read_back(progress.artifact_id)
    assert value == 100.0 and text.startswith(
        "backup of ns/data (run-1): 40.0 MiB of 40.0 MiB, 5.0 MiB/s, done in 8.0 s;"
    )


def test_a_known_total_gives_the_time_left_and_old_lines_still_parse(harness):
    assert Reading.parse("progress done=5 total=?") == Reading(5, None)
    assert Reading.parse("cbt-mover: error: x") is None
    line = Reading.parse(f"progress done={MiB} total={4 * MiB}")
    assert describe("restore of ns/a", line, 2.0, "written, then read back") == (
        "restore of ns/a: 1.0 MiB of 4.0 MiB, 512.0 KiB/s, 6.0 s left; mode written, then read back"
    )
    clock = Clock()
    progress = ProgressArtifact("restore-progress-test-known", "restore of ns/a", clock=clock)
    clock.now += 2
    progress.on_line(f"progress done={MiB} total={4 * MiB}")
    assert read_back(progress.artifact_id) == (25.0, "restore of ns/a: 1.0 MiB of 4.0 MiB, 512.0 KiB/s, 6.0 s left")


def test_the_restore_instructions_name_the_restore_app_deployments_the_api_has(harness):
    """``reporting.report.restore_deployments`` finds ``restore-app`` deployments by their real names (none: the
    report leaves the Prefect form out)."""
    from prefect.client.orchestration import get_client

    from reporting.report import restore_deployments

    assert restore_deployments() == []
    with get_client(sync_client=True) as prefect:
        flow_id = prefect.create_flow_from_name("restore-app")
        made = prefect.create_deployment(flow_id=flow_id, name="restore-on-demand")
        try:
            assert restore_deployments() == ["restore-app/restore-on-demand"]
        finally:
            prefect.delete_deployment(made)


FEED_FROM_A_THREAD = """
import sys, threading
from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_ALLOW_EPHEMERAL_MODE, temporary_settings
from reporting.progress import ProgressArtifact
with temporary_settings({PREFECT_API_URL: sys.argv[1], PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False}):
    progress = ProgressArtifact("progress-test-thread", "backup of ns/data (run-3)", interval=0.0)
    line = "progress done=1048576 total=2097152 position=1048576 capacity=2097152"
    follower = threading.Thread(target=progress.on_line, args=(line,))
    follower.start()
    follower.join()
    print(progress.artifact_id)
"""


def test_lines_fed_from_another_thread_reach_the_api_of_the_task(harness):
    """The mover's lines come from a log follower's thread, which does not inherit the task's Prefect settings
    (a worker may hold its API in them, not in the environment): the update still goes to that API."""
    import subprocess
    import sys
    import uuid

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    proc = subprocess.run(
        [sys.executable, "-c", FEED_FROM_A_THREAD, harness], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "progress artifact update failed" not in proc.stderr, proc.stderr
    assert read_back(uuid.UUID(proc.stdout.split()[-1]))[0] == 50.0
