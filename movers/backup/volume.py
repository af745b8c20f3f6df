"""The backup of one volume: ``back_up_volume(open_repo, request) -> BackupResult``, the one place that decides
where the changed ranges come from (no Prefect, no CLI).

* ``cbt``: the SnapshotMetadata service's delta since ``changes.base_handle`` when the base's backup is of the
  same source volume (never a delta across two volumes), else, or when the service refuses the base, a full
  backup from the allocated blocks; when CBT is unavailable a scan (or, ``cbt_fallback`` ``fail``, exit code 9).
  ``--kube``'s lookup of the snapshot fills in the identities for the next delta.
* ``scan``: the whole device, built on ``changes.parent`` (default the volume's newest backup).
* ``extents``: the operator's JSON lines, read whole and checked first, built on the backup they are changes
  since (``--parent``, ``--base-handle`` or their summary line; ``movers.repo.deltabase``).

The result names the change source used and, when it is not the one asked for, the reason (``cbt_fallback``).
Order: the request was validated when it was built (``movers.backup.request``); then the device and the extents
are checked, and only then the repository is opened (``open_repo``) and the cluster asked: bad input writes
nothing. How the pod reaches the service (``movers.cbt.source.CbtConnection``) is a separate argument: the
request says what to back up, the connection how this process talks to the cluster.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from movers import device
from movers.backup.request import BackupRequest, BackupResult, CbtCounters
from movers.cbt.source import CbtConnection
from movers.errors import UsageError
from movers.pipeline.stats import ProgressFn
from movers.repo.manifest import Manifest, SnapshotIdentity, VolumeIdentity

log = logging.getLogger("movers")


class Progress(Protocol):
    """A progress display around the backup (``movers.cli.progress.Reporter``): made and entered once the
    repository is open; ``phase("backup")`` is the engine's callback."""

    def phase(self, name: str) -> ProgressFn: ...

    def __enter__(self) -> Progress: ...

    def __exit__(self, *exc: object) -> Any: ...


@dataclass
class _Quiet:
    def phase(self, name: str) -> ProgressFn:
        return lambda done, total, **detail: None

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class _Outcome:
    manifest: Manifest
    change_source: str
    reason: str | None = None  # why not the change source asked for
    cbt: CbtCounters | None = None


@dataclass
class _Backup:
    """One ``run_backup`` of the request, with what ``--kube`` learned recorded in ``volume`` and ``snapshot``."""

    repo: Any
    request: BackupRequest
    progress: ProgressFn
    volume: VolumeIdentity = field(init=False)
    snapshot: SnapshotIdentity = field(init=False)

    def __post_init__(self) -> None:
        self.volume, self.snapshot = self.request.volume.identity(), self.request.snapshot.identity()

    def run(self, **how) -> Manifest:
        from movers.pipeline.backup import BackupOptions, run_backup

        r = self.request
        how.setdefault("force_full", r.changes.full)
        options = BackupOptions(level=r.zstd_level, workers=r.threads())
        return run_backup(
            self.repo,
            r.device,
            self.volume,
            snapshot=self.snapshot,
            options=options,
            progress=self.progress,
            tags=r.tags,
            run_pvcs=r.run_pvcs,
            **how,
        )


def back_up_volume(
    open_repo: Callable[[], Any],
    request: BackupRequest,
    *,
    cbt: CbtConnection | None = None,
    progress: Callable[[], Progress] | None = None,
) -> BackupResult:
    """Back up ``request.device`` into the repository ``open_repo()`` returns, from the change source the request
    names (see the module doc); ``cbt``: how to reach the SnapshotMetadata service (``source`` ``cbt`` needs one
    that is ``wanted``). ``progress`` makes the display, once the repository is open (a terminal's bar starts when
    made), and the backup runs inside it."""
    changes = request.changes
    if changes.source == "cbt" and not (cbt and cbt.wanted):
        raise UsageError("a CBT backup needs --cbt-address (with --cbt-ca-file) or --kube")
    device.check_source(request.device)
    checked = _checked_extents(changes.extents, _device_size(request.device)) if changes.extents else None
    repo = open_repo()
    with (progress or _Quiet)() as display:
        backup = _Backup(repo, request, display.phase("backup"))
        if changes.source == "cbt":
            assert cbt is not None
            outcome = _cbt_backup(backup, cbt)
        elif checked is not None:
            outcome = _extents_backup(backup, *checked)
        else:
            outcome = _Outcome(backup.run(parent=changes.parent), "scan")
    m = outcome.manifest
    return BackupResult(
        backup_id=m.backup_id,
        volume=m.volume.id,
        mode=m.mode,
        parent=m.parent,
        capacity_bytes=m.capacity_bytes,
        snapshot_handle=m.snapshot.snapshot_handle,
        pv_volume_handle=m.volume.pv_volume_handle,
        tags=m.tags,
        change_source=outcome.change_source,
        cbt_fallback=outcome.reason,
        cbt=outcome.cbt,
        **m.stats,
        requests=repo.store.requests.as_dict(),
    )


def _extents_backup(backup: _Backup, stream, name: str, check) -> _Outcome:
    from movers.extents import parse_jsonl

    with stream:
        parent = _extents_parent(backup, check)
        extents = parse_jsonl(stream, name)
        return _Outcome(backup.run(extents=extents, parent=parent, force_full=parent is None), "extents")


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
    from movers.extents import open_source

    source, name = open_source(path)
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
    from movers.extents import check_stream, not_utf8

    try:
        return check_stream(lines, capacity, name)
    except UnicodeDecodeError:
        keep.close()
        raise not_utf8(name) from None
    except BaseException:
        keep.close()
        raise


def _copied(lines, copy):
    for line in lines:
        copy.write(line)
        yield line


def _extents_parent(backup: _Backup, check) -> str | None:
    """The backup id the extents are changes since (``movers.repo.deltabase``), or None for a full backup:
    ``--full``, ``--parent``, else the one backup that recorded ``--base-handle`` or the handle the extents'
    summary line names; allocated extents (their summary says so) or a volume without backups: a full backup.
    Otherwise which backup they are changes since is not known: ``AmbiguousParent`` (exit 2). A parent of
    another source volume is refused too."""
    from movers.repo.deltabase import AmbiguousParent, delta_parent
    from movers.repo.lineage import same_volume

    changes, repo, volume = backup.request.changes, backup.repo, backup.volume
    if changes.full:
        return None
    if changes.base_handle and check.base_handle and changes.base_handle != check.base_handle:
        raise UsageError(
            f"--base-handle {changes.base_handle} is not the snapshot the extents' summary line names"
            f" ({check.base_handle})"
        )
    handle = changes.base_handle or check.base_handle
    if changes.parent is None and handle is None:
        newest = repo.latest(volume.id)
        if check.allocated or newest is None:
            return None
        raise AmbiguousParent(
            f"the extents do not say which backup of {volume.id} they are changes since (its newest is"
            f" {newest.backup_id}): name it with --parent BACKUP_ID or --base-handle (the snapshot handle it"
            " recorded), or back up with --full (and the extents of the whole volume) or --scan"
        )
    parent = delta_parent(repo, volume.id, parent_id=changes.parent, base_handle=handle)
    why = same_volume(parent.volume, volume)
    if why:
        raise UsageError(
            f"{why}: the extents cannot be changes since backup {parent.backup_id}; back up with"
            " --full (and the extents of the whole volume) or --scan"
        )
    return parent.backup_id


def _record_snapshot(ref, volume: VolumeIdentity, snapshot: SnapshotIdentity) -> None:
    """What ``--kube`` looked up about the snapshot (a ``SnapshotRef``; None: nothing) goes into the manifest's
    identities, for the next delta (what the request names wins, but the snapshot's source volume handle)."""
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


def _cbt_backup(backup: _Backup, connection: CbtConnection) -> _Outcome:
    """Back up the ranges the SnapshotMetadata service names (see the module doc)."""
    from movers.cbt.source import open_session
    from movers.errors import CbtBaseRejectedError, CbtUnavailableError
    from movers.repo.deltabase import AmbiguousParent, delta_parent
    from movers.repo.lineage import same_volume

    request, changes = backup.request, backup.request.changes
    target = dict(namespace=request.snapshot.namespace, snapshot=request.snapshot.volume_snapshot)
    opts = connection.options(
        **target,
        base_handle=changes.base_handle,
        base_snapshot=changes.base_snapshot,
        max_results=changes.cbt_max_results,
    )
    size = _device_size(request.device)

    def allocated(why: str):
        log.warning("%s: a full backup from the allocated blocks instead of a delta", why)
        return session.client.allocated(opts.namespace, opts.snapshot, clamp_to=size)

    try:
        session = open_session(opts, clamp_to=size)
    except CbtUnavailableError as err:
        _record_snapshot(err.snapshot, backup.volume, backup.snapshot)
        return _fallback(backup, err)
    try:
        _record_snapshot(session.snapshot, backup.volume, backup.snapshot)
        if not backup.snapshot.snapshot_handle:
            log.warning("no --snapshot-handle: the next backup cannot ask for a delta since this one")
        base, stream, why = changes.base_handle, session.stream, None
        if base and session.base_rejected:  # a v1alpha1 service and no base VolumeSnapshot that is the base
            base, why = None, session.base_rejected
            stream = allocated(why)
        if base and changes.full:  # --full: a delta's ranges are not the whole volume
            log.info("--full: the allocated blocks, not the changes since %s", base)
            base, stream = None, session.client.allocated(opts.namespace, opts.snapshot, clamp_to=size)
        parent = None
        if base:
            try:
                parent = delta_parent(backup.repo, backup.volume.id, parent_id=changes.parent, base_handle=base)
                other = same_volume(parent.volume, backup.volume)
            except AmbiguousParent as err:
                other = str(err)
            if other:  # never a delta across two volumes: the changes would be overlaid on another volume's data
                base, parent, why = None, None, other
                stream = allocated(why)
        try:
            try:
                manifest = backup.run(
                    extents=stream,
                    base_handle=base,
                    parent=parent.backup_id if parent else None,
                    force_full=changes.full or not base,
                )
            except CbtBaseRejectedError as err:
                base, why = None, str(err)
                stream = allocated(why)
                manifest = backup.run(extents=stream, force_full=True)
        except CbtUnavailableError as err:
            return _fallback(backup, err)
        counters = CbtCounters(
            block_type=stream.block_type,
            messages=stream.messages,
            tuples=stream.tuples,
            extents=stream.extents,
            resumes=stream.resumes,
        )
        reason = f"{why}: full backup from the allocated blocks" if why else None
        return _Outcome(manifest, "cbt-delta" if base else "cbt-allocated", reason, counters)
    finally:
        session.close()


def _fallback(backup: _Backup, err: Exception) -> _Outcome:
    """CBT is unavailable: a scan, with the reason, or (``cbt_fallback`` ``fail``) the error (exit code 9)."""
    if backup.request.changes.cbt_fallback == "fail":
        raise err
    log.warning("%s; falling back to a scan backup", err)
    return _Outcome(backup.run(), "scan", str(err))
