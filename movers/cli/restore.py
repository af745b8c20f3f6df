"""``cbt-mover restore``: write a backup onto a device or image file, and with ``--verify-device`` read it
back and compare."""

from __future__ import annotations

import argparse

from movers import device
from movers.cli._common import add_repo_options, emit, mib, open_repo, progress_reporter


def add_parsers(sub) -> None:
    """The ``restore`` subcommand, with its handler."""
    p = sub.add_parser("restore", help="restore a backup onto a device or image file")
    add_repo_options(p)
    p.add_argument("--volume", required=True)
    p.add_argument("--backup", default="latest", help="backup id or latest (default)")
    p.add_argument("--device", required=True, help="target block device or image file")
    p.add_argument("--assume-zeroed", action="store_true", help="the target reads as zeros: skip zeroing holes")
    p.add_argument(
        "--verify-device",
        action="store_true",
        help="after writing, read the target back and compare it with the backup (one more full read)",
    )
    p.add_argument("--workers", type=int, default=4)
    p.set_defaults(handler=cmd_restore)


def cmd_restore(args: argparse.Namespace) -> int:
    from movers.pipeline.restore import run_restore

    device.check_target(args.device)
    repo = open_repo(args)
    manifest = repo.resolve(args.volume, args.backup)
    phases = 2 if args.verify_device else 1  # writing, then reading back
    with progress_reporter(args) as reporter:
        try:
            stats = run_restore(
                repo,
                manifest,
                args.device,
                assume_zeroed=args.assume_zeroed,
                workers=max(1, args.workers),
                progress=reporter.phase("restore", part=0, parts=phases),
            )
        except device.NoRoom as err:
            raise device.NoRoom(
                f"restore target {args.device} has no room for backup {manifest.backup_id}"
                f" ({mib(manifest.capacity_bytes)}): {err}; the target is incomplete"
            ) from None
        except device.ReadOnly as err:
            raise device.ReadOnly(f"restore target {args.device}: {err}; the target is incomplete") from None
        check = None
        if args.verify_device:
            from movers.pipeline.readback import verify_device

            readback = reporter.phase("readback", part=1, parts=phases)
            check = verify_device(repo, manifest, args.device, workers=max(1, args.workers), progress=readback)
    result = {"backup_id": manifest.backup_id, "volume": args.volume, "mode": manifest.mode, **stats.as_dict()}
    text = (
        f"restored {manifest.backup_id} of {args.volume} to {args.device}: {mib(stats.written_bytes)} written,"
        f" verified {stats.chunks_verified} chunks in {stats.duration_s} s"
    )
    if check is not None:
        result["readback"] = check.as_dict()
        text += f"; read back {mib(check.checked_bytes + check.zero_bytes)} in {check.duration_s} s: identical"
    result["requests"] = repo.store.requests.as_dict()
    emit(args, result, text)
    return 0
