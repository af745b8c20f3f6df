"""Scripted fault injection around any Store, for tests (in the spirit of kopia's blobtesting/faulty.go); it owns
``FaultyStore`` and ``SimulatedCrash``, which the product never raises or catches.

Contract:

* ``fail(method, error, times=1, key_prefix="", after=0)`` queues a fault: the next ``times`` calls of
  ``method`` whose key (for ``list``: the prefix argument) starts with ``key_prefix`` raise
  ``error`` instead of reaching the inner store. ``error`` is an exception instance or class
  (a class is instantiated with a message naming the call). Faults fire in the order queued;
  ``after=n`` lets the first ``n`` matching calls through.
* ``fail_while(active, error)``: every call of any method raises ``error`` while ``active()``
  returns True (an outage whose length the test controls, e.g. with a fake clock).
* ``crash_after_puts(n, prefix="")`` lets ``n`` more writes (calls of ``put`` or ``put_new``) of
  keys starting with ``prefix`` through; the next one raises ``SimulatedCrash`` (a
  ``BaseException``, so ``except Exception`` does not swallow it) and its object is NOT written.
  From then on the store behaves like a dead process: every call raises ``SimulatedCrash``
  until ``recover()``.
* ``put_new`` and ``create`` are writes like ``put``: faults scripted for ``"put"`` and
  ``crash_after_puts`` hit all three (``fail("put_new", ...)`` or ``fail("create", ...)`` only those),
  and ``calls["put"]`` counts all three (``calls["put_new"]``, ``calls["create"]`` their own).
* ``calls[method]`` counts every call, faulted or not; ``puts`` (keys) and ``bytes_put`` count
  only writes that reached the inner store and wrote (``put_new`` or ``create`` returning True).
* Thread-safe: bookkeeping happens under a lock, inner calls run outside it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from movers.repo.store.base import Store, StoreWrapper

METHODS = ("put", "put_new", "create", "get", "get_range", "size", "exists", "list", "delete")


class SimulatedCrash(BaseException):
    """The process "died" here (raised by ``FaultyStore.crash_after_puts``)."""


@dataclass
class _Fault:
    method: str
    error: BaseException | type[BaseException]
    remaining: int
    key_prefix: str
    after: int = 0  # matching calls let through first


def _instance(error: BaseException | type[BaseException], message: str) -> BaseException:
    """``error`` itself, or an instance of it with ``message`` when it is a class."""
    return error(message) if isinstance(error, type) else error


class FaultyStore(StoreWrapper):
    """Wraps ``inner`` and injects the faults scripted with ``fail`` and ``crash_after_puts``."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        self.puts: list[str] = []
        self.bytes_put = 0
        self._faults: list[_Fault] = []
        self._crash: tuple[int, str] | None = None  # (puts still allowed, key prefix)
        self._crashed = False
        self._outages: list[tuple[Callable[[], bool], BaseException | type[BaseException]]] = []
        self._lock = threading.Lock()

    def fail(
        self,
        method: str,
        error: BaseException | type[BaseException],
        times: int = 1,
        key_prefix: str = "",
        after: int = 0,
    ) -> None:
        """Make ``times`` matching calls of ``method`` raise ``error``, once ``after`` of them succeeded."""
        if method not in METHODS:
            raise ValueError(f"unknown store method {method!r}; expected one of {METHODS}")
        with self._lock:
            self._faults.append(_Fault(method, error, times, key_prefix, after))

    def fail_while(self, active: Callable[[], bool], error: BaseException | type[BaseException]) -> None:
        """Make every call raise ``error`` while ``active()`` is True."""
        with self._lock:
            self._outages.append((active, error))

    def crash_after_puts(self, n: int, prefix: str = "") -> None:
        """Let ``n`` puts under ``prefix`` succeed, then crash on the next one (not written)."""
        with self._lock:
            self._crash = (n, prefix)

    def recover(self) -> None:
        """Forget a crash that fired ("restart the process") and any crash still armed."""
        with self._lock:
            self._crash = None
            self._crashed = False

    def pending_faults(self) -> int:
        """How many injected failures have not fired yet."""
        with self._lock:
            return sum(f.remaining for f in self._faults)

    def _before(self, method: str, key: str) -> None:
        write = method in ("put", "put_new", "create")
        with self._lock:
            self.calls[method] += 1
            if method != "put" and write:
                self.calls["put"] += 1
            if self._crashed:
                raise SimulatedCrash(f"store is crashed ({method} {key})")
            for active, error in self._outages:
                if active():
                    raise _instance(error, f"injected outage in {method}({key!r})")
            for fault in self._faults:
                matches = fault.method == method or (write and fault.method == "put")
                if matches and key.startswith(fault.key_prefix) and fault.after > 0:
                    fault.after -= 1
                elif matches and key.startswith(fault.key_prefix):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    raise _instance(fault.error, f"injected fault in {method}({key!r})")
            if write and self._crash is not None and key.startswith(self._crash[1]):
                left, prefix = self._crash
                if left <= 0:
                    self._crash = None
                    self._crashed = True
                    raise SimulatedCrash(f"simulated crash before put {key}")
                self._crash = (left - 1, prefix)

    def put(self, key: str, data: bytes) -> None:
        self._before("put", key)
        self.inner.put(key, data)
        with self._lock:
            self.puts.append(key)
            self.bytes_put += len(data)

    def put_new(self, key: str, data: bytes) -> bool:
        self._before("put_new", key)
        written = self.inner.put_new(key, data)
        if written:
            with self._lock:
                self.puts.append(key)
                self.bytes_put += len(data)
        return written

    def create(self, key: str, data: bytes) -> bool:
        self._before("create", key)
        written = self.inner.create(key, data)
        if written:
            with self._lock:
                self.puts.append(key)
                self.bytes_put += len(data)
        return written

    def get(self, key: str) -> bytes:
        self._before("get", key)
        return self.inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self._before("get_range", key)
        return self.inner.get_range(key, offset, length)

    def size(self, key: str) -> int:
        self._before("size", key)
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        self._before("exists", key)
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self._before("list", prefix)
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._before("delete", key)
        self.inner.delete(key)

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"
