"""A volume's live progress in the Prefect UI: a progress artifact fed from its mover's ``progress`` log lines.

A mover prints ``progress done=N total=N`` (``total=?`` while a stream of CBT extents is still being read); a
backup's lines go on with ``position=N capacity=N mode=M`` (``movers.cli``). The artifact's value is the
percentage (bytes done of the total, else the position on the volume: reads ascend), its description (markdown,
updated with it) says bytes done of the total in human units, the rate, the time left and the mode.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from reporting.best_effort import best_effort
from reporting.tables import rate, seconds, size

_LINE = re.compile(r"progress done=(\d+) total=(\d+|\?)((?: [a-z_]+=\S+)*)")


def progress_key(namespace: str, pvc: str) -> str:
    """The progress artifact key of a volume: lowercase, only ``[a-z0-9-]``."""
    return "progress-" + re.sub(r"[^a-z0-9-]+", "-", f"{namespace}-{pvc}".lower()).strip("-")


@dataclass(frozen=True)
class Reading:
    """One progress line: bytes ``done`` of ``total`` (None: not known yet), a backup's ``position`` on the
    volume of ``capacity`` bytes and ``mode``."""

    done: int
    total: int | None
    position: int | None = None
    capacity: int | None = None
    mode: str | None = None

    @classmethod
    def parse(cls, line: str) -> Reading | None:
        match = _LINE.search(line)
        if not match:
            return None
        extra = dict(kv.split("=", 1) for kv in match.group(3).split())
        number = {k: int(v) for k, v in extra.items() if k in ("position", "capacity") and v.isdigit()}
        total = None if match.group(2) == "?" else int(match.group(2))
        return cls(int(match.group(1)), total, number.get("position"), number.get("capacity"), extra.get("mode"))

    def fraction(self) -> float:
        """How far along, 0..1: bytes done of the total, else the position on the volume."""
        if self.total is not None:
            return min(1.0, self.done / self.total) if self.total else 1.0
        if self.position is not None and self.capacity:
            return min(1.0, self.position / self.capacity)
        return 0.0


def describe(what: str, reading: Reading, elapsed: float, mode: str | None = None) -> str:
    """The description of a volume's progress after ``elapsed`` seconds: what moves, bytes done of the total (or
    the position on the volume while the total is not known), the rate, the time left, the mode."""
    speed = reading.done / elapsed if elapsed > 0 else None
    if reading.total is not None:
        amount = f"{size(reading.done)} of {size(reading.total)}"
        left = (reading.total - reading.done) / speed if speed else None
    else:
        at = reading.fraction()
        amount = f"{size(reading.done)} read, at {at:.0%} of the {size(reading.capacity)} volume (total not known yet)"
        left = elapsed * (1 - at) / at if at > 0 else None
    done = reading.total is not None and reading.done >= reading.total
    parts = [f"{what}: {amount}", f"{rate(speed)}", f"done in {seconds(elapsed)}" if done else f"{seconds(left)} left"]
    how = f"{reading.mode} ({mode})" if reading.mode and mode else reading.mode or mode
    return ", ".join(parts) + (f"; mode {how}" if how else "")


class ProgressArtifact:
    """A Prefect progress artifact of one volume, fed ``on_line`` with its mover's log lines (from the log
    follower's thread) and updated (value and description) at most once per ``interval`` s; ``finish`` sets
    100 %. ``what`` names the move (``backup of ns/pvc (run)``), ``mode`` what was planned. Best effort: an
    update that fails is logged. Updates run in the context the artifact was made in (the task's: its Prefect
    settings and API), whichever thread feeds the lines."""

    def __init__(
        self,
        key: str,
        what: str,
        mode: str | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prefect.artifacts import create_progress_artifact

        self.what, self.mode, self.interval, self.clock = what, mode, interval, clock
        self.started, self.last, self.lock = clock(), float("-inf"), threading.Lock()
        self.reading: Reading | None = None
        self.context = contextvars.copy_context()
        self.artifact_id = create_progress_artifact(progress=0.0, key=key, description=f"{what}: starting")

    def on_line(self, line: str) -> None:
        reading = Reading.parse(line)
        if reading is None:
            return
        with self.lock:
            self.reading = reading
            now = self.clock()
            if now - self.last < self.interval:
                return
            self.last = now
        self._update(reading, now)

    def finish(self) -> None:
        """Set 100 %; the description keeps the last bytes and rate the mover reported."""
        last = self.reading or Reading(0, 0)
        self._update(Reading(last.total or last.done, last.total or last.done, mode=last.mode), self.clock())

    def _update(self, reading: Reading, now: float) -> None:
        from prefect.artifacts import update_progress_artifact

        text = describe(self.what, reading, now - self.started, self.mode)
        with best_effort("progress artifact update failed", logging.getLogger(__name__)):  # progress is informational
            self.context.copy().run(
                update_progress_artifact, self.artifact_id, round(100.0 * reading.fraction(), 1), description=text
            )
