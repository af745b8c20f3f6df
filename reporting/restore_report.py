"""What a restore run tells people: the table ``restore-<target namespace>`` (one row per volume, ``reporting.tables``'
style: the same header words and units as the backup's table) and the markdown ``restore-<target namespace>-report``.
Pure but for ``publish``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reporting.tables import rate, seconds, size, table

if TYPE_CHECKING:
    from movers.repo.selection import Selection


def display_rows(target: str, rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The flow's rows (``flows.restore._row``) as people read them."""
    return table(
        {
            "volume": f"{target}/{r['pvc']}",
            "restored from": r["volume"],
            "backup id": r["backup_id"],
            "volume mode": r["volume_mode"],
            "storage class": r.get("storage_class"),
            "source": r.get("source") or "repository",
            "path": r.get("path") or "-",
            "compared": size(r.get("compared_bytes")),
            "fetched": size(r.get("fetched_bytes")),
            "written": size(r["written_bytes"]),
            "capacity": size(r.get("capacity_bytes")),
            "duration": seconds(r["duration_s"]),
            "throughput": rate(r["written_bytes"] / r["duration_s"] if r["duration_s"] else None),
            "read back": seconds(r.get("readback_s")),
            "replaced": bool(r["replaced"]),
        }
        for r in rows
    )


def _source_text(source: str | None, path: str | None = None) -> str:
    """How a volume was restored, for the report's sentence (``movers.restore.plan.Target.source``; in place, the
    writer's ``path``: by CBT or by compare)."""
    if source == "in place":
        return {"cbt": "in place by CBT", "compare": "in place by compare"}.get(path or "", "in place")
    return {"snapshot": "from the kept snapshot"}.get(source or "", "from the repository")


@dataclass(frozen=True)
class RestoreRun:
    """A restore run as its report names it: the source ``namespace``, the ``target`` namespace, its run id, the
    repository, the backups ``selected`` and ``backup_run``: the line naming the backup run restored (and linking
    its flow run), if known; ``application``: the workloads it scaled down and back, if any."""

    namespace: str
    target: str
    run_id: str
    repo: str
    selected: Selection
    backup_run: str = ""
    application: str = ""  # what the run did to the application (workloads scaled down and back), if anything


def report_markdown(run: RestoreRun, rows: list[dict[str, Any]]) -> str:
    """Where each volume came from and went, what was written, the selection's notes, the backup run, and what
    the run did to the application (workloads scaled down and back)."""
    target, selected, backup_run = run.target, run.selected, run.backup_run
    lines = "\n".join(
        f"- `{target}/{r['pvc']}` ({r['volume_mode']}, class `{r['storage_class']}`, PV `{r['pv']}`"
        f"{', replaced the existing claim' if r['replaced'] else ''}): backup `{r['backup_id']}` of `{r['volume']}`,"
        f" {_source_text(r.get('source'), r.get('path'))} ({r.get('source_reason') or '-'}): compared"
        f" {size(r.get('compared_bytes'))}, fetched {size(r.get('fetched_bytes'))}, {size(r['written_bytes'])}"
        f" written in {seconds(r['duration_s'])}, read back identical" + "".join(f"\n  - note: {n}" for n in r["notes"])
        for r in rows
    )
    notes = "".join(f"- {n}\n" for n in selected.notes)
    return (
        f"# Restore {run.run_id}\n\nFrom `{run.repo}`, {selected.how}, namespace `{run.namespace}` into `{target}`:\n\n"
        + (f"{backup_run}\n\n" if backup_run else "")
        + (f"{notes}\n" if notes else "")
        + f"{lines}\n\n"
        "Each claim is annotated `cbt-mover.io/restored-from=<volume>@<backup id>`.\n"
        + (f"\n## Application\n\n- {run.application}\n" if run.application else "")
    )


def publish(run: RestoreRun, rows: list[dict[str, Any]]) -> None:
    """The restore's table and markdown artifacts."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_table_artifact(
        key=f"restore-{run.target}",
        table=display_rows(run.target, rows),
        description=f"restore {run.run_id} of {run.namespace} into {run.target} from {run.repo}",
    )
    create_markdown_artifact(
        key=f"restore-{run.target}-report",
        markdown=report_markdown(run, rows),
    )
