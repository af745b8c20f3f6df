"""A policy's backup window: the daily hours in which its movers may start (pure: no Prefect, no clock of its own).

``window: {start: "01:00", end: "05:00", timezone: UTC}``: every day from ``start`` to ``end`` in ``timezone``; an
``end`` before ``start`` crosses midnight (``22:00``-``04:00``); ``start == end`` is the whole day. ``ends_at``
is the end of the window open at a time, or None when it is closed then.

What the flow does with it (``flows/backup.py``): a run that starts outside its window stops at once, before any
snapshot; a mover that has not started (its cluster and node slots taken, ``tasks.caps``) when the window ends
stops waiting; then the run cleans up what it created and ends in the state ``WindowClosed`` (type Cancelled) with
a message that says which window and what was left undone. A mover that started runs to its end.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

TIME_OF_DAY = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?$")


def time_of_day(value: str) -> time:
    """``HH:MM`` or ``HH:MM:SS`` (24 h) as a time; ValueError otherwise."""
    match = TIME_OF_DAY.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a time of day HH:MM (00:00 to 23:59)")
    return time(int(match[1]), int(match[2]), int(match[3] or 0))


def ends_at(start: str, end: str, timezone: str, now: datetime) -> datetime | None:
    """The end (aware, in ``timezone``) of the window ``start``-``end`` open at ``now`` (aware), or None when the
    window is closed at ``now``."""
    zone = ZoneInfo(timezone)
    local = now.astimezone(zone)
    first, last = time_of_day(start), time_of_day(end)
    length = (datetime.combine(local.date(), last) - datetime.combine(local.date(), first)) % timedelta(days=1)
    length = length or timedelta(days=1)
    for days_back in (0, 1):  # the window opened today, or yesterday and crosses midnight
        opened = datetime.combine(local.date() - timedelta(days=days_back), first, zone)
        if opened <= local < opened + length:
            return opened + length
    return None
