"""The backup pipeline: read -> zero-detect -> hash -> dedup -> compress -> pack -> upload.

Concurrency and error timing (one join point, like s3transfer's futures):

* The caller's thread walks the planned reads and submits one task per read to a pool of
  ``workers`` threads (read, find data runs, hash, compress chunks the repository lacks).
  It never has more than ``max_inflight`` bytes nor ``max_inflight_reads`` reads outstanding,
  so memory is independent of the volume size and of the number of extents.
* Results are consumed strictly in submission (= volume) order: dedup decisions, packing
  and map building happen in the caller's thread, so they need no locks.
* Full packs go to an upload pool; at most ``upload_threads`` packs are in flight.
* The first error anywhere cancels what is queued and is raised from ``run_backup`` after
  in-flight work stopped. Nothing is committed unless everything succeeded: the manifest
  is the last object written.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from movers import device
from movers.errors import IntegrityError, ObjectNotFound, UsageError
from movers.extents import Extent, validated
from movers.pipeline.fresh import distinct_pack, finish_page_fresh, listed_dirs
from movers.pipeline.planner import gather, plan_reads, scan_reads
from movers.pipeline.stats import BackupStats, ProgressFn
from movers.pipeline.zeros import data_runs, is_zero
from movers.repo import digests as dg
from movers.repo import pack as packfmt
from movers.repo import volmap
from movers.repo.chunks import encode_chunk
from movers.repo.deltabase import delta_parent
from movers.repo.index import ChunkIndex, ChunkLocation, EitherIndex
from movers.repo.leases import Lease, other_attempts
from movers.repo.manifest import Manifest, MapRef, SnapshotIdentity, VolumeIdentity, check_volume_id, new_backup_id
from movers.repo.mapwriter import DigestUpdate, MapWriter
from movers.repo.prunestate import read_state
from movers.repo.repository import Repository
from movers.repo.shards import ShardedIndex

log = logging.getLogger(__name__)
MiB = 1 << 20


@dataclass
class BackupOptions:
    level: int = 3  # zstd level
    workers: int = field(default_factory=lambda: os.cpu_count() or 2)
    upload_threads: int = 4
    max_inflight: int = 64 * MiB
    # also bound the number of reads: many tiny CBT extents would otherwise mean thousands of futures
    max_inflight_reads: int = 64
    max_gap: int = 64 * 1024
    min_hole: int = 64 * 1024


class Piece(NamedTuple):
    """A range of one read: a hole (no ``cid``) or data in the chunk ``cid`` at ``coff``.

    ``stored``: the chunk's stored bytes when the worker found it new, else None. ``raw_len``: the chunk's
    length when it is longer than the piece (a gathered chunk); -1 for the later pieces of a gathered chunk,
    which its first piece stored or found.
    """

    voff: int
    length: int
    cid: bytes | None
    stored: bytes | None = None
    flags: int = 0
    coff: int = 0
    raw_len: int = 0


# (ranges re-stored, their pieces, digests of the blocks read whole)
ReadResult = tuple[list[tuple[int, int]], list[Piece], list[DigestUpdate]]


class _Uploader:
    """Uploads finished packs on a bounded pool and remembers what it wrote."""

    def __init__(self, repo: Repository, threads: int, stats: BackupStats, garbage: set[str]) -> None:
        self.repo = repo
        self.stats = stats
        self.garbage = garbage
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="upload")
        self.limit = threads
        self.pending: deque[Future] = deque()
        self.packs: dict[bytes, list[packfmt.PackEntry]] = {}
        self.lock = threading.Lock()

    def submit(self, builder: packfmt.PackBuilder) -> None:
        """Finish (hash) and upload ``builder`` on the pool; blocks while the pool is full."""
        while len(self.pending) >= self.limit:
            self._collect(self.pending.popleft())
        self.pending.append(self.pool.submit(self._finish_and_put, builder))

    def _finish_and_put(self, builder: packfmt.PackBuilder) -> tuple[bytes, list[packfmt.PackEntry]]:
        pack_id, data, entries = distinct_pack(*builder.finish(), self.garbage, self.repo.content_hash)
        written = self.repo.put_once(packfmt.pack_key(pack_id), data)
        with self.lock:
            self.stats.stored_bytes += written
            self.stats.pack_bytes += written
            self.stats.objects_written += int(written > 0)
            self.stats.packs_written += int(written > 0)
        return pack_id, entries

    def _collect(self, fut: Future) -> None:
        pack_id, entries = fut.result()
        self.packs[pack_id] = entries

    def drain(self) -> None:
        while self.pending:
            self._collect(self.pending.popleft())

    def close(self, cancel: bool) -> None:
        self.pool.shutdown(wait=True, cancel_futures=cancel)


def run_backup(  # noqa: PLR0913 engine core: the repository, the device and its identity, then keyword-only inputs of one backup (extents, snapshot, options, progress, parent selection, tags), each optional with its default; grouping them would only move the list
    repo: Repository,
    device_path: str,
    volume: VolumeIdentity,
    *,
    extents: Iterable[Extent] | None = None,
    snapshot: SnapshotIdentity | None = None,
    options: BackupOptions | None = None,
    progress: ProgressFn | None = None,
    force_full: bool = False,
    base_handle: str | None = None,
    parent: str | None = None,
    tags: Mapping[str, str] | None = None,
    run_pvcs: Sequence[str] | None = None,
) -> Manifest:
    """Back up ``device_path`` and return the committed manifest.

    With ``extents`` (ascending, disjoint ``(offset, length)``), only those ranges are read:
    an incremental of the volume's latest backup, or a full backup (everything else a hole)
    when there is none or ``force_full``. Without ``extents`` the whole device is scanned and
    only content the repository lacks is uploaded.

    ``parent`` (a backup id) and ``base_handle`` (the extents are a CBT delta since the snapshot with that CSI
    handle): the backup the extents build on, as ``movers.repo.deltabase.delta_parent`` finds it (the named one,
    which must have recorded ``base_handle`` when both are given; else the one backup that recorded it); it is
    found before anything is written (bad input changes nothing). With neither, the parent is the volume's
    newest backup: only a caller that knows the extents are changes since it may leave both out.
    ``tags`` are recorded in the manifest as given, ``run_pvcs`` (every PVC of the application run)
    sorted.

    Nothing the newest prune state lists (read first, before the chunk index) is deduplicated
    against or re-created under its key, and a lease (``movers.repo.leases``) held from before that
    read until the commit makes a concurrent prune wait for this backup (see ``movers.repo.prune``).
    """
    check_volume_id(volume.id)  # before anything is written
    if not force_full and (parent is not None or base_handle is not None):
        parent = delta_parent(repo, volume.id, parent_id=parent, base_handle=base_handle).backup_id
    with Lease(repo.store, f"backup of volume {volume.id}", keep_failed=True) as lease:
        return _backup(
            repo,
            device_path,
            volume,
            lease,
            extents=extents,
            snapshot=snapshot,
            options=options,
            progress=progress,
            force_full=force_full,
            parent_id=parent,
            tags=tags,
            run_pvcs=run_pvcs,
        )


def _backup(  # noqa: PLR0913 engine core: run_backup's inputs passed through under its lease
    repo: Repository,
    device_path: str,
    volume: VolumeIdentity,
    lease: Lease,
    *,
    extents: Iterable[Extent] | None,
    snapshot: SnapshotIdentity | None,
    options: BackupOptions | None,
    progress: ProgressFn | None,
    force_full: bool,
    parent_id: str | None,
    tags: Mapping[str, str] | None,
    run_pvcs: Sequence[str] | None,
) -> Manifest:
    options = options or BackupOptions()
    started = time.monotonic()
    stats = BackupStats()
    state = read_state(repo.store)[1]
    lease.saw(state.key)
    garbage = state.garbage
    fd = device.open_device(device_path)
    try:
        capacity = device.device_size(fd)
        if capacity <= 0:
            raise UsageError(f"device {device_path} is empty")
        parent = None if force_full else _parent(repo, volume.id, parent_id)
        parent_slots = repo.page_slots(parent) if parent else None
        if extents is None:
            mode = "incremental-scan" if parent else "full"
            reads = scan_reads(capacity, repo.config.chunk_max)
        else:
            mode = "incremental-cbt" if parent else "full"
            checked = _count_changed(validated(extents, capacity), stats)
            reads = plan_reads(checked, repo.config.chunk_max, options.max_gap)
        log.info(
            "backup of volume %s: mode %s, capacity %d, parent %s",
            volume.id,
            mode,
            capacity,
            parent.backup_id if parent else "none",
        )
        mapw = MapWriter(repo, capacity, parent_slots)
        scan_parent = extents is None and parent is not None
        total = capacity if extents is None else None
        report = _Report(progress, total, capacity, mode)
        engine = _Engine(repo, fd, mapw, options, stats, report, scan_parent, garbage, lease)
        try:
            map_ref = engine.run(reads)
        finally:
            mapw.close()
        if extents is None:
            stats.changed_bytes = engine.scan_changed_bytes
    finally:
        os.close(fd)
    manifest = Manifest(
        backup_id=new_backup_id(),
        volume=volume,
        capacity_bytes=capacity,
        snapshot=snapshot or SnapshotIdentity(),
        parent=parent.backup_id if parent else None,
        mode=mode,
        created=datetime.now(UTC).isoformat(),
        map=map_ref,
        tags=dict(tags or {}),
        run_pvcs=sorted(set(run_pvcs)) if run_pvcs is not None else None,
        format_version=repo.config.format_version,
        mandatory_features=list(repo.config.mandatory_features),
    )
    stats.duration_s = round(time.monotonic() - started, 3)
    manifest.stats = stats.as_dict()
    data = manifest.encode()
    lease.check()
    if not repo.store.create(repo.manifest_key(manifest), data):  # the commit point, never rewriting a manifest
        raise IntegrityError(f"backup {manifest.backup_id} of volume {volume.id} exists already in {repo.describe()}")
    stats.stored_bytes += len(data)
    stats.metadata_bytes += len(data)
    stats.objects_written += 1
    manifest.stats = stats.as_dict()
    log.info("committed backup %s of volume %s", manifest.backup_id, volume.id)
    return manifest


def rewrite_ranges(  # noqa: PLR0913 engine core: what one rewrite of a map's ranges needs, as a backup holds it
    repo: Repository,
    fd: int,
    mapw: MapWriter,
    ranges: Iterable[Extent],
    options: BackupOptions,
    stats: BackupStats,
    garbage: set[str],
    lease: Lease,
) -> MapRef:
    """Store ``ranges`` (ascending, disjoint, within ``mapw``'s capacity) of ``fd`` again, as an incremental stores
    its extents, into the map ``mapw`` writes on top of its parent: the engine of ``run_backup`` for a caller that
    holds the lease and the prune state's ``garbage`` itself (``movers.pipeline.consolidate``)."""
    reads = plan_reads(validated(ranges, mapw.capacity), repo.config.chunk_max, options.max_gap)
    report = _Report(None, None, mapw.capacity, "rewrite")
    return _Engine(repo, fd, mapw, options, stats, report, False, garbage, lease).run(reads)


def _parent(repo: Repository, volume_id: str, parent_id: str | None) -> Manifest | None:
    """Backup ``parent_id`` (found before the lease), read again now that the lease keeps prunes from deleting
    what it uses; the newest backup when none was named."""
    return repo.latest(volume_id) if parent_id is None else repo.read_manifest(volume_id, parent_id)


def _packs_of_attempts(
    repo: Repository, attempts: Sequence[str], garbage: set[str]
) -> dict[bytes, list[packfmt.PackEntry]]:
    """The packs earlier attempts of this backup uploaded (a version 2 pack id starts with its backup's lease id,
    so one prefix listing finds them), except those a prune lists; unreadable ones are skipped."""
    found: dict[bytes, list[packfmt.PackEntry]] = {}
    for lease_id in attempts:
        for key in repo.store.list(packfmt.pack_key(bytes.fromhex(lease_id))):
            if key in garbage:
                continue
            try:
                found[packfmt.pack_id_from_key(key)] = repo.read_pack_trailer(key)
            except (IntegrityError, ObjectNotFound) as err:
                log.warning("not reusing pack %s of an earlier attempt: %s", key, err)
    if found:
        log.info("reusing %d pack(s) an earlier attempt of this backup uploaded", len(found))
    return found


class _Report:
    """The backup's ``progress`` calls: bytes read of the total, with the position reached on the volume (reads
    are ascending), its capacity and the backup's mode. With extents the total is None until the last call,
    made once the packs, index and map are written (the extents are a stream: their sum is known at its end)."""

    def __init__(self, progress: ProgressFn | None, total: int | None, capacity: int, mode: str) -> None:
        self.progress, self.total, self.capacity, self.mode = progress, total, capacity, mode

    def __call__(self, done: int, position: int) -> None:
        if self.progress:
            self.progress(done, self.total, position=position, capacity=self.capacity, mode=self.mode)

    def done(self, read: int) -> None:
        self.total = read
        self(read, self.capacity)


def _count_changed(extents: Iterable[Extent], stats: BackupStats) -> Iterable[Extent]:
    for off, length in extents:
        stats.changed_bytes += length
        yield off, length


class _Engine:
    def __init__(  # noqa: PLR0913 engine core: the state one backup's engine holds, set once by _backup (private)
        self,
        repo,
        fd,
        mapw,
        options,
        stats,
        report: _Report,
        scan_parent: bool,
        garbage: set[str],
        lease: Lease,
    ) -> None:
        self.repo = repo
        self.fd = fd
        self.mapw = mapw
        self.options = options
        self.stats = stats
        self.report = report
        # A scan on top of a parent compares block digests and re-stores only changed blocks.
        self.scan_parent = scan_parent
        self.sparse = not device.is_block_device(fd)
        self.scan_changed_bytes = 0
        self.hash = repo.content_hash
        self.garbage = garbage
        self.garbage_maps = {key for key in garbage if key.startswith(volmap.MAP_PREFIX)}
        # A located repository (format version 2) is not read whole for dedup: a CBT delta is new data by
        # definition, a scan keeps what the parent's block digests say is unchanged, and a backup without a
        # parent reads the shards of the chunk index its chunks fall in. All reuse what earlier attempts of the
        # same backup uploaded (their packs are named after their lease).
        self.located = repo.config.located
        self.pack_prefix = bytes.fromhex(lease.id)
        if not self.located:
            self.index, self.recovered = repo.backup_index(garbage)
        else:
            base = ChunkIndex() if mapw.has_parent else ShardedIndex(repo.store, garbage)
            self.recovered = _packs_of_attempts(repo, other_attempts(repo.store, lease.what, lease.id), garbage)
            found = ChunkIndex()
            for pack_id, entries in self.recovered.items():
                found.add_pack(pack_id, entries)
            self.index = EitherIndex(found, base) if self.recovered else base
        self.session: dict[bytes, ChunkLocation | None] = {}  # chunks this backup stored, and where
        self.builder = self._new_builder()
        self.locations: dict[bytes, ChunkLocation] = {}  # of the chunks the current page's new entries use
        self.page = -1
        self.covered: list[tuple[int, int]] = []
        self.entries: list = []
        self.updates: list[DigestUpdate] = []

    def run(self, reads: Iterable[Extent]) -> MapRef:
        """Process every read, upload packs and the index, write the map; return its reference."""
        opts = self.options
        uploader = _Uploader(self.repo, opts.upload_threads, self.stats, self.garbage)
        pool = ThreadPoolExecutor(opts.workers, thread_name_prefix="chunk")
        ok = False
        try:
            inflight: deque[tuple[int, int, Future]] = deque()
            inflight_bytes = 0
            small = 0 if self.scan_parent else dg.DIGEST_BLOCK  # a scan on a parent compares whole blocks
            for item in gather(reads, small, self.repo.config.chunk_max, self.mapw.page_size):
                if isinstance(item, list):
                    off, length = item[0][0], sum(n for _off, n in item)
                    task = (self._process_batch, item)
                else:
                    off, length = item
                    task = (self._process, off, length, self._base_digests(off, length) if self.scan_parent else None)
                while inflight and (
                    inflight_bytes + length > opts.max_inflight or len(inflight) >= opts.max_inflight_reads
                ):
                    inflight_bytes -= self._consume(inflight.popleft(), uploader)
                inflight.append((off, length, pool.submit(*task)))
                inflight_bytes += length
            while inflight:
                self._consume(inflight.popleft(), uploader)
            self._finish_page()
            if len(self.builder):
                uploader.submit(self.builder)
            uploader.drain()
            ok = True
        finally:
            pool.shutdown(wait=True, cancel_futures=not ok)
            uploader.close(cancel=not ok)
        new_packs = dict(self.recovered)
        self.stats.reused_packs = len(new_packs)
        new_packs.update(uploader.packs)
        written, objects = self.repo.write_index(new_packs, sharded=self.located and not self.mapw.has_parent)
        self.repo.indexed(new_packs)
        map_ref = self.mapw.finish()
        for dir_hex in listed_dirs(map_ref.dirs, self.garbage_maps):
            log.warning("map directory %s of this backup is listed by prune (see movers.pipeline.fresh)", dir_hex[:16])
        meta = written + self.mapw.bytes_written
        self.stats.metadata_bytes += meta
        self.stats.stored_bytes += meta
        self.stats.objects_written += objects + self.mapw.objects_written
        self.report.done(self.stats.read_bytes)
        return map_ref

    def _base_digests(self, off: int, length: int) -> bytes:
        """The parent's (base) digests of the blocks of one read, for a scan to compare."""
        page = off // self.mapw.page_size
        _entries, base = self.mapw.parent_page(page)
        first = page * self.mapw.page_size // dg.DIGEST_BLOCK
        blocks = dg.blocks_touching(off, off + length)
        return base[(blocks.start - first) * dg.DIGEST_LEN : (blocks.stop - first) * dg.DIGEST_LEN]

    def _process(self, off: int, length: int, base: bytes | None) -> ReadResult:
        """Worker: read one range; return its pieces, the ranges re-stored and block digests.

        Without ``base`` the whole read is re-stored. With it (a scan on a parent) only the
        digest blocks whose digest differs from ``base`` are.
        """
        capacity = self.mapw.capacity
        # bytes, not a reused buffer: comparing memoryviews is byte-by-byte in CPython, slower
        # than the page faults a fresh buffer costs (measured).
        if self.sparse and device.is_hole(self.fd, off, length):
            data = None  # a hole of a sparse image file: zeros, not worth reading
        else:
            data = device.pread_exact(self.fd, length, off)
        view = memoryview(data) if data is not None else None
        updates = []
        changed: list[tuple[int, int]] = []
        for n, i in enumerate(dg.blocks_within(off, off + length, capacity)):
            bs, be = dg.block_span(i, capacity)
            if data is None or is_zero(data, bs - off, be - off):
                digest = self.hash.zero_digest(be - bs)
            else:
                digest = self.hash.block_digest(view[bs - off : be - off])
            updates.append((i, digest))
            if base is not None and base[n * dg.DIGEST_LEN : (n + 1) * dg.DIGEST_LEN] != digest:
                if changed and changed[-1][1] == bs - off:
                    changed[-1] = (changed[-1][0], be - off)
                else:
                    changed.append((bs - off, be - off))
        runs = [(0, length)] if base is None else changed
        pieces: list[Piece] = []
        for rs, re in runs:
            if data is None:
                pieces.append(Piece(off + rs, re - rs, None))
            else:
                self._chunk(data if (rs, re) == (0, length) else data[rs:re], off + rs, pieces)
        return [(off + rs, off + re) for rs, re in runs], pieces, updates

    def _process_batch(self, reads: list[Extent]) -> ReadResult:
        """Worker: read small reads (each shorter than a digest block, so no block digests) and store their data as
        one gathered chunk, each data run an entry at its offset in the chunk; zero runs are holes as in ``_chunk``."""
        pieces: list[Piece] = []
        parts: list[bytes] = []
        uses: list[tuple[int, int, int]] = []  # (volume offset, length, offset in the gathered chunk)
        coff = 0
        device.prefetch(self.fd, reads)
        for off, length in reads:  # small reads: reading costs what asking for a hole would
            data = device.pread_exact(self.fd, length, off)
            pos = 0
            for start, end in data_runs(data, self.options.min_hole):
                if start > pos:
                    pieces.append(Piece(off + pos, start - pos, None))
                parts.append(data if (start, end) == (0, length) else data[start:end])
                uses.append((off + start, end - start, coff))
                coff += end - start
                pos = end
            if pos < length:
                pieces.append(Piece(off + pos, length - pos, None))
        if parts:
            chunk = b"".join(parts)
            cid = self.hash.chunk_id(chunk)
            stored, flags = None, 0
            if cid not in self.index and cid not in self.session:
                stored, flags = encode_chunk(chunk, self.options.level)
            voff, length, at = uses[0]
            pieces.append(Piece(voff, length, cid, stored, flags, at, len(chunk)))
            pieces.extend(Piece(voff, length, cid, None, flags, at, -1) for voff, length, at in uses[1:])
        return [(off, off + length) for off, length in reads], pieces, []

    def _chunk(self, data: bytes, off: int, pieces: list[Piece]) -> None:
        """Split ``data`` (at volume offset ``off``) into holes and chunks, compressing new ones."""
        view = memoryview(data)
        pos = 0
        for start, end in data_runs(data, self.options.min_hole):
            if start > pos:
                pieces.append(Piece(off + pos, start - pos, None))
            chunk = view[start:end]
            cid = self.hash.chunk_id(chunk)
            if cid in self.index or cid in self.session:
                pieces.append(Piece(off + start, end - start, cid))
            else:
                stored, flags = encode_chunk(chunk, self.options.level)
                pieces.append(Piece(off + start, end - start, cid, stored, flags))
            pos = end
        if pos < len(data):
            pieces.append(Piece(off + pos, len(data) - pos, None))

    def _consume(self, item: tuple[int, int, Future], uploader: _Uploader) -> int:
        off, length, fut = item
        covered, pieces, updates = fut.result()
        page = off // self.mapw.page_size
        if page != self.page:
            self._finish_page()
            self.page = page
        self.covered.extend(covered)
        self.updates.extend(updates)
        stats = self.stats
        stats.read_bytes += length
        restored = sum(e - s for s, e in covered)
        self.scan_changed_bytes += restored
        stats.unchanged_bytes += length - restored
        new = False  # whether the current chunk was stored by this backup (later pieces of a gathered chunk share it)
        for voff, plen, cid, stored, flags, coff, raw_len in pieces:
            if cid is None:
                stats.zero_bytes += plen
                continue
            self.entries.append((voff, plen, cid, coff))
            if raw_len >= 0:  # not a later piece of a gathered chunk, whose first piece stored or found it
                new = cid not in self.index and cid not in self.session
                if new:
                    self._store(cid, stored, raw_len or plen, flags, uploader)
            if new:
                stats.new_chunk_bytes += plen
            else:
                stats.dedup_bytes += plen
            if self.located:
                self.locations[cid] = self.session.get(cid) or self.index.get(cid)
        self.report(stats.read_bytes, covered[-1][1] if covered else off + length)
        return length

    def _store(self, cid: bytes, stored: bytes, raw_len: int, flags: int, uploader: _Uploader) -> None:
        """Pack a new chunk (uploading the pack when full) and remember where it is."""
        entry = self.builder.add(cid, stored, raw_len, flags)
        self.session[cid] = (
            ChunkLocation(self.builder.pack_id, entry.offset, entry.stored_len, entry.raw_len, flags)
            if self.located
            else None
        )
        self.stats.new_chunks += 1
        if self.builder.size >= self.repo.config.pack_target:
            uploader.submit(self.builder)
            self.builder = self._new_builder()

    def _new_builder(self) -> packfmt.PackBuilder:
        if not self.located:
            return self.repo.new_pack()
        return self.repo.new_pack(self.pack_prefix + os.urandom(32 - len(self.pack_prefix)))

    def _finish_page(self) -> None:
        located = self.locations if self.located else None
        if self.page >= 0 and self.garbage_maps:
            finish_page_fresh(
                self.mapw, self.page, self.covered, self.entries, self.updates, self.garbage_maps, located
            )
        elif self.page >= 0:
            self.mapw.finish_page(self.page, self.covered, self.entries, self.updates, located)
        self.covered = []
        self.entries = []
        self.updates = []
        self.locations = {}
