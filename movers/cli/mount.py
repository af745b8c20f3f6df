"""``cbt-mover mount``: a read-only FUSE view of one backup's volume as an image file, fetched lazily.

The command mounts DIR in the foreground and runs until the mount is gone: SIGINT (Ctrl-C), SIGTERM or SIGHUP
unmount it, and so does an unmount from outside (``fusermount3 -u DIR``, ``umount DIR``); then it prints its one
result (``--json``: one object) and exits 0. Once the mount serves, one line on stderr says
``cbt-mover: ready: DIR/NAME ...``; the image file appearing in DIR (empty before) is the same signal.
The view itself is ``movers.files.fuseview``.
"""

from __future__ import annotations

import argparse
import sys
import time

from movers.cli._common import add_repo_options, emit, mib, open_repo_ahead
from movers.errors import UsageError

MiB = 1 << 20


def add_parsers(sub) -> None:
    """The ``mount`` subcommand, with its handler."""
    p = sub.add_parser(
        "mount",
        help="show a backup's volume as a read-only image file in DIR (FUSE), fetched lazily",
        description="Mount a read-only FUSE view at DIR (an existing empty directory) holding one file, the"
        " backup's volume as an image named after the volume id with / replaced by _ (ns/pvc -> ns_pvc.img)."
        " Runs in the foreground until unmounted (Ctrl-C, SIGTERM, fusermount3 -u DIR).",
    )
    add_repo_options(p)
    p.add_argument("--volume", required=True)
    p.add_argument("--backup", default="latest", help="backup id or latest (default)")
    p.add_argument(
        "--cache-mib",
        type=int,
        default=64,
        help="memory for fetched chunks, in MiB (default 64); the kernel's page cache keeps what it read besides",
    )
    p.add_argument("--workers", type=int, default=4, help="parallel fetches from the repository (default 4)")
    p.add_argument(
        "--allow-other",
        action="store_true",
        help="let other users (root included) read the image; a non-root user needs user_allow_other in /etc/fuse.conf",
    )
    p.add_argument("dir", metavar="DIR", help="mount point: an existing, empty directory")
    p.set_defaults(handler=cmd_mount)


def cmd_mount(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.cache_mib < 1:
        raise UsageError("--cache-mib must be at least 1")
    from movers.files import fuseview

    mountpoint = fuseview.check_mountpoint(args.dir)
    fuseview.check_fuse()
    opened = open_repo_ahead(args)
    from movers.pipeline.lazy import BackupReader

    repo = opened()
    manifest = repo.resolve(args.volume, args.backup)
    name = fuseview.image_name(args.volume)
    image = mountpoint / name

    def ready() -> None:
        print(
            f"cbt-mover: ready: {image} (volume {args.volume}, backup {manifest.backup_id},"
            f" {mib(manifest.capacity_bytes)}); stop with Ctrl-C, SIGTERM or fusermount3 -u {mountpoint}",
            file=sys.stderr,
            flush=True,
        )

    with BackupReader(repo, manifest, workers=max(1, args.workers), cache_bytes=args.cache_mib * MiB) as reader:
        fuseview.serve(
            reader,
            mountpoint,
            name,
            mtime=fuseview.backup_time(manifest.created),
            volume=args.volume,
            on_ready=ready,
            allow_other=args.allow_other,
        )
    result = fuseview.MountResult(
        volume=args.volume,
        backup_id=manifest.backup_id,
        image=str(image),
        fetched_bytes=reader.fetched_bytes,
        chunks_fetched=reader.chunks_fetched,
        duration_s=round(time.monotonic() - started, 3),
    )
    text = (
        f"unmounted {image} ({args.volume}, backup {manifest.backup_id}): fetched {mib(result.fetched_bytes)}"
        f" in {result.chunks_fetched} chunks over {result.duration_s} s"
    )
    emit(args, result.as_output(), text)
    return 0
