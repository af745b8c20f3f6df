"""Turns a stream of changed extents into the reads the backup performs.

Reads follow the extents, not a fixed grid:

* Nearby extents are merged when the gap between them is at most ``max_gap`` and the merged
  span stays within 2x the changed bytes it contains. Merging saves map entries and chunk
  objects; the 2x rule bounds the extra bytes read (and so uploaded) by the changed bytes.
* Reads never cross a multiple of ``chunk_max`` (4 MiB by default): long extents are split
  on that absolute grid, so unchanged aligned pieces dedup between backups and a scan.

Everything is lazy: memory does not grow with the number of extents.

``gather`` then groups runs of small reads (scattered CBT changes) into batches the backup stores as one
chunk each, so the cost per changed extent is a read and a map entry, not a chunk of its own.
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


Batch = list[Extent]  # small reads stored together as one chunk


def gather(reads: Iterable[Extent], small: int, limit: int, page_size: int) -> Iterator[Extent | Batch]:
    """``reads`` with each run of consecutive reads shorter than ``small`` grouped into batches of at most ``limit``
    bytes that stay within one map page; other reads as they are."""
    batch: Batch = []
    size = 0
    for off, length in reads:
        if length < small and (not batch or (size + length <= limit and off // page_size == batch[0][0] // page_size)):
            batch.append((off, length))
            size += length
            continue
        if batch:
            yield batch
            batch, size = [], 0
        if length < small:
            batch.append((off, length))
            size = length
        else:
            yield off, length
    if batch:
        yield batch
