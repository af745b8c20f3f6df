"""What a backup run tells people: summary rows and Prefect artifacts (its events: ``tasks.events``).

Ratios, from the mover's result (``movers.pipeline.stats.BackupStats``):

- dedup = non-zero bytes read / bytes of chunks new to the repository (``inf`` when everything read
  was already stored, ``None`` when nothing was read);
- compression = raw bytes of the new chunks / bytes uploaded for them (data objects only);
- throughput = bytes read from the snapshot per second of the mover's run.
"""

from __future__ import annotations

import math
from typing import Any

from movers.kube.backup import MoverResult, VolumePlan
from movers.units import human_bytes


def _ratio(numerator: float, denominator: float) -> float | None:
    if numerator <= 0:
        return None
    return math.inf if denominator <= 0 else round(numerator / denominator, 2)


def volume_row(volume: str, plan: VolumePlan, result: MoverResult, snapshot: str | None = None) -> dict[str, Any]:
    """One volume's summary (plain numbers) from its plan and its mover's result; ``snapshot`` says how its
    snapshot was taken (e.g. ``per-pvc (fallback: ...)``), ``why`` is the plan's reason."""
    read, new, stored = result.read_bytes, result.new_chunk_bytes, result.stored_bytes
    duration = result.duration_s
    return {
        "volume": volume,
        "mode": result.mode,
        "planned": plan.change_source,
        "why": plan.why,
        "snapshot": snapshot,
        "change_source": result.change_source,
        "changed_bytes": result.changed_bytes,
        "read_bytes": read,
        "uploaded_bytes": stored,
        "dedup_ratio": _ratio(read - result.zero_bytes, new),
        "compression_ratio": _ratio(new, stored - result.metadata_bytes) if new else None,
        "duration_s": round(duration, 3),
        "throughput_bps": int(read / duration) if duration > 0 else None,
        "reused_packs": result.reused_packs,
        "backup_id": result.backup_id,
    }


def snapshot_text(snap: dict[str, Any]) -> str:
    """How a run took its snapshots, for its table: ``group``, ``per-pvc`` or ``per-pvc (fallback: why)``."""
    return f"{snap['path']} (fallback: {snap['fallback']})" if snap.get("fallback") else snap["path"]


def _times(r: float | None) -> str:
    return "-" if r is None else "all stored before" if math.isinf(r) else f"{r:.2f}x"


def display_rows(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The rows as people read them (sizes in KiB/MiB/GiB, ratios as ``1.25x``)."""
    return [
        {
            "volume": r["volume"],
            "mode": r["mode"] or "-",
            "change source": r["change_source"]
            if r["change_source"] == r["planned"]
            else f"{r['change_source']} (planned {r['planned']})",
            "changed": human_bytes(r["changed_bytes"]),
            "read": human_bytes(r["read_bytes"]),
            "uploaded": human_bytes(r["uploaded_bytes"]),
            "dedup": _times(r["dedup_ratio"]),
            "compression": _times(r["compression_ratio"]),
            "duration": f"{r['duration_s']:.1f} s",
            "throughput": "-" if r["throughput_bps"] is None else f"{human_bytes(r['throughput_bps'])}/s",
            "backup id": r["backup_id"] or "-",
            "snapshot": r.get("snapshot") or "-",
            "plan": r.get("why") or "-",
        }
        for r in rows
    ]


def restore_markdown(run_id: str, namespace: str, app: str, repo_url: str, rows: list[dict[str, Any]]) -> str:
    """What to run to restore this backup: the restore flow (whole app or one PVC) and the CLI."""
    pvcs = ", ".join(f"`{r['volume'].split('/', 1)[1]}`" for r in rows)
    cli = "\n".join(
        f"    cbt-mover restore --repo {repo_url} --volume {r['volume']} --backup {r['backup_id']}"
        " --device /dev/<target>"
        for r in rows
    )
    return (
        f"# Backup {run_id} of `{namespace}` ({app})\n\n"
        f"Repository `{repo_url}`; volumes {pvcs}.\n\n"
        "## Restore the application (Prefect)\n\n"
        f"    prefect deployment run 'restore-app/restore' -p repo={repo_url} -p namespace={namespace}"
        f" -p backup={run_id} -p target_namespace=<namespace>\n\n"
        "Add `-p 'pvcs=[\"<pvc>\"]'` for one volume. Existing PVCs are never overwritten unless"
        " `-p overwrite=true`.\n\n"
        "## Restore one volume onto a block device or image file (CLI)\n\n"
        "From a Block-mode pod (or host) with the repository's credentials:\n\n"
        f"{cli}\n"
    )
