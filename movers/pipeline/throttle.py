"""``Throttle``: a byte rate shared by threads (a token bucket), for a mover's read and upload limits.

``Throttle(rate)`` lets ``rate`` bytes per second through on average: ``take(n)`` reserves ``n`` bytes and sleeps
until the rate allows them (a taker larger than the bucket waits for its whole size, so no request is ever
refused). The bucket starts empty and refills while idle up to ``BURST_S`` seconds' worth, so that the measured
rate of anything longer than a fraction of a second is the limit. Thread-safe: the engine's reader
threads share one, its upload threads another. ``rate`` None or 0: no limit (``take`` returns at once).

The time it slept is counted (``waited_s``), for the mover's statistics and the bench.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MiB = 1 << 20
BURST_S = 0.1  # the credit an idle throttle gathers, in seconds of its rate


class Throttle:
    """At most ``rate`` bytes per second on average (None or 0: no limit), a burst of ``BURST_S`` seconds' worth."""

    def __init__(
        self,
        rate: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate is not None and rate < 0:
            raise ValueError(f"a rate is 0 (no limit) or more bytes per second, not {rate}")
        self.rate = float(rate or 0)
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._credit = 0.0  # an empty bucket: the first bytes wait their time too
        self._at = clock()
        self.waited_s = 0.0

    @classmethod
    def mib_per_s(cls, mib: float | None) -> Throttle:
        """A throttle of ``mib`` MiB/s (None or 0: no limit)."""
        return cls(mib * MiB if mib else None)

    @property
    def limited(self) -> bool:
        return self.rate > 0

    def take(self, n: int) -> None:
        """Let ``n`` bytes through: at once while there is credit, else after the time the rate needs."""
        if not self.limited or n <= 0:
            return
        with self._lock:  # reserve now, sleep outside the lock: later takers queue behind this one's debt
            now = self._clock()
            self._credit = min(self.rate * BURST_S, self._credit + (now - self._at) * self.rate) - n
            self._at = now
            wait = -self._credit / self.rate if self._credit < 0 else 0.0
            self.waited_s += wait
        if wait > 0:
            self._sleep(wait)
