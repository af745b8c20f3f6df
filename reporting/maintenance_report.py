"""What a maintenance run tells people: artifact tables and the verify summary (its events: ``reporting.events``).

Pure functions over the typed results of ``tasks.maintenance`` (no Prefect calls), read as their ``to_dict()``.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from reporting.tables import cell, markdown_table, seconds, size, table

if TYPE_CHECKING:
    from movers.pipeline.verify import VerifyReport
    from tasks.maintenance import Consolidated, Forgotten, Pruned

MAX_DAMAGE_ROWS = 200


def public_url(url: str) -> str:
    """The repository URL without credentials (``scheme://user:secret@host`` loses ``user:secret@``)."""
    return re.sub(r"//[^/@]*@", "//", url.strip()).rstrip("/")


def artifact_key(url: str, what: str) -> str:
    """An artifact key (lowercase letters, digits, dashes) naming the repository and what it shows."""
    slug = re.sub(r"[^a-z0-9]+", "-", public_url(url).lower()).strip("-")[:40].strip("-")
    return f"maintenance-{slug}-{hashlib.sha256(public_url(url).encode()).hexdigest()[:6]}-{what}"


def retention_rows(results: list[tuple[dict[str, Any], Forgotten]]) -> list[dict[str, str]]:
    """One row per backup: volume, backup id, created, its application run and policy, keep / forget (or would
    forget), why, the rules. A run's backups share its verdict (``movers.repo.retention``)."""
    from movers.repo.retention import backup_time

    rows: list[dict[str, str]] = []
    for rules, forgotten in results:
        result = forgotten.to_dict()
        shown = ", ".join(f"{k.removeprefix('keep_')} {v}" for k, v in rules.items() if v) or "-"
        verb = "would forget" if result["dry_run"] else "forget"
        run_of = {b["backup_id"]: r for r in result.get("runs", []) for b in r["backups"]}
        for vol in result["volumes"]:
            for k in vol["kept"]:
                run = run_of.get(k["backup_id"])
                rows.append(
                    {
                        "volume": vol["volume"],
                        "backup": k["backup_id"],
                        "created": k["created"],
                        "run": _run_cell(run),
                        "policy": k.get("policy") or "-",
                        "action": "keep",
                        "why": ", ".join(k["reasons"]),
                        "rules": shown,
                    }
                )
            for bid in vol["expired"]:
                created, run = backup_time(bid), run_of.get(bid)
                rows.append(
                    {
                        "volume": vol["volume"],
                        "backup": bid,
                        "created": created.isoformat() if created else "-",
                        "run": _run_cell(run),
                        "policy": (run or {}).get("policy") or "-",
                        "action": verb,
                        "why": (run or {}).get("why_forgotten") or "no rule keeps it",
                        "rules": shown,
                    }
                )
    return table(rows)


def _run_cell(run: dict[str, Any] | None) -> str:
    """``<run id> (complete)`` or ``<run id> (partial: no logs)``; ``-`` outside a run."""
    if run is None:
        return "-"
    return f"{run['run']} ({'complete' if run['complete'] else 'partial: no ' + ', '.join(run['missing'])})"


def consolidation_rows(consolidated: Consolidated) -> list[dict[str, str]]:
    """One row per volume's newest backup: what a restore of it fetches before and after, what was stored again;
    or why no consolidation ran."""
    if consolidated.skipped:
        return table([{"result": "skipped", "why": consolidated.skipped}])
    return table(
        [
            {
                "volume": r.volume,
                "backup": r.backup_id,
                "result": ("dry run: " if r.dry_run else "") + ("consolidated" if r.spans else "not fragmented"),
                "restore fetches": f"{size(r.fetch_after)} (was {size(r.fetch_before)})",
                "fully used": size(r.ideal_bytes),
                "stored again": size(r.rewritten_bytes),
                "uploaded": size(r.stored_bytes),
            }
            for r in consolidated.results
        ]
    )


def prune_rows(pruned: Pruned) -> list[dict[str, str]]:
    """The prune report (``movers.repo.prune.PruneReport``: every counter) as one table row, or why it did not
    run."""
    report = pruned.to_dict()
    if report.get("skipped"):
        return table([{"result": "skipped", "why": report["skipped"]}])
    r = report
    return table(
        [
            {
                "result": "dry run (nothing deleted)" if r["dry_run"] else "done",
                "backups marked": r["backups_marked"],
                "referenced": f"{r['chunks_referenced']} chunks in {r['packs_total']} packs",
                "packs deleted": r["packs_deleted"],
                "map objects deleted": r["map_objects_deleted"],
                "bytes deleted": size(r["bytes_deleted"]),
                "in grace": f"{r['packs_in_grace']} packs ({size(r['bytes_in_grace'])}),"
                f" {r['map_objects_in_grace']} map objects",
                "duplicate packs": f"{r['duplicate_packs_deleted']} deleted, {r['duplicate_packs_in_grace']} in grace",
                "kept": f"{r['packs_kept']} packs ({size(r['kept_chunk_bytes'])})",
                "dead bytes": f"{size(r['dead_bytes'])} in {r['packs_partly_used']} partly used packs",
                "repacked": f"{r['packs_repacked']} packs ({size(r['bytes_repacked'])} copied)",
                "forwarding objects": f"{r['forwarding_objects_deleted']} deleted,"
                f" {r['forwarding_objects_in_grace']} in grace",
                "index objects": f"{r['index_objects_deleted']} replaced by {r['index_objects_written']}",
                "running backups": f"{r['backups_waited_for']} waited for; deferred {r['packs_deferred']} packs,"
                f" {r['map_objects_deferred']} map objects",
                "leases deleted": r["leases_deleted"],
                "unreadable packs": len(r["unreadable_packs"]),
                "duration": seconds(r["duration_s"]),
            }
        ]
    )


def verify_markdown(url: str, checked: VerifyReport) -> str:
    """The verify result: verdict, what the mode checked and read (a full verify reads every referenced chunk; a
    sampled one checks every map and reads a sample of the packs whole), the damage (volume, backup, offset) and
    warnings."""
    r = checked.to_dict()
    verdict = "OK" if r["ok"] else f"DAMAGED ({len(r['damage'])} finding(s))"
    checked = f"- {r['backups_checked']} backups and {r['map_objects_checked']} map objects checked"
    if r["mode"] == "sampled":
        share = f" ({r['fetched_bytes'] / r['stored_bytes']:.0%})" if r["stored_bytes"] else ""
        lines = [
            f"- mode sampled (fraction {r['sample']}, seed {r['seed']}): {r['packs_read']} of {r['packs_total']}"
            f" packs read whole",
            f"{checked}; {r['chunks_referenced']} chunks referenced, {r['chunks_verified']} decoded and hash-checked",
            f"- {size(r['fetched_bytes'])} read of {size(r['stored_bytes'])} referenced data in the packs{share}",
        ]
    else:
        lines = [
            "- mode full: every referenced chunk read",
            f"{checked}; {r['chunks_verified']} chunks decoded and hash-checked",
            f"- {size(r['fetched_bytes'])} read",
        ]
    lines = [f"# Verify of `{public_url(url)}`: {verdict}", "", *lines, f"- {seconds(r['duration_s'])}"]
    if r["damage"]:
        shown = [
            {
                "volume": d["volume"],
                "backup": d["backup_id"],
                "volume offset": d["offset"],
                "object": d["object"],
                "error": d["error"],
            }
            for d in r["damage"][:MAX_DAMAGE_ROWS]
        ]
        lines += ["", "## Damage", "", markdown_table(shown).rstrip("\n")]
        if len(r["damage"]) > MAX_DAMAGE_ROWS:
            lines.append(f"\n... and {len(r['damage']) - MAX_DAMAGE_ROWS} more")
    if r["warnings"]:
        lines += ["", "## Warnings (no backup affected)", ""] + [f"- {cell(w)}" for w in r["warnings"][:50]]
    return "\n".join(lines) + "\n"
