"""Prune's mark: what the manifests reference, as bits on a ``PackTable`` (a byte per entry, a byte per pack).

``References.mark`` reads every manifest, its directories and its pages (a page shared by several backups
once) and marks every entry of each referenced chunk id (all its copies), the map objects referenced (an
``IdSet``) and the referenced chunk ids no entry has (another ``IdSet``: normally none). Version 1 also decides
there, chunk id by chunk id, which copy stays when only one pack may hold it (``HOME``, or ``NO_HOME`` when none
may: every copy stays); the ids with copies in several such packs are left to ``movers.repo.prune`` (``split``).
Version 2 (located pages) marks the copy a page names (``PINNED``) and the pack it names (``NAMED``); for a chunk
a prune's repacking moved (``movers.repo.forwarding``), the copy it moved to, and it records which forwarding was
followed.
A second ``mark`` (``again=True``: manifests committed while prune waited for backups) marks ``NEW_REF`` and
``NEW_NAMED`` only.

Memory: a byte per entry and per pack, 32 + ~7 bytes per referenced map object and per referenced chunk id
stored nowhere, and one page's decoded entries at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from movers.errors import NotFoundError
from movers.repo import volmap
from movers.repo.forwarding import Forwarding
from movers.repo.ids import ID_LEN, IdSet
from movers.repo.index import ChunkLocation
from movers.repo.packtable import PackTable
from movers.repo.repository import Repository

# entry bits
REF = 1  # a manifest references its chunk id (every copy is marked)
HOME = 2  # version 1: the copy that stays
NO_HOME = 4  # version 1: referenced, and no candidate pack holds a copy: every copy stays
PINNED = 8  # version 2: a located page names this copy
NEW_REF = 16  # referenced by a manifest marked again (committed while prune waited)
# pack bits
CANDIDATE = 1  # version 1: may hold the copy that stays (present, readable, not listed by the previous state)
NAMED = 2  # version 2: a located page names it
NEW_NAMED = 4  # named by a manifest marked again


class References:
    """What the manifests reference, marked on ``table`` (finished). ``pack`` bits: the caller sets
    ``CANDIDATE`` before the first ``mark`` (version 1); ``mark`` sets the others."""

    def __init__(
        self,
        table: PackTable,
        located: bool,
        forwarding: Forwarding | None = None,
        present: Collection[bytes] = frozenset(),
    ) -> None:
        self.table = table
        self.located = located
        self.forwarding = forwarding  # version 2: a chunk a page names is pinned where it was moved to, if it was
        self.present = present  # the pack ids that exist (where forwarding may lead)
        self.forwarded: set[bytes] = set()  # packs whose forwarding objects pages need
        self.new_forwarded: set[bytes] = set()  # the same, for the manifests marked again
        self.entry = bytearray(len(table.pack_of))
        self.pack = bytearray(len(table))
        self.maps = IdSet()  # referenced pages and directories
        self.new_maps = IdSet()  # the same, of the manifests marked again
        self.missing = IdSet()  # referenced chunk ids no entry has
        self.chunks = 0  # referenced chunk ids some entry has
        self.split: list[bytes] = []  # version 1: referenced chunk ids with copies in several candidate packs

    @property
    def chunks_referenced(self) -> int:
        return self.chunks + len(self.missing)

    def mark(
        self,
        repo: Repository,
        progress: Callable[[int, int], None] | None = None,
        skip: Collection[str] = (),
        again: bool = False,
    ) -> tuple[int, set[str]]:
        """Mark what every manifest but ``skip`` (keys) references; return how many were marked (not forgotten
        meanwhile) and the keys of the manifests listed."""
        maps = self.new_maps if again else self.maps
        refs = [ref for ref in repo.list_backups() if ref.key not in skip]
        marked = 0
        for n, ref in enumerate(refs, 1):
            if progress:
                progress(n - 1, len(refs))
            try:
                manifest = repo.read_manifest(ref.volume, ref.backup_id)
            except NotFoundError:  # forgotten while we listed: references nothing any more
                continue
            for dir_hex in manifest.map.dirs:
                dir_id = None if dir_hex is None else bytes.fromhex(dir_hex)
                if dir_id is not None and len(dir_id) == ID_LEN:  # another length: page_slots says it is missing
                    maps.add(dir_id)
            for page_id, _count in repo.page_slots(manifest):
                if page_id == volmap.NO_PAGE:
                    continue
                known = len(maps)
                if maps.add(page_id) < known:  # read already
                    continue
                entries, _digests, locations = repo.read_located_page(page_id)
                self._page({e[2] for e in entries}, locations or {}, again)
            marked += 1
        if progress:
            progress(len(refs), len(refs))
        return marked, {ref.key for ref in refs}

    def _page(self, used: set[bytes], locations: dict[bytes, ChunkLocation], again: bool) -> None:
        find = self.table.chunks.find
        pins = self.located and locations
        numbers: dict[bytes, int] = {}  # pack id -> number, of the packs this page names
        for cid in used | locations.keys() if pins else used:
            copies = find(cid)
            if cid in used:
                if again:
                    self._mark_all(copies, NEW_REF)
                else:
                    self._reference(cid, copies)
            if pins and cid in locations:
                pack_id = locations[cid].pack_id
                if self.forwarding and self.forwarding.tables:
                    moved, via = self.forwarding.locate(cid, pack_id, self.present)
                    if moved is not None:
                        pack_id = moved.pack_id
                        (self.new_forwarded if again else self.forwarded).update(via)
                p = numbers.get(pack_id)
                if p is None:
                    p = numbers[pack_id] = self.table.packs.index(pack_id)
                if p >= 0:  # else a pack no index lists and packs/ lacks: nothing to keep
                    self._pin(p, copies, again)

    def _mark_all(self, copies: Iterable[int], bit: int) -> None:
        entry = self.entry
        for n in copies:
            entry[n] |= bit

    def _reference(self, cid: bytes, copies: list[int]) -> None:
        if not copies:
            self.missing.add(cid)
            return
        entry = self.entry
        if entry[copies[0]] & REF:
            return
        self.chunks += 1
        if self.located:
            self._mark_all(copies, REF)
            return
        pack_of, pack = self.table.pack_of, self.pack
        holders = {pack_of[n] for n in copies if pack[pack_of[n]] & CANDIDATE}
        if len(holders) > 1:
            self._mark_all(copies, REF)
            self.split.append(cid)
        elif holders:
            [home] = holders
            for n in copies:
                entry[n] |= REF | HOME if pack_of[n] == home else REF
        else:
            self._mark_all(copies, REF | NO_HOME)

    def _pin(self, p: int, copies: list[int], again: bool) -> None:
        if again:
            self.pack[p] |= NEW_NAMED
            return
        self.pack[p] |= NAMED
        pack_of, entry = self.table.pack_of, self.entry
        for n in copies:
            if pack_of[n] == p:
                entry[n] |= PINNED
