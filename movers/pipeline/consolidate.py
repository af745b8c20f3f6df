"""Consolidation: store a committed backup's fragmented spans again, so that its restore fetches what it uses.

An incremental that overwrites scattered blocks leaves the chunks it overwrote partly dead: a restore of the new
backup still fetches each of them whole (a chunk is compressed and sealed whole) for the part that is still live,
and after months of small scattered changes a large share of what a restore of the latest backup fetches is dead.
A backup cannot afford to re-read and re-upload the live rest of every chunk it touches (its upload would be a
multiple of what changed), so maintenance does it, reading only the repository:

1. **Measure** (``measure``): walk the backup's map; per chunk, the bytes the map uses of it. A restore fetches the
   stored bytes of every chunk used (``fetch_bytes``); fully used chunks would take ``ideal_bytes``. Only a backup
   whose ratio exceeds ``1 / (1 - dead_fraction)`` (1.25x at the default 0.2) is consolidated: below it the restore
   is within bound and rewriting would cost upload for little.
2. **Rewrite** every span of ``chunk_max`` bytes of volume (the unit a backup chunks in) that uses a chunk more than
   half of ``dead_fraction`` of which is dead: only when all its users are rewritten does a restore stop fetching a
   chunk (the chunks of a scattered incremental are used all over the volume, so this is usually most of it). A
   window of at most ``window`` bytes of spans at a time: fetch the chunks that cover the window's spans
   (``MapReader``: each chunk verified), put their bytes into an anonymous memory file at their volume offsets, and
   store those spans again with the backup engine (``movers.pipeline.backup.rewrite_ranges``: zero detection,
   chunking, compression, packing, block digests) into a map on top of the backup's own (each window on top of the
   previous window's map). Then measure again and, while the ratio is over ``1 / (1 - dead_fraction / 2)``, repeat
   (at most ``MAX_ROUNDS`` rounds): a rewritten span no longer uses the chunks it shared with spans not rewritten.
3. **Check**: every 64 KiB block digest that both the old map and the new one record must be equal (the new ones
   are computed from the bytes the old chunks verified to); otherwise ``IntegrityError`` and nothing is committed.
4. **Commit**: a remap (``movers.repo.remap``), written after every object it names. A crash before it leaves the
   backup as it was, its new objects unreferenced (prune frees them after the grace).

The repository's prune lock is held throughout (a prune that marked the backup's old map while the remap is
committed would free the new map's objects) and a lease as a backup holds one (the prune state's rules on what may
be reused apply: nothing a prune listed is deduplicated against or re-created). The backup is read after the lock
is taken, through its newest remap.

Memory: ``measure`` holds, per chunk of the map, its id and two counts (~200 bytes); the rewrite holds one window in
an anonymous file (``window``, default 256 MiB) plus the backup engine's and the reader's bounds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from movers.errors import IntegrityError
from movers.pipeline.backup import BackupOptions, rewrite_ranges
from movers.pipeline.inplace import overlap, pages_touching
from movers.pipeline.reader import MapReader
from movers.pipeline.stats import BackupStats
from movers.repo import digests as dg
from movers.repo import volmap
from movers.repo.leases import Lease
from movers.repo.manifest import Manifest
from movers.repo.mapwriter import MapWriter
from movers.repo.prunelock import PruneLock
from movers.repo.prunestate import read_state
from movers.repo.remap import Remap
from movers.repo.repository import Locator, Repository

log = logging.getLogger(__name__)
MiB = 1 << 20
# a span is rewritten when more than this share of what its restore fetches is dead: a restore of a consolidated
# backup fetches at most 1 / (1 - DEAD_FRACTION) = 1.25x what it would from fully used chunks
DEAD_FRACTION = 0.2
WINDOW = 256 * MiB
# Rewriting spans leaves the chunks they shared with other spans less used, which may make those spans fragmented
# in turn: measure and rewrite again, at most this many times (a repeated span is rewritten from the new map).
MAX_ROUNDS = 3

Range = tuple[int, int]


@dataclass(frozen=True)
class Fragmentation:
    """What a restore of one map fetches (``fetch_bytes``: the stored bytes of every chunk it uses, each once)
    against what it would with every chunk fully used (``ideal_bytes``), and the spans (``[start, end)`` of the
    volume, ``chunk_max`` each) to rewrite so that no chunk over the threshold is used any more."""

    fetch_bytes: int
    ideal_bytes: int
    spans: list[Range]  # every span that uses a chunk more than ``chunk_dead`` of which its map does not use

    @property
    def ratio(self) -> float:
        return self.fetch_bytes / self.ideal_bytes if self.ideal_bytes else 1.0


@dataclass
class ConsolidationResult:
    """One backup's consolidation (``dry_run``: measured only). ``rewritten_bytes``: volume bytes stored again;
    ``fetched_bytes``: stored bytes read from the repository; ``stored_bytes``: bytes written to it (packs, index,
    map, remap); ``fetch_before`` / ``fetch_after``: the stored bytes a restore of the backup fetches (``measure``)."""

    volume: str
    backup_id: str
    dry_run: bool
    spans: int
    rewritten_bytes: int = 0
    fetched_bytes: int = 0
    stored_bytes: int = 0
    fetch_before: int = 0
    fetch_after: int = 0
    ideal_bytes: int = 0
    remap: str | None = None
    duration_s: float = 0.0


def measure(repo: Repository, manifest: Manifest, chunk_dead: float = DEAD_FRACTION / 2) -> Fragmentation:
    """The fragmentation of ``manifest``'s map (see the module doc, step 1): two walks over its pages."""
    span = repo.config.chunk_max
    used: dict[bytes, int] = {}
    size: dict[bytes, tuple[int, int]] = {}  # chunk id -> (raw length, stored length)
    for _page, entries, where in repo.iter_located_map(manifest):
        for _voff, length, cid, _coff in entries:
            used[cid] = used.get(cid, 0) + length
            if cid not in size:
                size[cid] = _sizes(where, cid, manifest)
    ideal = sum(used[cid] * stored / raw for cid, (raw, stored) in size.items())
    dead = {cid for cid, (raw, _stored) in size.items() if used[cid] < (1 - chunk_dead) * raw}
    spans: set[int] = set()
    if dead:
        for _page, entries, _where in repo.iter_located_map(manifest):
            for voff, length, cid, _coff in entries:
                if cid in dead:
                    spans.update(range(voff // span, (voff + length - 1) // span + 1))
    return Fragmentation(
        sum(stored for _raw, stored in size.values()),
        round(ideal),
        [(n * span, min((n + 1) * span, manifest.capacity_bytes)) for n in sorted(spans)],
    )


def _sizes(where: Locator, cid: bytes, manifest: Manifest) -> tuple[int, int]:
    loc = where.get(cid)
    if loc is None:
        raise IntegrityError(f"backup {manifest.backup_id} of volume {manifest.volume.id} uses a chunk in no pack")
    return loc.raw_len, loc.stored_len


def _windows(spans: list[Range], window: int) -> Iterator[list[Range]]:
    """``spans`` in groups of at most ``window`` bytes (at least one span each), adjacent spans joined."""
    group: list[Range] = []
    held = 0
    for s, e in spans:
        if group and held + (e - s) > window:
            yield group
            group, held = [], 0
        if group and group[-1][1] == s:
            group[-1] = (group[-1][0], e)
        else:
            group.append((s, e))
        held += e - s
    if group:
        yield group


@dataclass(frozen=True)
class ConsolidationOptions:
    """``dead_fraction``: the threshold of ``measure``; ``window``: bytes of spans rewritten at a time; ``dry_run``:
    only measure; ``lock_wait_s``: how long to wait for a running prune."""

    dead_fraction: float = DEAD_FRACTION
    window: int = WINDOW
    workers: int = 4
    dry_run: bool = False
    lock_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.dead_fraction < 1:
            raise ValueError("dead_fraction must be between 0 and 1")


def consolidate(
    repo: Repository, volume: str, backup: str | None = None, options: ConsolidationOptions | None = None
) -> ConsolidationResult:
    """Consolidate backup ``backup`` (None or "latest": the newest) of ``volume`` (see the module doc); with
    ``options.dry_run`` only measure it. ``PruneLockedError`` (exit 5) while a prune runs, ``NotFoundError`` for a
    backup that is not there, ``IntegrityError`` for damaged data (nothing committed)."""
    opts = options or ConsolidationOptions()
    dead_fraction, window, workers, dry_run = opts.dead_fraction, opts.window, opts.workers, opts.dry_run
    lock_wait_s = opts.lock_wait_s
    started = time.monotonic()
    if dry_run:
        manifest = repo.resolve(volume, backup)
        frag = measure(repo, manifest, dead_fraction / 2)
        return _result(manifest, frag, dry_run=True, started=started, due=frag.ratio > 1 / (1 - dead_fraction))
    with PruneLock(repo.store, "consolidate", wait_s=lock_wait_s):
        manifest = repo.resolve(volume, backup)
        frag = measure(repo, manifest, dead_fraction / 2)
        result = _result(manifest, frag, dry_run=False, started=started, due=frag.ratio > 1 / (1 - dead_fraction))
        if not result.spans:
            return result
        what = f"consolidation of backup {manifest.backup_id} of volume {manifest.volume.id}"
        with Lease(repo.store, what) as lease:
            state = read_state(repo.store)[1]
            lease.saw(state.key)
            new, rewritten = manifest, []
            for _round in range(MAX_ROUNDS):
                if not frag.spans or frag.ratio <= 1 / (1 - dead_fraction / 2):
                    break
                new = _rewrite(repo, new, frag.spans, window, workers, state.garbage, lease, result)
                rewritten += frag.spans
                frag = measure(repo, new, dead_fraction / 2)
            _check_digests(repo, manifest, new, rewritten)
            result.spans, result.fetch_after, result.ideal_bytes = (
                len(set(rewritten)),
                frag.fetch_bytes,
                frag.ideal_bytes,
            )
            remap = Remap(
                backup_id=manifest.backup_id,
                volume=manifest.volume.id,
                capacity_bytes=manifest.capacity_bytes,
                map=new.map,
                created=datetime.now(UTC).isoformat(),
                rewritten_bytes=result.rewritten_bytes,
                fetch_before=result.fetch_before,
                fetch_after=frag.fetch_bytes,
            )
            lease.check()
            result.remap = repo.write_remap(manifest, remap)
            result.stored_bytes += len(remap.encode())
    result.duration_s = round(time.monotonic() - started, 3)
    log.info(
        "consolidated backup %s of volume %s: %d bytes stored again, a restore fetches %d bytes instead of %d",
        manifest.backup_id,
        manifest.volume.id,
        result.rewritten_bytes,
        result.fetch_after,
        result.fetch_before,
    )
    return result


def _result(
    manifest: Manifest, frag: Fragmentation, *, dry_run: bool, started: float, due: bool
) -> ConsolidationResult:
    return ConsolidationResult(
        volume=manifest.volume.id,
        backup_id=manifest.backup_id,
        dry_run=dry_run,
        spans=len(frag.spans) if due else 0,
        fetch_before=frag.fetch_bytes,
        fetch_after=frag.fetch_bytes,
        ideal_bytes=frag.ideal_bytes,
        duration_s=round(time.monotonic() - started, 3),
    )


def _rewrite(  # noqa: PLR0913 engine core: the backup, its spans, the bounds, and the lease state one rewrite needs
    repo: Repository,
    manifest: Manifest,
    spans: list[Range],
    window: int,
    workers: int,
    garbage: set[str],
    lease: Lease,
    result: ConsolidationResult,
) -> Manifest:
    """``manifest`` with a map in which ``spans`` are stored again (step 2), not committed."""
    options = BackupOptions(workers=workers)
    current = manifest
    fd = os.memfd_create("cbt-mover-consolidate", os.MFD_CLOEXEC)
    try:
        for ranges in _windows(spans, window):
            os.ftruncate(fd, 0)  # frees the previous window
            os.ftruncate(fd, manifest.capacity_bytes)
            result.fetched_bytes += _fill(repo, manifest, ranges, fd, workers)
            stats = BackupStats()
            mapw = MapWriter(repo, manifest.capacity_bytes, repo.page_slots(current))
            try:
                ref = rewrite_ranges(repo, fd, mapw, [(s, e - s) for s, e in ranges], options, stats, garbage, lease)
            finally:
                mapw.close()
            current = dataclasses.replace(manifest, map=ref)
            result.rewritten_bytes += sum(e - s for s, e in ranges)
            result.stored_bytes += stats.stored_bytes
            lease.check()
    finally:
        os.close(fd)
    return current


def _fill(repo: Repository, manifest: Manifest, ranges: list[Range], fd: int, workers: int) -> int:
    """Write the bytes ``manifest`` restores in ``ranges`` into ``fd`` at their offsets (holes stay zero); the
    stored bytes fetched."""

    def pages() -> Iterator[tuple[int, list[volmap.Entry], Locator]]:
        for page, entries, where in repo.iter_located_map(manifest, pages_touching(ranges, manifest.map.page_size)):
            yield page, [en for en in entries if overlap(ranges, en[0], en[0] + en[1])], where

    def sink(raw: bytes | memoryview, uses: list[volmap.Entry]) -> None:
        for voff, length, _cid, coff in uses:
            for s, e in overlap(ranges, voff, voff + length):
                os.pwrite(fd, raw[coff + s - voff : coff + e - voff], s)

    reader = MapReader(repo, workers=workers)
    reader.run(manifest, sink, pages=pages())
    return reader.fetched_bytes


def _check_digests(repo: Repository, old: Manifest, new: Manifest, spans: list[Range]) -> None:
    """Step 3: the block digests both maps record for the pages of ``spans`` are equal."""
    page_size = old.map.page_size
    pages = sorted(pages_touching(spans, page_size))
    old_slots, new_slots = repo.page_slots(old), repo.page_slots(new)
    for page in pages:
        before = repo.read_page_with_digests(old_slots[page][0])[1]
        after = repo.read_page_with_digests(new_slots[page][0])[1]
        for i in range(min(len(before), len(after)) // dg.DIGEST_LEN):
            a = before[i * dg.DIGEST_LEN : (i + 1) * dg.DIGEST_LEN]
            b = after[i * dg.DIGEST_LEN : (i + 1) * dg.DIGEST_LEN]
            if a != dg.UNKNOWN and b != dg.UNKNOWN and a != b:
                start = page * page_size + i * dg.DIGEST_BLOCK
                raise IntegrityError(
                    f"consolidation of backup {old.backup_id} of volume {old.volume.id}: block at volume offset"
                    f" {start} reads differently from its recorded digest; nothing committed"
                )
