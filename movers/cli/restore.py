"""``cbt-mover restore``: write a backup onto a device or image file, and with ``--verify-device`` read it
back and compare.

The flags (or, in a writer pod, ``--request-env``) make one ``movers.restore.request.RestoreRequest``, checked
before any work; the JSON result is its ``WriteResult``, which the restore flow reads back from the writer pod's
termination log.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from movers.cli._common import add_repo_options, emit, mib, open_repo_ahead, progress_reporter
from movers.errors import UsageError

if TYPE_CHECKING:
    from movers.restore.request import RestoreRequest


def add_parsers(sub) -> None:
    """The ``restore`` subcommand, with its handler."""
    p = sub.add_parser("restore", help="restore a backup onto a device or image file")
    add_repo_options(p)
    # required unless --request-env: restore_request says so in argparse's words
    p.add_argument("--volume")
    p.add_argument("--backup", default="latest", help="backup id or latest (default)")
    p.add_argument("--device", help="target block device or image file")
    p.add_argument(
        "--request-env",
        metavar="VAR",
        help="read the whole restore request (movers.restore.request.RestoreRequest, JSON) from this environment"
        " variable instead of the flags of the volume, backup, device, --assume-zeroed, --verify-device,"
        " --overwrite, --extents and --workers (the writer pod's)",
    )
    p.add_argument("--assume-zeroed", action="store_true", help="the target reads as zeros: skip zeroing holes")
    p.add_argument(
        "--verify-device",
        action="store_true",
        help="after writing, read the target back and compare it with the backup (one more full read)",
    )
    p.add_argument(
        "--overwrite",
        choices=("always", "if-changed"),
        default="always",
        help="always: write the whole backup (default); if-changed: the device holds a version of this volume (of"
        " its size, not in use): compare it with the backup by the digests the map records, fetch and write only"
        " what differs",
    )
    p.add_argument(
        "--extents",
        metavar="FILE",
        help="with --overwrite if-changed: JSON lines {offset, length} of the ranges known to differ (the form"
        " backup --extents reads; - for stdin): nothing else of the device is read",
    )
    p.add_argument("--workers", type=int, default=4)
    p.set_defaults(handler=cmd_restore)


def restore_request(args: argparse.Namespace) -> RestoreRequest:
    """The ``RestoreRequest`` of the parsed flags: with ``--request-env VAR`` the flow's (the writer pod), else the
    same request built from the volume, backup, device, ``--assume-zeroed``, ``--verify-device`` and ``--workers``
    flags."""
    from movers.restore.request import RestoreRequest

    if args.request_env:
        return RestoreRequest.from_env(args.request_env)
    missing = [flag for flag in ("--volume", "--device") if getattr(args, flag[2:]) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)} (see cbt-mover restore --help)")
    return RestoreRequest(
        volume=args.volume,
        backup=args.backup,
        device=str(args.device),
        assume_zeroed=args.assume_zeroed,
        verify_device=args.verify_device,
        overwrite=args.overwrite,
        extents=args.extents,
        workers=max(1, args.workers),
    )


def cmd_restore(args: argparse.Namespace) -> int:
    opened = open_repo_ahead(args)  # the key derivation runs while the restore's modules load: recovery time
    from movers.restore.volume import restore_volume

    request = restore_request(args)
    result = restore_volume(opened, request, progress=lambda: progress_reporter(args))
    if request.overwrite == "if-changed":
        text = (
            f"restored {result.backup_id} of {request.volume} onto {request.device} in place: compared"
            f" {mib(result.compared_bytes)}, fetched {mib(result.fetched_bytes)}, wrote"
            f" {mib(result.written_bytes + result.zeroed_bytes)} in {result.duration_s} s"
        )
    else:
        text = (
            f"restored {result.backup_id} of {request.volume} to {request.device}: {mib(result.written_bytes)}"
            f" written, verified {result.chunks_verified} chunks in {result.duration_s} s"
        )
    check = result.readback
    if check is not None:
        text += f"; read back {mib(check.checked_bytes + check.zero_bytes)} in {check.duration_s} s: identical"
    emit(args, result.as_output(), text)
    return 0
