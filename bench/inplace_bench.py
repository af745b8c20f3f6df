#!/usr/bin/env python3
"""Restore-in-place benchmark: what a restore costs when the device already holds the volume (not a test).

Run it directly::

    .venv/bin/python bench/inplace_bench.py [--size 512M] [--regions 8] [--region 512K] [--workers 2]
                                           [--seed N] [--workdir DIR] [--keep] [--live] [--write-docs]

Issue 23's engine goal, through the CLI, in one run:

1. A volume image of ``--size`` (the engine benchmark's mix: random and text-like 64 KiB runs, some holes), backed
   up with ``--scan`` into an encrypted file repository.
2. Peers on the same disk: ``cp`` of the image to a new file and ``sync`` (what the machine's own copy costs);
   the interpreter deriving a key from a passphrase as ``init`` set it up (scrypt: what every restore of this
   repository pays before it can read anything); and, before the compare, ``cat`` of the device it reads.
3. **Full**: ``restore`` of the backup into a new image file (every chunk fetched and written).
4. **Compare**: a copy of the image with ``--regions`` regions of ``--region`` random bytes written over it (the
   live volume that drifted), restored with ``--overwrite if-changed``.
5. **Extents**: the same regions written again, restored with ``--overwrite if-changed --extents`` naming them
   (what CBT between the backup's snapshot and a snapshot of the live volume reports).

Each restore runs cold (page cache dropped when root) and is checked bit-exact against the image (sha256).
Reported per restore: wall seconds of the process and of the engine (the JSON's ``duration_s``: without the
interpreter's start-up and the key derivation, which every restore pays the same), CPU seconds, peak RSS,
compared, fetched and written bytes, and the ratios the issue sets: fetched <= 20% of the full restore's, written
<= 2x the changed bytes, time <= 0.5x the full restore's by compare and <= 0.25x with extents.
``--write-docs`` writes the ``--docs-section`` (default "in-place") of ``docs/benchmarks.md``; the recovery time
table of issue 23 is ``--size 1G --region 4K --regions 2621 --docs-section rto`` (1% of the volume changed in
scattered 4 KiB blocks). Exit status: 0 when every step ran
and every restore is bit-exact (goal misses are reported, not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
from benchlib import BenchError, KiB, MiB, log  # noqa: E402
from engine_bench import parse_size, sha256_file  # noqa: E402
from scalelib import Cli, mib  # noqa: E402

ROOT = Path(BENCH_DIR).parent
DOCS = ROOT / "docs" / "benchmarks.md"
PASSWORD = "in-place bench passphrase"
GOAL_FETCHED = 0.20  # of the full restore's fetched bytes
GOAL_WRITTEN = 2.0  # x the changed bytes
GOAL_COMPARE_TIME = 0.5  # x the full restore's wall time
GOAL_EXTENTS_TIME = 0.25
COMPARE = "in place, by compare"
# peers measured in the same run, cold: what no restore of this repository can take less than
KEY_KINDS = {"passphrase": "a passphrase", "file": "a key file"}
START_UP = "start-up (peer)"  # the interpreter's start and (a passphrase's) key derivation, nothing else
READ_DEVICE = "read the device: cat (peer)"  # what a compare reads
# scrypt at init's default cost (movers.repo.keys.DEFAULT_KDF_COST, 16: N = 65536, r = 8, p = 1)
KDF = "import hashlib; hashlib.scrypt(b'p', salt=bytes(16), n=1 << 16, r=8, p=1, maxmem=1 << 27, dklen=32)"


@dataclass
class Row:
    name: str
    wall: float
    engine: float  # the restore's own duration_s (the process's wall time less start-up, key derivation, exit)
    cpu: float
    rss: int
    compared: int | None
    fetched: int | None
    written: int | None


def make_volume(path: Path, size: int, seed: int) -> None:
    """Random and text-like 64 KiB runs (40% each), the rest holes: what ``engine_bench`` backs up."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.truncate(size)
        for off in range(0, size, 64 * KiB):
            roll = rng.random()
            if roll < 0.4:
                data = rng.randbytes(64 * KiB)
            elif roll < 0.8:
                data = (f"row {rng.randrange(10**6)} value={rng.random():.6f}\n" * 3000).encode()[: 64 * KiB]
            else:
                continue
            os.pwrite(f.fileno(), data, off)


def drift(path: Path, regions: list[int], length: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        for off in regions:
            os.pwrite(f.fileno(), rng.randbytes(length), off)
        os.fsync(f.fileno())


def run_bench(args: argparse.Namespace, scratch: Path) -> int:
    cli = Cli.for_scratch(scratch, args.live)
    if args.key == "file":  # a key file holds the key itself: no key derivation (HKDF only)
        key_file = scratch / "repo.key"
        key_file.write_bytes(os.urandom(32))
        cli.env["CBT_MOVER_KEY_FILE"] = str(key_file)
    else:
        cli.env["CBT_MOVER_PASSWORD"] = PASSWORD
    cli.runner.env = cli.env
    size, length = args.size, args.region
    image, repo = scratch / "volume.img", f"file://{scratch / 'repo'}"
    log(f"volume {mib(size)} MiB: writing the image")
    make_volume(image, size, args.seed)
    want = sha256_file(image)
    cli.run(["init", "--repo", repo], "init")
    cli.run(["backup", "--repo", repo, "--volume", "v", "--device", str(image), "--scan"], "backup", cold=True)
    rng = random.Random(args.seed + 1)
    slots = sorted(rng.sample(range(size // length), args.regions))
    regions = [s * length for s in slots]
    extents = scratch / "changed.jsonl"
    extents.write_text("".join(json.dumps({"offset": o, "length": length}) + "\n" for o in regions))
    changed = args.regions * length
    rows: list[Row] = []
    failures: list[str] = []

    cli.runner.drop_caches()
    copy = cli.runner.run(["sh", "-c", f"cp {image} {scratch / 'cp.img'} && sync"], "cp + sync")
    rows.append(Row("cp + sync (peer)", copy.wall, copy.wall, copy.cpu, copy.maxrss, None, None, None))
    (scratch / "cp.img").unlink()
    cli.runner.drop_caches()
    kdf = cli.runner.run([*cli.python, "-c", KDF if args.key == "passphrase" else "pass"], "start-up peer")
    rows.append(Row(START_UP, kdf.wall, kdf.wall, kdf.cpu, kdf.maxrss, None, None, None))

    restore = ["restore", "--repo", repo, "--volume", "v", "--workers", str(args.workers)]
    for name, target, extra in (
        ("full, into a new image", scratch / "new.img", []),
        (COMPARE, scratch / "live.img", ["--overwrite", "if-changed"]),
        ("in place, with extents", scratch / "live.img", ["--overwrite", "if-changed", "--extents", str(extents)]),
    ):
        if target.name == "live.img":
            if not target.exists():
                shutil.copyfile(image, target)
            drift(target, regions, length, args.seed + len(rows))
        if name == COMPARE:
            cli.runner.drop_caches()
            read = cli.runner.run(["sh", "-c", f"cat {target} > /dev/null"], "read the device")
            rows.append(Row(READ_DEVICE, read.wall, read.wall, read.cpu, read.maxrss, None, None, None))
        log(f"restore: {name}")
        proc, out = cli.run([*restore, "--device", str(target), *extra], name, cold=True)
        written = out.get("written_bytes", 0) + out.get("zeroed_bytes", 0)
        rows.append(
            Row(
                name,
                proc.wall,
                out["duration_s"],
                proc.cpu,
                proc.maxrss,
                out.get("compared_bytes"),
                out["fetched_bytes"],
                written,
            )
        )
        if sha256_file(target) != want:
            failures.append(f"{name}: the target is not bit-exact")
    print(report(args, rows, changed, cli.code))
    for failure in failures:
        log(failure)
    if args.write_docs:
        benchlib.write_marked_section(DOCS, args.docs_section, docs_text(args, rows, changed))
    return 1 if failures else 0


def _ratio(v: float | None, of: float | None) -> float | None:
    return None if v is None or not of else v / of


def report(args: argparse.Namespace, rows: list[Row], changed: int, code: str) -> str:
    full = next(r for r in rows if r.name.startswith("full"))
    lines = [
        f"in-place restore: volume {mib(args.size)} MiB, {args.regions} changed regions of {args.region // KiB} KiB"
        f" ({mib(changed)} MiB), {args.workers} workers; code: {code}",
        "",
        "| restore | wall s | x full | engine s | x full | cpu s | peak RSS MiB | compared MiB | fetched MiB"
        " | x full fetched | written MiB | x changed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.wall:.2f} | {benchlib.x_ratio(_ratio(r.wall, full.wall))} | {r.engine:.2f} |"
            f" {benchlib.x_ratio(_ratio(r.engine, full.engine))} | {r.cpu:.2f} |"
            f" {mib(r.rss)} | {mib(r.compared) if r.compared is not None else '-'} |"
            f" {mib(r.fetched) if r.fetched is not None else '-'} |"
            f" {benchlib.x_ratio(_ratio(r.fetched, full.fetched))} |"
            f" {mib(r.written) if r.written is not None else '-'} | {benchlib.x_ratio(_ratio(r.written, changed))} |"
        )
    compare, extents = rows[-2], rows[-1]
    goals = [
        ("fetched by compare <= 20% of full", _ratio(compare.fetched, full.fetched), GOAL_FETCHED),
        ("fetched with extents <= 20% of full", _ratio(extents.fetched, full.fetched), GOAL_FETCHED),
        ("written by compare <= 2x changed", _ratio(compare.written, changed), GOAL_WRITTEN),
        ("written with extents <= 2x changed", _ratio(extents.written, changed), GOAL_WRITTEN),
        ("wall time by compare <= 0.5x full", _ratio(compare.wall, full.wall), GOAL_COMPARE_TIME),
        ("wall time with extents <= 0.25x full", _ratio(extents.wall, full.wall), GOAL_EXTENTS_TIME),
        ("engine time by compare <= 0.5x full", _ratio(compare.engine, full.engine), GOAL_COMPARE_TIME),
        ("engine time with extents <= 0.25x full", _ratio(extents.engine, full.engine), GOAL_EXTENTS_TIME),
    ]
    lines += ["", "| goal | measured | met |", "|---|---:|:-:|"]
    for name, value, goal in goals:
        met = value is not None and value <= goal
        lines.append(f"| {name} | {value:.3f} | {'yes' if met else 'NO'} |")
    start_up = next(r for r in rows if r.name == START_UP).wall
    peer = "python + scrypt" if args.key == "passphrase" else "python"
    read = next(r for r in rows if r.name == READ_DEVICE).wall
    lines += [
        "",
        "What the peers of this run put under the wall times: every restore starts an interpreter"
        + (" and derives the passphrase's key (scrypt)" if args.key == "passphrase" else " (a key file: no derivation)")
        + ", and a compare also reads the whole device as `cat` does; were the rest free"
        " (imports, map, hashing, fetching, writing), the ratios would be:",
        "",
        "| restore | peers | x full |",
        "|---|---|---:|",
        f"| by compare | {peer}, then cat | {(start_up + read) / full.wall:.3f} |",
        f"| with extents | {peer} | {start_up / full.wall:.3f} |",
    ]
    return "\n".join(lines)


def docs_text(args: argparse.Namespace, rows: list[Row], changed: int) -> str:
    info = benchlib.machine_info()
    body = report(args, rows, changed, "the working tree" if args.live else "a snapshot of movers/")
    return (
        f"## Restore in place: {mib(args.size)} MiB, {args.regions} x {args.region // KiB} KiB changed"
        " (`bench/inplace_bench.py`)\n\n"
        "A restore onto the device that holds the volume compares it with the backup by the digests the map records"
        " and fetches and writes only what differs (`cbt-mover restore --overwrite if-changed`); with `--extents`"
        " only the named ranges are read. Each restore cold, checked bit-exact.\n\n"
        + benchlib.machine_table(info, [])
        + "\n\n"
        + body
        + f"\n\nThe repository's key: {KEY_KINDS[args.key]} (`--key {args.key}`)."
        + "\n\nA compare reads every data byte of the device once (holes of an image file are not read) and hashes"
        " it; the full restore reads the compressed backup and writes into an image file, whose writes land in the"
        " page cache until the final fsync. Where reading the device costs about what the full restore's reads and"
        " writes cost, as on this machine's disk, the compare cannot be twice as fast; with the extents CBT reports"
        " nothing but those ranges is read. Every restore also pays what does not grow with the volume: the"
        " interpreter's start and the passphrase's key derivation (scrypt at the default cost, about 0.2 s on one"
        " core; the CLI runs it while the restore's modules load): the wall time less the engine's, which at this"
        " size is most of a restore with extents. Targets that are block devices were not measured here. Fetched bytes"
        " follow the chunks the changes touch: a chunk is fetched whole (it is compressed and encrypted as one), so"
        " changes scattered over most chunks fetch most of the backup while clustered ones fetch little; what is"
        " written is only what differs either way.\n"
    )


def parse_region(text: str) -> int:
    """A changed region's size: ``4K``, ``512K``, ``1M`` or bytes; a multiple of 4 KiB."""
    units = {"K": KiB, "M": MiB}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    value = int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)
    if value <= 0 or value % (4 * KiB):
        raise argparse.ArgumentTypeError("a region is a positive multiple of 4 KiB")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=parse_size, default=512 * MiB)
    p.add_argument("--regions", type=int, default=8)
    p.add_argument("--region", type=parse_region, default=512 * KiB)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--live", action="store_true", help="run the working tree's code, not a snapshot of it")
    p.add_argument("--write-docs", action="store_true")
    p.add_argument(
        "--key",
        choices=("passphrase", "file"),
        default="passphrase",
        help="how the repository's key is given: a passphrase (scrypt at init's default cost before every command) or"
        " a key file (the repository Secret's `keyfile`: no key derivation)",
    )
    p.add_argument(
        "--docs-section",
        default="in-place",
        help="the section of docs/benchmarks.md --write-docs writes (e.g. rto for --size 1G --region 4K"
        " --regions 2621: 1%% of the volume in scattered 4 KiB blocks)",
    )
    args = p.parse_args(argv)
    if args.size % args.region or args.regions * args.region > args.size:
        raise SystemExit("--regions x --region must fit in --size, which must be a multiple of --region")
    return benchlib.run_main(args, lambda scratch: run_bench(args, scratch))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as err:
        log(f"benchmark failed: {err}")
        sys.exit(1)
