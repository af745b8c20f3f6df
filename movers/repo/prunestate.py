"""Prune state objects: what the last prune found unreferenced, read by the next prune and by backups.

A state object is JSON at ``prune/<UTC time>-<hash>``::

    {"format": "cbt-mover-prune-state", "version": 1, "written": <unix time>,
     "first_unreferenced": {object key: unix time first seen unreferenced, ...},
     "deleting": [object keys this prune deletes after writing the state, ...],
     "redundant": [keys of first_unreferenced that are packs of duplicate copies, ...]}

``redundant`` (optional, like ``deleting``) names the keys of ``first_unreferenced`` that are packs whose
referenced chunks all have a copy elsewhere that stays (their time is when they were first seen so).
``deleting`` is optional (states of older writers lack it). The *newest readable* state is the
one that counts: prune carries its first-seen times over, and a backup treats every key it lists
(``PruneState.garbage``) as absent (see ``movers.repo.prune``, "Backups never newly reference
what a prune may delete"). Both read it with ``read_state`` so they agree on which one that is.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

from movers.errors import ObjectNotFound, TransientStoreError
from movers.repo.store.base import Store

log = logging.getLogger(__name__)

STATE_PREFIX = "prune/"
STATE_FORMAT = "cbt-mover-prune-state"
_RELISTS = 5


@dataclass
class PruneState:
    """One decoded state object (empty when the repository has none)."""

    key: str | None = None
    first_unreferenced: dict[str, float] = field(default_factory=dict)
    deleting: list[str] = field(default_factory=list)
    redundant: frozenset[str] = frozenset()  # keys of first_unreferenced that are packs of duplicate copies

    @property
    def garbage(self) -> set[str]:
        """Every key the state lists: objects a prune may delete, so no backup may newly reference them."""
        return set(self.first_unreferenced) | set(self.deleting)


def decode_state(key: str, data: bytes) -> PruneState:
    """Decode a state object; ``ValueError`` when it is not one."""
    try:
        doc = json.loads(data)
        if doc.get("format") != STATE_FORMAT:
            raise ValueError("unknown format")
        first = {str(k): float(v) for k, v in doc["first_unreferenced"].items()}
        deleting = [str(k) for k in doc.get("deleting", [])]
        redundant = frozenset(str(k) for k in doc.get("redundant", []))
    except (TypeError, KeyError, AttributeError, UnicodeDecodeError) as err:
        raise ValueError(f"malformed prune state: {err}") from None
    return PruneState(key, first, deleting, redundant)


def encode_state(
    written: float, first_unreferenced: dict[str, float], deleting: list[str], redundant: list[str] = ()
) -> tuple[str, bytes]:
    """``(key, bytes)`` of a new state object; keys sort by ``written``."""
    data = json.dumps(
        {
            "format": STATE_FORMAT,
            "version": 1,
            "written": written,
            "first_unreferenced": first_unreferenced,
            "deleting": sorted(deleting),
            "redundant": sorted(redundant),
        },
        sort_keys=True,
    ).encode()
    stamp = datetime.fromtimestamp(written, UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{STATE_PREFIX}{stamp}-{hashlib.sha256(data).hexdigest()[:16]}", data


def read_state(store: Store) -> tuple[list[str], PruneState]:
    """All state keys (oldest first) and the newest *readable* state.

    Unreadable states are skipped with a warning (the next older one counts). When the newest
    state vanishes while being read, a prune has just replaced it (new states are written
    before old ones are deleted), so the listing is taken again rather than falling back to an
    older state that would miss what the newer one lists. ``TransientStoreError`` if that keeps
    happening.
    """
    for _ in range(_RELISTS):
        keys = list(store.list(STATE_PREFIX))
        for key in reversed(keys):
            try:
                return keys, decode_state(key, store.get(key))
            except ObjectNotFound:
                break  # replaced by a newer state: list again
            except ValueError as err:
                log.warning("ignoring unreadable prune state %s: %s", key, err)
        else:
            return keys, PruneState()
    raise TransientStoreError(f"prune states under {STATE_PREFIX} kept vanishing while being read; retry")


def garbage_keys(store: Store) -> set[str]:
    """The keys the newest prune state lists (``PruneState.garbage``): what a backup must treat as absent."""
    return read_state(store)[1].garbage
