"""The keep rules of retention (pure): ``Policy`` (restic-style) and ``select_kept``, which applies them to one
series of backups; ``movers.repo.retention`` (per volume) and ``movers.repo.runretention`` (per application run)
both judge with them.

* ``keep_last N``: the N newest backups;
* ``keep_daily N``: the newest backup of each of the last N calendar days *that have a backup*
  (UTC); likewise ``keep_weekly`` (ISO weeks) and ``keep_monthly`` (calendar months);
* the newest backup of a series is always kept (it is the base of the next incremental);
* a rule of 0 or None does nothing. With no rule at all, nothing is expired.

Each kept backup carries the reasons it is kept (``"last"``, ``"daily 2024-05-01"``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from movers.errors import UsageError


@dataclass(frozen=True)
class Policy:
    keep_last: int | None = None
    keep_daily: int | None = None
    keep_weekly: int | None = None
    keep_monthly: int | None = None

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and (not isinstance(value, int) or value < 0):
                raise UsageError(f"{name.replace('_', '-')} must be a whole number >= 0, not {value!r}")

    @property
    def empty(self) -> bool:
        return not any(asdict(self).values())


@dataclass
class Kept:
    backup_id: str
    created: datetime
    reasons: list[str]
    run: str | None = None  # the application run it belongs to (kept with it)
    policy: str | None = None


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _buckets(rule: str) -> Callable[[datetime], tuple[str, str]]:
    """``(bucket key, label)`` of a time for the daily/weekly/monthly rules."""
    if rule == "daily":
        return lambda t: (t.strftime("%Y-%m-%d"),) * 2
    if rule == "weekly":

        def week(t: datetime) -> tuple[str, str]:
            year, wk, _ = t.isocalendar()
            return (f"{year}-W{wk:02d}",) * 2

        return week
    return lambda t: (t.strftime("%Y-%m"),) * 2


def select_kept(
    backups: Sequence[tuple[str, datetime]],
    keep_last: int | None = None,
    keep_daily: int | None = None,
    keep_weekly: int | None = None,
    keep_monthly: int | None = None,
    now: datetime | None = None,
) -> tuple[list[Kept], list[str]]:
    """Split one volume's ``(backup id, created)`` pairs into ``(kept, expired ids)``.

    Both lists are newest first. Calendar buckets are taken in UTC. ``now`` only excludes
    backups dated in the future from the calendar rules' counting (clock skew): they are
    still kept (as "future"), never expired.
    """
    policy = Policy(keep_last, keep_daily, keep_weekly, keep_monthly)
    items = sorted(((bid, _utc(t)) for bid, t in backups), key=lambda x: (x[1], x[0]), reverse=True)
    if not items:
        return [], []
    now = _utc(now) if now is not None else None
    reasons: dict[str, list[str]] = {bid: [] for bid, _ in items}
    if policy.empty:
        for bid, _ in items:
            reasons[bid].append("no policy")
    reasons[items[0][0]].append("newest")
    for bid, _t in items[: policy.keep_last or 0]:
        reasons[bid].append("last")
    for rule, count in (("daily", keep_daily), ("weekly", keep_weekly), ("monthly", keep_monthly)):
        if not count:
            continue
        bucket_of = _buckets(rule)
        seen: set[str] = set()
        for bid, t in items:  # newest first: the first backup met in a bucket is its newest
            if now is not None and t > now:
                if "future" not in reasons[bid]:
                    reasons[bid].append("future")
                continue
            key, label = bucket_of(t)
            if key in seen:
                continue
            if len(seen) >= count:
                break
            seen.add(key)
            reasons[bid].append(f"{rule} {label}")
    kept = [Kept(bid, t, reasons[bid]) for bid, t in items if reasons[bid]]
    expired = [bid for bid, _t in items if not reasons[bid]]
    return kept, expired
