"""Verify: check that backups restore, fully or by a sample of the stored data.

* ``run_verify`` (full): reads every chunk the given backups reference and checks it against its
  hash, and checks that manifests, directories and map pages decode, match their ids and hold
  ordered, in-range entries. A chunk shared by several backups is read once. Then the framing of every
  pack holding their chunks (``pack.read_framing``: header, footer, trailer, entries within the data).
* ``run_verify_sampled``: the same metadata checks for every backup (cheap: manifests, directories
  and pages are small) plus "every referenced chunk is in a pack the index knows", then reads a
  random sample of the packs holding referenced chunks, about ``sample`` of their bytes, *whole*:
  every referenced chunk is decoded at the location restores read it from, every other chunk
  named by the pack's trailer is decoded too, its framing checked, and the pack's bytes are checked
  against its id. Damage no backup would meet (a dead chunk) is a warning. The seed is reported, so a
  sample can be re-read.

Damaged framing (a header, footer or trailer, also one whose footer claims more than the pack holds: read
no further than the pack's size) is damage of the first backup using the pack, with no volume range:
restores read chunks through the index and still work, but the pack cannot be indexed again from its
trailer (a lost index, an interrupted backup's packs, a re-index).

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
from array import array
from collections import deque
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
from movers.repo.ids import IdSet, sorted_by_id
from movers.repo.index import ChunkLocation
from movers.repo.manifest import Manifest, shown_volume_id
from movers.repo.packtable import PackTable
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
    verified = _Verified(lambda: None if repo.config.located else repo.index().table)
    damaged_pages: dict[bytes, str] = {}
    pages_ok = IdSet()  # pages of backups read to the end: every chunk verified, no entry to look up again
    packs: dict[bytes, int] = {}  # the packs holding the backups' chunks -> the first backup using it (its number)
    for n, ref in enumerate(refs, 1):
        manifest = _read_manifest(repo, ref, report)
        if manifest is not None:
            report.backups_checked += 1
            reader = MapReader(repo, workers=workers)
            read: list[bytes] = []
            pages = _unverified(_map_pages(repo, ref, manifest, report, damaged_pages), pages_ok, read, packs, n - 1)
            try:
                reader.run(manifest, lambda raw, uses: verified.add(uses[0][2]), skip=verified, pages=pages)
            except DamagedData as err:
                report.add_damage(ref, str(err), err.key, err.offset, err.length)
            except MoverError as err:
                if _not_damage(err):
                    raise
                report.add_damage(ref, str(err))
            else:
                for page_id in read:
                    pages_ok.add(page_id)
            report.chunks_verified += reader.chunks_verified
            report.fetched_bytes += reader.fetched_bytes
        if progress:
            progress(n, len(refs))
    report.packs_total = len(packs)
    _check_framing(repo, packs, refs, report, workers)
    report.duration_s = round(time.monotonic() - started, 3)
    return report


def _unverified(
    pages: Iterator[tuple[int, bytes, list[volmap.Entry], Locator]],
    pages_ok: IdSet,
    read: list[bytes],
    packs: dict[bytes, int],
    ref_number: int,
) -> Iterator[tuple[int, list[volmap.Entry], Locator]]:
    """``pages`` for the reader, without the entries of pages in ``pages_ok``; the page ids go to ``read``, the
    packs their chunks are in to ``packs`` (with ``ref_number`` when first met)."""
    for page_index, page_id, entries, locator in pages:
        read.append(page_id)
        if page_id in pages_ok:
            yield page_index, [], locator
            continue
        for _voff, _length, cid, _coff in entries:
            location = locator.get(cid)
            if location is not None and location.pack_id not in packs:
                packs[location.pack_id] = ref_number
        yield page_index, entries, locator


def _check_framing(
    repo: Repository, packs: dict[bytes, int], refs: list[BackupRef], report: VerifyReport, workers: int
) -> None:
    """Check the framing of ``packs`` (pack id -> the number of the first backup using it) on ``workers`` threads;
    damage is the first using backup's. A pack that is not there was reported by the chunk reads (or moved)."""

    def check(pack_id: bytes) -> str | None:
        try:
            repo.check_pack_framing(packfmt.pack_key(pack_id))
        except ObjectNotFound:
            return None
        except IntegrityError as err:
            return str(err)
        return None

    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="framing") as pool:
        ordered = sorted(packs)
        for pack_id, error in zip(ordered, pool.map(check, ordered), strict=True):
            if error is not None:
                key = packfmt.pack_key(pack_id)
                report.add_damage(refs[packs[pack_id]], _framing_damage(key, error), key)


def _framing_damage(key: str, error: str) -> str:
    return f"pack {key}: {error} (restores read its chunks through the index; its trailer cannot index it again)"


class _Verified:
    """The chunk ids a full verify has checked: a byte per entry of the chunk index (version 1: its pages resolve
    chunks there; ``table()`` returns it, None for version 2), else an ``IdSet`` (~40 bytes per id). The reader's
    threads ``add`` (to a queue); the thread asking ``in`` moves them over first, so only it writes. Asked only
    after a page was read, so the version 1 index is loaded by then (``table()`` reads nothing)."""

    def __init__(self, table: Callable[[], PackTable | None]) -> None:
        self._get_table = table
        self._table: PackTable | None = None
        self._marks = bytearray()
        self._ids = IdSet()  # ids the table lacks
        self._new: deque[bytes] = deque()
        self._added = False

    def add(self, cid: bytes) -> None:
        self._new.append(cid)
        self._added = True

    def __contains__(self, cid: bytes) -> bool:
        if self._get_table is not None:
            self._table, self._get_table = self._get_table(), None
            self._marks = bytearray(len(self._table.pack_of)) if self._table is not None else bytearray()
        while self._new:
            new = self._new.popleft()
            n = self._entry(new)
            if n >= 0:
                self._marks[n] = 1
            else:
                self._ids.add(new)
        n = self._entry(cid)
        return bool(self._marks[n]) if n >= 0 else cid in self._ids

    def _entry(self, cid: bytes) -> int:
        """The entry of the table that stands for ``cid`` (one of its copies, always the same), or -1."""
        return -1 if self._table is None else self._table.chunks.first(cid)

    def __bool__(self) -> bool:
        """Whether any chunk was added (else the reader need not look entries up)."""
        return self._added


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
    seen: IdSet | None = None,
) -> Iterator[tuple[int, bytes, list[volmap.Entry], Locator]]:
    """Yield ``(page index, page id, entries, where their chunks are)`` for every page of a backup's map that reads and
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
            yield page_index, page_id, entries, locator


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

    ``progress(done, total)`` counts backups during the map checks, then bytes during the pack reads. Memory:
    about 80 bytes per referenced chunk (``_Used``), plus the chunk index for version 1 pages
    (``Repository.index``), plus ~60 bytes per pack holding referenced chunks.
    """
    if not 0.0 <= sample <= 1.0:
        raise UsageError(f"the sample must be a fraction between 0 and 1, not {sample}")
    started = time.monotonic()
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    report = VerifyReport(mode="sampled", sample=sample, seed=seed)
    used = _check_maps(repo, refs, report, progress)
    present = bytearray(len(used.packs))
    for key in repo.store.list(packfmt.PACK_PREFIX):
        p = used.packs.index(packfmt.pack_id_from_key(key))
        if p >= 0:
            present[p] = 1
    _follow_forwarding(repo, used, present)
    live = bytearray(b"\x01") * len(used)
    for u in range(len(used)):
        if not present[used.pack[u]]:
            live[u] = 0
            ref, offset, length = used.first_use(u)
            key = packfmt.pack_key(used.packs.id(used.pack[u]))
            error = (
                f"chunk {used.ids.id(u).hex()[:16]} is not in any pack of the repository (its pack {key} is missing)"
            )
            report.add_damage(ref, error, key, offset, length)
    report.chunks_referenced = sum(live)
    by_pack = _ByPack(used, live)
    weight = by_pack.weight
    holding = array("I", (p for p in range(len(used.packs)) if by_pack.count(p)))
    report.packs_total, report.stored_bytes = len(holding), sum(weight)
    chosen = _choose(sorted_by_id(used.packs, holding), weight, sample, seed)
    total = sum(weight[p] for p in chosen)
    done = 0
    for p, found in _read_packs(repo, chosen, by_pack, workers):
        report.packs_read += 1
        report.fetched_bytes += found.fetched
        report.chunks_verified += found.chunks
        report.warnings.extend(found.warnings)
        for cid, error in found.damaged:
            ref, offset, length = used.first_use(used.ids.index(cid))
            report.add_damage(ref, error, packfmt.pack_key(used.packs.id(p)), offset, length)
        if found.framing is not None:
            report.add_damage(by_pack.first_ref(p), found.framing, packfmt.pack_key(used.packs.id(p)))
        done += weight[p]
        if progress:
            progress(done, total)
    report.duration_s = round(time.monotonic() - started, 3)
    return report


class _Used:
    """Each referenced chunk id once (numbered in the order first used): where restores read it and its first use
    (the backup, volume offset and length). Columns: ~80 bytes per chunk id, ~40 per pack."""

    def __init__(self, refs: list[BackupRef]) -> None:
        self.refs = refs
        self.ids = IdSet()
        self.packs = IdSet()
        self.pack, self.offset, self.stored_len, self.raw_len = array("I"), array("Q"), array("I"), array("I")
        self.flags = bytearray()
        self.ref, self.voff, self.length = array("I"), array("Q"), array("Q")

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, cid: bytes) -> bool:
        return cid in self.ids

    def add(self, cid: bytes, location: ChunkLocation, ref: int, voff: int, length: int) -> None:
        self.ids.add(cid)
        self.pack.append(self.packs.add(location.pack_id))
        self.offset.append(location.offset)
        self.stored_len.append(location.stored_len)
        self.raw_len.append(location.raw_len)
        self.flags.append(location.flags)
        self.ref.append(ref)
        self.voff.append(voff)
        self.length.append(length)

    def move(self, u: int, location: ChunkLocation) -> None:
        """Chunk ``u`` is read at ``location`` (where a prune's repacking moved it)."""
        self.pack[u] = self.packs.add(location.pack_id)
        self.offset[u], self.stored_len[u], self.raw_len[u] = location.offset, location.stored_len, location.raw_len
        self.flags[u] = location.flags

    def location(self, u: int) -> ChunkLocation:
        pack_id = self.packs.id(self.pack[u])
        return ChunkLocation(pack_id, self.offset[u], self.stored_len[u], self.raw_len[u], self.flags[u])

    def first_use(self, u: int) -> tuple[BackupRef, int, int]:
        return self.refs[self.ref[u]], self.voff[u], self.length[u]


def _follow_forwarding(repo: Repository, used: _Used, present: bytearray) -> None:
    """Chunks whose pack is missing are read where a prune's repacking moved them, if it did
    (``movers.repo.forwarding``); ``present`` (a byte per pack number) grows with the packs they moved to."""
    missing = [u for u in range(len(used)) if not present[used.pack[u]]]
    forwarding = load_forwarding(repo.store) if missing and repo.config.located else Forwarding()
    if not forwarding.tables:
        return
    listed = {packfmt.pack_id_from_key(key) for key in repo.store.list(packfmt.PACK_PREFIX)}
    for u in missing:
        moved, _via = forwarding.locate(used.ids.id(u), used.packs.id(used.pack[u]), listed)
        if moved is not None:
            used.move(u, moved)
            present.extend(bytes(len(used.packs) - len(present)))
            present[used.pack[u]] = 1


class _ByPack:
    """The live chunk numbers of ``used`` grouped by pack (4 bytes each), and each pack's referenced bytes."""

    def __init__(self, used: _Used, live: bytearray) -> None:
        self.used = used
        counts = array("I", bytes(4 * len(used.packs)))
        self.weight = array("Q", bytes(8 * len(used.packs)))
        for u, p in enumerate(used.pack):
            if live[u]:
                counts[p] += 1
                self.weight[p] += used.stored_len[u]
        self.start, at = array("I"), 0
        for n in counts:
            self.start.append(at)
            at += n
        self.start.append(at)
        self.order = array("I", bytes(4 * at))
        cursor = array("I", self.start)
        for u, p in enumerate(used.pack):
            if live[u]:
                self.order[cursor[p]] = u
                cursor[p] += 1

    def count(self, p: int) -> int:
        return self.start[p + 1] - self.start[p]

    def first_ref(self, p: int) -> BackupRef:
        """The first backup using a chunk of pack ``p`` (it holds some)."""
        return self.used.refs[min(self.used.ref[u] for u in self.order[self.start[p] : self.start[p + 1]])]

    def chunks(self, p: int) -> dict[bytes, ChunkLocation]:
        """Pack ``p``'s referenced chunk ids and where restores read them."""
        used = self.used
        return {used.ids.id(u): used.location(u) for u in self.order[self.start[p] : self.start[p + 1]]}


def _check_maps(repo: Repository, refs: list[BackupRef], report: VerifyReport, progress: Progress | None) -> _Used:
    """Check every backup's directories and pages; return each located chunk's first use (the backup,
    volume offset and length) and where it is read from."""
    used = _Used(refs)
    damaged_pages: dict[bytes, str] = {}
    seen = IdSet()  # pages checked: their chunks have a first use already
    for n, ref in enumerate(refs, 1):
        manifest = _read_manifest(repo, ref, report)
        if manifest is not None:
            report.backups_checked += 1
            for _index, _page_id, entries, locator in _map_pages(repo, ref, manifest, report, damaged_pages, seen):
                for voff, length, cid, _coff in entries:
                    if cid in used:
                        continue
                    location = locator.get(cid)
                    if location is not None:
                        used.add(cid, location, n - 1, voff, length)
                    else:
                        chunk = cid.hex()[:16]
                        report.add_damage(
                            ref, f"chunk {chunk} is not in any pack of the repository", None, voff, length
                        )
        if progress:
            progress(n, len(refs))
    return used


def _choose(pack_numbers: array, weight: array, sample: float, seed: int) -> array:
    """A seeded random subset of ``pack_numbers`` (in pack id order) whose weights add up to about ``sample`` of
    the total. The same packs for a seed as shuffling the sorted pack ids would choose."""
    if sample >= 1.0:
        return pack_numbers
    shuffled = array("I", pack_numbers)
    random.Random(seed).shuffle(shuffled)
    goal = sample * sum(weight[p] for p in pack_numbers)
    chosen, covered = array("I"), 0
    for p in shuffled:
        if covered >= goal:
            break
        chosen.append(p)
        covered += weight[p]
    return chosen


@dataclass
class _PackResult:
    fetched: int = 0
    chunks: int = 0
    damaged: list[tuple[bytes, str]] = field(default_factory=list)  # referenced chunk, error
    framing: str | None = None  # the pack's damaged framing
    warnings: list[str] = field(default_factory=list)


def _read_packs(repo: Repository, chosen: array, by_pack: _ByPack, workers: int):
    """Yield ``(pack number, _PackResult)`` for every chosen pack, read on ``workers`` threads (at most
    two packs per thread in memory)."""
    pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="verify")
    pending: dict[Future, int] = {}
    todo = iter(chosen)
    try:
        while True:
            while len(pending) < 2 * max(1, workers) and (p := next(todo, None)) is not None:
                pack_id = by_pack.used.packs.id(p)
                pending[pool.submit(_check_pack, repo, pack_id, by_pack.chunks(p))] = p
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
        trailer = packfmt.read_framing(lambda offset, n: view[offset : offset + n], len(data), repo.pack_seal(pack_id))
    except IntegrityError as err:
        result.framing = _framing_damage(key, str(err))
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
    intact = not (result.damaged or result.warnings or result.framing)
    if addressed and intact and hashlib.sha256(data).digest() != pack_id:
        result.warnings.append(f"pack {key} does not match its id (damage outside every chunk)")
    return result
