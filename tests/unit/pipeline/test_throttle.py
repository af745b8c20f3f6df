"""``movers.pipeline.throttle.Throttle``: a token bucket that starts empty, on a fake clock."""

from __future__ import annotations

import pytest

from movers.pipeline.throttle import MiB, Throttle


class Clock:
    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_no_rate_never_waits():
    clock = Clock()
    for rate in (None, 0):
        throttle = Throttle(rate, clock, clock.sleep)
        throttle.take(10**12)
        assert not throttle.limited and clock.slept == []


def test_the_rate_from_the_first_byte_and_a_small_burst_after_idling():
    clock = Clock()
    throttle = Throttle(100, clock, clock.sleep)
    throttle.take(50)  # an empty bucket
    assert clock.slept == [pytest.approx(0.5)]
    clock.now += 10  # idle: the credit refills to BURST_S seconds' worth, no more
    throttle.take(10)
    assert clock.slept == [pytest.approx(0.5)]
    throttle.take(100)
    assert clock.slept == [pytest.approx(0.5), pytest.approx(1.0)]
    assert throttle.waited_s == pytest.approx(1.5)


def test_a_take_larger_than_the_bucket_waits_for_its_size():
    clock = Clock()
    throttle = Throttle(100, clock, clock.sleep)
    throttle.take(350)
    assert clock.slept == [pytest.approx(3.5)]


def test_the_average_rate_is_the_limit():
    clock = Clock()
    throttle = Throttle(Throttle.mib_per_s(4).rate, clock, clock.sleep)
    for _ in range(64):
        throttle.take(MiB)
    assert 64 * MiB / clock.now == pytest.approx(4 * MiB)


def test_a_negative_rate_is_refused():
    with pytest.raises(ValueError, match="0 \\(no limit\\) or more"):
        Throttle(-1)
