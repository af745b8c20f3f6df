#!/usr/bin/env python3
"""End-to-end benchmark of the cbt-mover engine against restic and zstd (a benchmark, not a test).

Run it with ``make bench`` or directly::

    .venv/bin/python bench/engine_bench.py [--size 2G] [--workdir DIR] [--keep]
                                           [--skip-restic] [--skip-s3] [--skip-mem]
                                           [--seed N] [--enc-repeats N] [--write-docs]
                                           [--write-encryption-docs]

Every measurement is a separate subprocess (the ``cbt-mover`` CLI, ``restic``, ``zstd``) whose
wall time, CPU time and peak RSS (``os.wait4``) are recorded. The page cache is dropped before
every measured phase when that is allowed (root); otherwise every tool runs warm, in the same
order. Phases:

1. Build a sparse volume image (``--size``, default 2 GiB) at 4 KiB granularity, deterministic
   from ``--seed``: about 40 % random, 30 % text-like (log / YAML lines), 15 % zeros (holes,
   never written) and 15 % repeated blocks, in runs of 4 KiB to 8 MiB.
2. ``zstd -T0 -3`` over the image: the compression limit.
3. Full backups: ``cbt-mover backup --extents`` listing the allocated ranges (what CBT
   GetMetadataAllocated feeds), ``cbt-mover backup --scan`` into a second repository, and
   ``restic backup`` of the image file.
4. Pwrite random bytes over 1 % of the 4 KiB blocks (seeded), then incrementals: ``--extents``
   listing exactly the changed blocks (adjacent ones coalesced), ``--scan`` in the scan
   repository, and ``restic backup`` again.
5. Restores of the latest backup to a new file (both cbt-mover repositories and restic), each
   checked by sha256 against the mutated image.
6. Encryption cost: ``--enc-repeats`` (default 3) pairs of a full ``--extents`` backup of the mutated
   image into a fresh unencrypted repository and a restore of it, and the same into a fresh encrypted
   repository (``init --key-file``, 32 random bytes written into the scratch dir), alternating which
   mode goes first; the medians give MiB/s unencrypted vs encrypted and the goal verdict (<= 10 %
   slower). Then the one-off cost of a passphrase: ``ls`` opened by a passphrase slot (scrypt at the
   default cost) vs by the key file.
7. "S3 (moto)": a ``moto_server`` subprocess on 127.0.0.1, full ``--extents`` backup of the
   mutated image to ``s3://bench/repo`` and a restore from it (moto is stopped in every outcome).
8. Memory: peak RSS of ``--scan`` and ``--extents`` backups of a 1 GiB and an 8 GiB sparse volume
   holding the same 256 MiB of mixed data; the 8G/1G ratio.

It prints a markdown table, the ratios the goals need (full and restore throughput vs restic,
incremental amplification vs restic and fixed 1 MiB / 4 MiB grids, peak RSS, 8G/1G RSS) and
the goal verdicts, then the "Encryption cost" section (between ``<!-- section:encryption -->``
markers).

Flags:

``--write-docs``  also write the same report plus machine info (CPU, cores, RAM, kernel, Python,
                  restic and zstd versions, git commit, date) to ``docs/benchmarks.md``;
                  ``make bench`` passes it.
``--write-encryption-docs``  replace only the encryption cost section of ``docs/benchmarks.md`` (appended
                  when the page has none), keeping the rest, e.g. a restic comparison this machine
                  cannot rerun.
``--enc-repeats`` pairs for the encryption cost (default 3; 0 skips the phase).
``--size``        image size (``2G``, ``512M``, bytes; a multiple of 4 KiB), default 2G.
``--workdir``     parent of the scratch directory (default: the system temp dir, i.e. /tmp).
``--keep``        keep the scratch directory (images, repositories, logs) for inspection.
``--skip-restic`` do not run restic (when restic is missing and cannot be installed it is
                  skipped too; as root with apt-get it is installed automatically).
``--skip-s3``     skip the moto phase; ``--skip-mem`` skip the 1G/8G memory phase.
``--cli CMD``     command running cbt-mover. Default: ``movers/`` is copied into the scratch dir at
                  the start and run from there with ``.venv/bin/python -P -m movers``, so every
                  phase measures the same code even while the working tree is being edited;
                  ``--cli live`` runs ``.venv/bin/cbt-mover`` on the working tree instead.

The scratch directory is removed in every outcome unless ``--keep``. Exit status: 0 when every
phase ran and every restore matched (goal misses are reported, not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
from benchlib import ROOT, BenchError, GiB, KiB, MiB, Proc, Runner, last_json, log, proc_cpu, x_ratio  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
BLOCK = 4096
VOLUME = "bench-vol"
MIX = {"random": 0.40, "text": 0.30, "zero": 0.15, "repeat": 0.15}
MAX_RUN_LOG2 = 11  # runs of 1 .. 2048 blocks (4 KiB .. 8 MiB), log-uniform
MEM_SIZES = (1 * GiB, 8 * GiB)
MEM_DATA = 256 * MiB
MEM_SEGMENTS = 64
GOALS = {"full_x": 1.5, "restore_x": 1.5, "amp": 2.0, "rss_mib": 300.0, "rss_ratio": 1.2, "enc_cost": 0.10}
ENC_MODES = ("unencrypted", "encrypted")
ENC_SECTION = "encryption"  # the marked section of DOCS the encryption cost owns (--write-encryption-docs)
KDF_REPEATS = 3
# Settings that give cbt-mover a repository key (movers/repo/keys.py); the bench gives its own, explicitly.
ENC_KEY_ENV = (
    "CBT_MOVER_PASSWORD",
    "CBT_MOVER_PASSWORD_FILE",
    "CBT_MOVER_KEY_FILE",
    "CBT_MOVER_KMS_KEY",
    "CBT_MOVER_NEW_PASSWORD",
    "CBT_MOVER_KDF_COST",
)

# ---------------------------------------------------------------------------------------------
# Data generation


_WORDS = (
    "alpha beta gamma delta kube-system default monitoring ingress volume snapshot replica controller "
    "etcd scheduler kubelet csi-driver node pod service endpoint deployment statefulset daemonset "
    "backup restore mover prefect flow task worker queue retry timeout healthy ready pending"
).split()
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")


def _text_pool(rng: random.Random, n: int = 30000) -> list[str]:
    """Distinct log / YAML-ish lines with varying numbers (compressible like real text)."""
    pool = []
    for i in range(n):
        w = rng.choice(_WORDS)
        v = rng.choice(_WORDS)
        kind = i % 5
        if kind == 0:
            pool.append(
                f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                f"{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}Z {rng.choice(_LEVELS)}"
                f" {w}[{rng.randint(1, 65535)}]:"
                f" request id={rng.getrandbits(32):08x} path=/api/v1/namespaces/{v}/pods/{w}-{rng.getrandbits(20):05x}"
                f" status={rng.choice((200, 200, 201, 404, 409, 500))} latency_ms={rng.randint(0, 5000)}\n"
            )
        elif kind == 1:
            pool.append(
                f"  - name: {w}-{rng.randint(0, 999)}\n    image: registry.local/{v}:{rng.randint(0, 9)}."
                f"{rng.randint(0, 40)}.{rng.randint(0, 99)}\n    replicas: {rng.randint(1, 12)}\n"
            )
        elif kind == 2:
            pool.append(
                f"[{rng.uniform(0, 900000):14.6f}] EXT4-fs (vd{chr(97 + rng.randint(0, 7))}{rng.randint(1, 9)}):"
                f" mounted filesystem {rng.getrandbits(64):016x} with ordered data mode. Quota mode: none.\n"
            )
        elif kind == 3:
            ip = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
            pool.append(f'{w}_{v}_bytes_total{{instance="{ip}:9100"}} {rng.randint(0, 10**12)}\n')
        else:
            pool.append(f"    {w}: {rng.choice(('true', 'false', str(rng.randint(0, 100000)), v))}  # {v} {w}\n")
    return pool


class Content:
    """Seeded generator of the block kinds, and of run plans mixing them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.text_pool = _text_pool(self.rng)
        self.avg_line = sum(map(len, self.text_pool)) / len(self.text_pool)
        self.block_pool = [self.rng.randbytes(BLOCK) for _ in range(48)]
        self.block_pool += [self.text(BLOCK) for _ in range(16)]

    def plan(self, nblocks: int, mix: dict[str, float]) -> list[tuple[str, int, int]]:
        """``(kind, first block, blocks)`` runs covering ``nblocks``, with exact kind totals."""
        kinds = [k for k, w in mix.items() if w > 0]
        total_w = sum(mix[k] for k in kinds)
        budget = {k: int(nblocks * mix[k] / total_w) for k in kinds}
        budget[kinds[0]] += nblocks - sum(budget.values())
        runs = []
        pos = 0
        while pos < nblocks:
            live = [k for k in kinds if budget[k] > 0]
            kind = self.rng.choices(live, weights=[budget[k] for k in live])[0]
            n = min(int(2 ** self.rng.uniform(0, MAX_RUN_LOG2)), budget[kind])
            budget[kind] -= n
            if runs and runs[-1][0] == kind:
                k, s, m = runs[-1]
                runs[-1] = (k, s, m + n)
            else:
                runs.append((kind, pos, n))
            pos += n
        return runs

    def random_bytes(self, n: int):
        while n > 0:
            m = min(n, MiB)
            yield self.rng.randbytes(m)
            n -= m

    def text(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            k = int((n - len(out)) / self.avg_line) + 16
            out += "".join(self.rng.choices(self.text_pool, k=k)).encode()
        return out[:n]

    def text_bytes(self, n: int):
        while n > 0:
            m = min(n, MiB)
            yield self.text(m)
            n -= m

    def repeat_bytes(self, n: int):
        motif = b"".join(self.rng.sample(self.block_pool, self.rng.randint(1, 4)))
        reps = -(-n // len(motif))
        data = motif * reps
        yield data[:n]

    def write(self, fd: int, kind: str, offset: int, length: int) -> None:
        gen = {"random": self.random_bytes, "text": self.text_bytes, "repeat": self.repeat_bytes}[kind]
        for piece in gen(length):
            _pwrite_all(fd, piece, offset)
            offset += len(piece)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


def coalesce(extents) -> list[tuple[int, int]]:
    """Sort and merge overlapping or adjacent ``(offset, length)`` extents."""
    out: list[list[int]] = []
    for off, length in sorted(extents):
        if out and off <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], off + length - out[-1][0])
        else:
            out.append([off, length])
    return [(o, n) for o, n in out]


@dataclass
class Image:
    path: Path
    size: int
    runs: list[tuple[str, int, int]]
    kind_bytes: dict[str, int]
    data_extents: list[tuple[int, int]]
    gen_s: float


def build_image(path: Path, size: int, seed: int) -> Image:
    started = time.monotonic()
    content = Content(seed)
    nblocks = size // BLOCK
    runs = content.plan(nblocks, MIX)
    kind_bytes = dict.fromkeys(MIX, 0)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        for kind, first, n in runs:
            kind_bytes[kind] += n * BLOCK
            if kind != "zero":
                content.write(fd, kind, first * BLOCK, n * BLOCK)
    finally:
        os.close(fd)
    data = coalesce((first * BLOCK, n * BLOCK) for kind, first, n in runs if kind != "zero")
    return Image(path, size, runs, kind_bytes, data, time.monotonic() - started)


def mutate(path: Path, size: int, seed: int, fraction: float = 0.01) -> list[int]:
    """Pwrite random bytes over ``fraction`` of the 4 KiB blocks; return the sorted block numbers."""
    rng = random.Random(seed ^ 0x5EED)
    nblocks = size // BLOCK
    blocks = sorted(rng.sample(range(nblocks), max(1, int(nblocks * fraction))))
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        for b in blocks:
            _pwrite_all(fd, rng.randbytes(BLOCK), b * BLOCK)
    finally:
        os.close(fd)
    return blocks


def build_sparse_volume(path: Path, size: int, seed: int) -> list[tuple[int, int]]:
    """``size`` bytes of holes with the same ``MEM_DATA`` bytes of mixed data (any size) in
    ``MEM_SEGMENTS`` segments spread over the volume; return the data extents."""
    content = Content(seed + 1)
    positions = random.Random(seed + 2)
    seg = MEM_DATA // MEM_SEGMENTS
    stride = size // MEM_SEGMENTS
    mix = {k: w for k, w in MIX.items() if k != "zero"}
    extents = []
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        for i in range(MEM_SEGMENTS):
            base = i * stride + positions.randrange(0, (stride - seg) // BLOCK + 1) * BLOCK
            for kind, first, n in content.plan(seg // BLOCK, mix):
                content.write(fd, kind, base + first * BLOCK, n * BLOCK)
            extents.append((base, seg))
    finally:
        os.close(fd)
    return extents


def write_extents(path: Path, extents) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for off, length in extents:
            f.write(f'{{"offset": {off}, "length": {length}}}\n')
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    buf = bytearray(8 * MiB)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def dir_stats(path: Path) -> tuple[int, int]:
    """``(files, apparent bytes)`` under ``path``."""
    files = size = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                size += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
    return files, size


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class Row:
    phase: str
    tool: str
    wall: float
    rate: float | None = None  # bytes/s
    uploaded: int | None = None
    objects: int | None = None
    rss: int | None = None
    cpu: float | None = None
    new_data: int | None = None
    repo_growth: int | None = None
    note: str = ""


def _mib(n: int | float | None, digits: int = 1) -> str:
    return "–" if n is None else f"{n / MiB:,.{digits}f}"


def table(rows: list[Row]) -> str:
    head = (
        "| phase | tool | wall s | MiB/s | uploaded MiB | objects | peak RSS MiB | CPU s | new data MiB |"
        " repo +MiB | notes |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        lines.append(
            f"| {r.phase} | {r.tool} | {r.wall:.2f} | {_mib(r.rate, 0)} | {_mib(r.uploaded)} |"
            f" {'–' if r.objects is None else r.objects} | {_mib(r.rss, 0)} |"
            f" {'–' if r.cpu is None else f'{r.cpu:.1f}'} | {_mib(r.new_data)} | {_mib(r.repo_growth)} | {r.note} |"
        )
    return "\n".join(lines)


@dataclass
class Bench:
    args: argparse.Namespace
    scratch: Path
    runner: Runner
    cli: list[str]
    cli_env: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    enc_rows: list[Row] = field(default_factory=list)  # the encryption cost pairs, reported in their own section
    results: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    # -- cbt-mover ------------------------------------------------------------------------------

    def cbt(self, args: list[str], label: str, env: dict | None = None) -> tuple[Proc, dict]:
        p = self.runner.run([*self.cli, *args, "--json"], label, env={**(env or os.environ), **self.cli_env})
        return p, last_json(p.stdout)

    def cbt_init(self, url: str, env: dict | None = None) -> None:
        self.cbt(["init", "--insecure-no-encryption", "--repo", url], f"init {url}", env=env)

    def cbt_backup(
        self,
        phase: str,
        tool: str,
        url: str,
        repo_dir: Path | None,
        device: Path,
        source: list[str],
        capacity: int,
        *,
        rate: bool,
        env: dict | None = None,
        objects_fn=None,
        rows: list[Row] | None = None,
    ) -> dict:
        """A measured backup (cache dropped first) whose row goes to ``rows`` (default: the main table)."""
        before = dir_stats(repo_dir) if repo_dir else objects_fn()
        self.runner.drop_caches()
        p, res = self.cbt(
            ["backup", "--repo", url, "--volume", VOLUME, "--device", str(device), *source], f"{phase} {tool}", env=env
        )
        after = dir_stats(repo_dir) if repo_dir else objects_fn()
        note = f"mode {res['mode']}, read {_mib(res['read_bytes'])} MiB"
        (self.rows if rows is None else rows).append(
            Row(
                phase,
                tool,
                p.wall,
                capacity / p.wall if rate else None,
                res["stored_bytes"],
                after[0] - before[0],
                p.maxrss,
                p.cpu,
                res["new_chunk_bytes"],
                after[1] - before[1],
                note,
            )
        )
        res.update(wall=p.wall, rss=p.maxrss, cpu=p.cpu, objects=after[0] - before[0], growth=after[1] - before[1])
        log(
            f"{phase} / {tool}: {p.wall:.2f} s, {res['mode']}, new {_mib(res['new_chunk_bytes'])} MiB,"
            f" stored {_mib(res['stored_bytes'])} MiB, RSS {_mib(p.maxrss, 0)} MiB"
        )
        return res

    def cbt_restore(
        self,
        phase: str,
        tool: str,
        url: str,
        target: Path,
        expect: str,
        capacity: int,
        env: dict | None = None,
        *,
        extra: list[str] | None = None,
        rows: list[Row] | None = None,
    ) -> dict:
        """A measured restore of the latest backup (cache dropped first, ``extra`` options appended), checked by
        sha256 against ``expect``; its row goes to ``rows`` (default: the main table)."""
        self.runner.drop_caches()
        p, res = self.cbt(
            ["restore", "--repo", url, "--volume", VOLUME, "--device", str(target), *(extra or [])],
            f"{phase} {tool}",
            env=env,
        )
        ok = sha256_file(target) == expect
        target.unlink()
        if not ok:
            self.failures.append(f"{phase} / {tool}: restored image sha256 differs from the source")
        (self.rows if rows is None else rows).append(
            Row(
                phase,
                tool,
                p.wall,
                capacity / p.wall,
                None,
                None,
                p.maxrss,
                p.cpu,
                None,
                None,
                f"sha256 {'OK' if ok else 'MISMATCH'}, fetched {_mib(res.get('fetched_bytes'))} MiB, fsync",
            )
        )
        res.update(wall=p.wall, rss=p.maxrss, cpu=p.cpu, ok=ok)
        log(f"{phase} / {tool}: {p.wall:.2f} s, sha256 {'OK' if ok else 'MISMATCH'}, RSS {_mib(p.maxrss, 0)} MiB")
        return res

    # -- restic ---------------------------------------------------------------------------------

    def restic_env(self) -> dict:
        env = dict(os.environ)
        env.update(
            RESTIC_PASSWORD="bench-password",
            RESTIC_REPOSITORY=str(self.scratch / "restic-repo"),
            RESTIC_CACHE_DIR=str(self.scratch / "restic-cache"),
        )
        return env

    def restic_backup(self, phase: str, image: Image, rate: bool) -> dict:
        repo = self.scratch / "restic-repo"
        before = dir_stats(repo)
        self.runner.drop_caches()
        p = self.runner.run(
            ["restic", "backup", "--host", "bench", "--json", str(image.path)], f"{phase} restic", env=self.restic_env()
        )
        after = dir_stats(repo)
        summary = last_json(p.stdout, lambda d: d.get("message_type") == "summary")
        packed = summary.get("data_added_packed")
        growth = after[1] - before[1]
        self.rows.append(
            Row(
                phase,
                "restic",
                p.wall,
                image.size / p.wall if rate else None,
                packed if packed is not None else growth,
                after[0] - before[0],
                p.maxrss,
                p.cpu,
                summary["data_added"],
                growth,
                "uploaded = data_added_packed" if packed is not None else "uploaded = repo growth",
            )
        )
        log(f"{phase} / restic: {p.wall:.2f} s, added {_mib(summary['data_added'])} MiB, repo +{_mib(growth)} MiB")
        return {
            "wall": p.wall,
            "rss": p.maxrss,
            "data_added": summary["data_added"],
            "growth": growth,
            "packed": packed,
        }

    def restic_restore(self, phase: str, image: Image, expect: str) -> dict:
        target = self.scratch / "restic-restore"
        self.runner.drop_caches()
        p = self.runner.run(
            ["restic", "restore", "latest", "--host", "bench", "--target", str(target)],
            f"{phase} restic",
            env=self.restic_env(),
        )
        restored = target / image.path.relative_to(image.path.anchor)
        started = time.monotonic()
        fd = os.open(restored, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_s = time.monotonic() - started
        ok = sha256_file(restored) == expect
        shutil.rmtree(target)
        if not ok:
            self.failures.append(f"{phase} / restic: restored image sha256 differs from the source")
        self.rows.append(
            Row(
                phase,
                "restic",
                p.wall,
                image.size / p.wall,
                None,
                None,
                p.maxrss,
                p.cpu,
                None,
                None,
                f"sha256 {'OK' if ok else 'MISMATCH'}; +{fsync_s:.2f} s to fsync the file afterwards",
            )
        )
        log(f"{phase} / restic: {p.wall:.2f} s (+{fsync_s:.2f} s fsync), sha256 {'OK' if ok else 'MISMATCH'}")
        return {"wall": p.wall, "wall_fsync": p.wall + fsync_s, "rss": p.maxrss, "ok": ok}


# ---------------------------------------------------------------------------------------------
# Tools


def ensure_tool(name: str, package: str) -> bool:
    if shutil.which(name):
        return True
    log(f"{name} is not on PATH; install it with: apt-get install -y {package}")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        log(f"running as root with apt-get: installing {package}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
            if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
                log(f"`{shlex.join(cmd)}` failed")
                return False
    return shutil.which(name) is not None


def tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "not available"


def snapshot_code(scratch: Path) -> tuple[list[str], dict[str, str], str]:
    """``(command, env, description)`` running a copy of ``movers/`` taken now (``benchlib.snapshot_code``)
    with ``python -P -m movers``."""
    src, desc = benchlib.snapshot_code(scratch, ["movers"])
    return [benchlib.python(), "-P", "-m", "movers"], {"PYTHONPATH": str(src)}, desc


def find_cli(arg: str) -> list[str]:
    if arg != "live":
        return shlex.split(arg)
    venv = ROOT / ".venv" / "bin" / "cbt-mover"
    if venv.exists():
        return [str(venv)]
    found = shutil.which("cbt-mover")
    return [found] if found else [sys.executable, "-m", "movers"]


@contextlib.contextmanager
def moto_server(logdir: Path):
    """Yield ``(endpoint_url, pid)`` of the project's moto S3 server; stopped in every outcome."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from localcluster.s3 import moto_s3

    with moto_s3() as server:
        yield server.endpoint_url, server.process.pid


def machine_info(cli: list[str]) -> dict[str, str]:
    """``benchlib.machine_info()`` plus python (the one running ``cli``), restic and zstd versions."""
    python = Path(cli[0]).with_name("python")
    python = cli[0] if "python" in Path(cli[0]).name else str(python) if python.exists() else sys.executable
    py = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True)
    return {
        **benchlib.machine_info(),
        "python": py.stdout.strip() or platform.python_version(),
        "restic": tool_version(["restic", "version"]),
        "zstd": tool_version(["zstd", "--version"]),
    }


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 2G, 512M, 1073741824)")
    value = int(float(m.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}[m.group(2).upper()])
    if value < 16 * MiB or value % BLOCK:
        raise argparse.ArgumentTypeError("size must be at least 16M and a multiple of 4 KiB")
    return value


# ---------------------------------------------------------------------------------------------
# The benchmark


def run_bench(b: Bench) -> None:
    args = b.args
    s = b.scratch
    size = args.size
    file_url = lambda p: "file://" + str(p)  # noqa: E731

    log(f"building a {_mib(size, 0)} MiB image in {s}")
    image = build_image(s / "volume.img", size, args.seed)
    allocated = sum(n for _o, n in image.data_extents)
    b.results["image"] = image
    log(
        f"image built in {image.gen_s:.1f} s: "
        + ", ".join(f"{k} {_mib(v, 0)} MiB" for k, v in image.kind_bytes.items())
        + f"; {len(image.runs)} runs, {len(image.data_extents)} allocated extents ({_mib(allocated, 0)} MiB)"
    )

    # -- zstd: the compression limit
    if b.results["have_zstd"]:
        zst = s / "volume.img.zst"
        b.runner.drop_caches()
        p = b.runner.run(["zstd", "-T0", "-3", "-q", "-f", "-o", str(zst), str(image.path)], "zstd -3")
        zsize = zst.stat().st_size
        zst.unlink()
        b.results["zstd"] = {"wall": p.wall, "size": zsize}
        b.rows.append(
            Row(
                "compress image",
                "zstd -T0 -3",
                p.wall,
                size / p.wall,
                zsize,
                None,
                p.maxrss,
                p.cpu,
                size,
                None,
                f"ratio {size / zsize:.2f} (image incl. holes)",
            )
        )
        log(f"zstd -T0 -3: {p.wall:.2f} s, {_mib(zsize)} MiB")

    # -- full backups
    cbt_repo, scan_repo = s / "repo-cbt", s / "repo-scan"
    b.cbt_init(file_url(cbt_repo))
    b.cbt_init(file_url(scan_repo))
    full_ext = write_extents(s / "allocated.jsonl", image.data_extents)
    b.results["full_cbt"] = b.cbt_backup(
        "full",
        "cbt-mover --extents",
        file_url(cbt_repo),
        cbt_repo,
        image.path,
        ["--extents", str(full_ext)],
        size,
        rate=True,
    )
    b.results["full_scan"] = b.cbt_backup(
        "full", "cbt-mover --scan", file_url(scan_repo), scan_repo, image.path, ["--scan"], size, rate=True
    )
    if b.results["have_restic"]:
        b.runner.run(["restic", "init"], "restic init", env=b.restic_env())
        b.results["full_restic"] = b.restic_backup("full", image, rate=True)

    # -- 1 % scattered changes and incrementals
    blocks = mutate(image.path, size, args.seed)
    changed = coalesce((blk * BLOCK, BLOCK) for blk in blocks)
    changed_bytes = len(blocks) * BLOCK
    b.results["changed"] = {"blocks": len(blocks), "bytes": changed_bytes, "extents": len(changed), "list": blocks}
    log(f"mutated {len(blocks)} blocks ({_mib(changed_bytes)} MiB) in {len(changed)} extents")
    incr_ext = write_extents(s / "changed.jsonl", changed)
    b.results["incr_cbt"] = b.cbt_backup(
        "incremental 1 %",
        "cbt-mover --extents",
        file_url(cbt_repo),
        cbt_repo,
        image.path,
        ["--extents", str(incr_ext), "--parent", b.results["full_cbt"]["backup_id"]],
        size,
        rate=False,
    )
    b.results["incr_scan"] = b.cbt_backup(
        "incremental 1 %", "cbt-mover --scan", file_url(scan_repo), scan_repo, image.path, ["--scan"], size, rate=False
    )
    if b.results["have_restic"]:
        b.results["incr_restic"] = b.restic_backup("incremental 1 %", image, rate=False)

    # -- restores
    expect = sha256_file(image.path)
    b.results["restore_cbt"] = b.cbt_restore(
        "restore latest", "cbt-mover (cbt repo)", file_url(cbt_repo), s / "restore-cbt.img", expect, size
    )
    b.results["restore_scan"] = b.cbt_restore(
        "restore latest", "cbt-mover (scan repo)", file_url(scan_repo), s / "restore-scan.img", expect, size
    )
    if b.results["have_restic"]:
        b.results["restore_restic"] = b.restic_restore("restore latest", image, expect)

    mutated_ext = write_extents(s / "allocated-mutated.jsonl", coalesce([*image.data_extents, *changed]))

    # -- encryption cost: unencrypted vs encrypted full backup and restore, in pairs
    if args.enc_repeats:
        encryption_phase(b, image, mutated_ext, expect)
    else:
        b.notes.append("Encryption cost phase skipped (--enc-repeats 0).")

    # -- S3 (moto)
    if args.skip_s3:
        b.notes.append("S3 (moto) phase skipped (--skip-s3).")
    else:
        try:
            s3_phase(b, image, mutated_ext, expect)
        except (BenchError, RuntimeError, OSError) as err:
            b.failures.append(f"S3 (moto) phase failed: {err}")
            log(b.failures[-1])

    # -- memory: 1 GiB vs 8 GiB sparse volumes with the same data
    if args.skip_mem:
        b.notes.append("Memory phase skipped (--skip-mem).")
    else:
        mem = {}
        for vsize in MEM_SIZES:
            vol = s / f"sparse-{vsize // GiB}g.img"
            extents = build_sparse_volume(vol, vsize, args.seed)
            ext_file = write_extents(s / f"sparse-{vsize // GiB}g.jsonl", extents)
            label = f"memory {vsize // GiB} GiB sparse"
            for mode, source in (("scan", ["--scan"]), ("extents", ["--extents", str(ext_file)])):
                repo = s / f"repo-mem-{vsize // GiB}g-{mode}"
                b.cbt_init(file_url(repo))
                mem[(vsize, mode)] = b.cbt_backup(
                    label, f"cbt-mover --{mode}", file_url(repo), repo, vol, source, vsize, rate=True
                )
                shutil.rmtree(repo)
            vol.unlink()
        b.results["mem"] = mem


def key_free_env() -> dict[str, str]:
    """This process's environment without any repository key setting: the unencrypted runs must not carry a
    key (refused, exit 2) and the encrypted ones must use exactly the key the bench gives."""
    return {k: v for k, v in os.environ.items() if k not in ENC_KEY_ENV}


def encryption_phase(b: Bench, image: Image, ext_file: Path, expect: str) -> None:
    """``--enc-repeats`` pairs of (full ``--extents`` backup + restore) of the mutated image into a fresh
    unencrypted and a fresh encrypted repository (a 32-byte random key file), alternating which goes first;
    each run drops the page cache like every other phase. Then the one-off cost of opening with a passphrase
    (scrypt at the default cost) against the key file, timed on ``ls``."""
    s = b.scratch
    key_file = s / "bench.key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _pwrite_all(fd, os.urandom(32), 0)
    finally:
        os.close(fd)
    env = key_free_env()
    key = ["--key-file", str(key_file)]
    reps = b.args.enc_repeats
    runs: dict[str, dict[str, list[dict]]] = {mode: {"full": [], "restore": []} for mode in ENC_MODES}
    for i in range(reps):
        order = ENC_MODES if i % 2 == 0 else tuple(reversed(ENC_MODES))
        for mode in order:
            repo = s / f"repo-enc-cost-{mode}"
            url = "file://" + str(repo)
            opts = key if mode == "encrypted" else []
            if mode == "encrypted":
                b.cbt(["init", "--repo", url, *key], f"init {url}", env=env)
            else:
                b.cbt_init(url, env=env)
            runs[mode]["full"].append(
                b.cbt_backup(
                    f"pair {i + 1}/{reps} full",
                    f"cbt-mover --extents, {mode}",
                    url,
                    repo,
                    image.path,
                    ["--extents", str(ext_file), *opts],
                    image.size,
                    rate=True,
                    env=env,
                    rows=b.enc_rows,
                )
            )
            runs[mode]["restore"].append(
                b.cbt_restore(
                    f"pair {i + 1}/{reps} restore",
                    f"cbt-mover, {mode}",
                    url,
                    s / "restore-enc-cost.img",
                    expect,
                    image.size,
                    env=env,
                    extra=opts,
                    rows=b.enc_rows,
                )
            )
            if mode == "encrypted" and i == reps - 1:
                b.results["kdf"] = kdf_open_cost(b, url, key, env)
            shutil.rmtree(repo)
    b.results["enc"] = runs
    b.results["enc_extents"] = sum(1 for _line in open(ext_file, encoding="utf-8"))


def kdf_open_cost(b: Bench, url: str, key: list[str], env: dict[str, str]) -> dict:
    """Add a passphrase slot at the default scrypt cost, then time ``ls`` opened by it and by the key file,
    ``KDF_REPEATS`` times each, alternating (warm cache: this measures the key derivation, not I/O)."""
    password = os.urandom(12).hex()
    b.cbt(["key", "add", "--repo", url, *key], "key add passphrase", env={**env, "CBT_MOVER_NEW_PASSWORD": password})
    _p, listed = b.cbt(["key", "list", "--repo", url, *key], "key list", env=env)
    kdf = next((slot["kdf"] for slot in listed["slots"] if slot.get("kdf")), None) or {}
    how = {"key file": (key, env), "passphrase": ([], {**env, "CBT_MOVER_PASSWORD": password})}
    walls: dict[str, list[float]] = {name: [] for name in how}
    for i in range(KDF_REPEATS):
        for name in list(how) if i % 2 == 0 else list(reversed(how)):
            opts, run_env = how[name]
            p, _res = b.cbt(["ls", "--repo", url, *opts], f"ls with {name}", env=run_env)
            walls[name].append(p.wall)
    res = {name: statistics.median(w) for name, w in walls.items()}
    res["kdf"] = kdf
    log(
        f"open cost: ls {res['passphrase']:.2f} s with a passphrase (scrypt {kdf}) vs {res['key file']:.2f} s with"
        " the key file"
    )
    return res


def s3_phase(b: Bench, image: Image, ext_file: Path, expect: str) -> None:
    with moto_server(b.scratch / "logs") as (endpoint, moto_pid):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=endpoint,
            AWS_CONFIG_FILE=str(b.scratch / "aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(b.scratch / "aws-credentials"),
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        client = _s3_client(endpoint)
        if client is not None:
            client.create_bucket(Bucket="bench")
        else:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            opener.open(urllib.request.Request(endpoint + "/bench", method="PUT"), timeout=10).close()

        def objects() -> tuple[int, int]:
            if client is None:
                return 0, 0
            n = total = 0
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix="repo/"):
                for obj in page.get("Contents", []):
                    n += 1
                    total += obj["Size"]
            return n, total

        url = "s3://bench/repo"
        b.cbt_init(url, env=env)
        cpu0 = proc_cpu(moto_pid)
        b.results["s3_full"] = b.cbt_backup(
            "S3 (moto) full",
            "cbt-mover --extents",
            url,
            None,
            image.path,
            ["--extents", str(ext_file)],
            image.size,
            rate=True,
            env=env,
            objects_fn=objects,
        )
        cpu1 = proc_cpu(moto_pid)
        b.rows[-1].note += f"; moto server used {cpu1 - cpu0:.1f} CPU s"
        b.results["s3_restore"] = b.cbt_restore(
            "S3 (moto) restore", "cbt-mover", url, b.scratch / "restore-s3.img", expect, image.size, env=env
        )
        b.rows[-1].note += f"; moto server used {proc_cpu(moto_pid) - cpu1:.1f} CPU s"


def _s3_client(endpoint: str):
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        return None
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )


# ---------------------------------------------------------------------------------------------
# Report


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**MISSED**")


def encryption_summary(b: Bench) -> list[dict]:
    """Per operation (full backup, restore): median MiB/s and CPU s of each mode over the pairs, the ratio of
    the medians (encrypted / unencrypted), each pair's own ratio, and whether the goal is met."""
    size = b.results["image"].size
    runs = b.results["enc"]
    out = []
    for op, name in (("full", "full backup (`--extents`)"), ("restore", "restore")):
        plain, enc = runs["unencrypted"][op], runs["encrypted"][op]
        rate = {m: statistics.median(size / r["wall"] for r in runs[m][op]) for m in ENC_MODES}
        cpu = {m: statistics.median(r["cpu"] for r in runs[m][op]) for m in ENC_MODES}
        ratio = rate["encrypted"] / rate["unencrypted"]
        pairs = [p["wall"] / e["wall"] for p, e in zip(plain, enc, strict=True)]
        out.append(
            {
                "op": op,
                "name": name,
                "rate": rate,
                "cpu": cpu,
                "ratio": ratio,
                "pairs": pairs,
                "ok": ratio >= 1 - GOALS["enc_cost"],
            }
        )
    return out


def _slower(ratio: float) -> str:
    cost = 1 - ratio
    return f"{cost:.1%} slower" if cost >= 0 else f"{-cost:.1%} faster"


def encryption_report(b: Bench, info: dict[str, str]) -> str:
    """The "Encryption cost" section: context of the run, every run of the pairs, the summary with the goal
    verdicts, and the one-off passphrase cost. Self-contained: ``--write-encryption-docs`` writes it alone."""
    reps = b.args.enc_repeats
    image: Image = b.results["image"]
    summary = encryption_summary(b)
    drop = "dropped before every backup and restore" if b.runner.can_drop else "NOT dropped (not permitted): warm"
    lines = [
        "### Encryption cost",
        "",
        f"Issue 13 goal: encryption costs <= {GOALS['enc_cost']:.0%} of full backup and restore throughput."
        f" Run {info['date']}, commit {info['git']} ({info['code']}), Python {info['python']},"
        f" {info['cores']} cores ({info['cpu']}), load average at the start {info['load_start']}, at the end"
        f" {benchlib.loadavg()}; page cache {drop}.",
        "",
        f"{reps} pair{'s' if reps != 1 else ''} of runs on the same data: the mutated {_mib(image.size, 0)} MiB image"
        f" (after the 1 % writes), a full `--extents` backup of its {b.results['enc_extents']} allocated ranges"
        f" (the {len(image.data_extents)} of the first full backup plus the scattered 4 KiB writes that landed in"
        " holes: more CPU per byte, so these full backups are slower than the first table's `full` row; compare"
        " the pairs with each other) into a fresh repository and a"
        " restore of that backup to a new file (sha256-checked, fsync), once into an unencrypted repository"
        " (`--insecure-no-encryption`) and once into an encrypted one (`cbt-mover init --key-file`, 32 random"
        " bytes the bench writes into its scratch directory). Which mode goes first alternates from pair to"
        " pair. The summary uses the **median** MiB/s of each mode over the pairs (MiB/s: image bytes, holes"
        " included, per wall second); each pair's own ratio shows the noise.",
        "",
        table(b.enc_rows),
        "",
        "| operation | unencrypted MiB/s | encrypted MiB/s | encrypted / unencrypted | cost | per-pair ratios |"
        f" CPU s unencrypted / encrypted | goal (<= {GOALS['enc_cost']:.0%} slower) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        pairs = ", ".join(f"{r:.2f}" for r in row["pairs"])
        lines.append(
            f"| {row['name']} | {row['rate']['unencrypted'] / MiB:,.0f} | {row['rate']['encrypted'] / MiB:,.0f} |"
            f" {row['ratio']:.2f} | {_slower(row['ratio'])} | {pairs} |"
            f" {row['cpu']['unencrypted']:.1f} / {row['cpu']['encrypted']:.1f} | {_verdict(row['ok'])} |"
        )
    lines.append("")
    for row in summary:
        spread = max(row["pairs"]) - min(row["pairs"])
        if len(row["pairs"]) > 1 and spread > GOALS["enc_cost"]:
            lines.append(
                f"* Noisy: the {row['name']} pairs range over {spread:.2f} in ratio ({min(row['pairs']):.2f} to"
                f" {max(row['pairs']):.2f}), more than the {GOALS['enc_cost']:.0%} the goal allows; read the"
                " verdict with that in mind (the host is shared)."
            )
    kdf = b.results.get("kdf")
    if kdf:
        params = kdf["kdf"]
        cost = f"scrypt N=2^{int(params['n']).bit_length() - 1}, r={params['r']}, p={params['p']}" if params else "?"
        lines.append(
            f"* One-off cost of a passphrase: `cbt-mover ls` of the encrypted repository takes"
            f" {kdf['passphrase']:.2f} s opened with `CBT_MOVER_PASSWORD` (a slot added at the default cost, {cost})"
            f" and {kdf['key file']:.2f} s with the key file (HKDF), median of {KDF_REPEATS} each, warm cache:"
            f" **{kdf['passphrase'] - kdf['key file']:+.2f} s** once per command (every backup, restore, ls),"
            " not per byte; the pairs above use the key file."
        )
    return "\n".join(lines)


def report(b: Bench, info: dict[str, str]) -> str:
    r = b.results
    image: Image = r["image"]
    lines = []
    lines.append(table(b.rows))
    lines.append("")
    lines.append(
        "MiB/s is image bytes (holes included) per wall second for full backups, restores and zstd; incremental"
        " rows report time and bytes only. *uploaded* is cbt-mover's `stored_bytes` (compressed packs +"
        " metadata) or restic's repository growth; *new data* is cbt-mover's `new_chunk_bytes` or restic's"
        " `data_added` (both before compression); *objects* are files (or S3 objects) the phase added to the"
        " repository. Restores go to a new file; cbt-mover fsyncs it, restic does not (the fsync time is"
        " added for the comparison below)."
    )
    lines.append("")
    lines.append("### Ratios")
    lines.append("")
    full_ratio = restore_ratio = None
    if "full_restic" in r:
        fr = r["full_restic"]["wall"]
        full_ratio = fr / r["full_cbt"]["wall"]
        lines.append(
            f"* Full backup throughput, cbt-mover `--extents` / restic: **{full_ratio:.2f}x**"
            f" ({_rate(image.size, r['full_cbt']['wall'])} vs {_rate(image.size, fr)} MiB/s);"
            f" `--scan` / restic: {fr / r['full_scan']['wall']:.2f}x"
        )
        rr = r["restore_restic"]
        restore_ratio = rr["wall_fsync"] / r["restore_cbt"]["wall"]
        lines.append(
            f"* Restore throughput, cbt-mover / restic (+fsync): **{restore_ratio:.2f}x**"
            f" ({_rate(image.size, r['restore_cbt']['wall'])} vs {_rate(image.size, rr['wall_fsync'])} MiB/s);"
            f" against restic without fsync: {rr['wall'] / r['restore_cbt']['wall']:.2f}x"
        )
    if "zstd" in r:
        z = r["zstd"]
        lines.append(
            f"* Compression: zstd -T0 -3 over the image gives {_mib(z['size'])} MiB in {z['wall']:.2f} s;"
            f" cbt-mover full stored {_mib(r['full_cbt']['stored_bytes'])} MiB"
            f" ({r['full_cbt']['stored_bytes'] / z['size']:.2f}x the zstd size)"
            + (
                f", restic {_mib(r['full_restic']['growth'])} MiB ({r['full_restic']['growth'] / z['size']:.2f}x)"
                if "full_restic" in r
                else ""
            )
        )
    ch = r["changed"]
    cb = ch["bytes"]
    blocks = ch["list"]
    grid = {g: len({blk * BLOCK // g for blk in blocks}) * g for g in (64 * KiB, MiB, 4 * MiB)}
    amp_cbt = r["incr_cbt"]["new_chunk_bytes"] / cb
    lines.append(
        f"* Incremental after {ch['blocks']} scattered 4 KiB writes ({_mib(cb)} MiB in {ch['extents']}"
        f" extents), amplification = bytes stored as new chunks (before compression) / changed bytes:"
    )
    lines.append(
        f"  * cbt-mover `--extents` (CBT): **{amp_cbt:.2f}x** ({_mib(r['incr_cbt']['new_chunk_bytes'])} MiB new,"
        f" {_mib(r['incr_cbt']['stored_bytes'])} MiB uploaded = {r['incr_cbt']['stored_bytes'] / cb:.2f}x"
        f" changed, in {r['incr_cbt']['wall']:.2f} s)"
    )
    lines.append(
        f"  * cbt-mover `--scan`: {r['incr_scan']['new_chunk_bytes'] / cb:.2f}x"
        f" ({_mib(r['incr_scan']['new_chunk_bytes'])} MiB new, {_mib(r['incr_scan']['stored_bytes'])} MiB"
        f" uploaded, in {r['incr_scan']['wall']:.2f} s)"
    )
    if "incr_restic" in r:
        ir = r["incr_restic"]
        lines.append(
            f"  * restic (CDC): {ir['data_added'] / cb:.2f}x ({_mib(ir['data_added'])} MiB added,"
            f" repo +{_mib(ir['growth'])} MiB = {ir['growth'] / cb:.2f}x changed, in {ir['wall']:.2f} s)"
        )
    for g, label in ((MiB, "1 MiB"), (4 * MiB, "4 MiB"), (64 * KiB, "64 KiB")):
        lines.append(f"  * fixed {label} grid (computed): {grid[g] / cb:.2f}x ({_mib(grid[g])} MiB)")
    cbt_rows = [row for row in b.rows if row.tool.startswith("cbt-mover")]
    peak = max(cbt_rows, key=lambda row: row.rss or 0)
    lines.append(f"* Peak RSS of any cbt-mover run: **{_mib(peak.rss, 0)} MiB** ({peak.phase} / {peak.tool})")
    rss_ratios = {}
    if "mem" in r:
        for mode in ("scan", "extents"):
            small, big = r["mem"][(MEM_SIZES[0], mode)], r["mem"][(MEM_SIZES[1], mode)]
            rss_ratios[mode] = big["rss"] / small["rss"]
            lines.append(
                f"* Sparse 8 GiB / 1 GiB peak RSS, `--{mode}` ({_mib(MEM_DATA, 0)} MiB of data in each):"
                f" **{rss_ratios[mode]:.2f}x** ({_mib(big['rss'], 0)} / {_mib(small['rss'], 0)} MiB;"
                f" wall {big['wall']:.2f} / {small['wall']:.2f} s)"
            )
    lines.append("")
    lines.append("### Goals")
    lines.append("")
    lines.append("| goal | target | measured | verdict |")
    lines.append("|---|---|---|---|")
    g = GOALS
    goals = [
        (
            "full backup throughput vs restic",
            f">= {g['full_x']}x",
            x_ratio(full_ratio),
            None if full_ratio is None else full_ratio >= g["full_x"],
        ),
        (
            "restore throughput vs restic",
            f">= {g['restore_x']}x",
            x_ratio(restore_ratio),
            None if restore_ratio is None else restore_ratio >= g["restore_x"],
        ),
        ("incremental amplification (CBT)", f"<= {g['amp']}x", x_ratio(amp_cbt), amp_cbt <= g["amp"]),
        (
            "peak RSS (any cbt-mover run)",
            f"< {g['rss_mib']:.0f} MiB",
            f"{_mib(peak.rss, 0)} MiB",
            peak.rss / MiB < g["rss_mib"],
        ),
    ]
    for mode, ratio in rss_ratios.items():
        goals.append(
            (f"RSS 8 GiB / 1 GiB sparse, --{mode}", f"<= {g['rss_ratio']}x", x_ratio(ratio), ratio <= g["rss_ratio"])
        )
    if "enc" in r:
        for row in encryption_summary(b):
            goals.append(
                (
                    f"encryption cost, {row['name']}",
                    f"<= {g['enc_cost']:.0%} slower",
                    f"{_slower(row['ratio'])} (median of {b.args.enc_repeats})",
                    row["ok"],
                )
            )
    for name, target, measured, ok in goals:
        lines.append(f"| {name} | {target} | {measured} | {_verdict(ok)} |")
    b.results["goals"] = goals
    if b.failures or b.notes:
        lines.append("")
        for f in b.failures:
            lines.append(f"* FAILURE: {f}")
        for n in b.notes:
            lines.append(f"* {n}")
    if "enc" in r:
        lines.append("")
        b.results["enc_report"] = encryption_report(b, info)
        lines.append(benchlib.marked(ENC_SECTION, b.results["enc_report"]))
    return "\n".join(lines)


def _rate(n: int, s: float) -> str:
    return f"{n / s / MiB:,.0f}"


def docs_text(b: Bench, body: str, info: dict[str, str]) -> str:
    image: Image = b.results["image"]
    kinds = ", ".join(f"{k} {_mib(v, 0)} MiB ({v / image.size:.0%})" for k, v in image.kind_bytes.items())
    drop = (
        "dropped before every measured phase"
        if b.runner.can_drop
        else "NOT dropped (not permitted): every tool ran with a warm cache, in the same order"
    )
    rows = [
        ("Python (cbt-mover)", info["python"]),
        ("restic", info["restic"]),
        ("zstd", info["zstd"]),
        ("cbt-mover code", f"commit {info['git']}, {info['code']}"),
        ("page cache", drop),
    ]
    return f"""# Engine benchmark

Generated by `bench/engine_bench.py --write-docs` (`make bench`); do not edit by hand, rerun it.
Each measurement is a separate subprocess; wall time, CPU time (user+sys) and peak RSS come from `os.wait4`.
One run, no repetitions (except the encryption cost pairs, see there): on a shared host expect run-to-run noise
(compare the load averages below).

## Machine

{benchlib.machine_table(info, rows)}

## Data set

A {_mib(image.size, 0)} MiB sparse image file (seed {b.args.seed}), 4 KiB granularity, {len(image.runs)} runs of
4 KiB to 8 MiB: {kinds}. Zeros are holes (never written). Random blocks come from a seeded PRNG, text blocks
from log / YAML / metrics lines with varying numbers, repeated blocks from a pool of 64 distinct blocks.
The full `--extents` backup lists the {len(image.data_extents)} allocated ranges (what CBT GetMetadataAllocated
feeds); the incremental `--extents` lists exactly the changed 4 KiB blocks, adjacent ones coalesced.
Memory phase: {MEM_SEGMENTS} segments of {_mib(MEM_DATA // MEM_SEGMENTS, 0)} MiB of the same mix (no zeros)
spread over a 1 GiB and an 8 GiB sparse volume, backed up into fresh repositories.

## Results

{body}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=2 * GiB, help="image size (default 2G)")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the scratch dir (default /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir")
    parser.add_argument("--skip-restic", action="store_true")
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-mem", action="store_true")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument(
        "--cli",
        default=None,
        help="command running cbt-mover; 'live' runs .venv/bin/cbt-mover on the working tree as it changes"
        " (default: a snapshot of movers/ taken at the start)",
    )
    parser.add_argument(
        "--enc-repeats",
        type=int,
        default=3,
        metavar="N",
        help="pairs of unencrypted / encrypted full backup + restore for the encryption cost (default 3, 0: skip)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"write the report to {DOCS.relative_to(ROOT)}")
    parser.add_argument(
        "--write-encryption-docs",
        action="store_true",
        help=f"replace only the encryption cost section of {DOCS.relative_to(ROOT)} (the rest stays as it is)",
    )
    args = parser.parse_args(argv)
    if args.enc_repeats < 0:
        parser.error("--enc-repeats must be >= 0")
    if args.write_encryption_docs and not args.enc_repeats:
        parser.error("--write-encryption-docs needs the encryption phase (--enc-repeats >= 1)")

    return benchlib.run_main(args, lambda scratch: run(args, scratch))


def run(args: argparse.Namespace, scratch: Path) -> int:
    """The whole benchmark in ``scratch`` (``benchlib.run_main`` owns it): report, docs, exit status."""
    if args.cli is None:
        cli, cli_env, code = snapshot_code(scratch)
    else:
        cli, cli_env, code = find_cli(args.cli), {}, f"`{args.cli}`"
    bench = Bench(args, scratch, Runner(scratch / "logs"), cli, cli_env)
    bench.results["have_zstd"] = ensure_tool("zstd", "zstd")
    if not bench.results["have_zstd"]:
        bench.notes.append("zstd phase skipped: zstd not available (apt-get install -y zstd).")
    if args.skip_restic:
        bench.results["have_restic"] = False
        bench.notes.append("restic phases skipped (--skip-restic).")
    else:
        bench.results["have_restic"] = ensure_tool("restic", "restic")
        if not bench.results["have_restic"]:
            bench.notes.append("restic phases skipped: restic not available (apt-get install -y restic).")
    info = machine_info(cli)
    info["code"] = code
    log(f"cbt-mover: {shlex.join(cli)} ({code}); restic: {info['restic']}; zstd: {info['zstd']}")
    run_bench(bench)
    if bench.runner.can_drop is False:
        bench.notes.append("The page cache could not be dropped: every tool ran warm, in the same order.")
    body = report(bench, info)
    benchlib.publish(body, DOCS if args.write_docs else None, lambda: docs_text(bench, body, info))
    if args.write_encryption_docs and "enc_report" in bench.results:
        benchlib.write_marked_section(DOCS, ENC_SECTION, bench.results["enc_report"])
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
