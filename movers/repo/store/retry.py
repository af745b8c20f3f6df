"""A Store wrapper that retries transient failures for a time budget, with capped exponential backoff
(``retrying``: the same loop for one call, which the AWS KMS key slots use too).

Contract:

* Only ``TransientStoreError`` is retried. A call is attempted again while less than ``retry_for``
  seconds have passed since its first attempt started, sleeping a random
  ``uniform(0, min(max_delay, base_delay * 2**n))`` before retry ``n + 1`` ("full jitter"), cut
  short at the budget's end: the last attempt starts at most ``retry_for`` seconds after the first.
  A call therefore ends within ``retry_for`` plus one attempt (on S3 an attempt is bounded by the
  connect and read timeouts, botocore's own retries being off). ``retry_for=0``: one attempt.
* The budget is the store's, not each call's: an outage (from the first transient failure after a success to the
  next success) is ridden out for ``retry_for`` seconds in all. A call made during an outage has what is left of
  the budget (its retries stop when the outage is ``retry_for`` old); one made once the outage is older than
  that fails at once, without an attempt (a lease refresh, an end mark and a delete after a backup gave up do
  not each wait out a hung endpoint). With attempts bounded by timeouts within the budget
  (``movers.aws.timeouts_within`` for S3), a command ends about ``retry_for`` plus one attempt after its store
  stopped answering.
* Every retry is logged at WARNING with the error's message (stores keep secrets out of it).
* When the budget is spent the last error is raised again (same type, the original as
  ``__cause__``) with a message that says how many attempts were made over how long, marked not
  ``retriable`` when there was a budget: callers (Prefect task retries) do not ride the same outage
  out a second and third time.
* Every other exception (``ObjectNotFound``, ``PermanentStoreError``, ``UsageError``,
  ``KeyboardInterrupt``, ...) passes straight through on the first occurrence.
* Retrying is safe because every Store operation is idempotent (objects are immutable). ``list``
  streams (a listing of millions of keys is never held whole): when it fails halfway it lists again
  and resumes after the last key it yielded (keys come in ascending order), so it never yields a key
  twice or misses one; its budget runs from the last key yielded. A ``put_new`` whose first attempt
  wrote the object but lost the answer returns False from the retry: the object is there either way.
  A ``create`` that was retried and then found the key reads it back: True when it holds the bytes given
  (the lost answer was ours: configs, key slots and manifests are unique), else False.
* The clock and the sleep are constructor arguments, so tests can run an outage of minutes at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from movers.errors import ObjectNotFound, TransientStoreError
from movers.repo.store.base import TEMPORARY_MAX_AGE_S, Store, StoreWrapper
from movers.values import parse_duration

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_RETRY_FOR = 300.0  # rides out the outages of minutes an object store has, then fails
MAX_RETRY_FOR = 3600.0  # a budget beyond this is a typo, not a plan


def parse_retry_for(value: Any) -> float:
    """Seconds of a retry budget from a duration (``movers.values``: ``300``, ``5m``, ``90s``);
    ``ValueError`` naming the value unless it is between 0 and ``MAX_RETRY_FOR``."""
    seconds = parse_duration(value)
    if not 0 <= seconds <= MAX_RETRY_FOR:
        raise ValueError(f"{value!r} is not between 0 and {MAX_RETRY_FOR / 60:g}m")
    return seconds


class RetryingStore(StoreWrapper):
    """Wraps ``inner``; see the module docstring for the retry contract."""

    def __init__(
        self,
        inner: Store,
        retry_for: float = DEFAULT_RETRY_FOR,
        base_delay: float = 0.2,
        max_delay: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= retry_for <= MAX_RETRY_FOR:
            raise ValueError(f"retry_for must be between 0 and {MAX_RETRY_FOR:g} s, not {retry_for}")
        super().__init__(inner)
        self.retry_for = retry_for
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._sleep = sleep
        self._clock = clock
        self._random = random.Random()
        self._outage_lock = threading.Lock()
        self._outage: float | None = None  # clock of the first transient failure since the last success

    def _budget_start(self) -> float:
        """When the budget of a call starting now began: now, or the start of the outage under way; raise when that
        outage has outlasted the budget (the module docstring)."""
        now = self._clock()
        with self._outage_lock:
            outage = self._outage
        if outage is None:
            return now
        if now - outage >= self.retry_for:
            err = TransientStoreError(
                f"{self.describe()} has failed for {now - outage:.0f} s, longer than the retry budget"
                f" ({self.retry_for:g} s): not tried again"
            )
            err.retriable = False
            raise err
        return min(now, outage)

    def _failed(self) -> None:
        with self._outage_lock:
            if self._outage is None:
                self._outage = self._clock()

    def _succeeded(self) -> None:
        with self._outage_lock:
            self._outage = None

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        started, attempt = self._budget_start(), 0
        while True:
            attempt += 1
            try:
                result = fn(*args)
            except TransientStoreError as err:
                self._failed()
                self._back_off(err, started, attempt)
                continue
            self._succeeded()
            return result

    def _back_off(self, err: TransientStoreError, started: float, attempt: int) -> None:
        back_off(
            err,
            started,
            attempt,
            self.retry_for,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            sleep=self._sleep,
            clock=self._clock,
            rng=self._random,
        )

    def put(self, key: str, data: bytes) -> None:
        self._call(self.inner.put, key, data)

    def put_new(self, key: str, data: bytes) -> bool:
        return self._call(self.inner.put_new, key, data)

    def create(self, key: str, data: bytes) -> bool:
        attempts = 0

        def attempt() -> bool:
            nonlocal attempts
            attempts += 1
            return self.inner.create(key, data)

        created = self._call(attempt)
        if created or attempts == 1:
            return created
        return self._holds(key, data)

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self._call(self.inner.get, key) == bytes(data)
        except ObjectNotFound:
            return False

    def get(self, key: str) -> bytes:
        return self._call(self.inner.get, key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self._call(self.inner.get_range, key, offset, length)

    def size(self, key: str) -> int:
        return self._call(self.inner.size, key)

    def exists(self, key: str) -> bool:
        return self._call(self.inner.exists, key)

    def list(self, prefix: str = "") -> Iterator[str]:
        last: str | None = None  # the last key yielded: a listing again resumes after it
        started, attempt = self._budget_start(), 0
        while True:
            attempt += 1
            try:
                for key in self.inner.list(prefix):
                    if last is not None and key <= last:
                        continue
                    self._succeeded()
                    yield key
                    last, started, attempt = key, self._clock(), 1
                self._succeeded()
                return
            except TransientStoreError as err:
                self._failed()
                self._back_off(err, started, attempt)

    def delete(self, key: str) -> None:
        self._call(self.inner.delete, key)

    def check(self) -> None:
        """Run the inner store's ``check()`` (if it has one) with retries."""
        check = getattr(self.inner, "check", None)
        if check is not None:
            self._call(check)

    def sweep_temporaries(self, older_than_s: float = TEMPORARY_MAX_AGE_S) -> tuple[int, int]:
        """The inner store's ``sweep_temporaries`` (local stores), else nothing to do: ``(0, 0)``."""
        sweep = getattr(self.inner, "sweep_temporaries", None)
        return sweep(older_than_s) if sweep is not None else (0, 0)

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r}, retry_for={self.retry_for:g})"


def retrying(
    call: Callable[[], T],
    retry_for: float,
    *,
    base_delay: float = 0.2,
    max_delay: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> T:
    """``call()``, attempted again on ``TransientStoreError`` as the module docstring says (the one retry loop:
    stores and the AWS KMS key slots use it)."""
    rng = rng or random.Random()
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except TransientStoreError as err:
            back_off(err, started, attempt, retry_for, base_delay, max_delay, sleep, clock, rng)


def back_off(  # noqa: PLR0913 engine core: one failed attempt (error, start, number, budget) and the retry policy's delays, clock, sleep and random source, each with its default (tests inject them)
    err: TransientStoreError,
    started: float,
    attempt: int,
    retry_for: float,
    base_delay: float = 0.2,
    max_delay: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> None:
    """After failed attempt number ``attempt`` of a call first tried at ``started``: sleep before the next one, or
    raise when the budget is spent (the module docstring's contract)."""
    elapsed = clock() - started
    left = retry_for - elapsed
    if left <= 0:
        exhausted = _exhausted(err, attempt, elapsed)
        # the budget is where outages are ridden out: callers (Prefect task retries) must not ride the
        # same outage out again, which multiplied the wait
        exhausted.retriable = retry_for <= 0
        raise exhausted from err
    cap = min(max_delay, base_delay * 2 ** min(attempt - 1, 32))
    delay = min(left, (rng or random.Random()).uniform(0, cap))
    log.warning("%s; retry %d in %.1f s (retrying for %.0f s more)", err, attempt, delay, left - delay)
    sleep(delay)


def _exhausted(err: TransientStoreError, attempts: int, elapsed: float) -> TransientStoreError:
    message = f"{err} (gave up after {attempts} attempts in {elapsed:.0f} s)"
    try:
        return type(err)(message)
    except Exception:  # a subclass with a different constructor
        return TransientStoreError(message)
