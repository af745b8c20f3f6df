"""What a maintenance run tells people: artifact tables and the verify summary (its events: ``tasks.events``).

Pure functions over the plain results of ``tasks.maintenance`` (no Prefect calls).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from movers.units import human_bytes as size

MAX_DAMAGE_ROWS = 200


def public_url(url: str) -> str:
    """The repository URL without credentials (``scheme://user:secret@host`` loses ``user:secret@``)."""
    return re.sub(r"//[^/@]*@", "//", url.strip()).rstrip("/")


def artifact_key(url: str, what: str) -> str:
    """An artifact key (lowercase letters, digits, dashes) naming the repository and what it shows."""
    slug = re.sub(r"[^a-z0-9]+", "-", public_url(url).lower()).strip("-")[:40].strip("-")
    return f"maintenance-{slug}-{hashlib.sha256(public_url(url).encode()).hexdigest()[:6]}-{what}"


def retention_rows(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, str]]:
    """One row per backup: volume, backup id, created, keep / forget (or would forget), why, the rules."""
    from movers.repo.retention import backup_time

    rows = []
    for rules, result in results:
        shown = ", ".join(f"{k.removeprefix('keep_')} {v}" for k, v in rules.items() if v) or "-"
        verb = "would forget" if result["dry_run"] else "forget"
        for vol in result["volumes"]:
            for k in vol["kept"]:
                rows.append(
                    {
                        "volume": vol["volume"],
                        "backup": k["backup_id"],
                        "created": k["created"],
                        "action": "keep",
                        "why": ", ".join(k["reasons"]),
                        "rules": shown,
                    }
                )
            for bid in vol["expired"]:
                created = backup_time(bid)
                rows.append(
                    {
                        "volume": vol["volume"],
                        "backup": bid,
                        "created": created.isoformat() if created else "-",
                        "action": verb,
                        "why": "no rule keeps it",
                        "rules": shown,
                    }
                )
    return rows


def prune_rows(report: dict[str, Any]) -> list[dict[str, str]]:
    """The prune report as one table row (or why the prune did not run)."""
    if report.get("skipped"):
        return [{"result": "skipped", "why": report["skipped"]}]
    return [
        {
            "result": "dry run (nothing deleted)" if report["dry_run"] else "done",
            "packs deleted": str(report["packs_deleted"]),
            "map objects deleted": str(report["map_objects_deleted"]),
            "bytes deleted": size(report["bytes_deleted"]),
            "in grace": f"{report['packs_in_grace']} packs ({size(report['bytes_in_grace'])}),"
            f" {report['map_objects_in_grace']} map objects",
            "kept": f"{report['packs_kept']} packs ({size(report['kept_chunk_bytes'])})",
            "dead bytes": f"{size(report['dead_bytes'])} in {report['packs_partly_used']} partly used packs",
            "repacked": f"{report['packs_repacked']} packs ({size(report['bytes_repacked'])} copied)",
            "index objects": f"{report['index_objects_deleted']} replaced by {report['index_objects_written']}",
            "backups marked": str(report["backups_marked"]),
            "duration": f"{report['duration_s']:.1f} s",
        }
    ]


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verify_markdown(url: str, report: dict[str, Any]) -> str:
    """The verify result: verdict, what was read, the damage (volume, backup, offset) and warnings."""
    verdict = "OK" if report["ok"] else f"DAMAGED ({len(report['damage'])} finding(s))"
    if report["mode"] == "sampled":
        how = (
            f"sampled (fraction {report['sample']}, seed {report['seed']}): {report['packs_read']} of"
            f" {report['packs_total']} packs read whole"
        )
    else:
        how = "full: every referenced chunk read"
    lines = [
        f"# Verify of `{public_url(url)}`: {verdict}",
        "",
        f"- mode {how}",
        f"- {report['backups_checked']} backups and {report['map_objects_checked']} map objects checked,"
        f" {report['chunks_verified']} chunks decoded and hash-checked",
        f"- {size(report['fetched_bytes'])} read (referenced data in the packs: {size(report['stored_bytes'])})",
        f"- {report['duration_s']:.1f} s",
    ]
    if report["damage"]:
        lines += ["", "## Damage", "", "| volume | backup | volume offset | object | error |", "|---|---|---|---|---|"]
        for d in report["damage"][:MAX_DAMAGE_ROWS]:
            lines.append(
                "| "
                + " | ".join(
                    _cell("-" if d[k] is None else d[k]) for k in ("volume", "backup_id", "offset", "object", "error")
                )
                + " |"
            )
        if len(report["damage"]) > MAX_DAMAGE_ROWS:
            lines.append(f"\n... and {len(report['damage']) - MAX_DAMAGE_ROWS} more")
    if report["warnings"]:
        lines += ["", "## Warnings (no backup affected)", ""] + [f"- {_cell(w)}" for w in report["warnings"][:50]]
    return "\n".join(lines) + "\n"
