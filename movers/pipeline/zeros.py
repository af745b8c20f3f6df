"""Finding the data in a buffer: all-zero runs become holes in the map, never chunks."""

from __future__ import annotations

BLOCK = 4096
_ZERO = bytes(BLOCK)
_ZERO_64K = bytes(65536)


def is_zero(data: bytes, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is all zero bytes (checks the edges before comparing).
    Pass bytes: a memoryview compares byte by byte, several times slower."""
    if data[start] or data[end - 1]:
        return False
    n = end - start
    zero = _ZERO if n == BLOCK else _ZERO_64K if n == 65536 else _ZERO_64K[:n] if n < 65536 else bytes(n)
    return data[start:end] == zero


def data_runs(data: bytes, min_hole: int = 64 * 1024) -> list[tuple[int, int]]:
    """Return the ``[start, end)`` runs of ``data`` that must be stored.

    Zero is detected per 4 KiB block (relative to the buffer start; the last block may be
    short). A run of zero blocks becomes a hole when it is at least ``min_hole`` long or
    touches either end of the buffer; shorter zero runs inside data stay in the chunk,
    where zstd stores them for almost nothing and the map stays small.
    """
    n = len(data)
    zero_runs: list[tuple[int, int]] = []
    run_start = -1
    for pos in range(0, n, BLOCK):
        end = min(pos + BLOCK, n)
        if is_zero(data, pos, end):
            if run_start < 0:
                run_start = pos
        elif run_start >= 0:
            zero_runs.append((run_start, pos))
            run_start = -1
    if run_start >= 0:
        zero_runs.append((run_start, n))
    runs = []
    pos = 0
    for zs, ze in zero_runs:
        if ze - zs >= min_hole or zs == 0 or ze == n:
            if zs > pos:
                runs.append((pos, zs))
            pos = ze
    if pos < n:
        runs.append((pos, n))
    return runs
