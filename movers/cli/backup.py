"""``cbt-mover backup``: back up a device or image file, its changes from ``--extents``, a ``--scan``, or CBT
(``--cbt-address ...`` or ``--kube``).

Every input is checked before the repository is opened (bad input writes nothing). With CBT it decides between
a delta since ``--base-handle``, a full backup from the allocated blocks, and a scan (or exit 9) when the
SnapshotMetadata service is unavailable (``_cbt_backup``); the JSON result says which (``change_source``) and
why (``cbt_fallback``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from contextlib import nullcontext
from typing import Any

from movers import device
from movers.cli._common import add_cbt_options, add_repo_options, cbt_options, emit, mib, open_repo, progress_reporter
from movers.errors import UsageError

log = logging.getLogger("movers")


def add_parsers(sub) -> None:
    """The ``backup`` subcommand, with its handler."""
    p = sub.add_parser("backup", help="back up a device or image file")
    add_repo_options(p)
    p.add_argument(
        "--volume",
        required=True,
        help="volume id, e.g. namespace/pvc: printable ASCII, at most 255 bytes URL-quoted (docs/format.md)",
    )
    p.add_argument("--device", required=True, help="block device or image file to read")
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
    from movers.extents import parse_jsonl
    from movers.pipeline.backup import BackupOptions, run_backup
    from movers.repo.manifest import (
        SnapshotIdentity,
        VolumeIdentity,
        parse_node_affinity,
        parse_pvc_labels,
        parse_run_pvcs,
        parse_tags,
    )

    if not 1 <= args.zstd_level <= 22:
        raise UsageError("--zstd-level must be between 1 and 22")
    tags = parse_tags(args.tag)
    node_affinity, run_pvcs = parse_node_affinity(args.node_affinity), parse_run_pvcs(args.run_pvcs)
    pvc_labels = parse_pvc_labels(args.pvc_labels)
    fs_type = args.fs_type or None
    if fs_type and args.volume_mode == "Block":
        log.warning("--fs-type %s ignored: a Block volume has no filesystem", fs_type)
        fs_type = None
    cbt = cbt_options(args)
    if sum(map(bool, (args.extents, args.scan, cbt.wanted))) != 1:
        raise UsageError("choose one change source: --extents FILE, --scan, or CBT (--cbt-address ... or --kube)")
    if args.parent is not None and args.full:
        raise UsageError("--parent names the backup to build on, --full builds on none: give one of them")
    device.check_source(args.device)
    # all of the input is checked before the repository is opened: bad input writes nothing
    checked = _checked_extents(args.extents, _device_size(args.device)) if args.extents else None
    repo = open_repo(args)
    volume = VolumeIdentity(
        args.volume,
        args.cluster,
        args.namespace,
        args.pvc,
        args.pv_handle,
        args.csi_driver,
        args.storage_class,
        args.volume_mode,
        args.pv_name,
        args.pv_uid,
        fs_type,
        node_affinity,
        pvc_labels,
    )
    snapshot = SnapshotIdentity(
        args.snapshot, args.namespace, args.snapshot_handle, args.group_snapshot, args.group_snapshot_handle
    )
    reporter = progress_reporter(args)
    run = dict(
        snapshot=snapshot,
        options=BackupOptions(level=args.zstd_level, workers=max(1, args.workers)),
        progress=reporter.phase("backup"),
        force_full=args.full,
        tags=tags,
        run_pvcs=run_pvcs,
    )
    extra: dict[str, Any] = {"change_source": "scan" if args.scan else "extents"}
    with reporter:
        if cbt.wanted:
            manifest = _cbt_backup(args, cbt, repo, volume, snapshot, run, extra)
        elif checked is not None:
            stream, name, check = checked
            with stream:
                parent = _extents_parent(repo, volume, args, check)
                run["force_full"] = parent is None
                extents = parse_jsonl(stream, name)
                manifest = run_backup(repo, args.device, volume, extents=extents, parent=parent, **run)
        else:
            manifest = run_backup(repo, args.device, volume, parent=args.parent, **run)
    result = {
        "backup_id": manifest.backup_id,
        "volume": volume.id,
        "mode": manifest.mode,
        "parent": manifest.parent,
        "capacity_bytes": manifest.capacity_bytes,
        "snapshot_handle": manifest.snapshot.snapshot_handle,
        "pv_volume_handle": manifest.volume.pv_volume_handle,
        "tags": manifest.tags,
        **extra,
        **manifest.stats,
        "requests": repo.store.requests.as_dict(),
    }
    emit(
        args,
        result,
        f"backup {manifest.backup_id} of {volume.id}: {manifest.mode}, read {mib(result['read_bytes'])},"
        f" new {mib(result['new_chunk_bytes'])}, uploaded {mib(result['stored_bytes'])} in {result['duration_s']} s",
    )
    return 0


def _extent_source(path: str):
    """The extents stream (a file, or stdin for ``-``) and its name for error messages."""
    if path == "-":
        return nullcontext(sys.stdin), "stdin"
    try:
        return open(path, encoding="utf-8"), path
    except OSError as err:
        raise UsageError(f"cannot read extents file {path}: {err.strerror}") from None


def _device_size(path: str) -> int:
    fd = device.open_device(path)
    try:
        return device.device_size(fd)
    finally:
        os.close(fd)


def _checked_extents(path: str, capacity: int):
    """``(stream, name, ExtentsCheck)``: the extents of ``path`` (``-``: stdin) read whole and checked
    (``movers.extents.check_stream``), then the same lines again from the start for the backup (a file is read
    twice, stdin or a pipe is kept in a temporary file meanwhile)."""
    import tempfile

    source, name = _extent_source(path)
    if path != "-" and source.seekable():
        check = _check_or_close(source, source, capacity, name)
        source.seek(0)
        return source, name, check
    copy = tempfile.SpooledTemporaryFile(max_size=16 << 20, mode="w+", encoding="utf-8")
    with source as f:
        check = _check_or_close(copy, _copied(f, copy), capacity, name)
    copy.seek(0)
    return copy, name, check


def _check_or_close(keep, lines, capacity: int, name: str):
    """``check_stream(lines, ...)``; on any error ``keep`` (the stream handed on) is closed first, and text that
    is not UTF-8 is a ``UsageError``."""
    from movers.extents import check_stream

    try:
        return check_stream(lines, capacity, name)
    except UnicodeDecodeError:
        keep.close()
        raise UsageError(f"{name} is not UTF-8 text (JSON lines of extents)") from None
    except BaseException:
        keep.close()
        raise


def _copied(lines, copy):
    for line in lines:
        copy.write(line)
        yield line


def _extents_parent(repo, volume, args, check) -> str | None:
    """The backup id the extents are changes since (``movers.repo.deltabase``), or None for a full backup:
    ``--full``, ``--parent``, else the one backup that recorded ``--base-handle`` or the handle the extents'
    summary line names; allocated extents (their summary says so) or a volume without backups: a full backup.
    Otherwise which backup they are changes since is not known: ``AmbiguousParent`` (exit 2). A parent of
    another source volume is refused too."""
    from movers.repo.deltabase import AmbiguousParent, delta_parent
    from movers.repo.lineage import same_volume

    if args.full:
        return None
    if args.base_handle and check.base_handle and args.base_handle != check.base_handle:
        raise UsageError(
            f"--base-handle {args.base_handle} is not the snapshot the extents' summary line names"
            f" ({check.base_handle})"
        )
    handle = args.base_handle or check.base_handle
    if args.parent is None and handle is None:
        newest = repo.latest(volume.id)
        if check.allocated or newest is None:
            return None
        raise AmbiguousParent(
            f"the extents do not say which backup of {volume.id} they are changes since (its newest is"
            f" {newest.backup_id}): name it with --parent BACKUP_ID or --base-handle (the snapshot handle it"
            " recorded), or back up with --full (and the extents of the whole volume) or --scan"
        )
    parent = delta_parent(repo, volume.id, parent_id=args.parent, base_handle=handle)
    why = same_volume(parent.volume, volume)
    if why:
        raise UsageError(
            f"{why}: the extents cannot be changes since backup {parent.backup_id}; back up with"
            " --full (and the extents of the whole volume) or --scan"
        )
    return parent.backup_id


def _record_snapshot(ref, volume, snapshot) -> None:
    """What ``--kube`` looked up about the snapshot (a ``SnapshotRef``; None: nothing) goes into the manifest's
    identities, for the next delta (flags given explicitly win, but the snapshot's source volume handle)."""
    if ref is None:
        return
    snapshot.volume_snapshot, snapshot.namespace = ref.name, ref.namespace
    snapshot.snapshot_handle = snapshot.snapshot_handle or ref.handle
    snapshot.group_snapshot = snapshot.group_snapshot or ref.group_snapshot
    snapshot.group_snapshot_handle = snapshot.group_snapshot_handle or ref.group_snapshot_handle
    volume.csi_driver = volume.csi_driver or ref.driver
    volume.namespace = volume.namespace or ref.namespace
    volume.pvc = volume.pvc or ref.source_pvc
    if ref.source_volume_handle and volume.pv_volume_handle not in (None, ref.source_volume_handle):
        log.warning(
            "--pv-handle %s is not the snapshot's source volume %s: recording the snapshot's",
            volume.pv_volume_handle,
            ref.source_volume_handle,
        )
    volume.pv_volume_handle = ref.source_volume_handle or volume.pv_volume_handle


def _cbt_backup(args, cbt, repo, volume, snapshot, run, extra):
    """Back up the ranges the SnapshotMetadata service names: a delta since ``--base-handle`` when the
    base's backup is of the same source volume, else (or when the service refuses the base) a full backup
    from the allocated blocks; a scan (or exit 9) when CBT is unavailable."""
    from movers.cbt.source import open_session
    from movers.errors import CbtBaseRejectedError, CbtUnavailableError
    from movers.pipeline.backup import run_backup
    from movers.repo.deltabase import AmbiguousParent, delta_parent
    from movers.repo.lineage import same_volume

    if args.parent is not None and not cbt.base_handle:
        raise UsageError("--parent with CBT needs --base-handle: the allocated blocks build on no backup")
    size = _device_size(args.device)
    try:
        session = open_session(cbt, clamp_to=size)
    except CbtUnavailableError as err:
        _record_snapshot(err.snapshot, volume, snapshot)
        return _fallback(args, err, repo, volume, snapshot, run, extra)
    try:
        _record_snapshot(session.snapshot, volume, snapshot)
        if not snapshot.snapshot_handle:
            log.warning("no --snapshot-handle: the next backup cannot ask for a delta since this one")
        base, stream = cbt.base_handle, session.stream
        if base and session.base_rejected:  # a v1alpha1 service and no base VolumeSnapshot that is the base
            base, stream = None, _allocated(session, cbt, size, extra, session.base_rejected)
        if base and run["force_full"]:  # --full: a delta's ranges are not the whole volume
            log.info("--full: the allocated blocks, not the changes since %s", base)
            base, stream = None, session.client.allocated(cbt.namespace, cbt.snapshot, clamp_to=size)
        parent = None
        if base:
            try:
                parent = delta_parent(repo, volume.id, parent_id=args.parent, base_handle=base)
                why = same_volume(parent.volume, volume)
            except AmbiguousParent as err:
                why = str(err)
            if why:  # never a delta across two volumes: the changes would be overlaid on another volume's data
                base, parent, stream = None, None, _allocated(session, cbt, size, extra, why)
        extra["change_source"] = "cbt-delta" if base else "cbt-allocated"
        try:
            try:
                manifest = run_backup(
                    repo,
                    args.device,
                    volume,
                    extents=stream,
                    base_handle=base,
                    parent=parent.backup_id if parent else None,
                    **{**run, "force_full": run["force_full"] or not base},
                )
            except CbtBaseRejectedError as err:
                stream = _allocated(session, cbt, size, extra, str(err))
                manifest = run_backup(repo, args.device, volume, extents=stream, **{**run, "force_full": True})
        except CbtUnavailableError as err:
            return _fallback(args, err, repo, volume, snapshot, run, extra)
        s = stream
        extra["cbt"] = {
            "block_type": s.block_type,
            "messages": s.messages,
            "tuples": s.tuples,
            "extents": s.extents,
            "resumes": s.resumes,
        }
        return manifest
    finally:
        session.close()


def _allocated(session, cbt, size, extra, why: str):
    """The allocated blocks of the target snapshot, for a full backup instead of a delta, and why."""
    log.warning("%s: a full backup from the allocated blocks instead of a delta", why)
    extra["change_source"] = "cbt-allocated"
    extra["cbt_fallback"] = f"{why}: full backup from the allocated blocks"
    return session.client.allocated(cbt.namespace, cbt.snapshot, clamp_to=size)


def _fallback(args, err, repo, volume, snapshot, run, extra):
    from movers.pipeline.backup import run_backup

    if args.cbt_fallback == "fail":
        raise err
    log.warning("%s; falling back to a scan backup", err)
    extra["change_source"] = "scan"
    extra["cbt_fallback"] = str(err)
    return run_backup(repo, args.device, volume, **run)
