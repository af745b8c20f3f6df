"""Reading and validating change extents.

The interchange format is JSON lines ``{"offset": N, "length": N}``, ascending and
non-overlapping (what ``cbt-mover extents`` prints and what ``backup --extents`` reads).
Lines with other shapes (for example a trailing ``{"summary": ...}`` line) are rejected,
except that a line holding an object with a ``summary`` key is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO

from movers.errors import UsageError

Extent = tuple[int, int]


def parse_jsonl(lines: Iterable[str], source: str = "extents") -> Iterator[Extent]:
    """Yield ``(offset, length)`` from JSON lines; raises ``UsageError`` naming the line."""
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise UsageError(f"{source} line {lineno}: not valid JSON") from None
        if isinstance(doc, dict) and "summary" in doc:
            continue
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("offset"), int)
            or not isinstance(doc.get("length"), int)
            or isinstance(doc.get("offset"), bool)
            or isinstance(doc.get("length"), bool)
        ):
            raise UsageError(f'{source} line {lineno}: expected {{"offset": N, "length": N}}, got {line[:80]}')
        yield doc["offset"], doc["length"]


def validated(extents: Iterable[Extent], capacity: int, source: str = "extents") -> Iterator[Extent]:
    """Pass extents through, raising ``UsageError`` on the first bad one.

    Extents must have length > 0 and offset >= 0, be ascending and non-overlapping, and end
    at or before ``capacity``.
    """
    prev_end = 0
    for n, (off, length) in enumerate(extents, 1):
        if off < 0 or length <= 0:
            raise UsageError(f"{source} #{n}: offset {off} length {length} is not a valid extent")
        if off < prev_end:
            raise UsageError(
                f"{source} #{n}: offset {off} is before the end of the previous extent ({prev_end}):"
                " extents must be sorted and non-overlapping"
            )
        if off + length > capacity:
            raise UsageError(f"{source} #{n}: extent {off}+{length} ends past the device end ({capacity} bytes)")
        prev_end = off + length
        yield off, length


def write_jsonl(extents: Iterable[Extent], out: IO[str]) -> tuple[int, int]:
    """Write extents as JSON lines; return ``(count, total bytes)``."""
    count = total = 0
    for off, length in extents:
        out.write(f'{{"offset": {off}, "length": {length}}}\n')
        count += 1
        total += length
    return count, total
