"""Forwarding objects: where the chunks of a repacked pack went (format version 2).

A version 2 map page names the pack each of its chunks is stored in, and pages are immutable. When
prune repacks a mostly dead pack it copies the chunks that pages still name into a new pack, then
writes a forwarding object for the old pack, and only then lets the old pack go (through the grace of
any unreferenced object). A reader that finds a named pack missing reads the pack's forwarding
objects and follows them; a moved chunk may be moved again, so hops are followed (at most
``MAX_HOPS``). Prune keeps a forwarding object while some page names its pack (directly or through
an earlier hop) and frees it, after the grace, once none does.

Key: ``moved/<old pack id>/<sha256 of the object>`` (an old pack may be forwarded by more than one
object: a later prune may move chunks that an earlier one did not). Content: an index object
(``movers.repo.index``) listing the new packs and the entries of the chunks that moved there.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from movers.errors import ObjectNotFound
from movers.repo.index import ChunkLocation, decode_index, encode_index
from movers.repo.pack import PackEntry
from movers.repo.store.base import Store

MOVED_PREFIX = "moved/"
MAX_HOPS = 16

Table = dict[bytes, ChunkLocation]  # chunk id -> where it moved


def forwarding_prefix(pack_id: bytes) -> str:
    """The key prefix of the forwarding objects of pack ``pack_id``."""
    return f"{MOVED_PREFIX}{pack_id.hex()}/"


def encode_forwarding(old_pack: bytes, packs: Iterable[tuple[bytes, list[PackEntry]]]) -> tuple[str, bytes]:
    """``(key, bytes)`` of a forwarding object saying that the chunks of ``packs`` (new pack id, entries)
    moved there from ``old_pack``."""
    _key, data = encode_index(packs)
    return forwarding_prefix(old_pack) + hashlib.sha256(data).hexdigest(), data


def old_pack_of(key: str) -> bytes | None:
    """The pack a forwarding object's key forwards, or None for a key that is not one."""
    parts = key[len(MOVED_PREFIX) :].split("/")
    try:
        return bytes.fromhex(parts[0]) if key.startswith(MOVED_PREFIX) and len(parts) == 2 else None
    except ValueError:
        return None


def decode_forwarding(data: bytes, key: str) -> Table:
    """The chunk id -> new location table of one forwarding object (``IntegrityError`` when damaged)."""
    return {
        e.chunk_id: ChunkLocation(pack_id, e.offset, e.stored_len, e.raw_len, e.flags)
        for pack_id, entries in decode_index(data, key)
        for e in entries
    }


def read_table(store: Store, pack_id: bytes) -> Table:
    """Everything the forwarding objects of ``pack_id`` say (empty: the pack was never forwarded)."""
    table: Table = {}
    for key in store.list(forwarding_prefix(pack_id)):
        table.update(decode_forwarding(store.get(key), key))
    return table


class Forwarder:
    """The forwarding tables a reader needed, each read once (thread-safe)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._tables: dict[bytes, Table] = {}
        self._lock = threading.Lock()

    def table(self, pack_id: bytes) -> Table:
        with self._lock:
            cached = self._tables.get(pack_id)
        if cached is None:
            cached = read_table(self.store, pack_id)
            with self._lock:
                self._tables[pack_id] = cached
        return cached


@dataclass
class Forwarding:
    """Every forwarding object of a repository (prune and verify read them all): the tables by old pack id, and
    their keys."""

    tables: dict[bytes, Table] = field(default_factory=dict)
    keys: dict[bytes, list[str]] = field(default_factory=dict)

    def add(self, old_pack: bytes, key: str, table: Table) -> None:
        self.tables.setdefault(old_pack, {}).update(table)
        self.keys.setdefault(old_pack, []).append(key)

    def locate(
        self, cid: bytes, pack_id: bytes, present: Collection[bytes]
    ) -> tuple[ChunkLocation | None, list[bytes]]:
        """Where chunk ``cid``, stored in pack ``pack_id`` as a page names it, can be read now (None: where the page
        says), and the packs whose forwarding was followed to get there.

        The chunk is followed through the forwarding tables to the last pack on its way that still exists
        (``present``): a forwarded copy counts only where it can be read. A chunk on no existing pack stays
        where the page names it (damage, for verify to report).
        """
        via, hops = [pack_id], []
        for _ in range(MAX_HOPS):
            moved = self.tables.get(via[-1], {}).get(cid)
            if moved is None:
                break
            hops.append(moved)
            via.append(moved.pack_id)
        for n in range(len(hops), 0, -1):
            if hops[n - 1].pack_id in present:
                return hops[n - 1], via[:n]
        return None, []


def load_forwarding(store: Store) -> Forwarding:
    """Read every forwarding object (``moved/``); ``IntegrityError`` when one is damaged (a prune that cannot
    see where chunks went must not sweep)."""
    found = Forwarding()
    for key in store.list(MOVED_PREFIX):
        old = old_pack_of(key)
        if old is None:
            continue  # not ours: leave it alone
        try:
            found.add(old, key, decode_forwarding(store.get(key), key))
        except ObjectNotFound:
            continue  # only prunes delete these, one at a time: this is a reader beside one
    return found


def resolve(
    pinned: Mapping[bytes, Collection[bytes]], present: Collection[bytes], forwarding: Forwarding
) -> tuple[dict[bytes, set[bytes]], set[bytes]]:
    """Which chunks are live in which pack (``Forwarding.locate`` of every chunk pages name; ``pinned``: pack id
    named -> chunk ids), and the old packs whose forwarding objects are still needed."""
    live: dict[bytes, set[bytes]] = {}
    needed: set[bytes] = set()
    for pid, cids in pinned.items():
        for cid in cids:
            at, via = forwarding.locate(cid, pid, present)
            needed.update(via)
            live.setdefault(pid if at is None else at.pack_id, set()).add(cid)
    return live, needed
