"""``.ci/deps``, the one list of the Debian packages ``make demo`` and ``make test`` need (the Makefile's
``deps-demo`` / ``deps-test`` steps): on a machine where they are missing and cannot be installed (here: a search
path without them and without apt-get, ``CBT_DEPS_PATH``), ``make`` stops at once with one line naming them; with
everything there it says nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FONTS = Path("/usr/share/fonts/truetype/dejavu")


def _make(target: str, search: Path) -> subprocess.CompletedProcess:
    """``make TARGET`` as a user runs it, also when the suite itself runs under ``make test`` (no MAKELEVEL)."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    env = {**inherited, "CBT_DEPS_PATH": str(search), "PY": sys.executable}
    return subprocess.run(
        ["make", "-s", "--no-print-directory", target], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_make_test_names_the_missing_packages_in_one_line_and_stops_at_once(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    started = time.monotonic()
    out = _make("deps-test", bare)
    assert time.monotonic() - started < 30
    assert out.returncode != 0 and out.stdout == "", out
    first, *rest = out.stderr.splitlines()
    expected = "e2fsprogs xfsprogs ntfs-3g fuse3 chromium"
    assert first.startswith(f"make test needs the Debian packages {expected}"), first
    assert first.endswith(
        f": run as root: apt-get install -y {expected}" + ("" if FONTS.exists() else " fonts-dejavu-core")
    )
    assert ("(not root)" if os.geteuid() else "(no apt-get here)") in first, first
    assert all(line.startswith("make: ***") for line in rest), rest  # make's own note of the failed step


def test_nothing_is_said_when_every_package_is_there(tmp_path):
    if not FONTS.exists():
        pytest.skip("fonts-dejavu-core is not installed here")
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("mkfs.ext4", "mkfs.xfs", "mkntfs", "ntfs-3g", "fusermount3", "chromium"):
        (tools / name).write_text("#!/bin/sh\n")
        (tools / name).chmod(0o755)
    out = _make("deps-test", tools)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    assert _make("deps-demo", tmp_path / "nothing").returncode == 0, "the demo needs none of the test's packages"
