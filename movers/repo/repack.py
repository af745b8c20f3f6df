"""Repacking partly used packs (format version 2), for prune.

A pack whose chunks no page names any more is deleted whole; a pack of which pages still name a few
chunks stays, dead bytes and all. Prune repacks such a pack when at least ``DEAD_FRACTION`` of its
stored bytes are dead: it reads and verifies the chunks pages name, copies their stored bytes
unchanged into new packs (an encrypted repository's sealed again with the new pack's key), uploads
those, then writes one forwarding object for each old pack (``movers.repo.forwarding``). From then on
the old pack is unreferenced: it is freed like any other after the grace, and a reader that finds it
missing follows its forwarding object.

Crash safety: new packs are uploaded before any forwarding object names them (a crash in between
leaves unreferenced packs, freed after the grace); the old pack is deleted only by a later step of
prune, after the forwarding object exists.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from movers.errors import IntegrityError, ObjectNotFound
from movers.repo import pack
from movers.repo.chunks import decode_chunk
from movers.repo.forwarding import Table, decode_forwarding, encode_forwarding
from movers.repo.pack import PackBuilder, PackEntry
from movers.repo.repository import Repository

DEAD_FRACTION = 0.5  # a kept pack with at least this share of its stored bytes dead is repacked
MAX_BYTES = 4 << 30  # default bound of the bytes one prune copies
_MAX_GAP = 1 << 20  # live chunks of a pack closer than this are read in one ranged GET

log = logging.getLogger(__name__)


def choose(candidates: Mapping[bytes, tuple[list[PackEntry], int]], max_bytes: int) -> dict[bytes, list[PackEntry]]:
    """Of the partly used packs (pack id -> (live entries, stored bytes of the pack)), those at least
    ``DEAD_FRACTION`` dead, emptiest first, while the live bytes to copy stay within ``max_bytes``."""
    ranked = []
    for pid, (live, total) in candidates.items():
        copy = sum(e.stored_len for e in live)
        if total and total - copy >= DEAD_FRACTION * total:
            ranked.append((copy / total, pid, live, copy))
    chosen: dict[bytes, list[PackEntry]] = {}
    budget = max_bytes
    for _share, pid, live, copy in sorted(ranked):
        if copy > budget:
            break
        chosen[pid] = live
        budget -= copy
    return chosen


@dataclass
class RepackResult:
    new_packs: dict[bytes, list[PackEntry]] = field(default_factory=dict)
    moved: dict[bytes, tuple[str, Table]] = field(default_factory=dict)  # old pack -> forwarding key, table
    bytes_copied: int = 0
    skipped: list[str] = field(default_factory=list)  # packs left as they are: a live chunk did not verify


def _runs(entries: list[PackEntry]) -> Iterable[list[PackEntry]]:
    run: list[PackEntry] = []
    for e in sorted(entries, key=lambda e: e.offset):
        if run and e.offset - (run[-1].offset + run[-1].stored_len) > _MAX_GAP:
            yield run
            run = []
        run.append(e)
    if run:
        yield run


def _read_live(repo: Repository, pid: bytes, live: list[PackEntry]) -> list[tuple[PackEntry, bytes]]:
    """The stored bytes of ``live`` chunks of pack ``pid`` (unsealed), each verified against its id."""
    key = pack.pack_key(pid)
    out = []
    for run in _runs(live):
        start = run[0].offset
        view = memoryview(repo.store.get_range(key, start, run[-1].offset + run[-1].stored_len - start))
        for e in run:
            stored = repo.open_chunk(pid, e.chunk_id, view[e.offset - start : e.offset - start + e.stored_len])
            decode_chunk(stored, e.flags, e.raw_len, e.chunk_id, repo.content_hash)
            out.append((e, bytes(stored)))
    return out


def repack(
    repo: Repository, thin: Mapping[bytes, list[PackEntry]], alive: Callable[[], None] = lambda: None
) -> RepackResult:
    """Copy the ``thin`` packs' live chunks (pack id -> entries of the chunks pages name) into new packs, then write
    a forwarding object for each old pack. ``alive()`` is called before each write (prune's lock check)."""
    result = RepackResult()
    target = repo.config.pack_target
    builder: PackBuilder | None = None
    placed: dict[bytes, list[tuple[bytes, PackEntry]]] = {}  # old pack -> (new pack, entry) of each moved chunk

    def flush() -> None:
        nonlocal builder
        if builder is None or not len(builder):
            return
        new_id, data, entries = builder.finish()
        alive()
        repo.put_once(pack.pack_key(new_id), data)
        result.new_packs[new_id] = entries
        builder = None

    for pid, live in sorted(thin.items()):
        try:
            chunks = _read_live(repo, pid, live)
        except (IntegrityError, ObjectNotFound) as err:
            log.warning("prune: not repacking pack %s: %s", pack.pack_key(pid), err)
            result.skipped.append(pack.pack_key(pid))
            continue
        for e, stored in chunks:
            if builder is None:
                builder = repo.new_pack(os.urandom(32))
            placed.setdefault(pid, []).append((builder.pack_id, builder.add(e.chunk_id, stored, e.raw_len, e.flags)))
            result.bytes_copied += len(stored)
            if builder.size >= target:
                flush()
    flush()
    for pid, moves in placed.items():  # every new pack exists now
        by_pack: dict[bytes, list[PackEntry]] = {}
        for new_id, entry in moves:
            by_pack.setdefault(new_id, []).append(entry)
        key, data = encode_forwarding(pid, sorted(by_pack.items()))
        alive()
        repo.put_once(key, data)
        result.moved[pid] = (key, decode_forwarding(data, key))
    return result
