"""Keeping a backup's new objects off the keys a prune may delete.

A backup treats every key the newest prune state lists (``movers.repo.prunestate``) as absent.
Objects are content-addressed, so a backup that re-creates such an object byte for byte (the
retry of a crashed backup rebuilds the same first pack and the same pages) would get the same
key: the store already holds it, ``put_once`` skips the upload, and the backup would reference
an object a prune is free to delete. These helpers give the new object another key instead:

* a pack gets one extra 16-byte chunk of random bytes (a valid chunk no map references: 16
  dead bytes), so its bytes and id differ;
* a page gets one of its new entries split in two at a different point (the same bytes
  restore, the page's bytes and id differ).

A directory whose key is listed is only reported: its pages are the backup's, and a page the
backup re-created was already given another id, so this needs a listed directory whose pages
are all still referenced elsewhere.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from itertools import count

from movers.repo import pack as packfmt
from movers.repo import volmap
from movers.repo.chunks import RAW
from movers.repo.contenthash import ContentHash
from movers.repo.mapwriter import DigestUpdate, MapWriter

log = logging.getLogger(__name__)
PADDING_LEN = 16


def distinct_pack(
    pack_id: bytes,
    data: bytes,
    entries: list[packfmt.PackEntry],
    garbage: Collection[str],
    content_hash: ContentHash,
) -> tuple[bytes, bytes, list[packfmt.PackEntry]]:
    """``(pack id, bytes, entries)``: the pack as built, or rebuilt with a padding chunk (named by the repository's
    ``content_hash``) while its key is listed."""
    while packfmt.pack_key(pack_id) in garbage:
        log.info("pack %s is listed by prune: writing it with a padding chunk", pack_id.hex()[:16])
        builder = packfmt.PackBuilder()
        for e in entries:
            builder.add(e.chunk_id, data[e.offset : e.offset + e.stored_len], e.raw_len, e.flags)
        padding = os.urandom(PADDING_LEN)
        builder.add(content_hash.chunk_id(padding), padding, PADDING_LEN, RAW)
        pack_id, data, entries = builder.finish()
    return pack_id, data, entries


def split_entry(entries: Sequence[volmap.Entry], at: int) -> list[volmap.Entry] | None:
    """``entries`` with the first entry longer than ``at`` split at ``at`` bytes, or None if none is."""
    for i, (voff, length, cid, coff) in enumerate(entries):
        if length > at:
            return [*entries[:i], (voff, at, cid, coff), (voff + at, length - at, cid, coff + at), *entries[i + 1 :]]
    return None


def finish_page_fresh(
    mapw: MapWriter,
    page: int,
    covered: Sequence[volmap.Range],
    new: Sequence[volmap.Entry],
    updates: Sequence[DigestUpdate],
    garbage_maps: Collection[str],
    locations: volmap.Locations | None = None,
) -> None:
    """``mapw.finish_page``, redone with one of the ``new`` entries split while the page's key is listed.

    A page with no new entry to split (only holes punched into the parent's) keeps its key and
    is logged: such a page equals a listed one only if the parent's page minus the same ranges
    was written before and then abandoned.
    """
    mapw.finish_page(page, covered, new, updates, locations)
    for at in count(512, 512):
        if volmap.map_key(mapw.slots[page][0]) not in garbage_maps:
            return
        varied = split_entry(new, at)
        if varied is None:
            log.warning(
                "map page %s of this backup is listed by prune and has no entry to vary", mapw.slots[page][0].hex()[:16]
            )
            return
        mapw.finish_page(page, covered, varied, updates, locations)


def listed_dirs(dirs: Sequence[str | None], garbage_maps: Collection[str]) -> list[str]:
    """The directory ids of a map reference whose keys are listed by prune (to report)."""
    return [d for d in dirs if d is not None and volmap.map_key(bytes.fromhex(d)) in garbage_maps]
