"""The demo application on its own: it writes, freeze stops every write until thaw, records verify."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

APP = [sys.executable, "-m", "demo.demo_app"]


@pytest.fixture
def app(tmp_path):
    devices = []
    for i in range(2):
        path = tmp_path / f"dev{i}.img"
        path.write_bytes(bytes(1 << 20))
        devices.append(str(path))
    env = {**os.environ, "DEMO_APP_CONTROL": str(tmp_path / "control.sock")}
    proc = subprocess.Popen(
        [*APP, "run", "--device", devices[0], "--device", devices[1], "--interval", "0.002"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    seen = threading.Condition()

    def pump():
        for line in proc.stdout:
            with seen:
                lines.append(line.strip())
                seen.notify_all()

    threading.Thread(target=pump, daemon=True).start()

    def wait_writes(n):
        with seen:
            assert seen.wait_for(lambda: sum(1 for x in lines if x.startswith("write ")) >= n, timeout=30)

    def control(command):
        out = subprocess.run([*APP, command], capture_output=True, text=True, env=env, timeout=30)
        return out.returncode, out.stdout.strip()

    try:
        yield devices, lines, wait_writes, control
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_no_write_while_frozen_and_records_verify(app):
    devices, lines, wait_writes, control = app
    wait_writes(20)
    assert control("freeze") == (0, "frozen")
    frozen_writes = int(re.search(r'"writes": (\d+)', control("status")[1]).group(1))
    threading.Event().wait(0.3)  # the frozen window under test: nothing may be written during it
    assert f'"writes": {frozen_writes}' in control("status")[1]
    assert control("thaw") == (0, "thawed")
    wait_writes(frozen_writes + 20)
    frozen_t = int(next(x for x in lines if x.startswith("frozen")).split("t=")[1])
    thawed_t = int(next(x for x in lines if x.startswith("thawed")).split("t=")[1])
    write_times = [int(x.rsplit("t=", 1)[1]) for x in lines if x.startswith("write ")]
    assert not [t for t in write_times if frozen_t <= t <= thawed_t]
    assert any(t > thawed_t for t in write_times) and any(t < frozen_t for t in write_times)
    for dev in devices:
        out = subprocess.run([*APP, "verify", "--device", dev], capture_output=True, text=True)
        assert out.returncode == 0 and '"damaged": 0' in out.stdout


def test_verify_detects_a_torn_record(tmp_path):
    import random

    from demo.demo_app import make_record

    dev = tmp_path / "d.img"
    rec = bytearray(make_record(1, 0, random.Random(1)))
    rec[100] ^= 0xFF
    dev.write_bytes(bytes(4096) + bytes(rec))
    out = subprocess.run([*APP, "verify", "--device", str(dev)], capture_output=True, text=True)
    assert out.returncode == 1 and '"damaged": 1' in out.stdout and "offset 4096" in out.stderr


def test_control_without_writer_is_a_clear_error(tmp_path):
    env = {**os.environ, "DEMO_APP_CONTROL": str(tmp_path / "none.sock")}
    out = subprocess.run([*APP, "freeze", "--timeout", "1"], capture_output=True, text=True, env=env)
    assert out.returncode == 2 and "cannot reach the writer" in out.stderr


def test_file_mode_creates_its_file_and_its_records_verify(tmp_path):
    """``--file``: the app on a filesystem (a Filesystem-mode PVC) creates the file and writes records into it."""
    target = tmp_path / "data" / "records.dat"
    target.parent.mkdir()
    env = {**os.environ, "DEMO_APP_CONTROL": str(tmp_path / "control.sock")}
    argv = [*APP, "run", "--file", str(target), "--file-size", str(1 << 20), "--interval", "0.002"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        writes = 0
        for line in proc.stdout:
            writes += line.startswith("write ")
            if writes >= 10:
                break
        assert writes >= 10
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert target.stat().st_size == 1 << 20
    out = subprocess.run([*APP, "verify", "--device", str(target)], capture_output=True, text=True)
    assert out.returncode == 0 and '"damaged": 0' in out.stdout
    assert '"records": 0' not in out.stdout


def test_run_needs_a_device_or_a_file():
    out = subprocess.run([*APP, "run"], capture_output=True, text=True)
    assert out.returncode == 2 and "run needs --device or --file" in out.stderr
