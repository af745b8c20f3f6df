"""Scaffolding shared by the scaling benchmarks (not a benchmark itself).

``history_bench.py``, ``scale_bench.py`` and ``extents_bench.py`` measure repository format version 1 against
version 2 side by side, in one run, through the CLI (``python -m movers``) on local ``file://`` repositories.
They share, on top of ``benchlib``: the code under test (a snapshot of ``movers/`` or the working tree), the
``Cli`` that creates repositories of either version and runs measured backups and restores, the goal verdict
table, and ``docs/scaling-benchmarks.md``, one page in which each script owns one section. Data helpers
(sizes, extents files, sha256 of images) are ``engine_bench``'s.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import benchlib
from benchlib import ROOT, MiB, Proc, last_json, log

DOCS = ROOT / "docs" / "scaling-benchmarks.md"
VERSIONS = (1, 2)
# The sections of DOCS, in page order: (name, script)
SECTIONS = (
    ("history", "history_bench.py"),
    ("consolidation", "history_bench.py --versions 2 --consolidate-every 7"),
    ("size", "scale_bench.py"),
    ("extents", "extents_bench.py"),
    ("hash", "hash_bench.py"),
    ("maintenance", "maintenance_bench.py"),
)

# The CLI has no option for a version 1 repository: the engine API creates one (RepoConfig(format_version=1)).
_INIT_V1 = (
    "import sys\n"
    "from movers.repo.config import RepoConfig\n"
    "from movers.repo.repository import Repository\n"
    "from movers.repo.store import open_store\n"
    "Repository.init(open_store(sys.argv[1]), RepoConfig(format_version=1))\n"
)


def versions_arg(text: str) -> tuple[int, ...]:
    """``--versions``: a comma-separated subset of ``VERSIONS``."""
    try:
        versions = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad version list {text!r} (e.g. 1,2)") from None
    if not versions or any(v not in VERSIONS for v in versions):
        raise argparse.ArgumentTypeError(f"versions must be among {','.join(map(str, VERSIONS))}")
    return versions


def add_common_args(parser: argparse.ArgumentParser, docs_section: str) -> None:
    """The options every scaling benchmark has: versions, scratch dir, code under test, docs."""
    parser.add_argument(
        "--versions", type=versions_arg, default=VERSIONS, help="repository format versions to compare (default 1,2)"
    )
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the scratch dir (default /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir")
    parser.add_argument("--live", action="store_true", help="run the working tree's movers/ instead of a snapshot")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help=f"write the report to the {docs_section!r} section of {DOCS.relative_to(ROOT)}",
    )


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` plus ``command``: how the script was run, for the docs."""
    args = parser.parse_args(argv)
    script = Path(sys.argv[0]).resolve()
    name = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script.name
    args.command = shlex.join([str(name), *(sys.argv[1:] if argv is None else argv)])
    return args


def in_order(versions: Sequence[int], step: int) -> list[int]:
    """``versions`` in alternating order by ``step``: neither version always runs first (warm caches, load)."""
    return list(versions) if step % 2 == 0 else list(reversed(versions))


class Cli:
    """Runs the code under test: ``cbt-mover`` commands with ``--json``, each a measured subprocess."""

    def __init__(self, runner: benchlib.Runner, python: list[str], env: dict[str, str], code: str) -> None:
        self.runner = runner
        self.python = python  # the interpreter command (with its options) that imports the code under test
        self.env = env
        self.code = code  # what the code under test is, for the report

    @classmethod
    def for_scratch(cls, scratch: Path, live: bool) -> Cli:
        """The CLI of a snapshot of ``movers/`` taken now (``benchlib.snapshot_code``; ``python -P``: neither
        the working directory nor the script's directory on ``sys.path``), or of the working tree (``live``).
        A ``PYTHONPATH`` of this process comes after the code under test."""
        after = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        if live:
            python, env, code = (
                [benchlib.python()],
                {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *after])},
                "the working tree (--live)",
            )
        else:
            src, code = benchlib.snapshot_code(scratch, ["movers"])
            python, env = [benchlib.python(), "-P"], {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *after])}
        return cls(benchlib.Runner(scratch / "logs", cwd=scratch, env=env), python, env, code)

    def run(self, args: list[str], label: str, *, cold: bool = False) -> tuple[Proc, dict]:
        """``cbt-mover ARGS --json`` to completion: the process and its JSON result. ``cold``: sync and drop the
        page cache first (when permitted: ``benchlib.Runner.drop_caches``)."""
        if cold:
            self.runner.drop_caches()
        p = self.runner.run([*self.python, "-m", "movers", *args, "--json"], label)
        return p, last_json(p.stdout)

    def init(self, repo: Path, version: int) -> str:
        """Create a repository of format ``version`` at ``repo``; return its URL. Version 2 (the default) by
        ``cbt-mover init``, version 1 by the engine API (the CLI does not offer it)."""
        url = f"file://{repo}"
        if version == 2:
            self.run(["init", "--insecure-no-encryption", "--repo", url], f"init v{version} {repo.name}")
        else:
            self.runner.run([*self.python, "-c", _INIT_V1, url], f"init v{version} {repo.name}")
        config = (repo / "config").read_text()
        if f'"format_version": {version}' not in config:
            raise benchlib.BenchError(f"{url} is not a version {version} repository: {config}")
        return url

    def backup(
        self,
        url: str,
        volume: str,
        device: Path,
        extents: Path,
        label: str,
        *,
        cold: bool = False,
        parent: str | None = None,
    ) -> tuple[Proc, dict]:
        """``backup --extents``: changes since backup ``parent`` (None: a volume's first backup)."""
        args = ["backup", "--repo", url, "--volume", volume, "--device", str(device), "--extents", str(extents)]
        return self.run([*args, *(["--parent", parent] if parent else [])], label, cold=cold)

    def restore(
        self, url: str, volume: str, target: Path, label: str, *, backup: str = "latest", cold: bool = False
    ) -> tuple[Proc, dict]:
        return self.run(
            ["restore", "--repo", url, "--volume", volume, "--backup", backup, "--device", str(target)],
            label,
            cold=cold,
        )

    def machine_info(self) -> dict[str, str]:
        """``benchlib.machine_info()`` plus the Python version the code under test runs on and ``code``."""
        out = subprocess.run(
            [*self.python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True
        )
        return {**benchlib.machine_info(), "python": out.stdout.strip() or platform.python_version(), "code": self.code}


# ---------------------------------------------------------------------------------------------
# Reports


def mib(n: float | None, digits: int = 1) -> str:
    return "–" if n is None else f"{n / MiB:,.{digits}f}"


def verdict(ok: bool | None) -> str:
    return "–" if ok is None else "**met**" if ok else "**NOT met**"


def goals_table(rows: Iterable[tuple[str, str, dict[int, tuple[str, bool | None]]]], versions: Sequence[int]) -> str:
    """Markdown table of goals: ``(goal, target, {version: (measured, met)})`` per row, one column per version."""
    head = "| goal | target | " + " | ".join(f"v{v} measured | v{v}" for v in versions) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(versions))]
    for goal, target, by_version in rows:
        cells = []
        for v in versions:
            measured, ok = by_version.get(v, ("–", None))
            cells += [measured, verdict(ok)]
        lines.append(f"| {goal} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_rows(info: dict[str, str], runner: benchlib.Runner) -> list[tuple[str, str]]:
    """The rows every section's machine table adds to ``benchlib.machine_table``."""
    drop = (
        "dropped before every measured run"
        if runner.can_drop
        else "NOT dropped (not permitted): every run warm, in the same order"
    )
    return [
        ("Python (cbt-mover)", info["python"]),
        ("cbt-mover code", f"commit {info['git']}, {info['code']}"),
        ("page cache", drop),
    ]


_PAGE_HEAD = """# Scaling benchmarks: repository format version 1 vs 2

Generated by `bench/history_bench.py`, `bench/scale_bench.py`, `bench/extents_bench.py`, `bench/maintenance_bench.py`
and `bench/hash_bench.py` with `--write-docs` (`make bench-scaling` runs them all); each script rewrites only its own
section: do not edit by hand, rerun it. They measure the goals of issue 12 (a repository whose cost follows the work:
no decay with history, no growth with size; hot paths as fast as the profile allows), the first four comparing format
version 1 with version 2, the last the content hashes of version 2, each in one run on the same data and machine,
through the CLI (`python -m movers`, local `file://` repositories in a scratch directory removed at the end). Every
measurement is a separate subprocess; wall time, CPU time (user + sys) and peak RSS come from `os.wait4`. On a
shared host expect run-to-run noise (compare the load averages of each section).
"""


def _marker(name: str, end: bool = False) -> str:
    return f"<!-- {'/' if end else ''}section:{name} -->"


def write_section(name: str, text: str, path: Path = DOCS) -> None:
    """Replace section ``name`` of the page at ``path`` by ``text`` (kept between markers), keeping the other
    sections as they are, in ``SECTIONS`` order."""
    sections: dict[str, str] = {}
    if path.exists():
        page = path.read_text(encoding="utf-8")
        for other, _script in SECTIONS:
            m = re.search(re.escape(_marker(other)) + r"\n(.*?)\n" + re.escape(_marker(other, True)), page, re.S)
            if m:
                sections[other] = m.group(1)
    sections[name] = text.strip("\n")
    parts = [_PAGE_HEAD]
    for other, script in SECTIONS:
        if other in sections:
            parts.append(f"{_marker(other)}\n{sections[other]}\n{_marker(other, True)}\n")
        else:
            parts.append(f"{_marker(other)}\n_Not run yet: `bench/{script} --write-docs`._\n{_marker(other, True)}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    log(f"wrote section {name!r} of {path}")
