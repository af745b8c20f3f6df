"""A Store wrapper that retries transient failures with bounded exponential backoff.

Contract:

* Only ``TransientStoreError`` is retried, at most ``attempts`` calls in all, sleeping a random
  ``uniform(0, min(max_delay, base_delay * 2**n))`` between them ("full jitter").
* When the attempts are exhausted the last error is raised again (same type, the original
  as ``__cause__``) with a message that says how many attempts were made.
* Every other exception (``ObjectNotFound``, ``PermanentStoreError``, ``UsageError``,
  ``KeyboardInterrupt``, ...) passes straight through on the first occurrence.
* Retrying is safe because every Store operation is idempotent (objects are immutable);
  ``list`` materialises the whole listing inside the retry, so a failure halfway through a
  listing never yields duplicate or missing keys.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from movers.errors import TransientStoreError
from movers.repo.store.base import Store
from movers.repo.store.counting import RequestCounts

T = TypeVar("T")


class RetryingStore:
    """Wraps ``inner``; see the module docstring for the retry contract."""

    def __init__(
        self,
        inner: Store,
        attempts: int = 5,
        base_delay: float = 0.2,
        max_delay: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.inner = inner
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._sleep = sleep
        self._random = random.Random()

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return fn(*args)
            except TransientStoreError as err:
                if attempt == self.attempts:
                    raise _exhausted(err, self.attempts) from err
                cap = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
                self._sleep(self._random.uniform(0, cap))
        raise AssertionError("unreachable")

    def put(self, key: str, data: bytes) -> None:
        self._call(self.inner.put, key, data)

    def put_new(self, key: str, data: bytes) -> bool:
        return self._call(self.inner.put_new, key, data)

    def get(self, key: str) -> bytes:
        return self._call(self.inner.get, key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self._call(self.inner.get_range, key, offset, length)

    def size(self, key: str) -> int:
        return self._call(self.inner.size, key)

    def exists(self, key: str) -> bool:
        return self._call(self.inner.exists, key)

    def list(self, prefix: str = "") -> Iterator[str]:
        yield from self._call(lambda: list(self.inner.list(prefix)))

    def delete(self, key: str) -> None:
        self._call(self.inner.delete, key)

    def check(self) -> None:
        """Run the inner store's ``check()`` (if it has one) with retries."""
        check = getattr(self.inner, "check", None)
        if check is not None:
            self._call(check)

    @property
    def requests(self) -> RequestCounts:
        """The inner store's request counts (each attempt counted)."""
        return self.inner.requests

    def describe(self) -> str:
        return self.inner.describe()

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r}, attempts={self.attempts})"


def _exhausted(err: TransientStoreError, attempts: int) -> TransientStoreError:
    message = f"{err} (gave up after {attempts} attempts)"
    try:
        return type(err)(message)
    except Exception:  # a subclass with a different constructor
        return TransientStoreError(message)
