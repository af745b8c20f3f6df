"""Scaffolding shared by the benchmark scripts in ``bench/`` (not a benchmark itself).

Both ``engine_bench.py`` and ``cbt_bench.py`` import it as ``benchlib`` (they put their own directory on
``sys.path`` first, so it works under ``python -P`` too). It holds what the two scripts do the same way:
logging to stderr, measuring subprocesses, reading their JSON output, copying the code under test into the
scratch directory, describing the machine, and the ``main()`` wrapper that owns the scratch directory and the
exit status. Nothing here knows what a benchmark measures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

T0 = time.monotonic()


def log(msg: str) -> None:
    """Print ``msg`` to stderr, prefixed with the seconds since this module was imported."""
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A benchmark step failed; ``run_main`` logs it and exits 1."""


# ---------------------------------------------------------------------------------------------
# Running and measuring subprocesses


@dataclass
class Proc:
    """A finished subprocess: exit code, wall and CPU (user + sys) seconds, peak RSS in bytes, decoded output; ``user``:
    the user part of ``cpu``."""

    cmd: list[str]
    rc: int
    wall: float
    cpu: float
    maxrss: int  # bytes
    stdout: str
    stderr: str
    user: float = 0.0


class Runner:
    """Runs commands one at a time, each measured with ``os.wait4`` and logged to ``logdir``.

    Run number ``n`` writes its stdout and stderr to ``logdir/NN-LABEL.out`` / ``.err`` (runs of
    non-alphanumerics in the label become one ``-``). Commands run in ``cwd`` (default: ``logdir``'s parent)
    with stdin from ``/dev/null`` and the environment ``env`` (default: this process's).
    """

    def __init__(self, logdir: Path, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.logdir = logdir
        self.cwd = logdir.parent if cwd is None else cwd
        self.env = env
        self.n = 0
        self.can_drop: bool | None = None  # unknown until drop_caches() tried

    def drop_caches(self) -> bool:
        """sync and drop the page cache; remembers whether that is possible here."""
        os.sync()
        if self.can_drop is False:
            return False
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            self.can_drop = True
        except OSError:
            self.can_drop = False
        return self.can_drop

    def run(self, cmd: list[str], label: str, env: dict | None = None, check: bool = True) -> Proc:
        """Run ``cmd`` to completion (``env`` replaces the runner's environment for this run).

        Raises ``BenchError`` with the output's last lines when ``check`` and it exits non-zero; an
        exception while waiting (e.g. KeyboardInterrupt) kills the child first.
        """
        self.n += 1
        base = self.logdir / f"{self.n:02d}-{re.sub(r'[^A-Za-z0-9]+', '-', label)}"
        with open(f"{base}.out", "wb+") as out, open(f"{base}.err", "wb+") as err:
            started = time.monotonic()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=self.env if env is None else env,
                cwd=self.cwd,
            )
            try:
                _pid, status, usage = os.wait4(proc.pid, 0)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            wall = time.monotonic() - started
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            result = Proc(
                cmd,
                proc.returncode,
                wall,
                usage.ru_utime + usage.ru_stime,
                usage.ru_maxrss * KiB,
                out.read().decode(errors="replace"),
                err.read().decode(errors="replace"),
                usage.ru_utime,
            )
        if check and result.rc != 0:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-8:])
            raise BenchError(f"{label}: {shlex.join(cmd)} exited {result.rc}:\n{tail}")
        return result


def last_json(text: str, pred: Callable[[dict], bool] = lambda d: True) -> dict:
    """The last line of ``text`` that is a JSON object satisfying ``pred``; ``BenchError`` if there is none."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and pred(doc):
                    return doc
    raise BenchError(f"no JSON result in output: {text[-300:]!r}")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far (Linux), 0.0 if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


# ---------------------------------------------------------------------------------------------
# The code under test


def python() -> str:
    """The project's ``.venv`` interpreter if there is one, else the one running this script."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _warn_uncompiled_dependencies() -> None:
    """Say so when the interpreter's dependencies have no bytecode (a venv made before the Makefile compiled it):
    each measured command then compiles its imports from source, which a mover pod (the image) does not."""
    probe = "import importlib.util as u, os, pydantic as p; print(os.path.exists(u.cache_from_source(p.__file__)))"
    out = subprocess.run([python(), "-c", probe], capture_output=True, text=True).stdout.strip()
    if out == "False":
        log(
            "warning: the venv's packages are not compiled to bytecode: every command compiles its imports first"
            " (start-up slower than in the image); rebuild the venv (rm .venv/.installed; make .venv/.installed)"
        )


def snapshot_code(scratch: Path, paths: Sequence[str]) -> tuple[Path, str]:
    """Copy ``paths`` (directories or files, relative to the repository root) into ``scratch/src``.

    Others edit the working tree while a benchmark runs; every phase must run the same code, so it is
    copied once, at the start, and the subprocesses run the copy (``PYTHONPATH=src``, ``python -P``).
    Returns ``(src, description)``: the description names the copied directories and lists the
    uncommitted changes (``git status``) under their top-level directories, for the report.
    """
    src = scratch / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for path in paths:
        if (ROOT / path).is_dir():
            shutil.copytree(ROOT / path, src / path, ignore=ignore)
        else:
            (src / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, src / path)
    # compiled as the image's pip install compiles the project: with PYTHONDONTWRITEBYTECODE set, nothing compiled
    # at run time is kept, and every measured command would compile its imports from source first
    subprocess.run([python(), "-m", "compileall", "-q", str(src)], check=True)
    _warn_uncompiled_dependencies()
    watched = list(dict.fromkeys(Path(p).parts[0] for p in paths))
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", *watched], capture_output=True, text=True
    ).stdout.splitlines()
    dirty = [line[3:] for line in dirty if line.strip()]
    desc = f"snapshot of {' and '.join(f'{p}/' for p in paths if (ROOT / p).is_dir())} at the start of the run"
    if dirty:
        desc += f" (uncommitted changes in {', '.join(dirty[:6])}{' ...' if len(dirty) > 6 else ''})"
    return src, desc


# ---------------------------------------------------------------------------------------------
# Reports


def loadavg() -> str:
    """``"1min / 5min / 15min"`` load averages, or ``"unknown"``."""
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine_info() -> dict[str, str]:
    """What every report says about the run: keys date, cpu, cores, ram, os, kernel, git, load_start.

    Each script adds its own (interpreter and tool versions, ``code``) before ``machine_table``.
    """
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, IndexError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    os_name = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
                break
    commit = (
        subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "ram": ram,
        "os": os_name,
        "kernel": f"{platform.system()} {platform.release()}",
        "git": commit,
        "load_start": loadavg(),
    }


def machine_table(info: dict[str, str], rows: Iterable[tuple[str, str]]) -> str:
    """The markdown "Machine" table of ``machine_info()``: date, CPU, cores, RAM, OS / kernel, then ``rows``
    (``(name, value)``), then the load average at the start (``info``) and now."""
    lines = [
        "| | |",
        "|---|---|",
        f"| date | {info['date']} |",
        f"| CPU | {info['cpu']} |",
        f"| cores | {info['cores']} |",
        f"| RAM | {info['ram']} |",
        f"| OS / kernel | {info['os']} / {info['kernel']} |",
    ]
    lines += [f"| {name} | {value} |" for name, value in rows]
    lines.append(f"| load average (1 / 5 / 15 min) | start {info['load_start']}, end {loadavg()} |")
    return "\n".join(lines)


def x_ratio(v: float | None) -> str:
    """``"1.23x"``, or ``"–"`` for None."""
    return "–" if v is None else f"{v:.2f}x"


def publish(body: str, docs: Path | None, docs_text: Callable[[], str]) -> None:
    """Print the report ``body`` to stdout; when ``docs`` is set, also write ``docs_text()`` to it."""
    print(body)
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(docs_text(), encoding="utf-8")
        log(f"wrote {docs}")


def marked(name: str, text: str) -> str:
    """``text`` between the markers of section ``name`` (HTML comments: invisible in rendered markdown), so
    ``write_marked_section`` can later replace just that part of a page."""
    return f"<!-- section:{name} -->\n{text.strip(chr(10))}\n<!-- /section:{name} -->"


def write_marked_section(path: Path, name: str, text: str) -> None:
    """Replace section ``name`` (``marked``) of the page at ``path`` by ``text``, leaving the rest of the page as
    it is; a page without that section gets it appended at the end (a missing page: the section alone)."""
    page = path.read_text(encoding="utf-8") if path.exists() else ""
    section = marked(name, text)
    pattern = re.compile(re.escape(f"<!-- section:{name} -->") + r".*?" + re.escape(f"<!-- /section:{name} -->"), re.S)
    if pattern.search(page):
        page = pattern.sub(lambda _m: section, page, count=1)
    else:
        page = (page.rstrip("\n") + "\n\n" if page else "") + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    log(f"wrote section {name!r} of {path}")


# ---------------------------------------------------------------------------------------------
# main()


def run_main(args: argparse.Namespace, bench: Callable[[Path], int]) -> int:
    """Run ``bench(scratch)`` in a fresh scratch directory and return the exit status.

    ``args.workdir`` (created if missing; None: the system temp dir) is the parent of the scratch
    directory ``cbt-bench-*``, which has an empty ``logs/`` for the ``Runner``. SIGTERM exits 143.
    Status: what ``bench`` returns; 1 after a ``BenchError`` (logged), 130 after Ctrl-C. The scratch
    directory is removed in every outcome unless ``args.keep``.
    """
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="cbt-bench-", dir=args.workdir))
    (scratch / "logs").mkdir()
    rc = 1
    try:
        rc = bench(scratch)
    except BenchError as err:
        log(f"benchmark failed: {err}")
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    except SystemExit as exc:
        log(f"terminated (exit {exc.code})")
        raise
    finally:
        if args.keep:
            log(f"kept scratch dir {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        log(f"done in {time.monotonic() - T0:.1f} s")
    return rc
