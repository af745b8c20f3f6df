#!/usr/bin/env python3
"""Hash benchmark: a version 2 repository hashing with SHA-256 vs BLAKE3 (a benchmark, not a test).

Run it directly::

    .venv/bin/python bench/hash_bench.py [--size 1G] [--repeat 1] [--write-docs] [--seed N] [--workdir DIR]
                                         [--keep] [--live]

Every byte a backup reads is hashed twice (the 64 KiB block digests of its map pages, then the chunk ids) and
every byte a restore fetches once (its chunk id is verified). Issue 12 asks whether a faster hash pays; this
measures it through the CLI, on the same data in the same run, for the two content hashes a version 2
repository can record (``movers.repo.contenthash``): ``sha256`` (what version 2 repositories created before
BLAKE3 record; set up by the engine API, the CLI cannot) and ``blake3`` (what ``cbt-mover init`` creates).

1. A ``--size`` (default 1 GiB) image of seeded random data, and a copy with seeded random bytes pwritten over
   1 % of its 4 KiB blocks.
2. ``--repeat`` rounds (default 1), each into new repositories, the two hashes taking turns to go first: a full
   backup with ``--extents`` listing the whole image, a restore of it to a new file (checked bit-exact by
   sha256), and a ``--scan`` incremental of the changed copy on top of the full (it hashes every 64 KiB block
   and stores the blocks whose digest changed). The page cache is dropped before each (when root).
3. The single-core speed of each hash on 4 MiB (a chunk) and 64 KiB (a digest block) inputs, in the code under
   test's interpreter.

Every backup and restore is a ``cbt-mover ... --json`` subprocess (wall, CPU and peak RSS from ``os.wait4``);
with ``--repeat`` above 1 the table shows each step's best round for each measure (least wall, CPU and user CPU
time; the largest peak RSS). The user CPU is where hashing shows: the system time (reads, writes and fsyncs of
the local repository) is the same for both hashes, and noisy.
``--write-docs`` writes the "hash" section of ``docs/scaling-benchmarks.md``. The scratch directory is removed
in every outcome unless ``--keep``. Exit status: 0 when every step ran and every restore matched, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
import scalelib  # noqa: E402
from benchlib import GiB, MiB, Proc, log  # noqa: E402
from engine_bench import parse_size, sha256_file, write_extents  # noqa: E402
from scalelib import Cli, mib  # noqa: E402

HASHES = ("sha256", "blake3")
STEPS = ("full backup", "restore", "scan incremental")
BLOCK = 4096
VOLUME = "hash-vol"
CHANGED = 0.01  # of the 4 KiB blocks, in the copy the scan incremental reads

# A version 2 repository recording the given content hash (``cbt-mover init`` records blake3; sha256 is what
# version 2 repositories made before it record).
_INIT = (
    "import sys\n"
    "from movers.repo.config import RepoConfig\n"
    "from movers.repo.contenthash import BY_FEATURE, HASH_FEATURES\n"
    "from movers.repo.manifest import FEATURES_OF_VERSION\n"
    "from movers.repo.repository import Repository\n"
    "from movers.repo.store import open_store\n"
    "others = [f for f in FEATURES_OF_VERSION[2] if f not in HASH_FEATURES]\n"
    "features = (*others, BY_FEATURE[sys.argv[2] + '-chunks'].feature)\n"
    "Repository.init(open_store(sys.argv[1]), RepoConfig(format_version=2, mandatory_features=features))\n"
)

# Single-core MiB/s of each content hash on a chunk and on a digest block (CPU time of this process).
_SPEED = (
    "import json, os, time\n"
    "from movers.repo.contenthash import BLAKE3, SHA256\n"
    "data = os.urandom(4 << 20)\n"
    "view = memoryview(data)\n"
    "out = {}\n"
    "for h in (SHA256, BLAKE3):\n"
    "    t = time.process_time()\n"
    "    for _ in range(64):\n"
    "        h.chunk_id(data)\n"
    "    chunk = 256 / (time.process_time() - t)\n"
    "    t = time.process_time()\n"
    "    for _ in range(64):\n"
    "        for i in range(0, len(data), 65536):\n"
    "            h.block_digest(view[i : i + 65536])\n"
    "    block = 256 / (time.process_time() - t)\n"
    "    out[h.name] = [round(chunk), round(block)]\n"
    "print(json.dumps(out))\n"
)


@dataclass
class Best:
    """One step of one hash over its rounds: the least wall, CPU and user CPU seconds, the largest peak RSS."""

    wall: float
    cpu: float
    user: float
    maxrss: int
    result: dict


@dataclass
class Bench:
    args: argparse.Namespace
    scratch: Path
    cli: Cli
    runs: dict[tuple[str, str], list[tuple[Proc, dict]]] = field(default_factory=dict)  # (hash, step) -> rounds
    speed: dict[str, list[int]] = field(default_factory=dict)
    filesystem: str = "?"  # of the scratch directory, for the report
    failures: list[str] = field(default_factory=list)

    def best(self, name: str, step: str) -> Best:
        procs = [p for p, _ in self.runs[(name, step)]]
        return Best(
            min(p.wall for p in procs),
            min(p.cpu for p in procs),
            min(p.user for p in procs),
            max(p.maxrss for p in procs),
            self.runs[(name, step)][0][1],
        )


def build_images(image: Path, changed: Path, size: int, seed: int) -> None:
    """``image``: ``size`` bytes of seeded random data; ``changed``: a copy with random bytes over ``CHANGED`` of
    its 4 KiB blocks."""
    rng = random.Random(f"{seed}-image")
    with open(image, "wb") as f:
        for _ in range(size // (8 * MiB)):
            f.write(rng.randbytes(8 * MiB))
        f.write(rng.randbytes(size % (8 * MiB)))
    with open(image, "rb") as src, open(changed, "wb") as dst:
        while data := src.read(8 * MiB):
            dst.write(data)
    nblocks = size // BLOCK
    blocks = rng.sample(range(nblocks), max(1, int(nblocks * CHANGED)))
    fd = os.open(changed, os.O_WRONLY | os.O_CLOEXEC)
    try:
        for blk in blocks:
            os.pwrite(fd, rng.randbytes(BLOCK), blk * BLOCK)
    finally:
        os.close(fd)


def init(b: Bench, name: str, repo: Path) -> str:
    url = f"file://{repo}"
    if name == "blake3":
        b.cli.run(["init", "--insecure-no-encryption", "--repo", url], f"init {name} {repo.name}")
    else:
        b.cli.runner.run([*b.cli.python, "-c", _INIT, url, name], f"init {name} {repo.name}")
    features = json.loads((repo / "config").read_text())["mandatory_features"]
    if f"{name}-chunks" not in features:
        raise benchlib.BenchError(f"{url} does not record {name}: {features}")
    return url


def run_round(b: Bench, n: int, image: Path, changed: Path, extents: Path, expect: str) -> None:
    s = b.scratch
    for name in scalelib.in_order(HASHES, n):
        url = init(b, name, s / f"repo-{name}-{n}")
        label = f"{name} round {n}"
        full = b.cli.backup(url, VOLUME, image, extents, f"full {label}", cold=True)
        target = s / f"restore-{name}.img"
        restored = b.cli.restore(url, VOLUME, target, f"restore {label}", cold=True)
        if sha256_file(target) != expect:
            b.failures.append(f"{label}: the restore differs from the image (sha256)")
        target.unlink()
        scan = b.cli.run(
            ["backup", "--repo", url, "--volume", VOLUME, "--device", str(changed), "--scan"],
            f"scan {label}",
            cold=True,
        )
        if scan[1]["mode"] != "incremental-scan":
            b.failures.append(f"{label}: the scan ran as {scan[1]['mode']}")
        for step, run in zip(STEPS, (full, restored, scan), strict=True):
            b.runs.setdefault((name, step), []).append(run)
            p = run[0]
            log(
                f"{label} {step}: {p.wall:.2f} s wall, {p.cpu:.2f} s CPU ({p.user:.2f} user),"
                f" RSS {mib(p.maxrss, 0)} MiB"
            )
        shutil.rmtree(s / f"repo-{name}-{n}")


def run_bench(b: Bench) -> None:
    args, s = b.args, b.scratch
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(s)], capture_output=True, text=True).stdout.strip()
    b.filesystem = f"{fstype or 'an unknown filesystem'} (`{s.parent}`)"
    image, changed = s / "volume.img", s / "changed.img"
    log(f"building a {mib(args.size, 0)} MiB image of random data and a copy with {CHANGED:.0%} of it changed")
    build_images(image, changed, args.size, args.seed)
    extents = write_extents(s / "allocated.jsonl", [(0, args.size)])
    expect = sha256_file(image)
    for n in range(args.repeat):
        run_round(b, n, image, changed, extents, expect)
    p = b.cli.runner.run([*b.cli.python, "-c", _SPEED], "hash speed")
    b.speed = benchlib.last_json(p.stdout)


def report(b: Bench) -> str:
    size = b.args.size
    head = "| step | hash | wall s | MiB/s | CPU s | of which user s | peak RSS MiB | stored MiB |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for step in STEPS:
        for name in HASHES:
            s = b.best(name, step)
            stored = mib(s.result["stored_bytes"]) if "stored_bytes" in s.result else "–"
            lines.append(
                f"| {step} | {name} | {s.wall:.2f} | {size / MiB / s.wall:,.0f} | {s.cpu:.2f} | {s.user:.2f} |"
                f" {mib(s.maxrss, 0)} | {stored} |"
            )
    lines += ["", f"### BLAKE3 vs SHA-256 (per {mib(size, 0)} MiB)", ""]
    for step in STEPS:
        sha, b3 = b.best("sha256", step), b.best("blake3", step)
        lines.append(
            f"* {step}: user CPU {b3.user:.2f} s vs {sha.user:.2f} s (**{b3.user / sha.user:.2f}x**, "
            f"{sha.user - b3.user:.2f} s less), CPU {b3.cpu:.2f} s vs {sha.cpu:.2f} s ({b3.cpu / sha.cpu:.2f}x);"
            f" throughput {size / MiB / b3.wall:,.0f} vs {size / MiB / sha.wall:,.0f} MiB/s"
            f" (**{sha.wall / b3.wall:.2f}x**)"
        )
    if b.speed:
        lines += ["", "### Single-core hash speed (MiB/s of CPU time)", "", "| hash | 4 MiB chunk | 64 KiB block |"]
        lines.append("|---|---|---|")
        lines += [f"| {name} | {chunk:,} | {block:,} |" for name, (chunk, block) in b.speed.items()]
    if b.failures:
        lines += ["", *(f"* FAILURE: {f}" for f in b.failures)]
    return "\n".join(lines).rstrip() + "\n"


def docs_text(b: Bench, body: str, info: dict[str, str]) -> str:
    args = b.args
    rounds = "one round" if args.repeat == 1 else f"{args.repeat} rounds, each measure's best shown"
    return f"""## Hash: SHA-256 vs BLAKE3 in a version 2 repository

`{args.command}`. A {mib(args.size, 0)} MiB image of seeded random data (seed {args.seed}) and a copy with random
bytes over {CHANGED:.0%} of its 4 KiB blocks; per content hash ({rounds}, new repositories each, the hashes
taking turns to go first): a full backup with `--extents` of the whole image, a restore of it to a new file
(checked by sha256), and a `--scan` incremental of the copy on top of the full. The page cache is dropped before
each; the scratch directory (images, repositories) was on {b.filesystem}. `sha256` is what version 2
repositories created before BLAKE3 record, `blake3` what `cbt-mover init` creates now
(`movers/repo/contenthash.py`). A backup hashes every byte twice (block digests, then chunk ids), a restore once,
a scan incremental every byte once and the changed 64 KiB blocks again. Random data is the case where hashing
weighs most: zstd gives up on it quickly; compressible data spends more in zstd. Hashing is user CPU; the system
time (reading the image, writing and fsyncing the local repository) is the same work for both hashes, and with
other load on the host it and the wall time vary from run to run far more than the user CPU does.

### Machine

{benchlib.machine_table(info, scalelib.machine_rows(info, b.cli.runner))}

### Results

{body}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=GiB, help="image size (default 1G)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; each step's fastest is reported (default 1)")
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the scratch dir (default /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir")
    parser.add_argument("--live", action="store_true", help="run the working tree's movers/ instead of a snapshot")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help=f"write the report to the 'hash' section of {scalelib.DOCS.relative_to(benchlib.ROOT)}",
    )
    args = scalelib.parse_args(parser, argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
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
        scalelib.write_section("hash", docs_text(bench, body, info))
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
