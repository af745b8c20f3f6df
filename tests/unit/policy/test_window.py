"""A policy's backup window (``movers.policy.window``, the policy's ``window``): daily hours, across midnight, in a
time zone; a bad time is one line naming the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from movers.errors import UsageError
from movers.policy.model import parse_policy
from movers.policy.window import ends_at

POLICY = {
    "name": "app",
    "namespace": "ns",
    "pvc_selector": {"matchLabels": {"app": "demo"}},
    "repository": {"url": "s3://bucket/repo"},
}


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, 10, hour, minute, tzinfo=UTC)


def test_a_window_within_a_day():
    assert ends_at("01:00", "05:00", "UTC", at(0, 59)) is None
    assert ends_at("01:00", "05:00", "UTC", at(1)) == at(5)
    assert ends_at("01:00", "05:00", "UTC", at(4, 59)) == at(5)
    assert ends_at("01:00", "05:00", "UTC", at(5)) is None


def test_a_window_across_midnight_and_the_whole_day():
    assert ends_at("22:00", "04:00", "UTC", at(23)) == datetime(2026, 3, 11, 4, tzinfo=UTC)
    assert ends_at("22:00", "04:00", "UTC", at(3)) == at(4)
    assert ends_at("22:00", "04:00", "UTC", at(12)) is None
    assert ends_at("06:00", "06:00", "UTC", at(5)) == at(6)  # start == end: always open, a day long


def test_a_window_in_a_time_zone():
    # 01:00-05:00 in Berlin (UTC+1 in March before the change) is 00:00-04:00 UTC
    assert ends_at("01:00", "05:00", "Europe/Berlin", at(3)) == at(4)
    assert ends_at("01:00", "05:00", "Europe/Berlin", at(4, 30)) is None


def test_the_policy_window():
    policy = parse_policy(POLICY | {"window": {"start": "01:00", "end": "05:00:30"}})
    assert policy.window.describe() == "01:00-05:00:30 UTC"
    assert policy.window.ends_at(at(2)) == datetime(2026, 3, 10, 5, 0, 30, tzinfo=UTC)
    assert parse_policy(POLICY).window is None


@pytest.mark.parametrize("bad", ["1:00", "24:00", "01:60", "noon"])
def test_a_bad_time_names_the_field(bad):
    with pytest.raises(UsageError, match=r"window\.start.*not a time of day HH:MM"):
        parse_policy(POLICY | {"window": {"start": bad, "end": "05:00"}})
