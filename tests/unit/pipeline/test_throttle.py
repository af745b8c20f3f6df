"""``movers.pipeline.throttle.Throttle``: a token bucket of one second's burst, on a fake clock."""

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


def test_a_burst_of_one_second_then_the_rate():
    clock = Clock()
    throttle = Throttle(100, clock, clock.sleep)
    throttle.take(100)  # the full bucket
    assert clock.slept == []
    throttle.take(50)
    assert clock.slept == [pytest.approx(0.5)]
    clock.now += 10  # idle: the credit refills to one second's worth, no more
    throttle.take(100)
    throttle.take(100)
    assert clock.slept == [pytest.approx(0.5), pytest.approx(1.0)]
    assert throttle.waited_s == pytest.approx(1.5)


def test_a_take_larger_than_the_burst_waits_for_its_size():
    clock = Clock()
    throttle = Throttle(100, clock, clock.sleep)
    throttle.take(350)
    assert clock.slept == [pytest.approx(2.5)]


def test_the_average_rate_is_the_limit():
    clock = Clock()
    throttle = Throttle.mib_per_s(4)
    throttle = Throttle(throttle.rate, clock, clock.sleep)
    for _ in range(64):
        throttle.take(MiB)
    assert 64 * MiB / clock.now == pytest.approx(64 / 60 * 4 * MiB)  # 60 s for 64 MiB: 4 MiB came at once


def test_a_negative_rate_is_refused():
    with pytest.raises(ValueError, match="0 \\(no limit\\) or more"):
        Throttle(-1)
