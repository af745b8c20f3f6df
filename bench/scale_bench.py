#!/usr/bin/env python3
"""Size benchmark: does a small backup cost more in a large repository? Format version 1 vs 2 (not a test).

Run it directly::

    .venv/bin/python bench/scale_bench.py [--chunks 500000[,5000000]] [--repeats 3] [--write-docs]
                                          [--versions 1,2] [--seed N] [--workdir DIR] [--keep] [--live]

The "Size" goal of issue 12, through the CLI, for a version 1 and a version 2 repository side by side:

1. Repositories already holding ``--chunks`` chunks (default 500,000; a list measures several sizes), one per
   format version, generated directly rather than by backups (the hidden ``--generate`` mode, run on the code
   under test): packs of ``--chunks-per-pack`` distinct chunks (64 random bytes each, stored raw) written with
   the engine's ``PackBuilder`` (version 1 names a pack by its hash, version 2 at random), and the chunk index
   written with the engine's encoders as the format writes it: version 1 one ``index/<id>`` object per
   ``--packs-per-index`` packs (one backup's packs), version 2 the sharded index ``index/<xx>/<id>``
   (``encode_sharded_index`` per 1,000,000 chunks, as backups without a parent and prune's compaction write
   it). One more chunk is a 64 KiB probe (see 3). No manifests or maps of other volumes: a backup or restore
   of one volume reads only its own (``backups/<volume>/``), whatever the repository holds.
2. Plus an empty repository per version. In each, ``--repeats`` times (repositories in rotating order), a
   1 MiB volume of seeded random data (a new volume id each time, so a backup without a parent) is backed up
   with ``--extents`` (the whole volume) and restored to a new image file, checked by sha256; the page cache
   is dropped (when root) before each. Medians of wall time (whole CLI process) and peak RSS (``os.wait4``).
3. Probe: a 64 KiB volume whose content is the generated probe chunk is backed up (and restored) in every
   generated repository: it must be stored as a duplicate (``dedup_bytes`` 65536), which shows the backup
   consults the generated chunk index, and its restore reads the generated pack.

Goal (issue 12): in a repository of 500,000 chunks (and of 5,000,000), the small backup and its restore
within +40 MiB peak RSS and +0.5 s of the empty repository. ``--write-docs`` writes the "size" section of
``docs/scaling-benchmarks.md``.

The scratch directory is removed in every outcome unless ``--keep``. Exit status: 0 when every step ran,
every restore matched and every probe deduplicated (goal misses are reported, not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P (the --generate child)
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
import scalelib  # noqa: E402
from benchlib import KiB, MiB, Proc, last_json, log  # noqa: E402
from engine_bench import sha256_file, write_extents  # noqa: E402
from scalelib import Cli, mib  # noqa: E402

SCRIPT = Path(__file__).resolve()
CHUNK_BYTES = 64  # raw size of a generated chunk: what the index costs does not depend on it
PROBE_BYTES = 64 * KiB
SMALL_BYTES = 1 * MiB
SHARD_BATCH = 1_000_000  # chunks per round of sharded index objects (version 2)
GOAL_MIB = 40
GOAL_S = 0.5
# Issue 12's "Why" (version 1, 500,000 chunks vs empty): backup s, MiB; restore s, MiB
ISSUE_V1 = ((1.51, 257, 1.42, 235), (0.17, 44, 0.08, 23))


def probe_data(seed: int) -> bytes:
    """The content of the probe chunk and volume (the generator and the benchmark compute the same)."""
    return random.Random(f"{seed}-probe").randbytes(PROBE_BYTES)


# ---------------------------------------------------------------------------------------------
# Hidden mode --generate: fill a repository with chunks, on the code under test


def generate(spec: dict) -> int:
    """Write ``spec["chunks"]`` chunks (plus the probe) into the repository at ``spec["url"]``; print a JSON
    summary (packs, index objects, bytes written)."""
    from movers.repo import pack as packfmt
    from movers.repo.chunks import RAW, encode_chunk
    from movers.repo.index import encode_index, encode_sharded_index
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    repo = Repository.open(open_store(spec["url"]))
    located = repo.config.located
    chunk_id = repo.content_hash.chunk_id
    rng = random.Random(f"{spec['seed']}-chunks")  # the same chunks in every repository
    names = random.Random(f"{spec['seed']}-packs-v{repo.config.format_version}")
    total, per_pack, per_index = spec["chunks"], spec["chunks_per_pack"], spec["packs_per_index"]
    stats = {"packs": 0, "index_objects": 0, "pack_bytes": 0, "index_bytes": 0, "chunks": 0}
    pending: list[tuple[bytes, list[packfmt.PackEntry]]] = []

    def flush() -> None:
        objects = encode_sharded_index(pending) if located else [encode_index(pending)]
        for key, data in objects:
            repo.store.put(key, data)
            stats["index_objects"] += 1
            stats["index_bytes"] += len(data)
        pending.clear()

    probe = probe_data(spec["seed"])
    done = in_pending = 0
    while done < total:
        n = min(per_pack, total - done)
        builder = packfmt.PackBuilder(names.randbytes(32) if located else None)
        if done == 0:
            stored, flags = encode_chunk(probe, 3)
            builder.add(chunk_id(probe), stored, PROBE_BYTES, flags)
        data = memoryview(rng.randbytes(n * CHUNK_BYTES))
        for i in range(n):
            raw = data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]
            builder.add(chunk_id(raw), bytes(raw), CHUNK_BYTES, RAW)
        pack_id, blob, entries = builder.finish()
        repo.store.put(packfmt.pack_key(pack_id), blob)
        stats["packs"] += 1
        stats["pack_bytes"] += len(blob)
        stats["chunks"] += len(entries)
        pending.append((pack_id, entries))
        done += n
        in_pending += len(entries)
        if (located and in_pending >= SHARD_BATCH) or (not located and len(pending) >= per_index):
            flush()
            in_pending = 0
    if pending:
        flush()
    print(json.dumps(stats), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# The benchmark


@dataclass
class Repo:
    """One repository under test: its format version and how many chunks it was given."""

    version: int
    chunks: int  # generated chunks (0: empty)
    url: str
    generated: dict = field(default_factory=dict)  # the generator's summary, plus its wall time
    backups: list[tuple[Proc, dict]] = field(default_factory=list)
    restores: list[tuple[Proc, dict]] = field(default_factory=list)
    probe: str = ""  # what the probe showed

    @property
    def name(self) -> str:
        return f"v{self.version} {self.chunks:,} chunks"


@dataclass
class Bench:
    args: argparse.Namespace
    scratch: Path
    cli: Cli
    repos: list[Repo] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def repo(self, version: int, chunks: int) -> Repo | None:
        return next((r for r in self.repos if r.version == version and r.chunks == chunks), None)


def fill(b: Bench, repo: Repo) -> None:
    spec = {
        "url": repo.url,
        "chunks": repo.chunks,
        "chunks_per_pack": b.args.chunks_per_pack,
        "packs_per_index": b.args.packs_per_index,
        "seed": b.args.seed,
    }
    p = b.cli.runner.run([*b.cli.python, str(SCRIPT), "--generate", json.dumps(spec)], f"generate {repo.name}")
    repo.generated = {**last_json(p.stdout), "wall": p.wall}
    g = repo.generated
    log(
        f"{repo.name}: generated {g['chunks']:,} chunks in {g['packs']:,} packs ({mib(g['pack_bytes'])} MiB),"
        f" {g['index_objects']:,} index objects ({mib(g['index_bytes'])} MiB) in {p.wall:.1f} s"
    )


def small_volume(b: Bench, n: int) -> tuple[Path, str]:
    """The ``n``-th 1 MiB volume (the same in every repository) and its sha256."""
    path = b.scratch / f"small-{n}.img"
    if not path.exists():
        path.write_bytes(random.Random(f"{b.args.seed}-small-{n}").randbytes(SMALL_BYTES))
    return path, sha256_file(path)


def backup_and_restore(b: Bench, repo: Repo, volume: str, device: Path, expect: str, label: str) -> tuple:
    extents = write_extents(b.scratch / f"{device.stem}.jsonl", [(0, device.stat().st_size)])
    backup = b.cli.backup(repo.url, volume, device, extents, f"backup {label} {repo.name}", cold=True)
    target = b.scratch / "restored.img"
    restore = b.cli.restore(repo.url, volume, target, f"restore {label} {repo.name}", cold=True)
    if sha256_file(target) != expect:
        b.failures.append(f"{repo.name}: the restore of {volume} differs from the volume (sha256)")
    target.unlink()
    return backup, restore


def run_bench(b: Bench) -> None:
    args = b.args
    for chunks in (0, *args.chunks):
        for v in args.versions:
            repo = Repo(v, chunks, b.cli.init(b.scratch / f"repo-v{v}-{chunks}", v))
            if chunks:
                fill(b, repo)
            b.repos.append(repo)
    for n in range(args.repeats):
        device, expect = small_volume(b, n)
        shift = n % len(b.repos)
        for repo in b.repos[shift:] + b.repos[:shift]:
            backup, restore = backup_and_restore(b, repo, f"small-{n}", device, expect, f"#{n + 1}")
            repo.backups.append(backup)
            repo.restores.append(restore)
            log(
                f"{repo.name} #{n + 1}: backup {backup[0].wall:.2f} s {mib(backup[0].maxrss, 0)} MiB,"
                f" restore {restore[0].wall:.2f} s {mib(restore[0].maxrss, 0)} MiB"
            )
    probe = b.scratch / "probe.img"
    probe.write_bytes(probe_data(args.seed))
    expect = sha256_file(probe)
    for repo in b.repos:
        if not repo.chunks:
            continue
        (_p, res), _restore = backup_and_restore(b, repo, "probe", probe, expect, "probe")
        if res["dedup_bytes"] != PROBE_BYTES or res["new_chunk_bytes"]:
            b.failures.append(
                f"{repo.name}: the probe was not found in the generated index (dedup {res['dedup_bytes']},"
                f" new {res['new_chunk_bytes']} bytes)"
            )
            repo.probe = "NOT found"
        else:
            repo.probe = "found"
        log(f"{repo.name}: probe chunk {repo.probe} by the backup, restore read it from a generated pack")


# ---------------------------------------------------------------------------------------------
# Report


def _median(runs: list[tuple[Proc, dict]], what: str) -> float:
    values = {
        "wall": [p.wall for p, _ in runs],
        "rss": [p.maxrss for p, _ in runs],
        "engine": [r["duration_s"] for _, r in runs],
    }[what]
    return statistics.median(values)


def results_table(b: Bench) -> str:
    head = (
        "| repository | version | backup wall s | backup engine s | backup peak RSS MiB | restore wall s |"
        " restore engine s | restore peak RSS MiB | backup Δ vs empty | restore Δ vs empty |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for chunks in (0, *b.args.chunks):
        for v in b.args.versions:
            r, empty = b.repo(v, chunks), b.repo(v, 0)
            deltas = []
            for runs, base in ((r.backups, empty.backups), (r.restores, empty.restores)):
                if chunks:
                    dw, dm = _median(runs, "wall") - _median(base, "wall"), _median(runs, "rss") - _median(base, "rss")
                    deltas.append(f"{dw:+.2f} s, {dm / MiB:+,.0f} MiB")
                else:
                    deltas.append("–")
            what = f"{chunks:,} chunks" if chunks else "empty"
            lines.append(
                f"| {what} | v{v} | {_median(r.backups, 'wall'):.2f} | {_median(r.backups, 'engine'):.2f} |"
                f" {mib(_median(r.backups, 'rss'), 0)} | {_median(r.restores, 'wall'):.2f} |"
                f" {_median(r.restores, 'engine'):.2f} | {mib(_median(r.restores, 'rss'), 0)} |"
                f" {deltas[0]} | {deltas[1]} |"
            )
    return "\n".join(lines)


def generated_table(b: Bench) -> str:
    head = "| repository | version | chunks | packs | pack MiB | index objects | index MiB | generated in s | probe |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in b.repos:
        if r.chunks:
            g = r.generated
            lines.append(
                f"| {r.chunks:,} chunks | v{r.version} | {g['chunks']:,} | {g['packs']:,} | {mib(g['pack_bytes'])} |"
                f" {g['index_objects']:,} | {mib(g['index_bytes'])} | {g['wall']:.1f} | {r.probe} |"
            )
    return "\n".join(lines)


def goals(b: Bench) -> list[tuple[str, str, dict[int, tuple[str, bool | None]]]]:
    rows = []
    for chunks in b.args.chunks:
        for op in ("backup", "restore"):
            for what, unit, limit in (("time", "s", GOAL_S), ("peak RSS", "MiB", GOAL_MIB)):
                by_version = {}
                for v in b.args.versions:
                    r, empty = b.repo(v, chunks), b.repo(v, 0)
                    runs, base = (r.backups, empty.backups) if op == "backup" else (r.restores, empty.restores)
                    key = "wall" if unit == "s" else "rss"
                    delta = _median(runs, key) - _median(base, key)
                    delta = delta if unit == "s" else delta / MiB
                    by_version[v] = (f"{delta:+.2f} s" if unit == "s" else f"{delta:+,.0f} MiB", delta <= limit)
                rows.append((f"{op} of 1 MiB in {chunks:,} chunks vs empty, {what}", f"<= +{limit} {unit}", by_version))
    return rows


def report(b: Bench) -> str:
    lines = [results_table(b), ""]
    lines.append(
        f"Medians of {b.args.repeats} runs each (each a new 1 MiB volume: a backup without a parent). *wall* and"
        " *peak RSS*: the whole CLI process (`os.wait4`); *engine*: the JSON's `duration_s`; *Δ vs empty*: the"
        " medians minus those of the empty repository of the same version."
    )
    lines += ["", "### Generated repositories", "", generated_table(b), ""]
    lines.append(
        "*probe*: whether the backup of a 64 KiB volume holding the generated probe chunk stored it as a duplicate"
        " (it consulted the generated index; its restore then read the generated pack)."
    )
    lines += ["", "### Goals", "", scalelib.goals_table(goals(b), b.args.versions), ""]
    if 500_000 in b.args.chunks:
        (bs, bm, rs, rm), (ebs, ebm, ers, erm) = ISSUE_V1
        lines.append(
            f"* Issue 12 measured version 1 before, 500,000 chunks vs empty: backup {bs} s and {bm} MiB"
            f" ({ebs} s, {ebm} MiB), restore {rs} s and {rm} MiB ({ers} s, {erm} MiB)."
        )
    lines += [f"* FAILURE: {f}" for f in b.failures]
    return "\n".join(lines).rstrip() + "\n"


def docs_text(b: Bench, body: str, info: dict[str, str]) -> str:
    args = b.args
    sizes = " and ".join(f"{c:,}" for c in args.chunks)
    reduced = "" if 500_000 in args.chunks else " (a reduced run: the goal is set for 500,000 and 5,000,000)"
    return f"""## Size: a small backup in a repository of {sizes} chunks{reduced}

`{args.command}`. Repositories holding {sizes} chunks, generated directly (not by backups) with the engine's
encoders: packs of {args.chunks_per_pack:,} distinct {CHUNK_BYTES}-byte chunks (`PackBuilder`; version 1 names
packs by hash, version 2 at random) and the chunk index as each version writes it (version 1: one `index/<id>`
object per {args.packs_per_index} packs, as one backup writes; version 2: sharded `index/<xx>/<id>` objects per
{SHARD_BATCH:,} chunks, as backups without a parent and prune's compaction write them). Against an empty
repository of the same version: a backup (`--extents`, the whole volume) of a new 1 MiB volume of random data
and its restore to a new image file (sha256 checked), {args.repeats} times each in rotating order with the page
cache dropped before each run. Goal (issue 12): within +{GOAL_MIB} MiB and +{GOAL_S} s of the empty repository.

### Machine

{benchlib.machine_table(info, scalelib.machine_rows(info, b.cli.runner))}

### Results

{body}"""


def chunk_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(c.replace("_", "")) for c in text.split(",") if c.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad chunk counts {text!r} (e.g. 500000,5000000)") from None
    if not counts or any(c < 1 for c in counts):
        raise argparse.ArgumentTypeError("chunk counts must be >= 1")
    return tuple(sorted(set(counts)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--chunks", type=chunk_counts, default=(500_000,), help="chunks in the large repositories (default 500000)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="backups and restores per repository (median)")
    parser.add_argument("--chunks-per-pack", type=int, default=1024, help="generated chunks per pack (default 1024)")
    parser.add_argument("--packs-per-index", type=int, default=4, help="packs per version 1 index object (default 4)")
    parser.add_argument("--generate", metavar="JSON", help=argparse.SUPPRESS)
    scalelib.add_common_args(parser, "size")
    args = scalelib.parse_args(parser, argv)
    if args.generate:
        return generate(json.loads(args.generate))
    if args.repeats < 1 or args.chunks_per_pack < 1 or args.packs_per_index < 1:
        parser.error("--repeats, --chunks-per-pack and --packs-per-index must be >= 1")
    return benchlib.run_main(args, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> int:
    cli = Cli.for_scratch(scratch, args.live)
    info = cli.machine_info()
    log(f"code: {cli.code}; load average {info['load_start']}")
    bench = Bench(args, scratch, cli)
    started = time.monotonic()
    run_bench(bench)
    log(f"measured in {time.monotonic() - started:.1f} s")
    body = report(bench)
    print(body)
    if args.write_docs:
        scalelib.write_section("size", docs_text(bench, body, info))
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
