"""What a ``restore-files`` run tells people: the table ``files-<namespace>`` (one row per thing copied: volume, path,
kind, size; ``reporting.tables``' style) and the markdown ``files-<namespace>-report`` (per volume: its backup, where
its files went, the bytes copied and the stored bytes fetched). Pure but for ``publish``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reporting.tables import markdown_table, seconds, size, table

if TYPE_CHECKING:
    from movers.files.request import FilesResult

MAX_ROWS = 1000  # the table's rows at most (the report says how many more were copied)


@dataclass(frozen=True)
class CopiedVolume:
    """One volume's copy: its claim ``pvc``, where its files went in the target (``into``: a path of the claim)
    and the files pod's ``result``."""

    pvc: str
    into: str
    result: FilesResult


@dataclass(frozen=True)
class FilesRun:
    """A run as its report names it: the application's ``namespace``, its run id, the repository, the backups
    selected (``how``), the target ``claim`` and whether the run created it (``new``)."""

    namespace: str
    run_id: str
    repo: str
    how: str
    claim: str
    new: bool


def entry_rows(namespace: str, copied: list[CopiedVolume]) -> list[dict[str, str]]:
    """One row per entry copied (``volume``, ``path``, ``kind``, ``size``), at most ``MAX_ROWS``."""
    rows = (
        {"volume": f"{namespace}/{v.pvc}", "path": e.path, "kind": e.kind, "size": size(e.size)}
        for v in copied
        for e in v.result.copied
    )
    return table(row for _, row in zip(range(MAX_ROWS), rows, strict=False))


def volume_rows(namespace: str, copied: list[CopiedVolume]) -> list[dict[str, str]]:
    """One row per volume: its backup, filesystem, where its files went, entries, bytes copied and fetched."""
    return table(
        {
            "volume": f"{namespace}/{v.pvc}",
            "backup id": v.result.backup_id,
            "filesystem": v.result.filesystem,
            "into": v.into,
            "entries": v.result.entries,
            "copied": size(v.result.copied_bytes),
            "fetched": size(v.result.fetched_bytes),
            "duration": seconds(v.result.duration_s),
        }
        for v in copied
    )


def report_markdown(run: FilesRun, copied: list[CopiedVolume]) -> str:
    """Where the files came from and went, per volume, and how many entries the table leaves out."""
    entries = sum(v.result.entries for v in copied)
    listed = min(MAX_ROWS, sum(len(v.result.copied) for v in copied))
    more = (
        f"\nThe table `files-{run.namespace}` lists {listed} of the {entries} entries copied (a files pod's result"
        f" names as many as its termination message holds, the table at most {MAX_ROWS}).\n"
    )
    claim = f"`{run.namespace}/{run.claim}`" + (" (created by this run)" if run.new else "")
    return (
        f"# Files restored by {run.run_id}\n\nFrom `{run.repo}`, {run.how}, into claim {claim}:\n\n"
        + markdown_table(volume_rows(run.namespace, copied))
        + (more if entries > listed else "")
    )


def publish(run: FilesRun, copied: list[CopiedVolume]) -> None:
    """The run's table and markdown artifacts."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_table_artifact(
        key=f"files-{run.namespace}",
        table=entry_rows(run.namespace, copied),
        description=f"files restored by {run.run_id} from {run.repo} into {run.namespace}/{run.claim}",
    )
    create_markdown_artifact(key=f"files-{run.namespace}-report", markdown=report_markdown(run, copied))
