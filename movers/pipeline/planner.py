"""Turns a stream of changed extents into the reads the backup performs.

Reads follow the extents, not a fixed grid:

* Nearby extents are merged when the gap between them is at most ``max_gap`` and the merged
  span stays within 2x the changed bytes it contains. Merging saves map entries and chunk
  objects; the 2x rule bounds the extra bytes read (and so uploaded) by the changed bytes.
* Reads never cross a multiple of ``chunk_max`` (4 MiB by default): long extents are split
  on that absolute grid, so unchanged aligned pieces dedup between backups and a scan.

Everything is lazy: memory does not grow with the number of extents.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

Extent = tuple[int, int]  # (offset, length)


def plan_reads(extents: Iterable[Extent], chunk_max: int, max_gap: int = 64 * 1024) -> Iterator[Extent]:
    """Yield ``(offset, length)`` reads covering every extent, ascending and disjoint."""
    group_start = group_end = changed = -1
    for off, length in extents:
        end = off + length
        if group_start >= 0:
            gap = off - group_end
            if gap <= max_gap and end - group_start <= 2 * (changed + length):
                group_end = end
                changed += length
                continue
            yield from split_on_grid(group_start, group_end, chunk_max)
        group_start, group_end, changed = off, end, length
    if group_start >= 0:
        yield from split_on_grid(group_start, group_end, chunk_max)


def split_on_grid(start: int, end: int, grid: int) -> Iterator[Extent]:
    """Cut ``[start, end)`` at every multiple of ``grid``."""
    pos = start
    while pos < end:
        cut = min(end, (pos // grid + 1) * grid)
        yield pos, cut - pos
        pos = cut


def scan_reads(capacity: int, chunk_max: int) -> Iterator[Extent]:
    """The reads of a whole-device scan."""
    return split_on_grid(0, capacity, chunk_max)
