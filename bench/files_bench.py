#!/usr/bin/env python3
"""Files-from-a-backup benchmark: one small file out of a backed-up filesystem, without restoring the volume (not a
test).

Run it directly, as root (loop devices, mounts)::

    .venv/bin/python bench/files_bench.py [--fs ext4,xfs,ntfs] [--repeat 3] [--workdir DIR] [--keep] [--live]
                                          [--write-docs]

Issue 24's goals, through the CLI, for each filesystem the machine can make (ext4 with ``mkfs.ext4 -d``; xfs with
``mkfs.xfs`` and a loop mount to fill it; NTFS with ``mkntfs`` and ``ntfs-3g``): an image of 256 MiB (xfs: 320
MiB, ``mkfs.xfs`` refuses less than 300 MB) holding a 64 MiB and a 1 MiB file of random bytes, backed up with
``--scan`` into an encrypted ``file://`` repository (a passphrase at init's default cost: every command derives the
key first). Then, each way ``--repeat`` times from a cold page cache, the seconds until the 1 MiB file is read
back (checked bit-exact) and the stored bytes fetched:

1. **mount**: ``cbt-mover mount`` started, waited for (its image appears), the image mounted read-only (``mount -o
   loop,ro -t TYPE``; NTFS: ``ntfs-3g -o ro`` on the image), the file read; then unmounted, the command stopped with
   SIGTERM and its JSON's ``fetched_bytes`` taken. Also reported: seconds until the mount was ready.
2. **files cp**: ``cbt-mover files cp`` of the file, when the tree has the ``files`` command (else the row says so).
3. **restore + mount + cp** (the peer: what users do without either): a full ``restore`` of the volume into a new
   image file, then a read-only loop mount and ``cp`` of the file.

Goals (issue 24): through the mount the file within 3 s of starting it, fetching <= 10% of the stored volume (what
a full restore fetches); ``files cp`` fetching <= 10% of it. ``--write-docs`` writes the "files" section of
``docs/benchmarks.md``. Exit status: 0 when every step ran and every copy is bit-exact (goal misses are reported,
not failures), 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # for benchlib, also under python -P
    sys.path.insert(0, BENCH_DIR)
import benchlib  # noqa: E402
from benchlib import BenchError, MiB, log  # noqa: E402
from scalelib import Cli, mib  # noqa: E402

ROOT = Path(BENCH_DIR).parent
DOCS = ROOT / "docs" / "benchmarks.md"
PASSWORD = "files bench passphrase"
VOLUME = "ns/data"
IMAGE_NAME = "ns_data.img"  # what cbt-mover mount names the image of VOLUME
SIZES = {"ext4": 256 * MiB, "xfs": 320 * MiB, "ntfs": 256 * MiB}
TOOLS = {"ext4": ["mkfs.ext4"], "xfs": ["mkfs.xfs"], "ntfs": ["mkntfs", "ntfs-3g"]}
GOAL_SECONDS = 3.0  # the file read back within 3 s of starting the mount
GOAL_FETCHED = 0.10  # of the stored volume (a full restore's fetched bytes)
MOUNT, FILES_CP, PEER = "mount + loop mount + read", "files cp", "restore + loop mount + cp (peer)"


@dataclass
class Row:
    fs: str
    way: str
    seconds: list[float] = field(default_factory=list)  # to the file read back, one per repeat
    ready: list[float] = field(default_factory=list)  # mount: until the mount served
    fetched: int | None = None
    cpu: float | None = None
    rss: int | None = None
    exact: bool = True
    missing: str | None = None  # why the way was not measured

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")


@contextlib.contextmanager
def fs_mounted(fs: str, image: Path, target: Path, read_only: bool = True) -> Iterator[Path]:
    """``image`` mounted at ``target``: ext4 and xfs on a loop device (detached by ``umount``), the type named (else
    mount's probe for other filesystems reads 4 KiB at 4 MiB, a whole chunk more through the view), NTFS by ntfs-3g
    (FUSE, on the file itself); unmounted afterwards."""
    target.mkdir(exist_ok=True)
    ro = ["-o", "ro"] if read_only else []
    if fs == "ntfs":
        run(["ntfs-3g", *ro, str(image), str(target)])
    else:
        run(["mount", "-t", fs, "-o", "loop" + (",ro" if read_only else ""), str(image), str(target)])
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)
        for dev in subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout.splitlines():
            subprocess.run(["losetup", "-d", dev.split(":", 1)[0]], check=False)


def make_filesystem(fs: str, image: Path, src: Path, scratch: Path) -> None:
    """A ``SIZES[fs]`` image of filesystem ``fs`` holding the files of ``src``."""
    size = SIZES[fs]
    if fs == "ext4":
        run(["mkfs.ext4", "-q", "-d", str(src), str(image), f"{size // MiB}M"])
        return
    with open(image, "wb") as f:
        f.truncate(size)
    run(["mkfs.xfs", "-q", "-f", str(image)] if fs == "xfs" else ["mkntfs", "-Q", "-F", "-q", str(image)])
    with fs_mounted(fs, image, scratch / f"fill-{fs}", read_only=False) as target:
        for path in src.iterdir():
            shutil.copyfile(path, target / path.name)
        os.sync()


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return any(line.split()[4] == str(path) for line in f)


def via_mount(cli: Cli, repo: str, fs: str, scratch: Path, want: str, row: Row, n: int) -> None:
    """One cold run of ``cbt-mover mount`` to the file read back (see the module doc), into ``row``."""
    mnt, target = scratch / f"mnt-{fs}-{n}", scratch / f"fs-{fs}-{n}"
    mnt.mkdir()
    cli.runner.drop_caches()
    with open(scratch / "logs" / f"mount-{fs}-{n}.err", "wb+") as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            [*cli.python, "-m", "movers", "mount", "--repo", repo, "--volume", VOLUME, "--json", str(mnt)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=cli.env,
            cwd=scratch,
        )
        status, usage = None, None
        try:
            while not (mnt / IMAGE_NAME).exists():
                if proc.poll() is not None:
                    err.seek(0)
                    raise BenchError(f"cbt-mover mount exited {proc.returncode}: {err.read().decode()[-300:]}")
                time.sleep(0.002)
            row.ready.append(time.monotonic() - started)
            with fs_mounted(fs, mnt / IMAGE_NAME, target) as where:
                data = (where / "small.bin").read_bytes()
                row.seconds.append(time.monotonic() - started)
            row.exact &= sha256(data) == want
        finally:
            proc.send_signal(signal.SIGTERM)
            _pid, status, usage = os.wait4(proc.pid, 0)
            if _mounted(mnt):
                subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        if os.waitstatus_to_exitcode(status) != 0:
            raise BenchError(f"cbt-mover mount exited {os.waitstatus_to_exitcode(status)} after SIGTERM")
        out = benchlib.last_json(proc.stdout.read().decode())
    row.fetched, row.cpu, row.rss = out["fetched_bytes"], usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def has_files_command(cli: Cli) -> bool:
    probe = subprocess.run(
        [*cli.python, "-m", "movers", "files", "cp", "--help"], capture_output=True, env=cli.env, cwd=cli.runner.cwd
    )
    return probe.returncode == 0


def via_files_cp(cli: Cli, repo: str, fs: str, scratch: Path, want: str, row: Row, n: int) -> None:
    dest = scratch / f"cp-{fs}-{n}"
    dest.mkdir()
    proc, out = cli.run(
        ["files", "cp", "--repo", repo, "--volume", VOLUME, "/small.bin", str(dest)], f"files cp {fs}", cold=True
    )
    row.seconds.append(proc.wall)
    copied = dest / "small.bin" if (dest / "small.bin").exists() else dest
    row.exact &= copied.is_file() and sha256(copied.read_bytes()) == want
    row.fetched, row.cpu, row.rss = out["fetched_bytes"], proc.cpu, proc.maxrss


def via_restore(cli: Cli, repo: str, fs: str, scratch: Path, want: str, row: Row, n: int) -> None:
    image = scratch / f"restored-{fs}-{n}.img"
    cli.runner.drop_caches()
    started = time.monotonic()
    proc, out = cli.run(["restore", "--repo", repo, "--volume", VOLUME, "--device", str(image)], f"restore {fs}")
    with fs_mounted(fs, image, scratch / f"peer-{fs}-{n}") as where:
        shutil.copyfile(where / "small.bin", scratch / f"peer-{fs}-{n}.bin")
    row.seconds.append(time.monotonic() - started)
    row.exact &= sha256((scratch / f"peer-{fs}-{n}.bin").read_bytes()) == want
    row.fetched, row.cpu, row.rss = out["fetched_bytes"], proc.cpu, proc.maxrss
    image.unlink()


def run_bench(args: argparse.Namespace, scratch: Path) -> int:
    if os.geteuid() != 0:
        raise BenchError("run it as root: it mounts FUSE, loop devices and NTFS")
    cli = Cli.for_scratch(scratch, args.live)
    cli.env["CBT_MOVER_PASSWORD"] = PASSWORD
    cli.runner.env = cli.env
    src = scratch / "content"  # (scratch / "src" holds the code under test)
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(64 * MiB))
    small = os.urandom(MiB)
    (src / "small.bin").write_bytes(small)
    want = sha256(small)
    files_cp = has_files_command(cli)
    rows: list[Row] = []
    for fs in args.fs:
        missing = [tool for tool in TOOLS[fs] if shutil.which(tool) is None]
        if missing:
            log(f"{fs}: skipped, no {', '.join(missing)}")
            continue
        image, repo = scratch / f"{fs}.img", f"file://{scratch / ('repo-' + fs)}"
        log(f"{fs}: {mib(SIZES[fs])} MiB image with a 64 MiB and a 1 MiB file, backed up with --scan")
        make_filesystem(fs, image, src, scratch)
        cli.run(["init", "--repo", repo], f"init {fs}")
        cli.run(["backup", "--repo", repo, "--volume", VOLUME, "--device", str(image), "--scan"], f"backup {fs}")
        for way, measure in ((MOUNT, via_mount), (FILES_CP, via_files_cp), (PEER, via_restore)):
            row = Row(fs, way)
            rows.append(row)
            if way == FILES_CP and not files_cp:
                row.missing = "no `cbt-mover files` in this tree"
                continue
            for n in range(args.repeat):
                log(f"{fs}: {way} ({n + 1}/{args.repeat})")
                measure(cli, repo, fs, scratch, want, row, n)
        image.unlink()
    body = report(args, rows, cli.code)
    print(body)
    failures = [f"{r.fs}, {r.way}: the file read back is not bit-exact" for r in rows if not r.exact]
    for failure in failures:
        log(failure)
    if args.write_docs:
        benchlib.write_marked_section(DOCS, "files", docs_text(args, body))
    return 1 if failures else 0


def _x(v: float | None, of: float | None) -> str:
    return benchlib.x_ratio(None if v is None or not of else v / of)


def report(args: argparse.Namespace, rows: list[Row], code: str) -> str:
    lines = [
        f"files from a backup: a 1 MiB file out of {', '.join(args.fs)} images with a 64 MiB and a 1 MiB file,"
        f" median of {args.repeat} cold runs; code: {code}",
        "",
        "| fs | way to the 1 MiB file | s to the file (median) | min-max s | x peer | mount ready s | fetched MiB"
        " | x full restore's fetched | cpu s | peak RSS MiB | bit-exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|",
    ]
    goals = []
    for r in rows:
        peer = next(p for p in rows if p.fs == r.fs and p.way == PEER)
        if r.missing:
            lines.append(f"| {r.fs} | {r.way} | {r.missing} | | | | | | | | |")
            continue
        spread = f"{min(r.seconds):.2f}-{max(r.seconds):.2f}"
        ready = f"{statistics.median(r.ready):.2f}" if r.ready else "–"
        lines.append(
            f"| {r.fs} | {r.way} | {r.median:.2f} | {spread} | {_x(r.median, peer.median)} | {ready} |"
            f" {mib(r.fetched)} | {_x(r.fetched, peer.fetched)} | {r.cpu:.2f} | {mib(r.rss)} |"
            f" {'yes' if r.exact else 'NO'} |"
        )
        if r.way != PEER and peer.fetched:
            goals.append(
                (f"{r.fs}: {r.way} fetches <= 10% of the stored volume", r.fetched / peer.fetched, GOAL_FETCHED)
            )
        if r.way == MOUNT:
            goals.append(
                (f"{r.fs}: the file within 3 s of starting the mount (slowest run)", max(r.seconds), GOAL_SECONDS)
            )
    lines += ["", "| goal | measured | met |", "|---|---:|:-:|"]
    for name, value, goal in goals:
        lines.append(f"| {name} | {value:.3f} | {'yes' if value <= goal else 'NO'} |")
    return "\n".join(lines)


def docs_text(args: argparse.Namespace, body: str) -> str:
    info = benchlib.machine_info()
    return (
        "## Files from a backup: one small file without restoring the volume (`bench/files_bench.py`)\n\n"
        "A 1 MiB file out of a backed-up filesystem image (256 MiB, xfs 320 MiB; a 64 MiB and a 1 MiB file; backed"
        " up with `--scan` into an encrypted `file://` repository) three ways: `cbt-mover mount` and the kernel's"
        " read-only mount of its image; `cbt-mover files cp`; and what users do without either, a full `restore`"
        " into a new image, a loop mount and `cp`. Each run from a cold page cache, the file checked bit-exact;"
        " seconds from starting the first command to the file read back. Fetched: stored bytes read from the"
        " repository (a full restore fetches the whole stored volume).\n\n"
        + benchlib.machine_table(info, [])
        + "\n\n"
        + body
        + "\n\nEvery command starts an interpreter and derives the passphrase's key (scrypt at the default cost)"
        " before it reads anything: most of the mount's time to the file. Through the mount, the kernel's own"
        " filesystem reads the superblock, group descriptors, inode table and journal it needs and then the file;"
        " the lazy reader fetches whole chunks (each compressed and encrypted as one), so the fetched bytes are"
        " the chunks under those reads, not the bytes read. The loop mounts name the type (`mount -t xfs -o loop,ro`):"
        " without it, mount's probe for other filesystems' signatures reads 4 KiB at offsets up to 4 MiB, and on xfs"
        " (whose 64 MiB file starts right after the first allocation group's headers) the probe at 4 MiB costs a"
        " whole 4 MiB chunk more (a run without `-t`: 7.9 MiB fetched on xfs, 12% of the stored volume, against 3.9"
        " MiB with it). Where udev probes every"
        " new loop device, it reads the same.\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--fs",
        type=lambda text: [fs for fs in text.split(",") if fs],
        default=["ext4", "xfs", "ntfs"],
        help="the filesystems, comma-separated (default ext4,xfs,ntfs; those whose tools are missing are skipped)",
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--live", action="store_true", help="run the working tree's code, not a snapshot of it")
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    unknown = [fs for fs in args.fs if fs not in SIZES]
    if unknown or args.repeat < 1:
        raise SystemExit(f"--fs takes {', '.join(SIZES)}; --repeat at least 1")
    return benchlib.run_main(args, lambda scratch: run_bench(args, scratch))


if __name__ == "__main__":
    sys.exit(main())
