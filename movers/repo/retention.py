"""Retention: which backups of a volume to keep, and ``forget`` to delete the manifests of the rest.

Selection is restic-style and per volume (``select_kept`` is pure):

* ``keep_last N``: the N newest backups;
* ``keep_daily N``: the newest backup of each of the last N calendar days *that have a backup*
  (UTC); likewise ``keep_weekly`` (ISO weeks) and ``keep_monthly`` (calendar months);
* the newest backup of a volume is always kept (it is the base of the next incremental);
* a rule of 0 or None does nothing. With no rule at all, nothing is expired.

Each kept backup carries the reasons it is kept (``"last"``, ``"daily 2024-05-01"``, ...).

Every backup is a complete map (no chains), so expiring any backup never breaks another one.
``forget`` only deletes manifests (the commit points); the data they referenced is freed by
``movers.repo.prune``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from movers.errors import NotFoundError, UsageError
from movers.repo.repository import Repository

log = logging.getLogger(__name__)

_ID_TIME = re.compile(r"^(\d{8}T\d{6}\d{6})Z")


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


@dataclass
class VolumeRetention:
    volume: str
    kept: list[Kept] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)


@dataclass
class ForgetReport:
    dry_run: bool
    volumes: list[VolumeRetention] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # manifest keys deleted (or that would be)

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "deleted": self.deleted,
            "volumes": [
                {
                    "volume": v.volume,
                    "kept": [
                        {"backup_id": k.backup_id, "created": k.created.isoformat(), "reasons": k.reasons}
                        for k in v.kept
                    ],
                    "expired": v.expired,
                }
                for v in self.volumes
            ],
        }


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


def backup_time(backup_id: str) -> datetime | None:
    """The creation time encoded in a backup id (``YYYYMMDDTHHMMSSffffffZ-xxxxxx``)."""
    m = _ID_TIME.match(backup_id)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)


def forget(
    repo: Repository,
    volume: str | None = None,
    *,
    keep_last: int | None = None,
    keep_daily: int | None = None,
    keep_weekly: int | None = None,
    keep_monthly: int | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> ForgetReport:
    """Delete the manifests of the backups ``select_kept`` expires, per volume.

    With no rule at all this refuses (``UsageError``) rather than keep everything silently.
    Only manifests are deleted; run ``prune`` to free the data. A backup's time is the one
    encoded in its id (no manifest read needed); an id without one falls back to the
    manifest's ``created`` field.
    """
    policy = Policy(keep_last, keep_daily, keep_weekly, keep_monthly)
    if policy.empty:
        raise UsageError("forget needs at least one of --keep-last, --keep-daily, --keep-weekly, --keep-monthly")
    now = now or datetime.now(UTC)
    report = ForgetReport(dry_run=dry_run)
    by_volume: dict[str, list] = {}
    for ref in repo.list_backups(volume):
        by_volume.setdefault(ref.volume, []).append(ref)
    if volume is not None and not by_volume:
        raise NotFoundError(f"volume {volume} has no backups in {repo.describe()}")
    for vol in sorted(by_volume):
        refs = {ref.backup_id: ref for ref in by_volume[vol]}
        pairs = []
        for bid in refs:
            t = backup_time(bid)
            if t is None:
                t = datetime.fromisoformat(repo.read_manifest(vol, bid).created)
            pairs.append((bid, t))
        kept, expired = select_kept(pairs, keep_last, keep_daily, keep_weekly, keep_monthly, now=now)
        report.volumes.append(VolumeRetention(vol, kept, expired))
        for bid in expired:
            key = refs[bid].key
            report.deleted.append(key)
            if not dry_run:
                repo.store.delete(key)
                log.info("forgot %s", key)
    return report


def forget_each(
    repo: Repository, volumes: Sequence[str] | None, *, dry_run: bool = False, **rules: int | None
) -> tuple[ForgetReport, list[str]]:
    """``forget`` of each of ``volumes`` (None: every volume of the repository) in one report, and the named
    volumes that have no backups (not an error: nothing to expire)."""
    result, missing = ForgetReport(dry_run=dry_run), []
    for volume in [None] if volumes is None else volumes:
        try:
            report = forget(repo, volume, dry_run=dry_run, **rules)
        except NotFoundError:
            missing.append(volume)
            continue
        result.volumes += report.volumes
        result.deleted += report.deleted
    return result, missing
