"""``make screenshots`` (``python -m demo.screenshots --out docs/ui``): PNG screenshots of the Prefect UI's
main pages after the whole demo (``demo.demo``: two backups, a restore, maintenance) was sent to a fresh
Prefect server, for docs/ui.md.

It starts a real ``prefect server start`` with its UI (``deploy.prefect_server``: free loopback port,
temporary home), runs ``python -m demo.demo`` with ``PREFECT_API_URL`` pointing at it (what a user does
with ``make ui`` and ``make demo``), finds the runs and artifacts through the server's API and renders each page
with headless Chromium (``demo.headless``). A page that never shows what it should (the run's name, the
artifact's first cell or heading), or a screenshot with hardly any colours (blank, a spinner), is an error.
With ``--server URL`` it photographs the runs already on that server instead (no new server, no demo).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demo.headless import Browser
from demo.pngstats import png_stats
from deploy.prefect_server import PrefectServer

REPO_ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1400
MIN_COLOURS = 500  # the UI's frame alone (menu, an empty list) has ~300
BUSY = ("Waiting for logs",)  # what the UI shows before it knows (a run page without logs says so after a while)


@dataclasses.dataclass(frozen=True)
class Shot:
    """One screenshot: ``file`` of ``path`` (under the UI's URL), once the page shows every string of ``expect``;
    ``tab``: a tab to click first (``expect`` is then what the tab shows); ``height``: the window's. The page
    must not show any of ``BUSY``."""

    file: str
    path: str
    expect: tuple[str, ...]
    tab: str | None = None
    height: int = 1000


def _client(api_url: str):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(api_url)


def _runs(prefect, flow: str) -> list:
    """The runs of ``flow``, oldest first."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    found = prefect.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])), sort=FlowRunSort.START_TIME_ASC
    )
    if not found:
        raise RuntimeError(f"no run of {flow!r} on the server")
    return found


def _artifacts(prefect, run) -> list:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    return prefect.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])))


def _first_log(prefect, run) -> tuple[str, ...]:
    """The run's first log message (its Logs tab shows it), or nothing when it has no logs."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    logs = prefect.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])), limit=1)
    return (logs[0].message.splitlines()[0],) if logs else ()


def _pick(artifacts: list, kind: str, key_has: str = "", of_task: bool = False):
    """The first artifact of type ``kind`` (of the flow run itself, or with ``of_task`` of its tasks) whose key
    contains ``key_has``, else the first of that type."""
    mine = [a for a in artifacts if a.type == kind and (a.task_run_id is not None) == of_task]
    if not mine:
        raise RuntimeError(f"no {kind} artifact among {[a.key for a in artifacts]}")
    return next((a for a in mine if key_has in (a.key or "")), mine[0])


def _progress(artifacts: list, key_has: str):
    """A volume's progress artifact: of a task, of type ``progress``, else of any type with "progress" in its key."""
    of_tasks = [a for a in artifacts if a.task_run_id is not None]
    found = [a for a in of_tasks if a.type == "progress"] or [a for a in of_tasks if "progress" in (a.key or "")]
    if not found:
        raise RuntimeError(f"no progress artifact among {[a.key for a in artifacts]}")
    return next((a for a in found if key_has in (a.key or "")), found[0])


def _first_text(artifact) -> str:
    """A string the artifact's page shows verbatim: a table's first cell, a markdown's first heading or line."""
    if artifact.type == "table":
        rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
        first = rows[0] if isinstance(rows, list) else {k: v[0] for k, v in rows.items()}
        return str(next(iter(first.values())))
    if artifact.type == "markdown":
        line = next(line for line in artifact.data.splitlines() if line.strip())
        return re.sub(r"[#`*]", "", line).strip()  # as rendered: without heading, code and emphasis marks
    return artifact.key


def plan(api_url: str) -> list[Shot]:
    """The screenshots of the demo's runs on the server at ``api_url``."""
    with _client(api_url) as prefect:
        backups, restores, (maint, *_) = (_runs(prefect, f) for f in ("backup-app", "restore-app", "maintain-repo"))
        restore = next(r for r in restores if r.state_type.value == "COMPLETED")
        refused = next(r for r in restores if r.state_type.value == "FAILED")  # the demo's refused restore
        backup = backups[-1]  # the CBT incremental: the one the demo restores
        of_backup, of_first = _artifacts(prefect, backup), _artifacts(prefect, backups[0])
        summary = _pick(of_backup, "table")
        instructions = _pick(of_backup, "markdown", "restore")
        progress = _progress(of_first, "data")
        of_restore, of_maint = _artifacts(prefect, restore), _artifacts(prefect, maint)
        restored = _pick(of_restore, "table")
        verify = _pick(of_maint, "markdown", "verify")
        failure = _pick(_artifacts(prefect, refused), "markdown", "failure")
        backup_log, restore_log = _first_log(prefect, backup), _first_log(prefect, restore)

    def art(artifact) -> str:
        return f"/artifacts/artifact/{artifact.id}"

    return [
        Shot("runs.png", "/runs", (backup.name, restore.name, maint.name), height=1150),
        Shot("backup-run.png", f"/runs/flow-run/{backup.id}", (backup.name, "Logs", *backup_log), height=1300),
        Shot("backup-artifacts.png", f"/runs/flow-run/{backup.id}", (progress.key,), tab="Artifacts", height=1300),
        Shot("backup-summary.png", art(summary), (backup.name, _first_text(summary))),
        Shot("restore-instructions.png", art(instructions), (_first_text(instructions),)),
        Shot("backup-progress.png", art(progress), (progress.key,)),
        Shot("restore-run.png", f"/runs/flow-run/{restore.id}", (restore.name, "Logs", *restore_log), height=1300),
        Shot("restore-summary.png", art(restored), (restore.name, _first_text(restored))),
        Shot("restore-refused-run.png", f"/runs/flow-run/{refused.id}", (refused.name, "Logs", "failed in step")),
        Shot("restore-refused-report.png", art(failure), (_first_text(failure),)),
        Shot("maintenance-report.png", art(verify), (_first_text(verify),)),
        Shot("events.png", "/events", ("cbt-mover",)),
    ]


def take(ui_url: str, shots: list[Shot], out: Path, say: Callable[[str], Any] = print) -> list[Path]:
    """Render every shot into ``out``; ``RuntimeError`` naming a screenshot that looks blank."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for shot in shots:
        with Browser(width=WIDTH, height=shot.height) as browser:
            if shot.tab:
                browser.open(ui_url + shot.path, expect=(shot.tab,), timeout=60)
                browser.click(shot.tab, expect=shot.expect, timeout=60, absent=BUSY)
            else:
                browser.open(ui_url + shot.path, expect=shot.expect, timeout=60, absent=BUSY)
            path = browser.screenshot(out / shot.file)
        stats = png_stats(path)
        if stats["colours"] < MIN_COLOURS:
            raise RuntimeError(f"{path} looks blank ({stats['colours']} colours): {ui_url + shot.path}")
        say(f"screenshots: {path} ({stats['bytes'] // 1024} KiB) {ui_url + shot.path}")
        written.append(path)
    return written


def run_demo(api_url: str) -> None:
    """``python -m demo.demo`` sent to ``api_url``, its output on this process's; ``RuntimeError`` if it
    does not end ``demo: ok``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "KUBECONFIG"))}
    env |= {"PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run([sys.executable, "-m", "demo.demo"], cwd=REPO_ROOT, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the demo failed (exit status {done.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.screenshots", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "ui", help="directory of the PNGs")
    parser.add_argument("--server", help="photograph the runs on this Prefect UI (e.g. http://127.0.0.1:4200)")
    args = parser.parse_args(argv)
    try:
        if args.server:
            url = args.server.rstrip("/")
            take(url, plan(f"{url}/api"), args.out)
            return 0
        with PrefectServer() as server:
            print(f"screenshots: Prefect server {server.url} (temporary); sending the demo to it", flush=True)
            run_demo(server.api_url)
            take(server.url, plan(server.api_url), args.out)
    except Exception as err:  # noqa: BLE001  (a command's contract: one line saying why)
        print(f"screenshots: FAILED {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
