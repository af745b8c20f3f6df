"""The controller machinery: list+watch threads feeding a work queue, one worker reconciling keys.

A ``Controller`` subclass declares ``watches()`` (a resource and a function mapping each watch event's object to
the keys to reconcile) and ``reconcile(key)``, which reads the current state from the API and moves it one step;
it returns None when done or a delay in seconds to look again (waiting for time to pass, e.g. readiness). An
exception (``Pending`` for an expected wait on another object) requeues the key with exponential backoff (0.05 s
doubling to ``max_backoff``; upstream's queues go up to minutes, which a test double does not need); a 409
Conflict (or a failed resourceVersion ``test`` of a JSON patch) is retried at once, as upstream does.

Each watch runs in its own thread: it lists (every item's keys are queued), then watches from the list's
resourceVersion with ``kubernetes.watch.Watch`` (bookmarks on), resuming from the last seen resourceVersion when
a stream ends and listing again after a 410 Gone or an error. ``start()`` returns once every watch has listed
once, so the controller has seen the current state; ``stop()`` ends the streams (``Watch.stop`` shuts the socket
down, so a blocked read returns at once), closes the queue and joins every thread. One worker thread means one
key at a time: reconciles never race each other inside a controller, only with other controllers and users,
which resourceVersion conflicts settle.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from localcluster.controllers.kube import Kube, Obj, Res

log = logging.getLogger(__name__)
Key = tuple[str, str, str]  # (kind, namespace or "", name)
WATCH_TIMEOUT = 300  # seconds a watch request lasts before it is re-issued from the last resourceVersion


@dataclass(frozen=True)
class WatchSpec:
    res: Res
    keys: Callable[[str, Obj], Iterable[Key]]  # (event type, object) -> keys to reconcile


class Pending(Exception):  # noqa: N818 (a state, not a failure)
    """Reconcile cannot proceed yet (waiting for another object); retried with backoff, logged at DEBUG."""


class WorkQueue:
    """Keys due at a time; a key is pending at most once (the earliest due time wins)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Key, float] = {}
        self._heap: list[tuple[float, int, Key]] = []
        self._seq = 0
        self._closed = False

    def add(self, key: Key, delay: float = 0.0) -> None:
        due = time.monotonic() + max(0.0, delay)
        with self._cond:
            if self._closed or self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, key))
            self._cond.notify()

    def get(self) -> Key | None:
        """The next due key (blocking), or None once closed."""
        with self._cond:
            while not self._closed:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier due time, or already handed out
                if self._heap:
                    due, _, key = self._heap[0]
                    wait = due - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        del self._due[key]
                        return key
                    self._cond.wait(wait)
                else:
                    self._cond.wait()
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class Controller:
    """Subclasses set ``name`` and implement ``watches`` and ``reconcile``."""

    name = "controller"
    max_backoff = 2.0

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.queue = WorkQueue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: set = set()
        self._lock = threading.Lock()
        self._failures: dict[Key, int] = {}
        self.errors: list[tuple[Key, str]] = []  # the last reconcile failures, for diagnostics (bounded)

    def watches(self) -> list[WatchSpec]:
        raise NotImplementedError

    def reconcile(self, key: Key) -> float | None:
        raise NotImplementedError

    def enqueue(self, key: Key, delay: float = 0.0) -> None:
        self.queue.add(key, delay)

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Controller:
        if self._threads:
            raise RuntimeError(f"{self.name} already started")
        synced = []
        try:
            for spec in self.watches():
                done = threading.Event()
                synced.append((spec, done))
                self._spawn(f"{self.name}-watch-{spec.res.plural}", self._watch_loop, spec, done)
            self._spawn(f"{self.name}-worker", self._work)
            deadline = time.monotonic() + timeout
            for spec, done in synced:
                if not done.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"{self.name}: listing {spec.res.plural} did not finish in {timeout} s")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End the watches and the worker and join them (idempotent)."""
        self._stopping.set()
        self.queue.close()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            while thread.is_alive() and time.monotonic() < deadline:
                with self._lock:
                    watches = list(self._watches)
                for w in watches:
                    w.stop()  # shuts the stream's socket down; repeated in case the request was still being made
                thread.join(0.05)
            if thread.is_alive():
                log.warning("%s: thread %s did not stop", self.name, thread.name)
        self._threads = []

    def __enter__(self) -> Controller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    # ---- worker ------------------------------------------------------------------------------------

    def _work(self) -> None:
        from kubernetes.client.exceptions import ApiException

        while (key := self.queue.get()) is not None:
            try:
                again = self.reconcile(key)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                conflict = isinstance(exc, ApiException) and (
                    exc.status == 409 or (exc.status == 422 and "is not equal to tested value" in str(exc.body))
                )  # a stale JSON-patch guard
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                delay = 0.0 if conflict and n < 5 else min(self.max_backoff, 0.05 * 2 ** min(n, 10))
                level = logging.DEBUG if conflict or isinstance(exc, Pending) else logging.INFO
                log.log(level, "%s: reconcile %s failed (%s), retry in %.2f s", self.name, key, _describe(exc), delay)
                self.errors = [*self.errors[-49:], (key, _describe(exc))]
                self.queue.add(key, delay)
                continue
            self._failures.pop(key, None)
            if again is not None:
                self.queue.add(key, again)

    # ---- watches -----------------------------------------------------------------------------------

    def _watch_loop(self, spec: WatchSpec, synced: threading.Event) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        rv = ""
        backoff = 0.05
        fn, args = self.kube.watch_call(spec.res)
        while not self._stopping.is_set():
            try:
                if not rv:
                    items, rv = self.kube.list(spec.res)
                    for obj in items:
                        self._enqueue_event(spec, "ADDED", obj)
                    synced.set()
                w = watch.Watch(return_type="object")
                with self._lock:
                    if self._stopping.is_set():
                        return
                    self._watches.add(w)
                try:
                    for event in w.stream(
                        fn, *args, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=WATCH_TIMEOUT
                    ):
                        if self._stopping.is_set():
                            return
                        obj = event.get("raw_object") or {}
                        rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                        if event.get("type") != "BOOKMARK":
                            self._enqueue_event(spec, event["type"], obj)
                finally:
                    with self._lock:
                        self._watches.discard(w)
                backoff = 0.05
            except ApiException as exc:
                if self._stopping.is_set():
                    return
                if exc.status != 410:
                    log.info("%s: watch of %s failed: %s", self.name, spec.res.plural, _describe(exc))
                    self._stopping.wait(backoff)
                    backoff = min(1.0, backoff * 2)
                rv = ""  # list again
            except Exception as exc:  # connection errors; at shutdown, the socket we shut down
                if self._stopping.is_set():
                    return
                log.info("%s: watch of %s broke: %s", self.name, spec.res.plural, _describe(exc))
                self._stopping.wait(backoff)
                backoff = min(1.0, backoff * 2)
                rv = ""

    def _enqueue_event(self, spec: WatchSpec, type_: str, obj: Obj) -> None:
        try:
            for key in spec.keys(type_, obj):
                self.queue.add(key)
        except Exception as exc:
            if not self._stopping.is_set():
                log.info("%s: mapping a %s event failed: %s", self.name, spec.res.kind, _describe(exc))


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        body = getattr(exc, "body", None) or ""
        return f"{status} {getattr(exc, 'reason', '')} {body[:300] if isinstance(body, str) else ''}".strip()
    return f"{type(exc).__name__}: {exc}"
