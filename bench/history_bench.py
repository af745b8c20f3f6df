#!/usr/bin/env python3
"""History benchmark: does a forever-incremental chain decay? Format version 1 vs 2 (a benchmark, not a test).

Run it directly::

    .venv/bin/python bench/history_bench.py [--size 1G] [--incrementals 90] [--every 30] [--write-docs]
                                            [--versions 1,2] [--seed N] [--workdir DIR] [--keep] [--live]

The "History" goal of issue 12, measured through the CLI for a version 1 and a version 2 repository side by
side, on the same data in the same run:

1. A ``--size`` (default 1 GiB) volume image of seeded random data; a full backup into each repository with
   ``--extents`` listing its allocated ranges (all of it); a restore of that full backup.
2. ``--incrementals`` N (default 90) rounds: pwrite seeded random bytes over 1 % of the 4 KiB blocks, chosen
   anew each round (scattered: a database's day), then an incremental into each repository with ``--extents``
   listing exactly the changed blocks (adjacent ones coalesced). The two versions alternate which goes first.
3. At every ``--every``-th incremental (default 30) and after the last one: a restore of the latest backup.

Every backup and restore is a ``cbt-mover ... --json`` subprocess (wall, CPU and peak RSS from ``os.wait4``);
the page cache is dropped (when root) before the full backups, incrementals #1, every ``--every``-th and #N,
and every restore; the other incrementals run warm (they are not reported one by one, but their uploaded bytes
count). Every restore is checked bit-exact (sha256 of the restored image against the image at that point).

It prints a markdown table and the goal verdicts: incremental #N <= 1.5x the time and peak RSS of #1; the
restore of the latest <= 1.25x the time and the fetched bytes (the restore JSON's ``fetched_bytes``) of the
full's restore; bytes uploaded over the incrementals (all objects: packs, maps, index, manifests; the JSON's
``stored_bytes``) <= 1.5x the changed bytes. ``--write-docs`` writes the "history" section of
``docs/scaling-benchmarks.md``. For a quick run: ``--size 256M --incrementals 10 --every 5``. With
``--consolidate-every N``, ``cbt-mover consolidate`` (maintenance, issue 23) runs after every N-th incremental; what it
fetches and uploads is reported apart from the backups' uploads, and with them; ``--write-docs`` then writes the
"consolidation" section.

The scratch directory is removed in every outcome unless ``--keep``. Exit status: 0 when every step ran and
every restore matched (goal misses are reported, not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
import scalelib  # noqa: E402
from benchlib import GiB, MiB, Proc, log, x_ratio  # noqa: E402
from engine_bench import coalesce, parse_size, sha256_file, write_extents  # noqa: E402
from scalelib import Cli, mib  # noqa: E402

BLOCK = 4096
VOLUME = "history-vol"
GOAL_INCR_X = 1.5  # incremental #N / #1, time and peak RSS
GOAL_RESTORE_X = 1.25  # restore latest / restore full, time and fetched bytes
GOAL_UPLOAD_X = 1.5  # bytes uploaded over the incrementals / changed bytes
# Issue 12's "Why": what version 1 measured before (time, memory; restore time, fetched bytes)
ISSUE_V1 = {30: (1.70, 1.49, 2.37, 1.51), 90: (3.34, 2.56, 3.36, 2.52)}


@dataclass
class Run:
    """One measured backup or restore of one version."""

    proc: Proc
    result: dict


@dataclass
class Chain:
    """Everything one version's repository went through."""

    version: int
    url: str
    full: Run | None = None
    incrementals: dict[int, Run] = field(default_factory=dict)  # all of them, by number (1..N)
    restores: dict[int, Run] = field(default_factory=dict)  # by the incremental they restore (0: the full)
    consolidations: dict[int, Run] = field(default_factory=dict)  # maintenance after the incremental of that number


@dataclass
class Bench:
    args: argparse.Namespace
    scratch: Path
    cli: Cli
    chains: dict[int, Chain] = field(default_factory=dict)
    cold: set[int] = field(default_factory=set)  # incrementals run with a dropped page cache
    failures: list[str] = field(default_factory=list)
    image_s: float = 0.0

    @property
    def image(self) -> Path:
        return self.scratch / "volume.img"

    def checkpoints(self) -> list[int]:
        """The incrementals reported one by one (and after which the latest backup is restored, but #1)."""
        n, every = self.args.incrementals, self.args.every
        return sorted({1, n, *range(every, n + 1, every)} if every else {1, n})


# ---------------------------------------------------------------------------------------------
# Data


def build_image(path: Path, size: int, seed: int) -> None:
    """``size`` bytes of seeded random data (every block allocated)."""
    rng = random.Random(f"{seed}-image")
    with open(path, "wb") as f:
        for _ in range(size // (8 * MiB)):
            f.write(rng.randbytes(8 * MiB))
        f.write(rng.randbytes(size % (8 * MiB)))


def mutate(path: Path, size: int, seed: int, round_no: int, fraction: float) -> list[tuple[int, int]]:
    """Pwrite seeded random bytes over ``fraction`` of the 4 KiB blocks (chosen anew for ``round_no``); return
    the changed ranges, adjacent blocks coalesced."""
    rng = random.Random(f"{seed}-round-{round_no}")
    nblocks = size // BLOCK
    blocks = sorted(rng.sample(range(nblocks), max(1, int(nblocks * fraction))))
    data = memoryview(rng.randbytes(len(blocks) * BLOCK))
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        for n, blk in enumerate(blocks):
            os.pwrite(fd, data[n * BLOCK : (n + 1) * BLOCK], blk * BLOCK)
    finally:
        os.close(fd)
    return coalesce((blk * BLOCK, BLOCK) for blk in blocks)


# ---------------------------------------------------------------------------------------------
# The benchmark


def restore(b: Bench, chain: Chain, point: int, expect: str) -> None:
    """Restore ``chain``'s latest backup (made after incremental ``point``; 0: the full) and check it."""
    target = b.scratch / f"restore-v{chain.version}.img"
    p, res = b.cli.restore(chain.url, VOLUME, target, f"restore v{chain.version} after #{point}", cold=True)
    ok = sha256_file(target) == expect
    target.unlink()
    if not ok:
        b.failures.append(f"v{chain.version}: restore after incremental #{point} differs from the image (sha256)")
    chain.restores[point] = Run(p, res)
    log(
        f"v{chain.version} restore after #{point}: {p.wall:.2f} s, fetched {mib(res['fetched_bytes'])} MiB,"
        f" RSS {mib(p.maxrss, 0)} MiB, sha256 {'OK' if ok else 'MISMATCH'}"
    )


def consolidate(b: Bench, chain: Chain, point: int) -> None:
    """Maintenance after incremental #``point``: ``cbt-mover consolidate`` of the volume's latest backup."""
    p, res = b.cli.run(["consolidate", "--repo", chain.url, "--volume", VOLUME], f"consolidate v{chain.version}")
    chain.consolidations[point] = Run(p, res)
    (one,) = res["backups"]
    log(
        f"v{chain.version} consolidation after #{point}: {p.wall:.2f} s, rewrote {mib(one['rewritten_bytes'])} MiB"
        f" (fetched {mib(res['fetched_bytes'])}, uploaded {mib(res['stored_bytes'])} MiB); a restore fetches"
        f" {mib(one['fetch_after'])} MiB (was {mib(one['fetch_before'])})"
    )


def run_bench(b: Bench) -> None:
    args, s = b.args, b.scratch
    log(f"building a {mib(args.size, 0)} MiB image of random data")
    build_image(b.image, args.size, args.seed)
    for v in args.versions:
        b.chains[v] = Chain(v, b.cli.init(s / f"repo-v{v}", v))

    full_extents = write_extents(s / "allocated.jsonl", [(0, args.size)])
    for v in scalelib.in_order(args.versions, 0):
        chain = b.chains[v]
        p, res = b.cli.backup(chain.url, VOLUME, b.image, full_extents, f"full v{v}", cold=True)
        chain.full = Run(p, res)
        log(f"v{v} full: {p.wall:.2f} s, uploaded {mib(res['stored_bytes'])} MiB, RSS {mib(p.maxrss, 0)} MiB")
    expect = sha256_file(b.image)
    for v in scalelib.in_order(args.versions, 0):
        restore(b, b.chains[v], 0, expect)

    checkpoints = set(b.checkpoints())
    for i in range(1, args.incrementals + 1):
        changed = mutate(b.image, args.size, args.seed, i, args.fraction)
        extents = write_extents(s / "changed.jsonl", changed)
        cold = i in checkpoints
        if cold:
            b.cold.add(i)
        for v in scalelib.in_order(args.versions, i):
            chain = b.chains[v]
            parent = (chain.incrementals[i - 1] if i > 1 else chain.full).result["backup_id"]
            label = f"incremental {i} v{v}"
            p, res = b.cli.backup(chain.url, VOLUME, b.image, extents, label, cold=cold, parent=parent)
            if res["mode"] != "incremental-cbt":
                b.failures.append(f"v{v}: incremental #{i} ran as {res['mode']}")
            chain.incrementals[i] = Run(p, res)
            if args.consolidate_every and i % args.consolidate_every == 0:
                consolidate(b, chain, i)
            if cold or i % 10 == 0:
                log(
                    f"v{v} incremental #{i}: {p.wall:.2f} s, uploaded {mib(res['stored_bytes'])} MiB"
                    f" (metadata {mib(res['metadata_bytes'])}), RSS {mib(p.maxrss, 0)} MiB"
                )
        if cold and (i != 1 or i == args.incrementals):
            expect = sha256_file(b.image)
            for v in scalelib.in_order(args.versions, i):
                restore(b, b.chains[v], i, expect)


# ---------------------------------------------------------------------------------------------
# Report


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def results_table(b: Bench) -> str:
    head = (
        "| step | version | wall s | engine s | CPU s | peak RSS MiB | uploaded MiB | of which metadata MiB |"
        " fetched MiB |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def row(step: str, v: int, run: Run, restore: bool = False) -> None:
        p, r = run.proc, run.result
        up = ("–", "–") if restore else (mib(r["stored_bytes"]), mib(r["metadata_bytes"], 2))
        fetched = mib(r["fetched_bytes"]) if restore else "–"
        lines.append(
            f"| {step} | v{v} | {p.wall:.2f} | {r['duration_s']:.2f} | {p.cpu:.2f} | {mib(p.maxrss, 0)} | {up[0]} |"
            f" {up[1]} | {fetched} |"
        )

    versions = list(b.chains)
    for v in versions:
        row("full backup", v, b.chains[v].full)
    for v in versions:
        row("restore of the full", v, b.chains[v].restores[0], restore=True)
    for i in b.checkpoints():
        for v in versions:
            if i in b.chains[v].incrementals:
                row(f"incremental #{i}", v, b.chains[v].incrementals[i])
        for v in versions:
            if i != 1 and i in b.chains[v].restores:
                row(f"restore after #{i}", v, b.chains[v].restores[i], restore=True)
    return "\n".join(lines)


def totals(chain: Chain) -> tuple[int, int, int]:
    """``(uploaded, of which metadata, changed)`` bytes over all incrementals of ``chain``."""
    runs = chain.incrementals.values()
    return (
        sum(r.result["stored_bytes"] for r in runs),
        sum(r.result["metadata_bytes"] for r in runs),
        sum(r.result["changed_bytes"] for r in runs),
    )


def goals(b: Bench) -> list[tuple[str, str, dict[int, tuple[str, bool | None]]]]:
    n = b.args.incrementals
    rows: dict[str, dict[int, tuple[str, bool | None]]] = {}
    names = {
        "time": f"incremental #{n} / #1, wall time",
        "rss": f"incremental #{n} / #1, peak RSS",
        "rtime": f"restore of the latest (after #{n}) / of the full, wall time",
        "rbytes": f"restore of the latest (after #{n}) / of the full, fetched bytes",
        "upload": f"uploaded over the {n} incrementals / changed bytes",
    }
    for v, c in b.chains.items():
        first, last = c.incrementals[1].proc, c.incrementals[n].proc
        full_r, last_r = c.restores[0], c.restores[n]
        uploaded, _meta, changed = totals(c)
        measured = {
            "time": (_ratio(last.wall, first.wall), GOAL_INCR_X),
            "rss": (_ratio(last.maxrss, first.maxrss), GOAL_INCR_X),
            "rtime": (_ratio(last_r.proc.wall, full_r.proc.wall), GOAL_RESTORE_X),
            "rbytes": (_ratio(last_r.result["fetched_bytes"], full_r.result["fetched_bytes"]), GOAL_RESTORE_X),
            "upload": (_ratio(uploaded, changed), GOAL_UPLOAD_X),
        }
        for key, (ratio, goal) in measured.items():
            rows.setdefault(key, {})[v] = (x_ratio(ratio), None if ratio is None else ratio <= goal)
    targets = {"time": GOAL_INCR_X, "rss": GOAL_INCR_X, "rtime": GOAL_RESTORE_X, "rbytes": GOAL_RESTORE_X}
    targets["upload"] = GOAL_UPLOAD_X
    return [(names[k], f"<= {targets[k]}x", rows[k]) for k in names]


def ratio_series(b: Bench) -> str:
    """#i / #1 and restore-after-#i / restore-of-the-full at every checkpoint, per version."""
    head = (
        "| after incremental | version | wall time #i / #1 | engine time #i / #1 | peak RSS #i / #1 |"
        " restore wall time / the full's | restore engine time / the full's | restore fetched / the full's |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for i in b.checkpoints():
        for v, c in b.chains.items():
            if i not in c.restores:
                continue
            first, cur = c.incrementals[1], c.incrementals[i]
            r0, ri = c.restores[0], c.restores[i]
            cells = [
                _ratio(cur.proc.wall, first.proc.wall),
                _ratio(cur.result["duration_s"], first.result["duration_s"]),
                _ratio(cur.proc.maxrss, first.proc.maxrss),
                _ratio(ri.proc.wall, r0.proc.wall),
                _ratio(ri.result["duration_s"], r0.result["duration_s"]),
                _ratio(ri.result["fetched_bytes"], r0.result["fetched_bytes"]),
            ]
            lines.append(f"| #{i} | v{v} | " + " | ".join(map(x_ratio, cells)) + " |")
    return "\n".join(lines)


def report(b: Bench) -> str:
    n = b.args.incrementals
    lines = [results_table(b), ""]
    lines.append(
        "*uploaded*: the backup JSON's `stored_bytes` (packs, map pages and directories, index objects, manifest),"
        " *of which metadata*: its `metadata_bytes` (all but packs); *fetched*: the restore JSON's `fetched_bytes`"
        " (pack bytes read, chunks coalesced into ranged reads). *wall*, *CPU* and *peak RSS*: the whole CLI process"
        " (interpreter start and imports included: the goals are judged on it); *engine*: the JSON's `duration_s`"
        " (the backup or restore itself)."
    )
    lines += ["", "### Ratios at each checkpoint (vs incremental #1 and vs the restore of the full)", ""]
    lines.append(ratio_series(b))
    lines += ["", "### Totals over the incrementals", ""]
    for v, c in b.chains.items():
        uploaded, meta, changed = totals(c)
        lines.append(
            f"* v{v}: uploaded {mib(uploaded)} MiB (metadata {mib(meta)} MiB) for {mib(changed)} MiB changed:"
            f" **{x_ratio(_ratio(uploaded, changed))}**; the full uploaded {mib(c.full.result['stored_bytes'])} MiB"
            f" of {mib(b.args.size, 0)} MiB"
        )
        if c.consolidations:
            runs = c.consolidations.values()
            up = sum(r.result["stored_bytes"] for r in runs)
            lines.append(
                f"  * maintenance: {len(runs)} consolidation(s) (after every {b.args.consolidate_every}th incremental)"
                f" rewrote {mib(sum(r.result['rewritten_bytes'] for r in runs))} MiB, fetching"
                f" {mib(sum(r.result['fetched_bytes'] for r in runs))} MiB and uploading {mib(up)} MiB in"
                f" {sum(r.proc.wall for r in runs):.1f} s; backups and maintenance together uploaded"
                f" {x_ratio(_ratio(uploaded + up, changed))} the changed bytes"
            )
    lines += ["", "### Goals", "", scalelib.goals_table(goals(b), list(b.chains)), ""]
    if n in ISSUE_V1 and b.args.size == GiB and b.args.fraction == 0.01:
        t, m, rt, rb = ISSUE_V1[n]
        lines.append(
            f"* Issue 12 measured version 1 before (same workload): #{n}/#1 {t}x time, {m}x memory; restore of the"
            f" latest {rt}x the time and {rb}x the fetched bytes of the full's restore."
        )
    if b.failures:
        lines += [f"* FAILURE: {f}" for f in b.failures]
    return "\n".join(lines).rstrip() + "\n"


def docs_text(b: Bench, body: str, info: dict[str, str]) -> str:
    args = b.args
    blocks = args.size // BLOCK
    quick = (
        "" if (args.size, args.incrementals) == (GiB, 90) else " (a reduced run: the goals are set for 1 GiB and 90)"
    )
    repos = " and ".join(f"a version {v}" for v in args.versions) + " repository"
    if len(args.versions) > 1:
        repos += " in turn (alternating which goes first)"
    consolidation = (
        f" Maintenance (`cbt-mover consolidate` of the latest backup, as `maintain-repo` runs it) after every"
        f" {args.consolidate_every}th incremental; its uploads are reported apart from the backups'."
        if args.consolidate_every
        else ""
    )
    title = "History with consolidation" if args.consolidate_every else "History"
    return f"""## {title}: a chain of {args.incrementals} incrementals{quick}

`{args.command}`. A {mib(args.size, 0)} MiB image of seeded random data (seed {args.seed}); a full backup with
`--extents` of the whole image, then {args.incrementals} rounds of pwrites of random bytes over
{args.fraction:.0%} of the {blocks:,} 4 KiB blocks ({int(blocks * args.fraction):,} blocks, chosen anew each
round), each followed by an incremental with `--extents` listing exactly the changed blocks, into
{repos}.{consolidation} The page cache is dropped before the
full backups, the incrementals listed below and every restore; the other incrementals run warm and count only
in the totals. Each restore is of the latest backup at that point, to a new image file, checked by sha256.
Goals (issue 12): incremental #{args.incrementals} <= {GOAL_INCR_X}x the time and memory of #1; the restore
of the latest <= {GOAL_RESTORE_X}x the time and fetched bytes of the full's restore; bytes uploaded over the
chain <= {GOAL_UPLOAD_X}x the changed bytes.

### Machine

{benchlib.machine_table(info, scalelib.machine_rows(info, b.cli.runner))}

### Results

{body}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=GiB, help="image size (default 1G)")
    parser.add_argument("--incrementals", type=int, default=90, help="incrementals in the chain (default 90)")
    parser.add_argument("--every", type=int, default=30, help="report (and restore) every N-th incremental")
    parser.add_argument(
        "--consolidate-every",
        type=int,
        default=0,
        metavar="N",
        help="run `cbt-mover consolidate` (maintenance) after every N-th incremental (default 0: never)",
    )
    parser.add_argument("--fraction", type=float, default=0.01, help="blocks changed per round (default 0.01)")
    scalelib.add_common_args(parser, "history")
    args = scalelib.parse_args(parser, argv)
    if args.incrementals < 1 or args.every < 0 or not 0 < args.fraction <= 1:
        parser.error("--incrementals must be >= 1, --every >= 0, --fraction in (0, 1]")
    return benchlib.run_main(args, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> int:
    cli = Cli.for_scratch(scratch, args.live)
    info = cli.machine_info()
    log(f"code: {cli.code}; load average {info['load_start']}")
    bench = Bench(args, scratch, cli)
    run_bench(bench)
    body = report(bench)
    print(body)
    if args.write_docs:
        scalelib.write_section("consolidation" if args.consolidate_every else "history", docs_text(bench, body, info))
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
