#!/usr/bin/env python3
"""A mover's read and upload limits (``mover.read_mib_s`` / ``upload_mib_s``): the limit vs the rate measured, in one
run (a benchmark, not a test).

    .venv/bin/python bench/throttle_bench.py [--size 64M] [--limits 8,16,32] [--workdir DIR]

Each row is one full backup (``movers.pipeline.backup.run_backup``, in this process, 4 workers) of the same image
of incompressible bytes (so the bytes uploaded are the bytes read) into a fresh local repository: first with no
limit, then with each limit as the read limit, then as the upload limit. The measured rate is what the backup's
statistics say it moved (read bytes, or pack bytes) over its wall time: at most the limit (the throttle starts
empty), a little below it by the time the engine spends besides reading or uploading.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from movers.pipeline.backup import BackupOptions, run_backup  # noqa: E402
from movers.pipeline.throttle import MiB  # noqa: E402
from movers.repo.manifest import VolumeIdentity  # noqa: E402
from movers.repo.repository import Repository  # noqa: E402
from movers.repo.store import LocalStore  # noqa: E402
from movers.values import quantity_bytes  # noqa: E402


def measure(image: Path, scratch: Path, options: BackupOptions, which: str) -> tuple[float, int, float]:
    """One backup into a fresh repository: (seconds, bytes moved, MiB/s) for ``which`` (read | upload)."""
    repo_dir = Path(tempfile.mkdtemp(dir=scratch))
    repo = Repository.init(LocalStore(repo_dir))
    started = time.monotonic()
    manifest = run_backup(repo, str(image), VolumeIdentity("bench/v"), options=options)
    took = time.monotonic() - started
    moved = manifest.stats["read_bytes" if which == "read" else "pack_bytes"]
    return took, moved, moved / MiB / took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="64M", help="image size (default 64M)")
    parser.add_argument("--limits", default="8,16,32", help="limits to try, MiB/s (default 8,16,32)")
    parser.add_argument("--workdir", default=None, help="parent of the scratch directory (default: /tmp)")
    args = parser.parse_args(argv)
    size = quantity_bytes(args.size.replace("M", "Mi").replace("G", "Gi")) or 0
    size -= size % MiB
    limits = [float(x) for x in args.limits.split(",") if x]
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        scratch = Path(tmp)
        image = scratch / "vol.img"
        with image.open("wb") as f:
            for _ in range(0, size, MiB):
                f.write(os.urandom(MiB))
        rows = []
        took, moved, rate = measure(image, scratch, BackupOptions(workers=4), "read")
        rows.append(("none", "-", took, moved, rate))
        for which in ("read", "upload"):
            for limit in limits:
                key = "read_mib_s" if which == "read" else "upload_mib_s"
                took, moved, rate = measure(image, scratch, BackupOptions(workers=4, **{key: limit}), which)
                rows.append((which, f"{limit:g}", took, moved, rate))
    print(f"Backup of {size / MiB:.0f} MiB of incompressible data, 4 workers, local repository:\n")
    print("| limit | MiB/s allowed | seconds | MiB moved | MiB/s measured | measured / allowed |")
    print("|---|---:|---:|---:|---:|---:|")
    for which, limit, took, moved, rate in rows:
        ratio = f"{rate / float(limit):.2f}" if limit != "-" else "-"
        print(f"| {which} | {limit} | {took:.2f} | {moved / MiB:.1f} | {rate:.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
