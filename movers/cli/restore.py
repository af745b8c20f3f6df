"""``cbt-mover restore``: write a backup onto a device or image file, and with ``--verify-device`` read it
back and compare.

The flags (or, in a writer pod, ``--request-env``) make one ``movers.restore.request.RestoreRequest``, checked
before any work; the JSON result is its ``WriteResult``, which the restore flow reads back from the writer pod's
termination log.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from movers.cli._common import (
    add_cbt_options,
    add_repo_options,
    cbt_options,
    emit,
    mib,
    open_repo_ahead,
    progress_reporter,
)
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
    p.add_argument("--namespace", help="with --snapshot: the namespace of the live volume's VolumeSnapshot")
    p.add_argument(
        "--snapshot",
        help="with --overwrite if-changed and --base-handle: a VolumeSnapshot of the live volume; the"
        " SnapshotMetadata service's delta between the backup's snapshot (--base-handle) and it names the ranges"
        " to rewrite (unavailable or refused: the device is compared instead)",
    )
    add_cbt_options(p)
    p.set_defaults(handler=cmd_restore)


def restore_request(args: argparse.Namespace) -> RestoreRequest:
    """The ``RestoreRequest`` of the parsed flags: with ``--request-env VAR`` the flow's (the writer pod), else the
    same request built from the volume, backup, device, ``--assume-zeroed``, ``--verify-device`` and ``--workers``
    flags."""
    from movers.restore.request import CbtDelta, RestoreRequest

    if args.request_env:
        return RestoreRequest.from_env(args.request_env)
    missing = [flag for flag in ("--volume", "--device") if getattr(args, flag[2:]) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)} (see cbt-mover restore --help)")
    cbt = None
    if args.snapshot or args.base_handle:
        if not (args.snapshot and args.base_handle and args.namespace):
            raise UsageError("a CBT delta needs --namespace, --snapshot (the live volume's) and --base-handle")
        cbt = CbtDelta(
            namespace=args.namespace,
            snapshot=args.snapshot,
            base_handle=args.base_handle,
            base_snapshot=args.base_snapshot,
            max_results=args.cbt_max_results,
        )
    return RestoreRequest(
        cbt=cbt,
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
    cbt = cbt_options(args).connection if request.cbt is not None else None  # grpc loads only for a delta
    result = restore_volume(opened, request, progress=lambda: progress_reporter(args), cbt=cbt)
    if request.overwrite == "if-changed":
        how = " by CBT" if result.path == "cbt" else ""
        how += f" by compare (no CBT: {result.cbt_fallback})" if result.cbt_fallback else ""
        text = (
            f"restored {result.backup_id} of {request.volume} onto {request.device} in place{how}: compared"
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
