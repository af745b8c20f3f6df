#!/usr/bin/env python3
"""Maintenance benchmark: memory and time of prune and verify in a large repository (a benchmark, not a test).

Run it directly::

    .venv/bin/python bench/maintenance_bench.py [--chunks 500000[,2000000]] [--baseline REF] [--full-verify]
                                                [--compare-max N] [--verify-max N] [--sample F] [--write-docs]
                                                [--versions 1,2] [--seed N] [--workdir DIR] [--keep] [--live]

The "maintenance at scale" goal of issue 12: prune and verify of a repository of millions of chunks and
thousands of backups in memory bounded by a small constant per chunk and time linear in the repository.

1. Repositories of ``--chunks`` chunks (a list measures several sizes), one per format version, generated
   directly rather than by backups (the hidden ``--generate`` mode, with the encoders of the code under test,
   files written without fsync: the on-store format is the same for every code measured):
   ``--chunks-per-volume`` chunks per volume, each volume a full backup then incrementals, each replacing a run
   of entries of its parent's map by new chunks (pages untouched are shared by id, as backups share them). The
   first ``--forgotten`` backups of every volume get no manifest (forgotten: what only they reference is
   garbage), the next ``--kept`` do. Chunks are 64 random bytes stored raw, ``--chunks-per-pack`` per pack (one
   backup's packs hold its new chunks), map pages hold ``--entries-per-page`` entries; each backup writes an
   index object of its packs (version 2: a backup without parent the sharded index). Plus ``--dup-share`` of
   the referenced chunks stored again in packs no index lists (a crashed backup's re-upload: trailers to read,
   copies that must not stay).
2. Plus an empty repository per version: the same commands there give the interpreter's own footprint.
3. For every code measured (``--baseline REF``, ``movers/`` of a git commit, only in repositories of at most
   ``--compare-max`` chunks; then a snapshot of the working tree), in every repository: ``prune --dry-run``,
   ``verify --sample`` (seeded), ``verify`` of everything (``--full-verify``, up to ``--verify-max`` chunks) and
   ``prune --grace 0`` (on a copy of the repository: it deletes). Each a ``cbt-mover ... --json`` subprocess:
   wall time and peak RSS (``os.wait4``); *bytes per chunk* is peak RSS minus that of the same command on the
   empty repository, divided by the chunks stored (*µs per chunk* likewise for the wall time).

Goal: prune well under 100 bytes of memory per stored chunk, time linear (compare the sizes). ``--write-docs``
writes the "maintenance" section of ``docs/scaling-benchmarks.md``. The scratch directory is removed in every
outcome unless ``--keep``. Exit status: 0 when every command ran and both codes reported the same (goal misses
are reported, not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from array import array
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P (the --generate child)
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
import scalelib  # noqa: E402
from benchlib import ROOT, Proc, last_json, log  # noqa: E402
from scalelib import Cli, mib  # noqa: E402

SCRIPT = Path(__file__).resolve()
CHUNK_BYTES = 64  # raw size of a generated chunk: what prune and verify hold per chunk does not depend on it
GOAL_BYTES_PER_CHUNK = 100  # prune, peak RSS over the empty repository's, per stored chunk
SHARD_BATCH = 1_000_000
COMMANDS = ("prune --dry-run", "verify --sample", "verify", "prune")


def chunk_data(seed: int, n: int) -> bytes:
    """The content of generated chunk ``n`` (a function of its number, so a copy can be stored again)."""
    head = hashlib.sha256(b"%d-%d" % (seed, n)).digest()
    return head + hashlib.sha256(head).digest()


# ---------------------------------------------------------------------------------------------
# Hidden mode --generate: fill a repository with backups, with the working tree's encoders


def generate(spec: dict) -> int:
    """Fill the repository at ``spec["url"]`` (see the module doc, 1.); print a JSON summary."""
    from movers.repo import pack as packfmt
    from movers.repo import volmap
    from movers.repo.chunks import RAW
    from movers.repo.index import ChunkLocation, encode_index, encode_sharded_index
    from movers.repo.manifest import Manifest, SnapshotIdentity, VolumeIdentity
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    repo = Repository.open(open_store(spec["url"]))
    root = Path(spec["url"].removeprefix("file://"))
    located, seed = repo.config.located, spec["seed"]
    total, per_volume, per_pack, epp = spec["chunks"], spec["chunks_per_volume"], spec["chunks_per_pack"], spec["epp"]
    forgotten, kept = spec["forgotten"], spec["kept"]
    steps = forgotten + kept
    volumes = max(1, total // per_volume)
    full = int(per_volume * (1 - spec["change_share"]))
    change = max(1, (per_volume - full) // max(1, steps - 1))
    page_size = repo.config.page_size
    spacing = page_size // epp
    capacity = full * spacing
    names = random.Random(f"{seed}-names-v{repo.config.format_version}")
    rng = random.Random(f"{seed}-changes")
    ids = bytearray()  # chunk number -> chunk id
    pack_of = array("I")  # chunk number -> pack number
    offset_of = array("I")  # chunk number -> offset in its pack
    pack_ids: list[bytes] = []
    stats = dict.fromkeys(("chunks", "packs", "index_objects", "manifests", "map_objects", "referenced"), 0)
    made = 0

    def put(key: str, data: bytes) -> None:  # as LocalStore lays objects out, without its fsync: scratch data
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def new_packs(numbers: list[int]) -> list[tuple[bytes, list[packfmt.PackEntry]]]:
        out = []
        for at in range(0, len(numbers), per_pack):
            builder = packfmt.PackBuilder(names.randbytes(32) if located else None)
            for n in numbers[at : at + per_pack]:
                raw = chunk_data(seed, n)
                builder.add(repo.content_hash.chunk_id(raw), raw, CHUNK_BYTES, RAW)
            pack_id, blob, entries = builder.finish()
            put(packfmt.pack_key(pack_id), blob)
            out.append((pack_id, entries))
            stats["packs"] += 1
            stats["chunks"] += len(entries)
        return out

    def store_chunks(count: int) -> tuple[list[int], list[tuple[bytes, list[packfmt.PackEntry]]]]:
        nonlocal made
        numbers = list(range(made, made + count))
        made += count
        packs = new_packs(numbers)
        for (pack_id, entries), at in zip(packs, range(0, count, per_pack), strict=True):
            pack_ids.append(pack_id)
            for e in entries:
                ids.extend(e.chunk_id)
                pack_of.append(len(pack_ids) - 1)
                offset_of.append(e.offset)
            assert len(entries) == min(per_pack, count - at)
        return numbers, packs

    def page(entries_of_volume: array, p: int) -> bytes:
        first, last = p * epp, min((p + 1) * epp, full)
        entries, locations = [], {}
        for i in range(first, last):
            n = entries_of_volume[i]
            cid = bytes(ids[32 * n : 32 * n + 32])
            entries.append((i * spacing, CHUNK_BYTES, cid, 0))
            locations[cid] = ChunkLocation(pack_ids[pack_of[n]], offset_of[n], CHUNK_BYTES, CHUNK_BYTES, RAW)
        start = p * page_size
        page_id, data = volmap.encode_page(
            start, min(page_size, capacity - start), entries, b"", locations if located else None
        )
        put(volmap.map_key(page_id), data)
        stats["map_objects"] += 1
        return page_id

    n_pages = -(-full // epp)
    base_time = datetime(2026, 1, 1, tzinfo=UTC)
    referenced = bytearray((total + total) // 8 + 1)  # a bit per chunk number a kept backup references
    for v in range(volumes):
        volume = f"bench-vol-{v:05d}"
        entries_of_volume = array("I")
        pages: list[bytes] = []
        parent = None
        for step in range(steps):
            if step == 0:
                numbers, packs = store_chunks(full)
                entries_of_volume.extend(numbers)
                pages = [page(entries_of_volume, p) for p in range(n_pages)]
            else:
                at = rng.randrange(0, full - change + 1)
                numbers, packs = store_chunks(change)
                entries_of_volume[at : at + change] = array("I", numbers)
                for p in range(at // epp, (at + change - 1) // epp + 1):
                    pages[p] = page(entries_of_volume, p)
            index_objects = (
                encode_sharded_index(packs) if located and step == 0 else [encode_index(packs)] if packs else []
            )
            for key, data in index_objects:
                put(key, data)
                stats["index_objects"] += 1
            slots = [(pid, min(epp, full - p * epp)) for p, pid in enumerate(pages)]
            dirs = []
            for first in range(0, n_pages, volmap.DIR_FANOUT):
                dir_id, data = volmap.encode_dir(slots[first : first + volmap.DIR_FANOUT])
                put(volmap.map_key(dir_id), data)
                stats["map_objects"] += 1
                dirs.append(dir_id.hex())
            created = base_time + timedelta(days=step, seconds=v)
            backup_id = created.strftime("%Y%m%dT%H%M%S%fZ") + f"-{v:06x}"
            if step >= forgotten:
                manifest = Manifest(
                    backup_id=backup_id,
                    volume=VolumeIdentity(id=volume),
                    capacity_bytes=capacity,
                    snapshot=SnapshotIdentity(),
                    parent=parent,
                    mode="full" if parent is None else "incremental-cbt",
                    created=created.isoformat(),
                    map=volmap_ref(page_size, dirs, full),
                    format_version=repo.config.format_version,
                    mandatory_features=list(repo.config.mandatory_features),
                )
                put(manifest.key, manifest.encode())
                stats["manifests"] += 1
                for n in entries_of_volume:
                    referenced[n >> 3] |= 1 << (n & 7)
            parent = backup_id
    stats["referenced"] = sum(bin(b).count("1") for b in referenced)
    # a crashed backup's re-upload of referenced chunks: packs no index object lists
    live = [n for n in range(made) if referenced[n >> 3] >> (n & 7) & 1]
    again = sorted(random.Random(f"{seed}-dup").sample(live, int(len(live) * spec["dup_share"])))
    new_packs(again)
    stats["duplicates"] = len(again)
    print(json.dumps(stats), flush=True)
    return 0


def volmap_ref(page_size: int, dirs: list[str], entries: int):
    from movers.repo import volmap
    from movers.repo.manifest import MapRef

    return MapRef(page_size, volmap.DIR_FANOUT, dirs, entries)


# ---------------------------------------------------------------------------------------------
# The benchmark


@dataclass
class Repo:
    version: int
    chunks: int  # asked for (0: the empty repository)
    root: Path
    generated: dict = field(default_factory=dict)  # the generator's summary, plus its wall time

    @property
    def url(self) -> str:
        return f"file://{self.root}"

    @property
    def stored(self) -> int:
        return self.generated.get("chunks", 0)  # copies included


@dataclass
class Bench:
    args: argparse.Namespace
    scratch: Path
    codes: dict[str, Cli]  # "before" (--baseline) and "after" (the code under test)
    repos: list[Repo] = field(default_factory=list)
    runs: dict[tuple[str, int, int, str], tuple[Proc, dict]] = field(default_factory=dict)  # (code, v, chunks, cmd)
    failures: list[str] = field(default_factory=list)


def baseline_cli(scratch: Path, ref: str) -> Cli:
    """The CLI of ``movers/`` at git commit ``ref`` (``git archive``), run like a snapshot (``python -P``)."""
    src = scratch / "baseline-src"
    src.mkdir()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "movers"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    python, env = [benchlib.python(), "-P"], {**os.environ, "PYTHONPATH": str(src)}
    return Cli(benchlib.Runner(scratch / "logs", cwd=scratch, env=env), python, env, f"commit {commit} ({ref})")


def command_args(b: Bench, command: str, url: str) -> list[str]:
    return {
        "prune --dry-run": ["prune", "--repo", url, "--dry-run"],
        "verify --sample": ["verify", "--repo", url, "--sample", str(b.args.sample), "--seed", str(b.args.seed)],
        "verify": ["verify", "--repo", url],
        "prune": ["prune", "--repo", url, "--grace", "0", "--wait-backups", "0"],
    }[command]


def generate_repo(b: Bench, repo: Repo) -> None:
    a = b.args
    spec = {
        "url": repo.url,
        "seed": a.seed,
        "chunks": repo.chunks,
        "chunks_per_volume": a.chunks_per_volume,
        "chunks_per_pack": a.chunks_per_pack,
        "epp": a.entries_per_page,
        "forgotten": a.forgotten,
        "kept": a.kept,
        "change_share": a.change_share,
        "dup_share": a.dup_share,
    }
    cli = b.codes["after"]
    p = cli.runner.run(
        [*cli.python, str(SCRIPT), "--generate", json.dumps(spec)], f"generate {repo.version} {repo.chunks}"
    )
    repo.generated = {**last_json(p.stdout), "wall": p.wall}
    g = repo.generated
    log(
        f"v{repo.version} {repo.chunks:,}: {g['chunks']:,} chunks ({g['duplicates']:,} copies) in {g['packs']:,} packs,"
        f" {g['manifests']:,} manifests, {g['map_objects']:,} map objects, {g['referenced']:,} chunks referenced;"
        f" {p.wall:.1f} s"
    )


def codes_for(b: Bench, repo: Repo) -> list[str]:
    """The codes measured in ``repo``: the baseline only up to ``--compare-max`` chunks (it needs GiBs above)."""
    return [name for name in b.codes if name == "after" or repo.chunks <= b.args.compare_max]


def commands_for(b: Bench, repo: Repo) -> list[str]:
    """The commands measured in ``repo``: a full verify only up to ``--verify-max`` chunks (it reads them all)."""
    return [c for c in b.args.commands if c != "verify" or repo.chunks <= b.args.verify_max]


def measure(b: Bench, repo: Repo, command: str, step: int) -> None:
    """``command`` in ``repo`` with every code (alternating which goes first); ``prune`` on a copy each."""
    for name in scalelib.in_order(codes_for(b, repo), step):
        cli = b.codes[name]
        root = repo.root
        if command == "prune":
            root = b.scratch / f"copy-{repo.root.name}"
            shutil.copytree(repo.root, root)
        try:
            label = f"{command} {name} v{repo.version} {repo.chunks}"
            p, result = cli.run(command_args(b, command, f"file://{root}"), label)
        finally:
            if root != repo.root:
                shutil.rmtree(root)
        b.runs[name, repo.version, repo.chunks, command] = (p, result)
        log(f"{label}: {p.wall:.2f} s, {mib(p.maxrss, 0)} MiB")


def compare(b: Bench) -> None:
    """Every code must report the same (but its duration): the compact tables change no result."""
    if len(b.codes) < 2:
        return
    for (name, version, chunks, command), (_p, result) in b.runs.items():
        if name == "after" or chunks == 0:
            continue
        other = b.runs["after", version, chunks, command][1]
        strip = {"duration_s"}
        if {k: v for k, v in result.items() if k not in strip} != {k: v for k, v in other.items() if k not in strip}:
            b.failures.append(f"v{version} {chunks:,} chunks, {command}: the reports of the two codes differ")


def run_bench(b: Bench) -> None:
    for chunks in (0, *b.args.chunks):
        for v in b.args.versions:
            repo = Repo(v, chunks, b.scratch / f"repo-v{v}-{chunks}")
            b.codes["after"].init(repo.root, v)
            if chunks:
                generate_repo(b, repo)
            b.repos.append(repo)
    for step, repo in enumerate(b.repos):
        for command in commands_for(b, repo):
            measure(b, repo, command, step)
    compare(b)


# ---------------------------------------------------------------------------------------------
# Report


def per_chunk(b: Bench, name: str, repo: Repo, command: str) -> tuple[float, float]:
    """Peak RSS (bytes) and wall time (µs) per stored chunk, over the same command on the empty repository."""
    p = b.runs[name, repo.version, repo.chunks, command][0]
    empty = b.runs[name, repo.version, 0, command][0]
    return (p.maxrss - empty.maxrss) / repo.stored, (p.wall - empty.wall) * 1e6 / repo.stored


def results_table(b: Bench) -> str:
    names = list(b.codes)
    head = "| repository | version | command |"
    for name in names:
        head += f" {name}: wall s | {name}: peak RSS MiB | {name}: bytes per chunk | {name}: µs per chunk |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for repo in b.repos:
        what = f"{repo.chunks:,} chunks" if repo.chunks else "empty"
        for command in commands_for(b, repo):
            row = f"| {what} | v{repo.version} | `{command}` |"
            for name in names:
                if (name, repo.version, repo.chunks, command) not in b.runs:
                    row += " – | – | – | – |"
                    continue
                p, _result = b.runs[name, repo.version, repo.chunks, command]
                memory, time_ = per_chunk(b, name, repo, command) if repo.chunks else (None, None)
                row += f" {p.wall:.2f} | {mib(p.maxrss, 0)} |"
                row += " – | – |" if memory is None else f" {memory:,.0f} | {time_:,.1f} |"
            lines.append(row)
    return "\n".join(lines)


def generated_table(b: Bench) -> str:
    head = (
        "| repository | version | chunks stored | of which copies | referenced | packs | manifests | map objects |"
        " index objects | generated in s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in b.repos:
        if r.chunks:
            g = r.generated
            lines.append(
                f"| {r.chunks:,} chunks | v{r.version} | {r.stored:,} | {g['duplicates']:,} | {g['referenced']:,} |"
                f" {g['packs']:,} | {g['manifests']:,} | {g['map_objects']:,} | {g['index_objects']:,} |"
                f" {g['wall']:.1f} |"
            )
    return "\n".join(lines)


def goals(b: Bench) -> list[tuple[str, str, dict[int, tuple[str, bool | None]]]]:
    rows = []
    for chunks in b.args.chunks:
        for command in ("prune --dry-run", "prune"):
            if command not in b.args.commands:
                continue
            by_version = {}
            for v in b.args.versions:
                repo = next(r for r in b.repos if r.version == v and r.chunks == chunks)
                value = per_chunk(b, "after", repo, command)[0]
                by_version[v] = (f"{value:,.0f} bytes", value < GOAL_BYTES_PER_CHUNK)
            rows.append(
                (
                    f"`{command}` in {chunks:,} chunks, peak RSS over empty",
                    f"< {GOAL_BYTES_PER_CHUNK} bytes per chunk",
                    by_version,
                )
            )
    return rows


def report(b: Bench) -> str:
    lines = [results_table(b), ""]
    lines.append(
        "*wall* and *peak RSS*: the whole CLI process (`os.wait4`); *bytes per chunk* and *µs per chunk*: peak RSS"
        " and wall time minus those of the same command and code on the empty repository of the same version,"
        " divided by the chunks stored (copies included). –: not run (the baseline only up to"
        f" {b.args.compare_max:,} chunks, a full verify only up to {b.args.verify_max:,})."
        + (" *before*: the baseline commit; *after*: the code under test." if "before" in b.codes else "")
    )
    lines += ["", "### Generated repositories", "", generated_table(b), ""]
    lines += ["### Goals", "", scalelib.goals_table(goals(b), b.args.versions), ""]
    if len(b.codes) > 1:
        lines.append(
            "* Every command reported the same with both codes (but its duration)."
            if not any("differ" in f for f in b.failures)
            else "* The two codes reported differently: see the failures."
        )
    lines += [f"* FAILURE: {f}" for f in b.failures]
    return "\n".join(lines).rstrip() + "\n"


def docs_text(b: Bench, body: str, info: dict[str, str]) -> str:
    a = b.args
    sizes = " and ".join(f"{c:,}" for c in a.chunks)
    base = f" against the baseline {b.codes['before'].code}" if "before" in b.codes else ""
    return f"""## Maintenance: prune and verify of {sizes} chunks

`{a.command}`. Memory and time of `prune --dry-run`, `prune --grace 0` (on a copy of the repository each time),
`verify --sample {a.sample}` (seeded){" and `verify`" if "verify" in a.commands else ""} in generated repositories
of {sizes} chunks, one per format version{base}. Generated directly with the engine's encoders (not by
backups): volumes of {a.chunks_per_volume:,} chunks of {CHUNK_BYTES} bytes, each a full backup then incrementals
replacing a run of its parent's entries by new chunks (untouched pages shared by id); the first {a.forgotten} backups
of every volume have no manifest (forgotten), the next {a.kept} do; {a.chunks_per_pack} chunks per pack, an index
object per backup (version 2: the sharded index for a backup without parent), {a.entries_per_page} entries per
map page, and {a.dup_share:.0%} of the referenced chunks stored again in packs no index lists. Goal (issue 12):
prune in memory well under {GOAL_BYTES_PER_CHUNK} bytes per stored chunk, time linear in the repository.

### Machine

{benchlib.machine_table(info, scalelib.machine_rows(info, b.codes["after"].runner))}

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
        "--chunks", type=chunk_counts, default=(500_000,), help="chunks per repository (default 500000)"
    )
    parser.add_argument("--baseline", metavar="REF", help="also measure movers/ at this git commit (e.g. main)")
    parser.add_argument("--full-verify", action="store_true", help="also run verify of everything (reads every chunk)")
    parser.add_argument("--sample", type=float, default=0.05, help="verify --sample fraction (default 0.05)")
    parser.add_argument(
        "--compare-max",
        type=int,
        default=1_000_000,
        help="run the baseline only in repositories up to this many chunks",
    )
    parser.add_argument(
        "--verify-max",
        type=int,
        default=1_000_000,
        help="run a full verify only in repositories up to this many chunks",
    )
    parser.add_argument("--chunks-per-volume", type=int, default=25_000)
    parser.add_argument("--chunks-per-pack", type=int, default=256)
    parser.add_argument("--entries-per-page", type=int, default=256)
    parser.add_argument("--forgotten", type=int, default=50, help="backups per volume without a manifest")
    parser.add_argument("--kept", type=int, default=60, help="backups per volume with a manifest")
    parser.add_argument(
        "--change-share", type=float, default=0.3, help="share of a volume's chunks the incrementals add"
    )
    parser.add_argument("--dup-share", type=float, default=0.01, help="share of referenced chunks stored again")
    parser.add_argument("--generate", metavar="JSON", help=argparse.SUPPRESS)
    scalelib.add_common_args(parser, "maintenance")
    args = scalelib.parse_args(parser, argv)
    if args.generate:
        return generate(json.loads(args.generate))
    if args.kept < 1 or args.forgotten < 0 or args.chunks_per_pack < 1 or args.entries_per_page < 1:
        parser.error("--kept, --chunks-per-pack and --entries-per-page must be >= 1, --forgotten >= 0")
    args.commands = [c for c in COMMANDS if c != "verify" or args.full_verify]
    return benchlib.run_main(args, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> int:
    codes = {}
    if args.baseline:
        codes["before"] = baseline_cli(scratch, args.baseline)
    codes["after"] = Cli.for_scratch(scratch, args.live)
    info = codes["after"].machine_info()
    log(f"codes: {', '.join(f'{name}: {cli.code}' for name, cli in codes.items())}; load {info['load_start']}")
    bench = Bench(args, scratch, codes)
    started = time.monotonic()
    run_bench(bench)
    log(f"measured in {time.monotonic() - started:.1f} s")
    body = report(bench)
    print(body)
    if args.write_docs:
        scalelib.write_section("maintenance", docs_text(bench, body, info))
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
