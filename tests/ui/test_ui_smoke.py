"""The Prefect UI shows what the flows report: a real ``prefect server start`` (with its UI, own temporary home,
free loopback port), a ``backup-app`` run sent to it (``tests/ui_backup.py``, a process of its own with
``PREFECT_API_URL``, as a worker sends runs), then its pages rendered by headless Chromium (Debian's
``chromium``, driven over the DevTools pipe: ``demo.headless``).

What a page must show is read from the server's API (the run's name, its logs, its artifacts' stored tables and
markdown) and from the flow's result (volumes, backup ids), so the test follows whatever the flows report.
Chromium missing is a failure naming the package, not a skip: make test installs it (.ci/deps).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import pytest

from demo.headless import Browser, chromium_path
from demo.pngstats import png_stats
from deploy.prefect_server import PrefectServer
from tests.ui_backup import NS

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    """The server, and its ``run`` and ``result``: a backup sent to it. The backup's process starts its cluster
    while the server starts (the first start migrates a new database: the longest part of the test)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from localcluster.kubelet.testing import wait_until

    chromium_path()  # fails at once, naming the package, before anything is started for nothing
    running = PrefectServer()
    try:
        running.start(wait=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "KUBECONFIG"))}
        env |= {"PREFECT_API_URL": running.api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        backup = subprocess.Popen(
            [sys.executable, "-m", "tests.ui_backup"], cwd=REPO_ROOT, env=env, stdout=PIPE, stderr=PIPE, text=True
        )
        try:
            running.wait_healthy()
            out, err = backup.communicate(timeout=300)
        finally:
            if backup.poll() is None:
                backup.kill()
                backup.communicate()
        assert backup.returncode == 0, (out[-3000:], err[-3000:])
        sent = json.loads(out.strip().splitlines()[-1])
        with _api(running) as prefect:
            (running.run,) = prefect.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[sent["flow_run_id"]]))
            )
        running.result = sent["result"]
        wait_until(lambda: _logs(running, running.run.id), 10, "the run's logs on the server")  # sent before exit
        yield running
    finally:
        running.stop()


def _api(server):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(server.api_url)


def _logs(server, flow_run_id) -> list:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with _api(server) as prefect:
        return prefect.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))


def _all_artifacts(server, flow_run_id) -> list:
    """The artifacts of the run and of its tasks."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    of_run = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
    with _api(server) as prefect:
        return prefect.read_artifacts(artifact_filter=of_run)


def _artifacts(server, flow_run_id) -> dict[str, list]:
    """The run's own artifacts (not its tasks' progress artifacts) by type: ``table``, ``markdown``."""
    by_type: dict[str, list] = {}
    for artifact in _all_artifacts(server, flow_run_id):
        if artifact.task_run_id is None:
            by_type.setdefault(artifact.type, []).append(artifact)
    return by_type


def _verbatim_lines(markdown: str) -> list[str]:
    """The lines of ``markdown`` a renderer shows as written: headings' text and code lines (indented or fenced)."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or (line.startswith("    ") and line.strip()):
            lines.append(line.strip())
        elif line.startswith("#"):
            lines.append(line.lstrip("#").replace("`", "").strip())
    return [line for line in lines if line]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.slow
def test_pages_render_the_run_its_logs_and_artifacts(server, tmp_path):
    """The run's page (name, flow, Logs tab, Artifacts tab listing them all), and every table and markdown
    artifact of the run on its own page: the summary table with each volume and backup id, every cell, and each
    markdown's headings and code lines (the restore instructions' commands)."""
    run, result = server.run, server.result
    volumes = [r["volume"] for r in result["volumes"]]
    backup_ids = [r["backup_id"] for r in result["volumes"]]
    assert volumes == [f"{NS}/data", f"{NS}/logs"], result
    artifacts = _artifacts(server, run.id)
    assert artifacts.get("table") and artifacts.get("markdown"), artifacts
    first_log = _logs(server, run.id)[0].message

    with Browser() as browser:
        # the run's page opens on its Logs tab
        browser.open(f"{server.url}/runs/flow-run/{run.id}", expect=(run.name, "backup-app", first_log))
        shots = [browser.screenshot(tmp_path / "run.png")]
        keys = {a.key for a in _all_artifacts(server, run.id)}
        assert len(keys) >= 4, keys  # table, restore instructions, a progress artifact per volume
        browser.click("Artifacts", expect=tuple(keys))

        for n, table in enumerate(artifacts["table"]):
            page = browser.open(f"{server.url}/artifacts/artifact/{table.id}", expect=(run.name,))
            cells = [str(v) for row in json.loads(table.data) for v in row.values() if v not in (None, "")]
            assert [c for c in cells if c not in page] == [], (table.key, cells, page)
            assert not table.description or table.description in page, (table.description, page)
            if n == 0:  # the summary
                assert [s for s in (*volumes, *backup_ids) if s not in page] == [], (table.key, page)
                shots.append(browser.screenshot(tmp_path / "table.png"))

        instructions = [a for a in artifacts["markdown"] if all(b in a.data for b in backup_ids)]
        assert instructions, [a.data for a in artifacts["markdown"]]  # the restore instructions name each backup
        for markdown in artifacts["markdown"]:
            page = browser.open(f"{server.url}/artifacts/artifact/{markdown.id}", expect=(run.name,))
            verbatim = _verbatim_lines(markdown.data)
            assert len(verbatim) >= 2, markdown.data
            assert [line for line in verbatim if _flat(line) not in _flat(page)] == [], (markdown.key, verbatim, page)

    for png in shots:
        stats = png_stats(png)
        assert (stats["width"], stats["height"]) == (1400, 1000), (png.name, stats)
        # the UI's frame alone (menu, an empty list) has ~300 colours; a page with a table or a graph many more
        assert stats["colours"] > 500 and stats["bytes"] > 40_000, (png.name, stats)
