"""Writes the map of a new backup on top of its parent's, one page at a time.

Pages must be finished in ascending order. A page that is never finished keeps the parent's
page (shared by id) or is a hole page when there is no parent. Memory holds one page's
entries plus one slot per page.
"""

from __future__ import annotations

from collections.abc import Sequence

from movers.repo import volmap
from movers.repo.manifest import MapRef
from movers.repo.repository import Repository


class MapWriter:
    def __init__(self, repo: Repository, capacity: int, parent_slots: Sequence[tuple[bytes, int]] | None) -> None:
        self.repo = repo
        self.capacity = capacity
        self.page_size = repo.config.page_size
        self.n_pages = max(1, -(-capacity // self.page_size))
        slots = list(parent_slots or [])[: self.n_pages]
        slots += [(volmap.NO_PAGE, 0)] * (self.n_pages - len(slots))
        self.slots = slots
        self.parent_slots = list(slots)
        # Parent pages that reach past a shrunken capacity must be rewritten (clipped).
        self._clip_last = bool(parent_slots) and len(parent_slots) >= self.n_pages and capacity % self.page_size != 0
        self.bytes_written = 0
        self.objects_written = 0

    def page_range(self, page_index: int) -> tuple[int, int]:
        start = page_index * self.page_size
        return start, min(start + self.page_size, self.capacity)

    def parent_entries(self, page_index: int) -> list[volmap.Entry]:
        return self.repo.read_page(self.parent_slots[page_index][0])

    def finish_page(self, page_index: int, covered: Sequence[volmap.Range], new: Sequence[volmap.Entry]) -> None:
        """Overlay ``new`` (inside the ``covered`` ranges) on the parent's page."""
        start, end = self.page_range(page_index)
        entries = volmap.overlay(self.parent_entries(page_index), covered, new)
        if end - start < self.page_size:
            entries = _clip(entries, end)
        volmap.check_entries(entries, start, end)
        self._store_page(page_index, entries)

    def _store_page(self, page_index: int, entries: list[volmap.Entry]) -> None:
        if not entries:
            self.slots[page_index] = (volmap.NO_PAGE, 0)
            return
        start, end = self.page_range(page_index)
        page_id, data = volmap.encode_page(start, end - start, entries)
        self._put(page_id, data)
        self.slots[page_index] = (page_id, len(entries))

    def _put(self, object_id: bytes, data: bytes) -> None:
        written = self.repo.put_once(volmap.map_key(object_id), data)
        self.bytes_written += written
        self.objects_written += int(written > 0)

    def finish(self) -> MapRef:
        """Write the directories and return the map reference for the manifest."""
        last = self.n_pages - 1
        if self._clip_last and self.slots[last] == self.parent_slots[last]:
            start, end = self.page_range(last)
            self._store_page(last, _clip(self.parent_entries(last), end))
        fanout = volmap.DIR_FANOUT
        dirs: list[str | None] = []
        for first in range(0, self.n_pages, fanout):
            group = self.slots[first : first + fanout]
            if all(pid == volmap.NO_PAGE for pid, _ in group):
                dirs.append(None)
                continue
            dir_id, data = volmap.encode_dir(group)
            self._put(dir_id, data)
            dirs.append(dir_id.hex())
        return MapRef(self.page_size, fanout, dirs, sum(n for _, n in self.slots))


def _clip(entries: list[volmap.Entry], end: int) -> list[volmap.Entry]:
    out = []
    for voff, length, cid, coff in entries:
        if voff >= end:
            break
        out.append((voff, min(length, end - voff), cid, coff))
    return out
