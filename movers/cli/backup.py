"""``cbt-mover backup``: back up a device or image file, its changes from ``--extents``, a ``--scan``, or CBT
(``--cbt-address ...`` or ``--kube``).

The flags (or, in a mover pod, ``--request-env``) make one ``movers.backup.request.BackupRequest``;
``movers.backup.volume.back_up_volume`` checks it before the repository is opened (bad input writes nothing) and
makes the CBT-or-scan decision; the JSON result says which (``change_source``) and why (``cbt_fallback``).
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING

from movers.cli._common import add_cbt_options, add_repo_options, cbt_options, emit, mib, open_repo, progress_reporter
from movers.errors import UsageError

if TYPE_CHECKING:
    from movers.backup.request import BackupRequest

log = logging.getLogger("movers")


def add_parsers(sub) -> None:
    """The ``backup`` subcommand, with its handler."""
    p = sub.add_parser("backup", help="back up a device or image file")
    add_repo_options(p)
    # required unless --request-env: cmd_backup says so in argparse's words
    p.add_argument(
        "--volume",
        help="volume id, e.g. namespace/pvc: printable ASCII, at most 255 bytes URL-quoted (docs/format.md)",
    )
    p.add_argument("--device", help="block device or image file to read")
    p.add_argument(
        "--request-env",
        metavar="VAR",
        help="read the whole backup request (movers.backup.request.BackupRequest, JSON) from this environment"
        " variable instead of the flags of the volume, device, change source and identity (the mover pod's)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--extents", help="JSON lines of changed extents {offset, length}; - for stdin")
    src.add_argument("--scan", action="store_true", help="read the whole device, store what the repo lacks")
    p.add_argument("--full", action="store_true", help="do not build on the latest backup")
    p.add_argument(
        "--parent",
        metavar="BACKUP_ID",
        help="the backup the --extents (or the CBT delta since --base-handle) are changes since; with --extents,"
        " needed unless --base-handle or the extents' summary line names the snapshot they are changes since",
    )
    p.add_argument(
        "--cbt-fallback",
        choices=("scan", "fail"),
        default="scan",
        help="when CBT is unavailable: scan the device (default) or fail with exit code 9",
    )
    add_cbt_options(p)
    p.add_argument("--zstd-level", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ident = p.add_argument_group("identity recorded in the manifest")
    for flag in ("--cluster", "--namespace", "--pvc"):
        ident.add_argument(flag)
    ident.add_argument("--pv-name", help="the source PV's name")
    ident.add_argument("--pv-uid", help="the source PV's metadata.uid (a delta needs the base's PV to be this one)")
    ident.add_argument(
        "--pv-handle",
        help="the source PV's CSI volume handle (default with --kube: the"
        " snapshot content's spec.source.volumeHandle); a delta needs the base's to be the same",
    )
    ident.add_argument("--csi-driver", help="the source PV's CSI driver (default with --kube: the snapshot's)")
    ident.add_argument("--fs-type", help="the source PV's spec.csi.fsType (Filesystem volumes; e.g. ext4, xfs, ntfs)")
    ident.add_argument(
        "--node-affinity",
        metavar="JSON",
        help="the source PV's spec.nodeAffinity.required (a NodeSelector), where a restore may place it",
    )
    ident.add_argument(
        "--pvc-labels",
        metavar="JSON",
        help="the source PVC's metadata.labels, which a restored claim gets back (an application's selector finds it)",
    )
    ident.add_argument(
        "--run-pvcs",
        metavar="PVC,PVC",
        help="every PVC of the application run this backup is part"
        " of: a restore of the run checks that each has a backup",
    )
    ident.add_argument("--snapshot", help="VolumeSnapshot name (the CBT target)")
    ident.add_argument("--snapshot-handle", help="CSI snapshot handle (base of the next delta)")
    ident.add_argument("--group-snapshot", help="VolumeGroupSnapshot name")
    ident.add_argument("--group-snapshot-handle")
    ident.add_argument("--storage-class", help="the PVC's storage class (what a restore provisions)")
    ident.add_argument("--volume-mode", choices=("Block", "Filesystem"), help="the PVC's volume mode")
    ident.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a tag recorded in the manifest (repeatable), e.g. cbt-mover.io/run=RUN_ID",
    )
    p.set_defaults(handler=cmd_backup)


def cmd_backup(args: argparse.Namespace) -> int:
    from movers.backup.volume import back_up_volume

    cbt = cbt_options(args).connection
    request = backup_request(args, cbt.wanted)
    r = back_up_volume(lambda: open_repo(args), request, cbt=cbt, progress=lambda: progress_reporter(args))
    emit(
        args,
        r.as_output(),
        f"backup {r.backup_id} of {r.volume}: {r.mode}, read {mib(r.read_bytes)},"
        f" new {mib(r.new_chunk_bytes)}, uploaded {mib(r.stored_bytes)} in {r.duration_s} s",
    )
    return 0


def backup_request(args: argparse.Namespace, cbt_wanted: bool) -> BackupRequest:
    """The ``BackupRequest`` of the parsed flags: with ``--request-env VAR`` the flow's (the mover pod), else the
    same request built from the volume, device, change source and identity flags (``cbt_wanted``: CBT flags were
    given)."""
    from movers.backup.request import BackupRequest, Changes, SourceSnapshot, SourceVolume
    from movers.repo.manifest import parse_node_affinity, parse_pvc_labels, parse_run_pvcs, parse_tags

    if args.request_env:
        return BackupRequest.from_env(args.request_env)
    missing = [flag for flag in ("--volume", "--device") if getattr(args, flag[2:]) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)} (see cbt-mover backup --help)")
    if sum(map(bool, (args.extents, args.scan, cbt_wanted))) != 1:
        raise UsageError("choose one change source: --extents FILE, --scan, or CBT (--cbt-address ... or --kube)")
    ns = args.namespace
    return BackupRequest(
        volume=SourceVolume(
            id=args.volume,
            cluster=args.cluster,
            namespace=ns,
            pvc=args.pvc,
            pv_volume_handle=args.pv_handle,
            csi_driver=args.csi_driver,
            storage_class=args.storage_class,
            volume_mode=args.volume_mode,
            pv_name=args.pv_name,
            pv_uid=args.pv_uid,
            fs_type=args.fs_type,
            node_affinity=parse_node_affinity(args.node_affinity),
            labels=parse_pvc_labels(args.pvc_labels),
        ),
        snapshot=SourceSnapshot(
            volume_snapshot=args.snapshot,
            namespace=ns,
            snapshot_handle=args.snapshot_handle,
            group_snapshot=args.group_snapshot,
            group_snapshot_handle=args.group_snapshot_handle,
        ),
        changes=Changes(
            source="extents" if args.extents else "scan" if args.scan else "cbt",
            extents=args.extents,
            base_handle=args.base_handle,
            base_snapshot=args.base_snapshot,
            parent=args.parent,
            full=args.full,
            cbt_fallback=args.cbt_fallback,
            cbt_max_results=args.cbt_max_results,
        ),
        device=args.device,
        tags=parse_tags(args.tag),
        run_pvcs=parse_run_pvcs(args.run_pvcs),
        workers=max(1, args.workers),
        zstd_level=args.zstd_level,
    )
