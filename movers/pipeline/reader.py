"""Fetching the chunks a backup's map references, verified, with bounded memory.

For each map page the reader groups the chunks it needs by pack, coalesces nearby chunks
of a pack into one ranged GET (gaps up to ``max_gap``, at most ``max_range`` bytes), then
decompresses and verifies every chunk. Restore and verify share it: the caller gets each
verified chunk with the map entries that use it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Container, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from movers.errors import DamagedData, IntegrityError, ObjectNotFound
from movers.repo import pack as packfmt
from movers.repo import volmap
from movers.repo.forwarding import MAX_HOPS, Forwarder
from movers.repo.index import ChunkLocation
from movers.repo.manifest import Manifest
from movers.repo.repository import Locator, Repository

MiB = 1 << 20
READ_AHEAD = 128 * MiB  # the default max_inflight: bytes of ranges submitted and not yet collected


@dataclass
class ReadPlan:
    """One ranged GET of a pack and the chunks inside it, with the entries using each."""

    pack_id: bytes
    offset: int
    length: int
    chunks: list[tuple[bytes, ChunkLocation, list[volmap.Entry]]]


def plan_page(
    entries: list[volmap.Entry], index: Locator, max_gap: int = 1 * MiB, max_range: int = 32 * MiB
) -> list[ReadPlan]:
    """Group a page's entries into coalesced pack range reads."""
    users: dict[bytes, list[volmap.Entry]] = defaultdict(list)
    for entry in entries:
        users[entry[2]].append(entry)
    located = []
    for cid, uses in users.items():
        loc = index.get(cid)
        if loc is None:
            voff, length = uses[0][0], uses[0][1]
            raise DamagedData(
                f"chunk {cid.hex()[:16]} at volume offset {voff} ({length} bytes) is not in any pack of the repository",
                offset=voff,
                length=length,
            )
        located.append((loc.pack_id, loc.offset, cid, loc, uses))
    located.sort(key=lambda x: (x[0], x[1]))
    plans: list[ReadPlan] = []
    for pack_id, offset, cid, loc, uses in located:
        last = plans[-1] if plans else None
        end = offset + loc.stored_len
        if (
            last is not None
            and last.pack_id == pack_id
            and offset - (last.offset + last.length) <= max_gap
            and end - last.offset <= max_range
        ):
            last.length = max(last.length, end - last.offset)
            last.chunks.append((cid, loc, uses))
        else:
            plans.append(ReadPlan(pack_id, offset, loc.stored_len, [(cid, loc, uses)]))
    return plans


ChunkSink = Callable[[bytes | memoryview, list[volmap.Entry]], None]


class Inflight:
    """The bytes a read holds in memory: the ranges submitted and not yet collected, and what the caller holds for
    a page until the last of the page's ranges is collected."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self._pages: dict[int, list[int]] = {}  # page index -> [ranges not yet collected, bytes held]

    def hold(self, page_index: int, held: int, ranges: int) -> None:
        """The caller holds ``held`` bytes for page ``page_index`` until its ``ranges`` ranges are collected."""
        if held and ranges:
            self._pages[page_index] = [ranges, held]
            self.bytes += held

    def room_for(self, length: int) -> bool:
        return self.bytes + length <= self.limit

    def submitted(self, length: int) -> None:
        self.bytes += length

    def collected(self, length: int, page_index: int) -> None:
        """A range of ``length`` bytes of page ``page_index`` is done (its chunks reached the sink)."""
        self.bytes -= length
        page = self._pages.get(page_index)
        if page is not None:
            page[0] -= 1
            if not page[0]:
                self.bytes -= self._pages.pop(page_index)[1]


class MapReader:
    """Reads every chunk of a backup in parallel and hands each verified chunk to a sink."""

    def __init__(self, repo: Repository, workers: int = 4, max_inflight: int = READ_AHEAD) -> None:
        self.repo = repo
        self.workers = workers
        self.max_inflight = max_inflight
        self.fetched_bytes = 0
        self.chunks_verified = 0
        self.forwarder = Forwarder(repo.store)
        self._lock = threading.Lock()

    def run(
        self,
        manifest: Manifest,
        sink: ChunkSink,
        on_page: Callable[[int, list], int | None] | None = None,
        skip: Container[bytes] | None = None,
        pages: Iterable[tuple[int, list[volmap.Entry], Locator]] | None = None,
    ) -> None:
        """Call ``sink(raw chunk, entries)`` for every chunk of ``manifest``'s map.

        ``on_page(page index, entries)`` is called (in the caller's thread) before the
        page's chunks are fetched; what it returns (if anything) is the bytes the caller holds
        until every chunk of that page has reached ``sink``, counted against ``max_inflight``
        until then. ``sink`` runs on worker threads; a raw chunk may be a view of the fetched
        range, valid only during the call. Raises ``DamagedData``
        (an ``IntegrityError``) naming the volume range of the first damaged chunk or chunk in no
        pack, ``IntegrityError`` for a damaged map. Chunks in ``skip`` are not fetched (verify uses it
        for chunks already checked). ``pages``: the ``(page index, entries, where their chunks are)`` to
        read instead of the whole map (verify walks and checks the map itself).
        """
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="fetch")
        pending: dict[Future, tuple[int, int]] = {}  # -> (range length, page index)
        inflight = Inflight(self.max_inflight)
        try:
            for page_index, entries, index in self.repo.iter_located_map(manifest) if pages is None else pages:
                held = on_page(page_index, entries) if on_page else None
                if skip:
                    entries = [e for e in entries if e[2] not in skip]
                plans = plan_page(entries, index)
                inflight.hold(page_index, held or 0, len(plans))
                for plan in plans:
                    while pending and not inflight.room_for(plan.length):
                        self._collect(pending, inflight, wait(pending, return_when=FIRST_COMPLETED).done)
                    pending[pool.submit(self.fetch_plan, manifest, plan, sink)] = (plan.length, page_index)
                    inflight.submitted(plan.length)
            while pending:
                self._collect(pending, inflight, wait(pending, return_when=FIRST_COMPLETED).done)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _collect(self, pending: dict[Future, tuple[int, int]], inflight: Inflight, done: set[Future]) -> None:
        """Forget the ``done`` fetches, raising the first one's error."""
        for fut in done:
            inflight.collected(*pending.pop(fut))
            fut.result()

    def fetch_plan(self, manifest: Manifest, plan: ReadPlan, sink: ChunkSink, hops: int = 0) -> None:
        """One ranged GET of ``plan``: each of its chunks decoded, verified and handed to ``sink`` (in this thread),
        following a pack a prune repacked; ``DamagedData`` as ``run`` says. Counts ``fetched_bytes``."""
        key = packfmt.pack_key(plan.pack_id)
        try:
            data = self.repo.store.get_range(key, plan.offset, plan.length)
        except ObjectNotFound:
            moved = self.forwarder.table(plan.pack_id) if hops < MAX_HOPS else {}
            if all(cid in moved for cid, _loc, _uses in plan.chunks):  # repacked by a prune: follow it
                uses = [u for _cid, _loc, chunk_uses in plan.chunks for u in chunk_uses]
                for forwarded in plan_page(uses, moved):
                    self.fetch_plan(manifest, forwarded, sink, hops + 1)
                return
            voff, length = min((u[0], u[1]) for _cid, _loc, uses in plan.chunks for u in uses)
            raise DamagedData(
                f"volume {manifest.volume.id} backup {manifest.backup_id}: data at volume offset {voff}"
                f" ({length} bytes) is not in any pack of the repository (its pack {key} is missing)",
                offset=voff,
                length=length,
                key=key,
            ) from None
        with self._lock:  # fetched whether or not it verifies
            self.fetched_bytes += plan.length
        view = memoryview(data)
        for cid, loc, uses in plan.chunks:
            rel = loc.offset - plan.offset
            try:
                raw = self.repo.decode_chunk(
                    plan.pack_id, view[rel : rel + loc.stored_len], loc.flags, loc.raw_len, cid
                )
            except IntegrityError as err:
                voff, length = min((u[0], u[1]) for u in uses)
                raise DamagedData(
                    f"volume {manifest.volume.id} backup {manifest.backup_id}: data at volume offset {voff}"
                    f" ({length} bytes) is damaged ({err}; pack {key})",
                    offset=voff,
                    length=length,
                    key=key,
                ) from None
            sink(raw, uses)
        with self._lock:
            self.chunks_verified += len(plan.chunks)
