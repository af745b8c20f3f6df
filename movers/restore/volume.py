"""The restore of one volume onto a device: ``restore_volume(open_repo, request) -> WriteResult``.

The one entry point of the writer (the writer pod's ``cbt-mover restore --request-env``, and the operator's CLI with
its flags build the same ``RestoreRequest``). In order: the target is checked (``movers.device.check_target``:
a device or image file that can be written), the repository is opened, the backup resolved (an id or ``latest``),
every chunk written and verified (``movers.pipeline.restore``; with ``overwrite: if-changed`` only what differs
from what the device holds, ``movers.pipeline.inplace``, the ``extents`` file read whole and checked first), then
with ``verify_device`` the target read back and compared with the backup (``movers.pipeline.readback``). A target
without room for the backup, or read-only, is a one-line error of its own class that says the target is
incomplete; nothing is retried here.

``cbt`` (``RestoreRequest.cbt``, a ``CbtDelta``): before anything is written, the SnapshotMetadata service is asked
for the changes between the backup's snapshot and a snapshot of the live volume, as a backup's mover asks for
its delta (``movers.cbt.source.open_session`` with the pod's ``CbtConnection``), read whole and checked against
the volume: those are the extents. When the service cannot answer (none for the driver, the delta refused, e.g.
INVALID_ARGUMENT for snapshots of two volumes or NOT_FOUND for a base that is gone, or any other CBT error) the
device is compared instead, and the result says why (``cbt_fallback``): a restore never fails for want of CBT.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from movers import device
from movers.pipeline.stats import ProgressFn
from movers.restore.request import CbtDelta, Path, ReadbackCounters, RestoreRequest, WriteResult
from movers.values import human_bytes

if TYPE_CHECKING:
    from movers.cbt.source import CbtConnection
    from movers.repo.repository import Repository

log = logging.getLogger("movers")
FALLBACK_CHARS = 600  # the most of a CBT error kept as the result's reason (the termination log holds 4 KiB)


class Phases(Protocol):
    """Where the restore reports its progress, a context manager that is open while the restore runs: one
    ``ProgressFn`` per phase (writing, then reading back), each ``part`` of ``parts``
    (``movers.cli.progress.Reporter`` is one)."""

    def phase(self, name: str, *, part: int = 0, parts: int = 1) -> ProgressFn: ...

    def __enter__(self) -> Phases: ...

    def __exit__(self, *exc: object) -> bool | None: ...


class _Quiet:
    def phase(self, name: str, *, part: int = 0, parts: int = 1) -> ProgressFn:
        return lambda done, total, **detail: None

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def cbt_extents(delta: CbtDelta, connection: CbtConnection, capacity: int) -> list[tuple[int, int]]:
    """The ranges of ``delta`` (see the module doc), read whole and checked against a volume of ``capacity``
    bytes; a ``CbtError`` when the service cannot name them (a v1alpha1 service without the base's
    VolumeSnapshot: ``CbtBaseRejectedError``)."""
    from movers.cbt.source import open_session
    from movers.errors import CbtBaseRejectedError
    from movers.extents import validated

    opts = connection.options(
        namespace=delta.namespace,
        snapshot=delta.snapshot,
        base_handle=delta.base_handle,
        base_snapshot=delta.base_snapshot,
        max_results=delta.max_results,
    )
    session = open_session(opts, clamp_to=capacity)
    try:
        if session.base_rejected:
            raise CbtBaseRejectedError(session.base_rejected)
        return list(validated(session.stream, capacity, "the CBT delta"))
    finally:
        session.close()


def _delta_or_why(
    request: RestoreRequest, connection: CbtConnection | None, capacity: int
) -> tuple[list[tuple[int, int]] | None, str | None]:
    """``(extents, None)`` of ``request.cbt``, or ``(None, why not)``: the device is compared instead."""
    from movers.errors import CbtError, UsageError

    assert request.cbt is not None
    if connection is None or not connection.wanted:
        return None, "this writer was given no way to reach the SnapshotMetadata service (--kube or --cbt-address)"
    try:
        return cbt_extents(request.cbt, connection, capacity), None
    except (CbtError, UsageError) as err:  # UsageError: e.g. the delta's ranges do not fit the volume
        why = " ".join(str(err).split())[:FALLBACK_CHARS]
        log.warning("%s: comparing the device with the backup instead", why)
        return None, why


def restore_volume(
    open_repo: Callable[[], Repository],
    request: RestoreRequest,
    progress: Callable[[], Phases] | None = None,
    cbt: CbtConnection | None = None,
) -> WriteResult:
    """Write the backup ``request`` names onto ``request.device`` from the repository ``open_repo()`` returns
    (called once the target is checked; the CLI's has been opening it, which only reads it, since it started: its
    errors still come after the target's), and read it back when asked (see the module doc). ``progress`` makes the
    display once the backup is resolved (a terminal's bar starts when made); the restore runs inside it. ``cbt``:
    how this process reaches the SnapshotMetadata service for ``request.cbt``."""
    from movers.extents import read_checked
    from movers.pipeline.inplace import restore_in_place
    from movers.pipeline.readback import verify_device
    from movers.pipeline.restore import run_restore

    target = request.device
    device.check_target(target)
    repo = open_repo()
    manifest = repo.resolve(request.volume, request.backup)
    extents = read_checked(request.extents, manifest.capacity_bytes) if request.extents else None
    path: Path = "full" if request.overwrite == "always" else "extents" if extents is not None else "compare"
    fallback = None
    if request.cbt is not None:
        extents, fallback = _delta_or_why(request, cbt, manifest.capacity_bytes)
        path = "compare" if extents is None else "cbt"
    steps = [*(["compare"] if request.overwrite == "if-changed" and extents is None else []), "restore"]
    steps += ["readback"] if request.verify_device else []
    with (progress or _Quiet)() as display:
        phase = {name: display.phase(name, part=i, parts=len(steps)) for i, name in enumerate(steps)}
        try:
            if request.overwrite == "if-changed":
                stats = restore_in_place(
                    repo,
                    manifest,
                    target,
                    extents=extents,
                    workers=request.workers,
                    compare_progress=phase.get("compare"),
                    write_progress=phase["restore"],
                )
            else:
                stats = run_restore(
                    repo,
                    manifest,
                    target,
                    assume_zeroed=request.assume_zeroed,
                    workers=request.workers,
                    progress=phase["restore"],
                )
        except device.NoRoom as err:
            raise device.NoRoom(
                f"restore target {target} has no room for backup {manifest.backup_id}"
                f" ({human_bytes(manifest.capacity_bytes, missing='?')}): {err}; the target is incomplete"
            ) from None
        except device.ReadOnly as err:
            raise device.ReadOnly(f"restore target {target}: {err}; the target is incomplete") from None
        check = None
        if request.verify_device:
            check = verify_device(repo, manifest, target, workers=request.workers, progress=phase["readback"])
    return WriteResult(
        backup_id=manifest.backup_id,
        volume=request.volume,
        mode=manifest.mode,
        path=path,
        cbt_fallback=fallback,
        readback=ReadbackCounters(**check.as_dict()) if check is not None else None,
        requests=repo.store.requests.as_dict(),
        **stats.as_dict(),
    )
