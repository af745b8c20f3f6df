"""Backup leases: a running backup says so in the repository, and prune waits for it.

A backup holds a lease from before it reads the prune state and the chunk index until its manifest is
written: the JSON object ``leases/<random id>-<sequence>``::

    {"format": "cbt-mover-lease", "what": "backup of volume ...", "host": ..., "pid": ...,
     "refreshed": <unix time of the holder's last refresh>, "saw": <the prune state key it read, "" for none>}

written anew every ``REFRESH_S`` by a thread under the next sequence number (the previous one is deleted
then: no key is ever written twice, as object-locked buckets need) and deleted when the backup ends,
whatever the outcome; readers take the newest sequence of each id. A lease
not refreshed for ``TTL_S`` (by the reader's clock: hosts' clocks must agree within a few minutes) is a
crashed backup's and counts as gone; a holder that could not refresh for ``TTL_S - REFRESH_S`` must not
commit (``Lease.check``), since a prune may already have stopped waiting for it.

Why (``movers.repo.prune``): a backup started before a prune wrote its state may use objects that prune is
about to delete: chunks it deduplicates against, its own new packs and map objects, its parent's pages. So
prune, after writing its state, waits for the leases it then sees, and marks the manifests committed
meanwhile, before it deletes anything; except that a backup which read the previous prune state (``saw``)
treats every key listed there as absent, so prune need not wait for it to delete those keys (the usual
case with a grace period: everything it deletes was listed by the previous prune). A backup whose lease
appears later wrote it after this prune's state existed, so it read that state and treats what it lists as
absent. The grace period is then an undo window, not what keeps running backups safe.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable

from movers.errors import ObjectNotFound, StoreError, TransientStoreError
from movers.repo.store.base import Store

log = logging.getLogger(__name__)

LEASE_PREFIX = "leases/"
LEASE_FORMAT = "cbt-mover-lease"
REFRESH_S = 60.0
TTL_S = 600.0


class Lease:
    """A backup's lease (a context manager): written on enter, refreshed by a thread, deleted on exit."""

    def __init__(self, store: Store, what: str, refresh_s: float = REFRESH_S, ttl_s: float = TTL_S) -> None:
        self.store, self.what, self.refresh_s, self.ttl_s = store, what, refresh_s, ttl_s
        self.id = secrets.token_hex(16)
        self.key: str | None = None  # the newest object written
        self._seq = 0
        self._lock = threading.Lock()
        self.refreshed = 0.0  # monotonic time of the last successful write
        self.state_seen: str | None = None  # the prune state the backup read (None: not yet read)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        doc = {
            "format": LEASE_FORMAT,
            "what": self.what,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "refreshed": time.time(),
        }
        if self.state_seen is not None:
            doc["saw"] = self.state_seen
        with self._lock:
            self._seq += 1
            key, previous = f"{LEASE_PREFIX}{self.id}-{self._seq:08d}", self.key
            self.store.put(key, json.dumps(doc, sort_keys=True).encode())
            self.key, self.refreshed = key, time.monotonic()
        if previous is not None:
            self._delete(previous)

    def _delete(self, key: str) -> None:
        try:
            self.store.delete(key)
        except StoreError as err:  # it expires after the TTL
            log.warning("cannot delete the backup lease object %s: %s", key, err)

    def _refresh_until_stopped(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self._write()
            except StoreError as err:  # the next refresh tries again; check() refuses a commit if too late
                log.warning("cannot refresh the backup lease %s: %s", self.id, err)

    def saw(self, state_key: str | None) -> None:
        """Record the prune state the backup read (None: the repository had none) in the lease, at once."""
        self.state_seen = state_key or ""
        self._write()

    def check(self) -> None:
        """``TransientStoreError`` when the lease went unrefreshed so long that a prune may count it as gone."""
        if time.monotonic() - self.refreshed > self.ttl_s - self.refresh_s:
            raise TransientStoreError(
                f"the backup lease {self.id} could not be refreshed for over {self.ttl_s - self.refresh_s:.0f} s:"
                " a prune may have deleted what this backup uses, so it does not commit; retry"
            )

    def __enter__(self) -> Lease:
        self._write()
        self._thread = threading.Thread(target=self._refresh_until_stopped, name="backup-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.key is not None:
            self._delete(self.key)


def live_leases(store: Store, ttl_s: float = TTL_S, now: float | None = None) -> dict[str, dict]:
    """The leases refreshed within ``ttl_s`` (lease id -> its newest document); unreadable ones count as live."""
    now = time.time() if now is None else now
    newest: dict[str, str] = {}
    for key in store.list(LEASE_PREFIX):
        lease_id = key[len(LEASE_PREFIX) :].rsplit("-", 1)[0]
        newest[lease_id] = max(newest.get(lease_id, key), key)
    live: dict[str, dict] = {}
    for lease_id, key in newest.items():
        doc = _newest_document(store, lease_id, key)
        if doc is None:
            continue  # ended
        try:
            refreshed = float(doc["refreshed"])
        except (ValueError, TypeError, KeyError) as err:
            log.warning("unreadable backup lease %s (%s): counted as live; delete it if no backup runs", key, err)
            doc, refreshed = {"what": "unreadable lease"}, now
        if now - refreshed < ttl_s:
            live[lease_id] = doc
    return live


def _newest_document(store: Store, lease_id: str, key: str) -> dict | None:
    """The lease's newest document; None when it ended. A key that vanishes was replaced by a refresh (the newer
    one is written first), so its id is listed again rather than taken for ended."""
    for _ in range(5):
        try:
            doc = json.loads(store.get(key))
            return doc if isinstance(doc, dict) else {}
        except ObjectNotFound:
            keys = list(store.list(f"{LEASE_PREFIX}{lease_id}-"))
            if not keys:
                return None
            key = max(keys)
        except ValueError:
            return {}
    return {}  # kept changing while read: alive


def wait_for_leases(
    store: Store,
    keys: set[str],
    timeout_s: float,
    ttl_s: float = TTL_S,
    poll_s: float = 2.0,
    on_wait: Callable[[dict[str, dict]], None] | None = None,
) -> dict[str, dict]:
    """Wait until none of the lease ids ``keys`` is live, at most ``timeout_s``; the ones still live (empty: done)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = {k: doc for k, doc in live_leases(store, ttl_s).items() if k in keys}
        if not pending or time.monotonic() >= deadline:
            return pending
        if on_wait:
            on_wait(pending)
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def saw_state(doc: dict, state_key: str | None) -> bool:
    """Did the lease's backup read prune state ``state_key`` (or a newer one) before it looked at any data?"""
    seen = doc.get("saw")
    return state_key is not None and isinstance(seen, str) and seen >= state_key
