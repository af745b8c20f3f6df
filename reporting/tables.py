"""The one style of the artifacts' tables and code blocks (backup, restore, maintenance, progress).

- column headers: lower-case words separated by spaces (``backup id``, ``uploaded``), never snake_case;
- sizes in B/KiB/MiB/GiB/TiB (``movers.values.human_bytes``), rates per second, durations in seconds with one
  decimal, ``-`` for nothing;
- a command in a fenced code block, one option per line with ``\\`` continuations, so that it wraps in the UI
  and works when pasted into a shell.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from movers.values import human_bytes

HEADER = re.compile(r"^[a-z][a-z0-9]*( [a-z0-9()/%.-]+)*$")


def size(n: float | None) -> str:
    return human_bytes(n)


def seconds(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f} s"


def rate(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{human_bytes(int(bytes_per_s))}/s"


def text(value: Any) -> str:
    """A cell: ``-`` for None or empty, ``yes``/``no`` for booleans, else ``str``."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``rows`` for ``create_table_artifact``: every value a string (``text``); ``ValueError`` for a header out of
    style (``HEADER``)."""
    out = []
    for row in rows:
        for header in row:
            if not HEADER.match(header):
                raise ValueError(f"table header {header!r} is not lower-case words")
        out.append({header: text(value) for header, value in row.items()})
    return out


def cell(value: Any) -> str:
    """A markdown table cell: one line, ``|`` escaped."""
    return text(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` (``table``'s style; headers from the first row) as a markdown table."""
    shown = table(rows)
    if not shown:
        return ""
    headers = list(shown[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(r.get(h)) for h in headers) + " |" for r in shown]
    return "\n".join(lines) + "\n"


def command(words: Sequence[str], options: Sequence[str | tuple[str, str]] = ()) -> str:
    """A fenced shell block: ``words`` on the first line, then each option (a flag, or a flag and its value) on a
    line of its own, joined by `` \\`` continuations."""
    lines = [" ".join(words)] + ["  " + (o if isinstance(o, str) else f"{o[0]} {o[1]}") for o in options]
    return "```sh\n" + " \\\n".join(lines) + "\n```\n"
