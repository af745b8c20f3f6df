"""Go's ``time.Parse`` for the two layouts the API's timestamps decode with, and its error messages.

``metav1.Time`` (``firstTimestamp``, ``creationTimestamp``, ...) decodes with ``time.RFC3339``
(``2006-01-02T15:04:05Z07:00``: any fraction of a second accepted after the seconds), ``metav1.MicroTime``
(``eventTime``, ``series.lastObservedTime``) with ``RFC3339Micro`` (``2006-01-02T15:04:05.000000Z07:00``:
exactly six fractional digits). ``parse_error(value, micro)`` is None for a value Go parses, else the
``*time.ParseError`` text the API server puts in its 400 answer, e.g.
``parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006"``.
"""

from __future__ import annotations

import calendar

RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"

# (layout element, how many digits, range), literals as (text, 0, None)
_DATE = [
    ("2006", 4, None),
    ("-", 0, None),
    ("01", 2, (1, 12, "month")),
    ("-", 0, None),
    ("02", 2, None),  # the day: checked against the month at the end
    ("T", 0, None),
    ("15", -2, (0, 23, "hour")),  # -2: one or two digits
    (":", 0, None),
    ("04", 2, (0, 59, "minute")),
    (":", 0, None),
    ("05", 2, (0, 59, "second")),
]


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_error(value: str, micro: bool = False) -> str | None:
    layout = RFC3339_MICRO if micro else RFC3339
    head = f"parsing time {_quote(value)}"

    def cannot(rest: str, element: str) -> str:
        return f"{head} as {_quote(layout)}: cannot parse {_quote(rest)} as {_quote(element)}"

    rest, numbers = value, {}
    for element, digits, limits in _DATE:
        if not digits:
            if not rest.startswith(element):
                return cannot(rest, element)
            rest = rest[len(element) :]
            continue
        width = abs(digits)
        if digits < 0 and rest[:1].isdigit() and not rest[1:2].isdigit():
            width = 1
        text = rest[:width]
        if len(text) < width or not (text.isascii() and text.isdigit()):
            return cannot(rest, element)
        numbers[element], rest = int(text), rest[width:]
        if limits and not limits[0] <= numbers[element] <= limits[1]:
            return f"{head}: {limits[2]} out of range"
    if micro:
        if len(rest) < 7 or rest[0] not in ".," or not (rest[1:7].isascii() and rest[1:7].isdigit()):
            return cannot(rest, ".000000")
        rest = rest[7:]
    elif len(rest) >= 2 and rest[0] in ".," and rest[1].isdigit():
        n = 2
        while n < len(rest) and rest[n].isdigit():
            n += 1
        rest = rest[n:]
    if rest.startswith("Z"):
        rest = rest[1:]
    else:
        zone = rest[:6]
        if len(zone) < 6 or zone[0] not in "+-" or zone[3] != ":" or not (zone[1:3] + zone[4:6]).isdigit():
            return cannot(rest, "Z07:00")
        if int(zone[1:3]) > 24:
            return f"{head}: time zone offset hour out of range"
        if int(zone[4:6]) > 60:
            return f"{head}: time zone offset minute out of range"
        rest = rest[6:]
    year, month, day = numbers["2006"], numbers["01"], numbers["02"]
    if rest:
        return f"{head}: extra text: {_quote(rest)}"
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return f"{head}: day out of range"
    return None
