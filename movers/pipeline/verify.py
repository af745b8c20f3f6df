"""Verify: check that backups restore, fully or by a sample of the stored data.

* ``run_verify`` (full): reads every chunk the given backups reference and checks it against its
  hash, and checks that manifests, directories and map pages decode, match their ids and hold
  ordered, in-range entries. A chunk shared by several backups is read once.
* ``run_verify_sampled``: the same metadata checks for every backup (cheap: manifests, directories
  and pages are small) plus "every referenced chunk is in a pack the index knows", then reads a
  random sample of the packs holding referenced chunks, about ``sample`` of their bytes, *whole*:
  every referenced chunk is decoded at the location restores read it from, every other chunk
  named by the pack's trailer is decoded too, and the pack's bytes are checked against its id.
  Damage no backup would meet (a dead chunk, a trailer) is a warning. The seed is reported, so a
  sample can be re-read.

Damage a restore would meet is a line of ``errors`` and an entry of ``damage`` with the same facts as
fields: ``volume``, ``backup_id``, ``object`` (the key of the manifest, map directory, map page or pack
at fault; None for a chunk in no pack), and ``offset`` / ``length``, the range of the volume a restore
cannot write (the first use of a damaged chunk, the pages a directory or page covers; None for a
manifest). Each backup's damaged map objects are reported and the rest of its map still checked; a
full verify stops reading a backup's data at its first damaged chunk.

Store failures (unreachable, access denied) raise; they say nothing about the data. Missing
objects are damage.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field

from movers.errors import (
    DamagedData,
    IntegrityError,
    MoverError,
    NotFoundError,
    ObjectNotFound,
    StoreError,
    UsageError,
)
from movers.pipeline.reader import MapReader
from movers.repo import pack as packfmt
from movers.repo import volmap
from movers.repo.forwarding import Forwarding, load_forwarding
from movers.repo.index import ChunkLocation
from movers.repo.manifest import Manifest, shown_volume_id
from movers.repo.repository import BackupRef, Locator, Repository

Progress = Callable[[int, int], None]


@dataclass
class VerifyReport:
    mode: str = "full"
    backups_checked: int = 0
    map_objects_checked: int = 0
    chunks_referenced: int = 0
    chunks_verified: int = 0
    packs_total: int = 0  # packs holding referenced chunks
    packs_read: int = 0
    stored_bytes: int = 0  # referenced chunk bytes in those packs
    fetched_bytes: int = 0
    sample: float | None = None
    seed: int | None = None
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)  # damage a restore meets, one line each
    damage: list[dict] = field(default_factory=list)  # the same: {volume, backup_id, offset, length, object, error}
    warnings: list[str] = field(default_factory=list)  # damage no backup meets

    @property
    def ok(self) -> bool:
        return not self.errors

    def add_damage(
        self,
        ref: BackupRef,
        error: str,
        obj: str | None = None,
        offset: int | None = None,
        length: int | None = None,
    ) -> None:
        """Record damage to backup ``ref``: in object ``obj`` (None: no object holds it, or which one is
        not known), affecting ``length`` bytes of the volume at ``offset`` (None: not a range of data)."""
        where = f"{shown_volume_id(ref.volume)}/{ref.backup_id}"
        if offset is not None:
            where += f" at volume offset {offset} ({length} bytes)"
        self.errors.append(f"{where}: {error}")
        self.damage.append(
            {
                "volume": ref.volume,
                "backup_id": ref.backup_id,
                "offset": offset,
                "length": length,
                "object": obj,
                "error": error,
            }
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def _not_damage(err: MoverError) -> bool:
    """Store failures other than a missing object say nothing about the data: re-raise them."""
    return isinstance(err, StoreError) and not isinstance(err, ObjectNotFound)


def run_verify(repo: Repository, refs: list[BackupRef], workers: int = 4, progress=None) -> VerifyReport:
    """Verify the given backups by reading all their data; damage is reported, never raised."""
    started = time.monotonic()
    report = VerifyReport(mode="full", sample=1.0)
    verified: set[bytes] = set()
    damaged_pages: dict[bytes, str] = {}
    for n, ref in enumerate(refs, 1):
        manifest = _read_manifest(repo, ref, report)
        if manifest is not None:
            report.backups_checked += 1
            reader = MapReader(repo, workers=workers)
            pages = _map_pages(repo, ref, manifest, report, damaged_pages)
            try:
                reader.run(manifest, lambda raw, uses: verified.add(uses[0][2]), skip=verified, pages=pages)
            except DamagedData as err:
                report.add_damage(ref, str(err), err.key, err.offset, err.length)
            except MoverError as err:
                if _not_damage(err):
                    raise
                report.add_damage(ref, str(err))
            report.chunks_verified += reader.chunks_verified
            report.fetched_bytes += reader.fetched_bytes
        if progress:
            progress(n, len(refs))
    report.duration_s = round(time.monotonic() - started, 3)
    return report


def _read_manifest(repo: Repository, ref: BackupRef, report: VerifyReport) -> Manifest | None:
    """The manifest of ``ref``; None when it was forgotten since it was listed or is damaged (reported)."""
    try:
        return repo.read_manifest(ref.volume, ref.backup_id)
    except NotFoundError:
        return None
    except MoverError as err:
        if _not_damage(err):
            raise
        report.add_damage(ref, str(err), ref.key)
        return None


def _map_pages(
    repo: Repository,
    ref: BackupRef,
    manifest: Manifest,
    report: VerifyReport,
    damaged: dict[bytes, str],
    seen: set[bytes] | None = None,
) -> Iterator[tuple[int, list[volmap.Entry], Locator]]:
    """Yield ``(page index, entries, where their chunks are)`` for every page of a backup's map that reads and
    checks sound (a located page's own table; the chunk index for a version 1 page).

    A damaged or missing directory or page is reported with the volume range it covers and its key, and
    what it covers is skipped; ``damaged`` (page id -> error) carries page damage across backups, so a
    shared page is read once and reported for each backup using it. Pages in ``seen`` are skipped and
    yielded pages added to it, when given.
    """
    page_size, capacity, fanout = manifest.map.page_size, manifest.capacity_bytes, manifest.map.dir_fanout
    n_pages = -(-capacity // page_size)
    for dir_index, dir_hex in enumerate(manifest.map.dirs):
        first = dir_index * fanout
        if dir_hex is None or first >= n_pages:
            continue
        dir_id = bytes.fromhex(dir_hex)
        try:
            slots = _read_dir(repo, dir_id)
        except MoverError as err:
            if _not_damage(err):
                raise
            start = first * page_size
            span = min(fanout * page_size, capacity - start)
            report.add_damage(ref, f"map directory: {err}", volmap.map_key(dir_id), start, span)
            continue
        report.map_objects_checked += 1
        for page_index, (page_id, _count) in enumerate(slots[: min(fanout, n_pages - first)], first):
            start = page_index * page_size
            span = min(page_size, capacity - start)
            if page_id == volmap.NO_PAGE or (seen is not None and page_id in seen):
                continue
            if page_id in damaged:
                report.add_damage(ref, damaged[page_id], volmap.map_key(page_id), start, span)
                continue
            try:
                entries, _digests, locations = repo.read_located_page(page_id)
                volmap.check_entries(entries, start, start + span)
                locator = repo.index() if locations is None else locations
            except MoverError as err:
                if _not_damage(err):
                    raise
                damaged[page_id] = str(err)
                report.add_damage(ref, str(err), volmap.map_key(page_id), start, span)
                continue
            report.map_objects_checked += 1
            if seen is not None:
                seen.add(page_id)
            yield page_index, entries, locator


def _read_dir(repo: Repository, dir_id: bytes) -> list[tuple[bytes, int]]:
    key = volmap.map_key(dir_id)
    try:
        return volmap.decode_dir(repo.store.get(key), dir_id)
    except ObjectNotFound:
        raise IntegrityError(f"map directory {key} is missing from the repository") from None


def run_verify_sampled(
    repo: Repository,
    refs: list[BackupRef],
    sample: float = 0.05,
    seed: int | None = None,
    workers: int = 4,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check every backup's map and read about ``sample`` (0..1) of the referenced packs' bytes whole.

    ``progress(done, total)`` counts backups during the map checks, then bytes during the pack reads.
    """
    if not 0.0 <= sample <= 1.0:
        raise UsageError(f"the sample must be a fraction between 0 and 1, not {sample}")
    started = time.monotonic()
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    report = VerifyReport(mode="sampled", sample=sample, seed=seed)
    index: dict[bytes, ChunkLocation] = {}  # where restores read each chunk (a page names it)
    first_use = _check_maps(repo, refs, index, report, progress)
    present = {packfmt.pack_id_from_key(key) for key in repo.store.list(packfmt.PACK_PREFIX)}
    forwarding = load_forwarding(repo.store) if repo.config.located else Forwarding()
    for cid, location in index.items():  # where a prune's repacking moved them
        moved, _via = forwarding.locate(cid, location.pack_id, present)
        index[cid] = location if moved is None else moved
    for cid in [cid for cid, location in index.items() if location.pack_id not in present]:
        ref, offset, length = first_use.pop(cid)
        key = packfmt.pack_key(index.pop(cid).pack_id)
        error = f"chunk {cid.hex()[:16]} is not in any pack of the repository (its pack {key} is missing)"
        report.add_damage(ref, error, key, offset, length)
    report.chunks_referenced = len(first_use)
    by_pack: dict[bytes, list[bytes]] = defaultdict(list)
    for cid in first_use:
        by_pack[index.get(cid).pack_id].append(cid)
    weight = {pid: sum(index.get(cid).stored_len for cid in cids) for pid, cids in by_pack.items()}
    report.packs_total, report.stored_bytes = len(by_pack), sum(weight.values())
    chosen = _choose(sorted(by_pack), weight, sample, seed)
    total = sum(weight[pid] for pid in chosen)
    done = 0
    for pid, found in _read_packs(repo, chosen, by_pack, index, workers):
        report.packs_read += 1
        report.fetched_bytes += found.fetched
        report.chunks_verified += found.chunks
        report.warnings.extend(found.warnings)
        for cid, error in found.damaged:
            ref, offset, length = first_use[cid]
            report.add_damage(ref, error, packfmt.pack_key(pid), offset, length)
        done += weight[pid]
        if progress:
            progress(done, total)
    report.duration_s = round(time.monotonic() - started, 3)
    return report


def _check_maps(
    repo: Repository,
    refs: list[BackupRef],
    index: dict[bytes, ChunkLocation],
    report: VerifyReport,
    progress: Progress | None,
) -> dict[bytes, tuple[BackupRef, int, int]]:
    """Check every backup's directories and pages; return each located chunk's first use (the backup,
    volume offset and length) and record in ``index`` where it is read from."""
    first_use: dict[bytes, tuple[BackupRef, int, int]] = {}
    damaged_pages: dict[bytes, str] = {}
    seen: set[bytes] = set()  # pages checked: their chunks have a first use already
    for n, ref in enumerate(refs, 1):
        manifest = _read_manifest(repo, ref, report)
        if manifest is not None:
            report.backups_checked += 1
            for _page_index, entries, locator in _map_pages(repo, ref, manifest, report, damaged_pages, seen):
                for voff, length, cid, _coff in entries:
                    if cid in first_use:
                        continue
                    location = locator.get(cid)
                    if location is not None:
                        index[cid] = location
                        first_use[cid] = (ref, voff, length)
                    else:
                        chunk = cid.hex()[:16]
                        report.add_damage(
                            ref, f"chunk {chunk} is not in any pack of the repository", None, voff, length
                        )
        if progress:
            progress(n, len(refs))
    return first_use


def _choose(pack_ids: list[bytes], weight: dict[bytes, int], sample: float, seed: int) -> list[bytes]:
    """A seeded random subset of ``pack_ids`` whose weights add up to about ``sample`` of the total."""
    if sample >= 1.0:
        return pack_ids
    shuffled = list(pack_ids)
    random.Random(seed).shuffle(shuffled)
    goal = sample * sum(weight.values())
    chosen, covered = [], 0
    for pid in shuffled:
        if covered >= goal:
            break
        chosen.append(pid)
        covered += weight[pid]
    return chosen


@dataclass
class _PackResult:
    fetched: int = 0
    chunks: int = 0
    damaged: list[tuple[bytes, str]] = field(default_factory=list)  # referenced chunk, error
    warnings: list[str] = field(default_factory=list)


def _read_packs(
    repo: Repository,
    chosen: list[bytes],
    by_pack: dict[bytes, list[bytes]],
    index: dict[bytes, ChunkLocation],
    workers: int,
):
    """Yield ``(pack id, _PackResult)`` for every chosen pack, read on ``workers`` threads (at most
    two packs per thread in memory)."""
    pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="verify")
    pending: dict[Future, bytes] = {}
    todo = iter(chosen)
    try:
        while True:
            while len(pending) < 2 * max(1, workers) and (pid := next(todo, None)) is not None:
                locs = {cid: index.get(cid) for cid in by_pack[pid]}
                pending[pool.submit(_check_pack, repo, pid, locs)] = pid
            if not pending:
                return
            for fut in wait(pending, return_when=FIRST_COMPLETED).done:
                yield pending.pop(fut), fut.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _check_pack(repo: Repository, pack_id: bytes, referenced: dict[bytes, ChunkLocation]) -> _PackResult:
    """Read one pack whole; decode its referenced chunks where restores read them, then the rest."""
    key = packfmt.pack_key(pack_id)
    result = _PackResult()
    try:
        data = repo.store.get(key)
    except ObjectNotFound:
        result.damaged = [(cid, f"pack {key} is missing") for cid in referenced]
        return result
    result.fetched = len(data)
    view = memoryview(data)
    checked: set[tuple[bytes, int]] = set()
    for cid, loc in referenced.items():
        try:
            repo.decode_chunk(pack_id, view[loc.offset : loc.offset + loc.stored_len], loc.flags, loc.raw_len, cid)
        except IntegrityError as err:
            result.damaged.append((cid, f"{err} (pack {key}, offset {loc.offset})"))
        result.chunks += 1
        checked.add((cid, loc.offset))
    try:
        offset, length = packfmt.trailer_location(data[-packfmt.FOOTER_LEN :], len(data))
        trailer = repo.parse_pack_trailer(pack_id, data[offset : offset + length])
    except IntegrityError as err:
        result.warnings.append(f"pack {key}: trailer damaged ({err}); restores use the index, a re-index would fail")
        trailer = []
    for e in trailer:
        if (e.chunk_id, e.offset) in checked:
            continue
        try:
            repo.decode_chunk(pack_id, view[e.offset : e.offset + e.stored_len], e.flags, e.raw_len, e.chunk_id)
        except IntegrityError as err:
            result.warnings.append(f"pack {key}: unreferenced chunk at offset {e.offset} damaged ({err})")
        result.chunks += 1
    addressed = not repo.config.located  # version 2 names packs at random
    if addressed and hashlib.sha256(data).digest() != pack_id and not result.damaged and not result.warnings:
        result.warnings.append(f"pack {key} does not match its id (damage outside every chunk)")
    return result
