"""Counters of one backup or restore, reported in manifests and ``--json`` output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

# progress(bytes done, bytes total or None when not yet known); a backup also passes the keywords
# position (bytes of the volume passed: reads are ascending, so it grows while the total is unknown),
# capacity and mode (full | incremental-cbt | incremental-scan)
ProgressFn = Callable[..., None]


@dataclass
class BackupStats:
    """A backup's counters. They reconcile: ``read = zero + new_chunk + dedup + unchanged`` and
    ``stored = pack + metadata``."""

    changed_bytes: int = 0  # bytes the change source named (extents), or new content found by a scan
    read_bytes: int = 0  # bytes read from the device
    new_chunk_bytes: int = 0  # raw size of chunks new to the repository
    new_chunks: int = 0
    dedup_bytes: int = 0  # data found already stored
    zero_bytes: int = 0  # read bytes that were all-zero (holes)
    unchanged_bytes: int = 0  # read bytes a scan found equal to its parent's (not chunked again)
    stored_bytes: int = 0  # bytes uploaded, all objects
    metadata_bytes: int = 0  # bytes uploaded for index, map and manifest objects
    pack_bytes: int = 0  # bytes uploaded for packs (the new chunks, compressed)
    objects_written: int = 0
    packs_written: int = 0
    reused_packs: int = 0  # packs of an interrupted run that this one indexed
    duration_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class RestoreStats:
    capacity_bytes: int = 0
    written_bytes: int = 0
    hole_bytes: int = 0
    zeroed_bytes: int = 0
    fetched_bytes: int = 0  # stored bytes read from the repository
    compared_bytes: int = 0  # device bytes read to compare with the backup (a restore in place)
    chunks_verified: int = 0
    duration_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)
