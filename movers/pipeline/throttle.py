"""``Throttle``: a byte rate shared by threads (a token bucket), for a mover's read and upload limits.

``Throttle(rate)`` lets ``rate`` bytes per second through on average, with a burst of one second's worth:
``take(n)`` returns at once while the bucket holds ``n`` bytes' credit, else sleeps until it would have (a taker
larger than the burst waits for its whole size, so no request is ever refused). Thread-safe: the engine's reader
threads share one, its upload threads another. ``rate`` None or 0: no limit (``take`` returns at once).

The time it slept is counted (``waited_s``), for the mover's statistics and the bench.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MiB = 1 << 20


class Throttle:
    """At most ``rate`` bytes per second on average (None or 0: no limit), a burst of one second's worth."""

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
        self._credit = self.rate  # start with a full bucket: one second's worth
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
            self._credit = min(self.rate, self._credit + (now - self._at) * self.rate) - n
            self._at = now
            wait = -self._credit / self.rate if self._credit < 0 else 0.0
            self.waited_s += wait
        if wait > 0:
            self._sleep(wait)
