"""Durations: the one parser of every policy field, hook, pod annotation, flag and flow parameter that
takes a duration.

A duration is a number of seconds (``30``, ``0.5``, also as a string) or a Go duration (``90s``,
``1m30s``, ``250ms``, ``1.5h``; parsed by ``durationpy``) that may begin with whole or fractional days
(``7d``, ``1d12h``: not Go syntax; a day is 24 h), for retention-scale settings such as a prune's grace.
"""

from __future__ import annotations

import re
from typing import Any

import durationpy

_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
_DAYS = re.compile(r"^(\d+(?:\.\d+)?)d")
EXAMPLES = "e.g. 30, 90s, 1m30s, 500ms, 24h, 7d"


def parse_duration(value: Any, *, bare_numbers: bool = True) -> float:
    """Seconds from ``value`` (see the module doc); ``ValueError`` naming the value and examples otherwise.
    The sign is kept: callers bound the range (a timeout must be positive, a grace not negative).
    ``bare_numbers=False``: Go's own syntax, where a string needs a unit (``"0"`` aside), as Velero's
    annotations are read."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})")
    if not isinstance(value, str):
        return float(value)
    text = value.strip()
    if _NUMBER.match(text) and (bare_numbers or float(text) == 0):
        return float(text)
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    days = _DAYS.match(body)
    rest = body[days.end() :] if days else body
    try:
        seconds = durationpy.from_str(rest).total_seconds() if rest else 0.0
    except durationpy.DurationError:
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})") from None
    if not body or rest.startswith(("-", "+")):
        raise ValueError(f"{value!r} is not a duration ({EXAMPLES})")
    return sign * ((float(days.group(1)) * 86400 if days else 0.0) + seconds)
