"""Retention selection (pure) and forget on a repository."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from movers.errors import NotFoundError, UsageError
from movers.repo.retention import backup_time, forget, forget_each
from movers.repo.retention_rules import Policy, select_kept


def t(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def ids(kept) -> list[str]:
    return [k.backup_id for k in kept]


def hourly(start: datetime, hours: int) -> list[tuple[str, datetime]]:
    return [(f"b{i:04d}", start + timedelta(hours=i)) for i in range(hours)]


def test_keep_last_and_newest_always_kept():
    backups = hourly(t(2024, 1, 1), 10)
    kept, expired = select_kept(backups, keep_last=3)
    assert ids(kept) == ["b0009", "b0008", "b0007"]
    assert kept[0].reasons == ["newest", "last"]
    assert expired == [f"b{i:04d}" for i in range(6, -1, -1)]
    # a rule that selects nothing still keeps the newest
    kept, expired = select_kept(backups, keep_monthly=0, keep_daily=None, keep_last=0, keep_weekly=0)
    assert ids(kept) == [b for b, _ in backups][::-1]  # no rule at all: keep everything
    assert all(k.reasons[0] == "no policy" for k in kept)
    kept, _ = select_kept(backups, keep_daily=1)
    assert ids(kept) == ["b0009"]
    assert kept[0].reasons == ["newest", "daily 2024-01-01"]


def test_daily_keeps_the_newest_of_each_day_with_a_backup():
    # 4 per day for 5 days, day 3 missing: the last 3 days *with backups* are kept
    backups = [(f"{d}-{h}", t(2024, 3, d, h)) for d in (1, 2, 4, 5, 6) for h in (0, 6, 12, 23)]
    kept, expired = select_kept(backups, keep_daily=3)
    assert ids(kept) == ["6-23", "5-23", "4-23"]
    assert [k.reasons for k in kept] == [["newest", "daily 2024-03-06"], ["daily 2024-03-05"], ["daily 2024-03-04"]]
    assert len(expired) == 17


def test_day_boundaries_are_utc():
    from datetime import timezone

    cest = timezone(timedelta(hours=2))
    # 01:00 CEST on March 2 is 23:00 UTC on March 1
    backups = [("a", datetime(2024, 3, 2, 1, 0, tzinfo=cest)), ("b", t(2024, 3, 1, 12)), ("c", t(2024, 3, 2, 5))]
    kept, expired = select_kept(backups, keep_daily=2)
    assert ids(kept) == ["c", "a"]
    assert expired == ["b"]
    assert kept[1].reasons == ["daily 2024-03-01"]


def test_weekly_uses_iso_weeks_across_the_year_end():
    # 2020-12-31 (Thu) and 2021-01-03 (Sun) are ISO week 2020-W53; 2021-01-04 (Mon) is 2021-W01
    backups = [
        ("thu", t(2020, 12, 31, 10)),
        ("sun", t(2021, 1, 3, 10)),
        ("mon", t(2021, 1, 4, 10)),
        ("prev", t(2020, 12, 27, 10)),
    ]
    kept, expired = select_kept(backups, keep_weekly=2)
    assert ids(kept) == ["mon", "sun"]
    assert kept[1].reasons == ["weekly 2020-W53"]
    assert sorted(expired) == ["prev", "thu"]


def test_monthly_handles_leap_day_and_month_ends():
    backups = [
        ("feb29", t(2024, 2, 29, 23, 59)),
        ("mar1", t(2024, 3, 1, 0, 0)),
        ("jan31", t(2024, 1, 31)),
        ("jan1", t(2024, 1, 1)),
        ("dec", t(2023, 12, 31, 23, 59, 59)),
    ]
    kept, expired = select_kept(backups, keep_monthly=3)
    assert ids(kept) == ["mar1", "feb29", "jan31"]
    assert sorted(expired) == ["dec", "jan1"]


def test_rules_combine_and_reasons_accumulate():
    backups = [(f"d{d:02d}", t(2024, 1, d, 12)) for d in range(1, 32)] + [("feb", t(2024, 2, 1, 12))]
    kept, expired = select_kept(backups, keep_last=2, keep_daily=3, keep_weekly=2, keep_monthly=2)
    by_id = {k.backup_id: k.reasons for k in kept}
    assert by_id["feb"] == ["newest", "last", "daily 2024-02-01", "weekly 2024-W05", "monthly 2024-02"]
    assert by_id["d31"] == ["last", "daily 2024-01-31", "monthly 2024-01"]
    assert by_id["d30"] == ["daily 2024-01-30"]
    assert by_id["d28"] == ["weekly 2024-W04"]  # Sunday: newest of ISO week 4
    assert set(by_id) == {"feb", "d31", "d30", "d28"}
    assert len(expired) == len(backups) - 4


def test_future_backups_are_never_expired_and_not_counted():
    backups = [("old", t(2024, 1, 1)), ("today", t(2024, 1, 2)), ("future", t(2024, 1, 9))]
    kept, expired = select_kept(backups, keep_daily=1, now=t(2024, 1, 2, 12))
    assert ids(kept) == ["future", "today"]
    assert kept[0].reasons == ["newest", "future"]
    assert expired == ["old"]


def test_empty_and_invalid():
    assert select_kept([], keep_last=3) == ([], [])
    with pytest.raises(UsageError):
        select_kept([("a", t(2024, 1, 1))], keep_last=-1)


def test_backup_time_from_id():
    assert backup_time("20240102T030405123456Z-abcdef") == t(2024, 1, 2, 3, 4, 5, 123456)
    assert backup_time("not-an-id") is None


def test_forget_deletes_only_expired_manifests():
    from movers.repo.manifest import Manifest, MapRef, SnapshotIdentity, VolumeIdentity
    from movers.repo.repository import Repository
    from movers.repo.store import MemoryStore

    repo = Repository.init(MemoryStore())
    start = t(2024, 5, 1)
    for vol in ("v1", "v2"):
        for i in range(5):
            created = start + timedelta(days=i)
            m = Manifest(
                created.strftime("%Y%m%dT%H%M%S%fZ") + "-000000",
                VolumeIdentity(vol),
                0,
                SnapshotIdentity(),
                None,
                "full",
                created.isoformat(),
                MapRef(1 << 26, 256, [], 0),
            )
            repo.store.put(m.key, m.encode())
    objects = set(repo.store.list())
    dry = forget(repo, rules=Policy(keep_last=2), dry_run=True)
    assert set(repo.store.list()) == objects
    assert len(dry.deleted) == 6
    report = forget(repo, "v1", rules=Policy(keep_last=2))
    assert [r.volume for r in report.volumes] == ["v1"]
    assert [b.backup_id[:8] for b in repo.list_backups("v1")] == ["20240504", "20240505"]
    assert len(repo.list_backups("v2")) == 5
    doc = report.to_dict()
    assert doc["volumes"][0]["kept"][0]["reasons"] == ["newest", "last"]
    with pytest.raises(UsageError):
        forget(repo, rules=Policy(keep_last=0))
    with pytest.raises(NotFoundError):
        forget(repo, "nope", rules=Policy(keep_last=1))
    each, missing = forget_each(repo, ["v2", "nope"], keep_last=3, dry_run=True)
    assert ([v.volume for v in each.volumes], len(each.deleted), missing) == (["v2"], 2, ["nope"])
    every, missing = forget_each(repo, None, keep_last=1)
    assert ([v.volume for v in every.volumes], len(every.deleted), missing) == (["v1", "v2"], 5, [])
