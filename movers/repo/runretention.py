"""Retention of application runs (restore points): which runs of one series to keep (pure).

An application's backups are kept or forgotten a whole run at a time (``RUN_TAG``), so that a restore
point is never split. ``select_runs`` takes the runs of one *series* (the runs of one namespace made by one
policy: ``movers.repo.retention``) and says which to keep and why:

* the keep rules count **complete** runs only (``keep_last N``: the N newest complete runs; ``keep_daily N``:
  the newest complete run of each of the last N days that have one; weekly and monthly alike, UTC), as
  ``movers.repo.retention_rules.select_kept`` counts backups; a run's time is that of its newest backup;
* the newest complete run is always kept (``"newest complete"``): a forget never leaves a series that had a
  complete run without one;
* a **partial** run (a member PVC has no backup in it: its mover failed) never takes a complete run's place
  in a bucket and counts for no rule. It is kept while it is newer than the newest complete run
  (``"partial, newer than the newest complete run"``: it holds the newest data of the volumes it has), and
  forgotten once a complete run is newer. Without any complete run, the rules count the partial runs
  (nothing complete to protect; the newest one is always kept);
* the run that holds a volume's newest backup (by backup id, the repository's order) is kept (``"newest of
  <volume>"``, when no other reason keeps it): a volume's newest backup is the base of its next incremental
  and prune relies on it staying (``movers.repo.prune``). It matters for volumes that left the application
  (newer runs lack them) and for runs that overlap in time (a run's time is its newest backup's, so a run
  that ends earlier may still hold a volume's newest backup);
* runs without a member list (written before runs recorded one) count as complete
  (``movers.repo.selection.RunStatus``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from movers.repo.retention_rules import Policy, select_kept

PARTIAL_NEWER = "partial, newer than the newest complete run"
PARTIAL_OLDER = "partial, older than the newest complete run"


@dataclass(frozen=True)
class RunPoint:
    """One run of a series as retention sees it."""

    run: str
    created: datetime  # the time of its newest backup
    complete: bool
    backups: Mapping[str, str]  # volume id -> the id of its newest backup in the run
    missing: tuple[str, ...] = ()  # member PVCs without one (a partial run)

    @property
    def volumes(self) -> tuple[str, ...]:
        """The volume ids with a backup in the run."""
        return tuple(sorted(self.backups))


@dataclass
class RunVerdict:
    point: RunPoint
    reasons: list[str] = field(default_factory=list)  # why it is kept; empty: forgotten

    @property
    def kept(self) -> bool:
        return bool(self.reasons)

    @property
    def why_forgotten(self) -> str:
        """One phrase for a forgotten run (empty for a kept one)."""
        if self.kept:
            return ""
        return PARTIAL_OLDER if not self.point.complete else "no rule keeps it"


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def select_runs(points: Sequence[RunPoint], policy: Policy, now: datetime | None = None) -> list[RunVerdict]:
    """The verdict on each run of one series, newest first (see the module doc). ``now``: as for
    ``select_kept`` (runs dated in the future are kept, not counted)."""
    if len({p.run for p in points}) != len(points):
        raise ValueError("a run is given twice")
    items = sorted(points, key=lambda p: (_utc(p.created), p.run), reverse=True)
    verdicts = {p.run: RunVerdict(p) for p in items}
    complete = [p for p in items if p.complete]
    counted = complete or items
    kept, _ = select_kept([(p.run, p.created) for p in counted], now=now, **asdict(policy))
    for k in kept:
        verdicts[k.backup_id].reasons += ["newest complete" if r == "newest" and complete else r for r in k.reasons]
    if complete:
        newest = (_utc(complete[0].created), complete[0].run)
        for p in items:
            if not p.complete and (_utc(p.created), p.run) > newest:
                verdicts[p.run].reasons.append(PARTIAL_NEWER)
    holder: dict[str, tuple[str, str]] = {}  # volume -> (its newest backup id, the run holding it)
    for p in items:
        for volume, backup_id in p.backups.items():
            holder[volume] = max(holder.get(volume, (backup_id, p.run)), (backup_id, p.run))
    for p in items:
        first = sorted(v for v, (_bid, run) in holder.items() if run == p.run)
        if first and not verdicts[p.run].reasons:
            verdicts[p.run].reasons.append("newest of " + ", ".join(first))
    return [verdicts[p.run] for p in items]
