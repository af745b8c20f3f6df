"""``make demo``'s job, as a fresh machine runs it: its own local cluster and a throwaway Prefect API
(no PREFECT_API_URL), ending with ``demo: ok`` and exit status 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _loop_backing_files() -> list[str]:
    out = subprocess.run(["losetup", "--list", "--noheadings", "--output", "BACK-FILE"], capture_output=True, text=True)
    return out.stdout.split()


def test_demo_runs_the_whole_story_and_says_ok(tmp_path):
    """...and leaves nothing behind: its cluster, repository and Prefect home are temporary (TMPDIR points at
    a directory of the test's own, which must be empty again) and no loop device stays attached."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "KUBECONFIG"))}
    env["TMPDIR"] = str(tmp)
    out = subprocess.run(
        [sys.executable, "-m", "demo.demo"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and lines[-1] == "demo: ok", (out.stdout[-3000:], out.stderr[-3000:])
    table = "\n".join(lines)
    assert table.count("incremental-cbt / cbt-delta") == 2, table
    assert table.count("full / cbt-allocated") == 2, table
    assert "verify full: ok" in table, table
    assert "demo: repository s3://cbt-mover-demo/demo: encrypted, its key file generated into Secret" in table
    assert sorted(p.name for p in tmp.iterdir()) == [], "the demo left files behind"
    assert [f for f in _loop_backing_files() if f.startswith(str(tmp))] == [], "the demo left loop devices attached"


def test_the_demo_logs_at_info_to_a_ui_and_keeps_its_prefect_state_where_make_ui_does():
    """Sent to a UI (PREFECT_API_URL), the runs log at INFO (their Logs tabs) while the terminal shows warnings,
    and the Prefect state (failed runs' results included) goes to .prefect/ of the checkout, not ~/.prefect; without
    one, to a temporary Prefect home the demo removes."""
    import shutil

    from demo.demo import prefect_environment

    to_ui = {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    assert prefect_environment(to_ui) is None
    assert (to_ui["PREFECT_LOGGING_LEVEL"], to_ui["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"]) == ("INFO", "WARNING")
    assert to_ui["PREFECT_HOME"] == str(REPO_ROOT / ".prefect")
    alone: dict[str, str] = {}
    home = prefect_environment(alone)
    try:
        assert (
            home and alone["PREFECT_HOME"] == home and Path(home).is_dir() and alone["PREFECT_LOGGING_LEVEL"] == "INFO"
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
