"""Reading and validating change extents.

The interchange format is JSON lines ``{"offset": N, "length": N}``, ascending and
non-overlapping (what ``cbt-mover extents`` prints and what ``backup --extents`` reads).
Lines with other shapes are rejected, except that a line holding an object with a ``summary`` key is
skipped as an extent. ``cbt-mover extents`` ends with one: ``mode`` ``delta`` with the ``base_handle`` of
the snapshot the extents are changes since, or ``allocated``; ``check_stream`` reads it (what a backup
builds the extents on, ``movers.repo.deltabase``), a listing from a ``starting_offset`` says neither.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
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


def open_source(path: str) -> tuple[AbstractContextManager[IO[str]], str]:
    """The extents of ``path`` (``-``: stdin) as a stream to read in a ``with``, and its name for error messages;
    ``UsageError`` when the file cannot be opened."""
    if path == "-":
        return nullcontext(sys.stdin), "stdin"
    try:
        return open(path, encoding="utf-8"), path
    except OSError as err:
        raise UsageError(f"cannot read extents file {path}: {err.strerror}") from None


def not_utf8(name: str) -> UsageError:
    """The error of an extents source that is not UTF-8 text."""
    return UsageError(f"{name} is not UTF-8 text (JSON lines of extents)")


def read_checked(path: str, capacity: int) -> list[Extent]:
    """Every extent of ``path`` (``-``: stdin), read whole and ``validated`` against a volume of ``capacity`` bytes
    before the caller uses any: ``UsageError`` naming the line or extent."""
    source, name = open_source(path)
    try:
        with source as lines:
            return list(validated(parse_jsonl(lines, name), capacity, name))
    except UnicodeDecodeError:
        raise not_utf8(name) from None


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


@dataclass(frozen=True)
class ExtentsCheck:
    """What a whole extents stream said, checked before a backup writes anything (``check_stream``): its
    extents' count and bytes, and what its ``summary`` line (``cbt-mover extents`` writes one last) says they
    are: ``base_handle``, the CSI handle of the snapshot they are changes since (a delta), ``allocated`` when
    they are every allocated block of the snapshot (no base), both None when no summary said."""

    extents: int
    bytes: int
    base_handle: str | None = None
    allocated: bool = False


def check_stream(lines: Iterable[str], capacity: int, source: str = "extents") -> ExtentsCheck:
    """Read ``lines`` to the end and check every extent as ``parse_jsonl`` and ``validated`` do (``UsageError``
    naming the first bad line or extent), and the summary lines: several must agree."""
    count = total = 0
    summaries: list[tuple[str | None, bool]] = []

    def lines_noting_summaries() -> Iterator[str]:
        for line in lines:
            if '"summary"' in line:
                doc = _summary(line)
                if doc is not None:
                    summaries.append(_base_of(doc))
            yield line

    for _off, length in validated(parse_jsonl(lines_noting_summaries(), source), capacity, source):
        count += 1
        total += length
    if len(set(summaries)) > 1:
        raise UsageError(f"{source}: its summary lines disagree on the snapshot the extents are changes since")
    base, allocated = summaries[0] if summaries else (None, False)
    return ExtentsCheck(count, total, base, allocated)


def _summary(line: str) -> dict | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None  # parse_jsonl names the line
    return doc.get("summary") if isinstance(doc, dict) and isinstance(doc.get("summary"), dict) else None


def _base_of(summary: dict) -> tuple[str | None, bool]:
    """``(base handle, allocated)`` of a summary: a ``mode`` delta with its ``base_handle``, or allocated blocks;
    ``(None, False)`` for a summary that says neither, or of a listing from a ``starting_offset`` (a part)."""
    mode, handle = summary.get("mode"), summary.get("base_handle")
    if summary.get("starting_offset"):
        return None, False
    if mode == "delta" and isinstance(handle, str) and handle:
        return handle, False
    return None, mode == "allocated" and not handle
