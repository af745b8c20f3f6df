"""How the CLI shows progress (``--progress``): a bar on a terminal (a real pseudo-terminal), JSON lines for
machines, and the ``progress done=N total=N`` lines Prefect tasks parse everywhere else."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

import pytest

from movers.cli.progress import Rate
from tests.volumes import make_image

MiB = 1 << 20
CLI = [sys.executable, "-m", "movers"]
PLAIN = re.compile(r"progress done=\d+ total=(\d+|\?)")
# a backup's line goes on with how far along the volume it is (reporting/progress.py reads both)
BACKUP_PLAIN = re.compile(PLAIN.pattern + r" position=\d+ capacity=\d+ mode=\S+")


def env(**extra):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "COLUMNS", "NO_COLOR", "TERM"))}
    return {**base, **extra}


def run(*args, stdin=None, rc=0):
    proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, input=stdin, env=env(), timeout=120)
    assert proc.returncode == rc, proc.stderr
    return proc


def run_on_terminal(*args) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe): exit code, what the terminal showed, stdout."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*CLI, *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=follower,
            stdin=subprocess.DEVNULL,
            env=env(TERM="xterm-256color", COLUMNS="120"),
        )
        os.close(follower)
        follower = -1
        shown = bytearray()
        while True:  # read the terminal until the child closes it (EIO on Linux)
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, "no output from the CLI for 60 s"
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        out = proc.stdout.read().decode()
        proc.stdout.close()
        return proc.wait(timeout=60), shown.decode(errors="replace"), out
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 8 * MiB, seed=7)
    return path


@pytest.fixture
def repo(tmp_path):
    url = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", url)
    return url


def test_a_terminal_gets_a_bar_with_bytes_rate_and_eta(repo, image):
    code, shown, out = run_on_terminal("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan")
    assert code == 0, shown
    assert "progress done=" not in shown, "auto on a terminal: the bar, not the lines"
    assert "\x1b[" in shown, "a live display redraws with terminal control sequences"
    assert "backup" in shown and "8.0 MiB / 8.0 MiB" in shown and "ETA 0:00:00" in shown, shown
    assert re.search(r"(\d+\.\d (KiB|MiB|GiB)|\d+ B)/s", shown), shown
    assert out.startswith("backup ") and "\x1b[" not in out, "the result on stdout stays plain"


def test_off_a_terminal_the_lines_prefect_parses_are_unchanged(repo, image):
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan")
    lines = proc.stderr.splitlines()
    assert lines and all(BACKUP_PLAIN.fullmatch(line) for line in lines), proc.stderr
    assert lines[-1] == f"progress done={8 * MiB} total={8 * MiB} position={8 * MiB} capacity={8 * MiB} mode=full"
    restored = image.parent / "restored.img"
    proc = run(
        "restore", "--repo", repo, "--volume", "v", "--device", restored, "--verify-device", "--progress", "plain"
    )
    # writing, then reading back, on one scale of twice the capacity, as the Prefect restore task has always read
    assert proc.stderr.splitlines()[-1] == f"progress done={16 * MiB} total={16 * MiB}", proc.stderr
    assert run("verify", "--repo", repo, "--progress", "none").stderr == ""


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines()]


def test_json_lines_per_phase_and_a_final_event(repo, image, tmp_path):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", "--progress", "json")
    restored = tmp_path / "restored.img"
    proc = run(
        *("restore", "--repo", repo, "--volume", "v", "--device", restored, "--verify-device", "--json"),
        *("--progress", "json", "--progress-interval", "0"),
    )
    docs = events(proc.stderr)
    progress, end = docs[:-1], docs[-1]
    assert {d["event"] for d in progress} == {"progress"}
    for d in progress:
        assert set(d) == {"event", "phase", "unit", "done", "total", "rate_bps", "eta_s"}, d
        assert d["unit"] == "bytes" and d["total"] == 8 * MiB and 0 <= d["done"] <= d["total"]
        assert d["rate_bps"] is None or d["rate_bps"] >= 0
    phases = [d["phase"] for d in progress]
    assert phases == sorted(phases, key=["restore", "readback"].index) and set(phases) == {"restore", "readback"}
    lasts = [[d for d in progress if d["phase"] == p][-1] for p in ("restore", "readback")]
    assert all(d["done"] == 8 * MiB and d["eta_s"] == 0 for d in lasts), lasts
    assert end["event"] == "end" and end["ok"] is True and end["phase"] == "readback" and end["elapsed_s"] >= 0
    assert json.loads(proc.stdout)["readback"], "--json's result stays on stdout"
    verify = events(run("verify", "--repo", repo, "--progress", "json").stderr)
    assert verify[-2] == {
        "event": "progress",
        "phase": "verify",
        "unit": "backups",
        "done": 1,
        "total": 1,
        "rate_bps": None,
        "eta_s": 0.0,
    }


def test_a_failed_command_ends_its_json_progress_before_the_error_line(repo, image):
    extents = '{"offset": 0, "length": 4096}\n'
    args = ("backup", "--repo", repo, "--volume", "v", "--device", image, "--extents", "-", "--progress", "json")
    proc = run(*args, "--parent", "20260101T000000000000Z-000000", stdin=extents, rc=3)  # no such backup
    *lines, error = proc.stderr.splitlines()
    assert error.startswith("cbt-mover: error: ") and "Traceback" not in proc.stderr
    end = json.loads(lines[-1])
    assert end["event"] == "end" and end["ok"] is False and end["phase"] == "backup"


def test_rate_and_time_left_come_from_the_recent_window():
    rate = Rate(window=10)
    assert rate.per_second() is None and rate.eta(0, 100) is None
    for t, done in ((0, 0), (5, 50), (10, 100), (20, 1100)):
        rate.add(t, done)
    assert rate.per_second() == pytest.approx((1100 - 100) / 10), "samples older than the window are dropped"
    assert rate.eta(1100, 2100) == pytest.approx(10) and rate.eta(2100, 2100) == 0.0 and rate.eta(5, None) is None
