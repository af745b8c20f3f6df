"""What a restore run tells people: the table ``restore-<target namespace>`` (one row per volume, ``reporting.tables``'
style: the same header words and units as the backup's table) and the markdown ``restore-<target namespace>-report``.
Pure but for ``publish``."""

from __future__ import annotations

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
            "written": size(r["written_bytes"]),
            "capacity": size(r.get("capacity_bytes")),
            "duration": seconds(r["duration_s"]),
            "throughput": rate(r["written_bytes"] / r["duration_s"] if r["duration_s"] else None),
            "read back": seconds(r.get("readback_s")),
            "replaced": bool(r["replaced"]),
        }
        for r in rows
    )


def report_markdown(
    namespace: str,
    target: str,
    run_id: str,
    repo: str,
    selected: Selection,
    rows: list[dict[str, Any]],
    backup_run: str = "",
) -> str:
    """Where each volume came from and went, what was written, the selection's notes; ``backup_run``: the line
    naming the backup run restored (and linking its flow run), if known."""
    lines = "\n".join(
        f"- `{target}/{r['pvc']}` ({r['volume_mode']}, class `{r['storage_class']}`, PV `{r['pv']}`"
        f"{', replaced the existing claim' if r['replaced'] else ''}): backup `{r['backup_id']}` of `{r['volume']}`,"
        f" {size(r['written_bytes'])} written in {seconds(r['duration_s'])}, read back identical"
        + "".join(f"\n  - note: {n}" for n in r["notes"])
        for r in rows
    )
    notes = "".join(f"- {n}\n" for n in selected.notes)
    return (
        f"# Restore {run_id}\n\nFrom `{repo}`, {selected.how}, namespace `{namespace}` into `{target}`:\n\n"
        + (f"{backup_run}\n\n" if backup_run else "")
        + (f"{notes}\n" if notes else "")
        + f"{lines}\n\n"
        "Each claim is annotated `cbt-mover.io/restored-from=<volume>@<backup id>`.\n"
    )


def publish(
    namespace: str,
    target: str,
    run_id: str,
    repo: str,
    selected: Selection,
    rows: list[dict[str, Any]],
    backup_run: str = "",
) -> None:
    """The restore's table and markdown artifacts (``report_markdown``'s ``backup_run`` line)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_table_artifact(
        key=f"restore-{target}",
        table=display_rows(target, rows),
        description=f"restore {run_id} of {namespace} into {target} from {repo}",
    )
    create_markdown_artifact(
        key=f"restore-{target}-report",
        markdown=report_markdown(namespace, target, run_id, repo, selected, rows, backup_run),
    )
