"""The prune lock: at most one prune of a repository deletes at a time, whoever started it (CLI or flow).

The lock is a ``movers.repo.leases.Lease`` under its own prefix, ``locks/prune-<UTC time>-<random>-<sequence>``
(a new key per refresh, so no key is ever written twice, as object-locked buckets need): refreshed every
``REFRESH_S``, deleted at the end; one not refreshed for ``TTL_S`` is a crashed prune's and is ignored (taken
over; ``sweep_expired`` deletes it later). A holder that could not refresh for ``TTL_S - REFRESH_S`` stops
deleting (``PruneLock.check``). Its document gets ``"held": true`` once the prune won.

Taking it needs no conditional put, only the store's read-after-write listing:

1. write a lock object (a *candidate*) under an id that sorts by the writer's clock;
2. list the live locks: another one *held*, or another candidate with a smaller id (older), means this one
   lost; otherwise wait (at most ``SETTLE_S``) until every other candidate is gone or held: one held means
   lost, all gone means won;
3. won: write ``held``; lost: delete the candidate and raise ``PruneLockedError`` (exit code 5), or with a
   ``wait_s`` poll (without writing) until no live lock is left and try again.

Why two prunes never both win, ``P`` and ``Q`` with ids ``P < Q``: if ``Q``'s listing showed ``P``, ``Q`` lost.
Otherwise ``P`` was written after ``Q`` listed, so ``P``'s listing shows ``Q``; ``P`` then waits until ``Q`` is
gone (ended: no overlap) or held (then ``P`` lost). Two candidates that see each other: the older wins, at
once. A candidate that sees no older one decides without waiting for an older one, so waits end.
"""

from __future__ import annotations

import logging
import secrets
import time
from datetime import UTC, datetime

from movers.errors import PruneLockedError
from movers.repo.leases import REFRESH_S, TTL_S, Lease, live_leases
from movers.repo.store.base import Store

log = logging.getLogger(__name__)

LOCK_PREFIX = "locks/prune-"
SETTLE_S = 30.0  # how long a candidate waits for younger candidates to decide (one listing and one put each)
POLL_S = 0.5


class PruneLock:
    """Holds the repository's prune lock (a context manager); ``PruneLockedError`` when another prune has it.

    ``wait_s``: how long to wait for another prune to finish before giving up (0: give up at once).
    """

    def __init__(
        self,
        store: Store,
        what: str = "prune",
        wait_s: float = 0.0,
        ttl_s: float = TTL_S,
        refresh_s: float = REFRESH_S,
        settle_s: float = SETTLE_S,
        poll_s: float = POLL_S,
    ) -> None:
        self.store, self.what, self.wait_s = store, what, wait_s
        self.ttl_s, self.refresh_s, self.settle_s, self.poll_s = ttl_s, refresh_s, settle_s, poll_s
        self.lease: Lease | None = None

    def _live(self) -> dict[str, dict]:
        return live_leases(self.store, self.ttl_s, prefix=LOCK_PREFIX)

    def _contend(self, lease: Lease) -> dict | None:
        """None when ``lease`` won, else the document of a lock that beats it."""
        deadline = time.monotonic() + self.settle_s
        while True:
            rivals = {i: doc for i, doc in self._live().items() if i != lease.id}
            for rival_id, doc in sorted(rivals.items()):
                if doc.get("held") is True or rival_id < lease.id:
                    return doc
            if not rivals:
                return None
            if time.monotonic() >= deadline:  # a younger candidate that never decided (crashed): be safe
                return next(iter(rivals.values()))
            time.sleep(self.poll_s)

    def _attempt(self) -> dict | None:
        """Try once: None when held (``self.lease`` set), else the document of the lock that beat us."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        lease = Lease(self.store, self.what, self.refresh_s, self.ttl_s, LOCK_PREFIX, f"{stamp}-{secrets.token_hex(8)}")
        lease.__enter__()
        try:
            winner = self._contend(lease)
            if winner is None:
                lease.update(held=True)
                self.lease = lease
                return None
        except BaseException:
            lease.__exit__()
            raise
        lease.__exit__()
        return winner

    def __enter__(self) -> PruneLock:
        deadline = time.monotonic() + self.wait_s
        while True:
            winner = self._attempt()
            if winner is None:
                return self
            while time.monotonic() < deadline and self._live():  # poll without writing
                time.sleep(min(max(self.poll_s, 2.0), max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                raise PruneLockedError(self._busy(winner))

    def _busy(self, doc: dict) -> str:
        refreshed = doc.get("refreshed")
        ago = f", refreshed {time.time() - refreshed:.0f} s ago" if isinstance(refreshed, int | float) else ""
        waited = f" (waited {self.wait_s:.0f} s)" if self.wait_s else ""
        return (
            f"another prune of {self.store.describe()} holds the prune lock: {doc.get('what', '?')} on"
            f" {doc.get('host', '?')} pid {doc.get('pid', '?')}{ago}{waited}; try again when it has finished"
            f" (a crashed prune's lock expires {self.ttl_s:.0f} s after its last refresh)"
        )

    def check(self) -> None:
        """``TransientStoreError`` when the lock went unrefreshed so long that another prune may take it over."""
        if self.lease is not None:
            self.lease.check()

    def __exit__(self, *exc: object) -> None:
        if self.lease is not None:
            self.lease.__exit__()
            self.lease = None
