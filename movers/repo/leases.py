"""Backup leases: a running backup says so in the repository, and prune waits for it.

A backup holds a lease from before it reads the prune state and the chunk index until its manifest is
written: the JSON object ``leases/<random id>-<sequence>``::

    {"format": "cbt-mover-lease", "what": "backup of volume ...", "host": ..., "pid": ...,
     "refreshed": <unix time of the holder's last refresh>, "saw": <the prune state key it read, "" for none>}

written anew every ``REFRESH_S`` by a thread under the next sequence number (the previous one is deleted
then: no key is ever written twice, as object-locked buckets need) and deleted when the backup ends,
or, when a backup fails with an error, rewritten once more with ``"ended": "failed"`` (not live any more; its
retry finds what it uploaded by its id, see ``movers.pipeline.backup``; prune sweeps it later). Readers take the
newest sequence of each id. A lease
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
EXPIRED_AFTER_S = 2 * TTL_S  # a lease not refreshed for this long is swept by prune (sweep_expired)


class Lease:
    """A lease (a context manager): written on enter, refreshed by a thread, deleted on exit.

    A backup's by default; ``prefix`` and ``lease_id`` give other holders their own namespace and ordering
    (the prune lock, ``movers.repo.prunelock``). ``update(**fields)`` adds fields to the document, written at
    once and with every refresh.
    """

    def __init__(
        self,
        store: Store,
        what: str,
        refresh_s: float = REFRESH_S,
        ttl_s: float = TTL_S,
        prefix: str = LEASE_PREFIX,
        lease_id: str | None = None,
        keep_failed: bool = False,
    ) -> None:
        self.store, self.what, self.refresh_s, self.ttl_s, self.prefix = store, what, refresh_s, ttl_s, prefix
        self.id = lease_id or secrets.token_hex(16)
        self.keep_failed = keep_failed  # a holder that fails leaves an ended lease: its retry finds what it wrote
        self.key: str | None = None  # the newest object written
        self.fields: dict[str, object] = {}
        self._seq = 0
        self._lock = threading.Lock()
        self.refreshed = 0.0  # monotonic time of the last successful write
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        with self._lock:
            doc = {
                "format": LEASE_FORMAT,
                "what": self.what,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "refreshed": time.time(),
                **self.fields,
            }
            self._seq += 1
            key, previous = f"{self.prefix}{self.id}-{self._seq:08d}", self.key
            self.store.put(key, json.dumps(doc, sort_keys=True).encode())
            self.key, self.refreshed = key, time.monotonic()
        if previous is not None:
            self._delete(previous)

    def _delete(self, key: str) -> None:
        try:
            self.store.delete(key)
        except StoreError as err:  # it expires after the TTL; a prune deletes it later (sweep_expired)
            log.warning("cannot delete the lease object %s: %s", key, err)

    def _refresh_until_stopped(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self._write()
            except StoreError as err:  # the next refresh tries again; check() refuses to go on if too late
                log.warning("cannot refresh the lease %s of %s: %s", self.id, self.what, err)

    def update(self, **fields: object) -> None:
        """Add ``fields`` to the lease's document and write it at once."""
        with self._lock:
            self.fields.update(fields)
        self._write()

    def saw(self, state_key: str | None) -> None:
        """Record the prune state the backup read (None: the repository had none) in the lease, at once."""
        self.update(saw=state_key or "")

    def check(self) -> None:
        """``TransientStoreError`` when the lease went unrefreshed so long that others may count it as gone."""
        if time.monotonic() - self.refreshed > self.ttl_s - self.refresh_s:
            raise TransientStoreError(
                f"the lease {self.id} of {self.what} could not be refreshed for over"
                f" {self.ttl_s - self.refresh_s:.0f} s, so others may count it as gone: a backup does not commit,"
                " a prune stops deleting; retry"
            )

    def __enter__(self) -> Lease:
        self._write()
        self._thread = threading.Thread(target=self._refresh_until_stopped, name=f"lease-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: object = None, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc_type is not None and self.keep_failed and isinstance(exc_type, type) and issubclass(exc_type, Exception):
            try:
                self.update(ended="failed")  # not live any more; swept by prune after EXPIRED_AFTER_S
                return
            except StoreError as err:
                log.warning("cannot mark the lease %s of %s as ended: %s", self.id, self.what, err)
        if self.key is not None:
            self._delete(self.key)


def _keys_by_id(store: Store, prefix: str) -> dict[str, list[str]]:
    """Lease id -> its keys, oldest sequence first."""
    by_id: dict[str, list[str]] = {}
    for key in store.list(prefix):
        by_id.setdefault(key[len(prefix) :].rsplit("-", 1)[0], []).append(key)
    return {lease_id: sorted(keys) for lease_id, keys in by_id.items()}


def live_leases(
    store: Store, ttl_s: float = TTL_S, now: float | None = None, prefix: str = LEASE_PREFIX
) -> dict[str, dict]:
    """The leases refreshed within ``ttl_s`` (lease id -> its newest document); unreadable ones count as live."""
    now = time.time() if now is None else now
    live: dict[str, dict] = {}
    for lease_id, keys in _keys_by_id(store, prefix).items():
        doc = _newest_document(store, prefix, lease_id, keys[-1])
        if doc is None:
            continue  # ended
        refreshed = _refreshed(doc)
        if refreshed is None:
            log.warning("unreadable lease %s: counted as live; delete it if nothing runs", keys[-1])
            doc, refreshed = {"what": "unreadable lease"}, now
        if now - refreshed < ttl_s and not doc.get("ended"):
            live[lease_id] = doc
    return live


def _refreshed(doc: dict) -> float | None:
    try:
        return float(doc["refreshed"])
    except (ValueError, TypeError, KeyError):
        return None


def other_attempts(store: Store, what: str, own_id: str, prefix: str = LEASE_PREFIX) -> list[str]:
    """The ids of the other leases, live or not yet swept, whose ``what`` is ``what``: earlier attempts of the same
    backup (a killed mover leaves its lease behind), or one running beside it."""
    found = []
    for lease_id, keys in _keys_by_id(store, prefix).items():
        if lease_id == own_id:
            continue
        doc = _newest_document(store, prefix, lease_id, keys[-1])
        if doc is not None and doc.get("what") == what:
            found.append(lease_id)
    return found


def sweep_expired(
    store: Store, older_than_s: float, now: float | None = None, prefix: str = LEASE_PREFIX, delete: bool = True
) -> int:
    """Delete the objects of leases not refreshed for ``older_than_s`` (their holders crashed, or could not
    delete them), and the superseded sequences of any lease (no reader uses them); the number deleted
    (``delete=False``: that would be). Unreadable leases are left alone; objects the store refuses to delete
    are skipped with a warning."""
    now = time.time() if now is None else now
    doomed: list[str] = []
    for lease_id, keys in _keys_by_id(store, prefix).items():
        doomed.extend(keys[:-1])
        doc = _newest_document(store, prefix, lease_id, keys[-1])
        refreshed = None if doc is None else _refreshed(doc)
        if refreshed is not None and now - refreshed > older_than_s:
            doomed.append(keys[-1])
    if not delete:
        return len(doomed)
    deleted = 0
    for key in doomed:
        try:
            store.delete(key)
            deleted += 1
        except StoreError as err:
            log.warning("cannot delete the expired lease object %s: %s", key, err)
    return deleted


def _newest_document(store: Store, prefix: str, lease_id: str, key: str) -> dict | None:
    """The lease's newest document; None when it ended. A key that vanishes was replaced by a refresh (the newer
    one is written first), so its id is listed again rather than taken for ended."""
    for _ in range(5):
        try:
            doc = json.loads(store.get(key))
            return doc if isinstance(doc, dict) else {}
        except ObjectNotFound:
            keys = list(store.list(f"{prefix}{lease_id}-"))
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
    prefix: str = LEASE_PREFIX,
) -> dict[str, dict]:
    """Wait until none of the lease ids ``keys`` is live, at most ``timeout_s``; the ones still live (empty: done)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = {k: doc for k, doc in live_leases(store, ttl_s, prefix=prefix).items() if k in keys}
        if not pending or time.monotonic() >= deadline:
            return pending
        if on_wait:
            on_wait(pending)
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def saw_state(doc: dict, state_key: str | None) -> bool:
    """Did the lease's backup read prune state ``state_key`` (or a newer one) before it looked at any data?"""
    seen = doc.get("saw")
    return state_key is not None and isinstance(seen, str) and seen >= state_key
