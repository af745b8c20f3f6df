"""The restore of one volume onto a device: ``restore_volume(open_repo, request) -> WriteResult``.

The one entry point of the writer (the writer pod's ``cbt-mover restore --request-env``, and the operator's CLI with
its flags build the same ``RestoreRequest``). In order: the target is checked (``movers.device.check_target``:
a device or image file that can be written), the repository is opened, the backup resolved (an id or ``latest``),
every chunk written and verified (``movers.pipeline.restore``; with ``overwrite: if-changed`` only what differs
from what the device holds, ``movers.pipeline.inplace``, the ``extents`` file read whole and checked first), then
with ``verify_device`` the target read back and compared with the backup (``movers.pipeline.readback``). A target
without room for the backup, or read-only, is a one-line error of its own class that says the target is
incomplete; nothing is retried here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from movers import device
from movers.pipeline.stats import ProgressFn
from movers.restore.request import ReadbackCounters, RestoreRequest, WriteResult
from movers.values import human_bytes

if TYPE_CHECKING:
    from movers.repo.repository import Repository


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


def restore_volume(
    open_repo: Callable[[], Repository], request: RestoreRequest, progress: Callable[[], Phases] | None = None
) -> WriteResult:
    """Write the backup ``request`` names onto ``request.device`` from the repository ``open_repo()`` returns
    (called once the target is checked; the CLI's has been opening it, which only reads it, since it started: its
    errors still come after the target's), and read it back when asked (see the module doc). ``progress`` makes the
    display once the backup is resolved (a terminal's bar starts when made); the restore runs inside it."""
    from movers.extents import read_checked
    from movers.pipeline.inplace import restore_in_place
    from movers.pipeline.readback import verify_device
    from movers.pipeline.restore import run_restore

    target = request.device
    device.check_target(target)
    repo = open_repo()
    manifest = repo.resolve(request.volume, request.backup)
    extents = read_checked(request.extents, manifest.capacity_bytes) if request.extents else None
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
        readback=ReadbackCounters(**check.as_dict()) if check is not None else None,
        requests=repo.store.requests.as_dict(),
        **stats.as_dict(),
    )
