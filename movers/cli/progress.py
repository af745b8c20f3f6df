"""How the CLI shows the progress of a command on stderr (``--progress auto|bar|plain|json|none``).

The engine reports ``progress(done, total)`` (``total`` None while unknown); a command opens one ``Reporter``
and asks it for a callback per phase (``phase("restore")``, ``phase("readback")``), each counting ``bytes`` or
``backups``. Forms:

* ``plain``: ``progress done=N total=N`` lines (``total=?`` while unknown; a backup's followed by ``position=N
  capacity=N mode=M``: how far along the volume it is), at most one per ``--progress-interval``
  seconds plus the last of each phase. Prefect tasks parse these lines from a mover pod's log
  (``tasks/kube.py``): their text and numbers are fixed (a restore with ``--verify-device`` counts both phases on
  one scale of twice the capacity, as it always has).
* ``bar``: a rich progress bar per phase: done/total, rate and time left, redrawn at most 10 times a second.
* ``json``: one JSON object per line: ``{"event": "progress", "phase", "unit", "done", "total" (null while
  unknown), "rate_bps" (bytes per second, null for a count of backups or before two samples), "eta_s" (null when
  unknown), and a backup's ``position``, ``capacity`` and ``mode``}``, at most one per interval per phase plus the
  last of each phase; then one ``{"event": "end", "ok", "elapsed_s", "phase", "done", "total"}`` when the
  command ends (``ok`` false when it failed).
* ``none``: nothing. ``auto`` (the default): ``bar`` when stderr is a terminal, else ``plain``.

Rates and times left come from the last ``WINDOW_S`` seconds of a phase (``Rate``), the one estimate both the bar
and the JSON lines show.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO

from movers.values import human_bytes

MODES = ("auto", "bar", "plain", "json", "none")
UNITS = ("bytes", "backups")
WINDOW_S = 10.0  # the rate is measured over this many recent seconds
BAR_REDRAW_S = 0.1

ProgressFn = Callable[..., None]  # (done, total, **detail): movers.pipeline.stats.ProgressFn


class Rate:
    """Units per second over the last ``window`` seconds of samples, and the time left at that rate."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, done: int) -> None:
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def per_second(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    def eta(self, done: int, total: int | None) -> float | None:
        rate = self.per_second()
        if total is None or done >= total:
            return 0.0 if total is not None else None
        return (total - done) / rate if rate else None


class _Phase:
    def __init__(self, name: str, unit: str, part: int, parts: int) -> None:
        if unit not in UNITS:
            raise ValueError(f"unknown progress unit {unit!r}")
        self.name, self.unit, self.part, self.parts = name, unit, part, parts
        self.rate = Rate()
        self.began = time.monotonic()  # the rate counts from here (0 done) until the window moves past it
        self.done, self.total = 0, None
        self.detail: dict[str, object] = {}  # a backup's position, capacity and mode (plain and json forms show them)
        self.shown = float("-inf")  # when it was last shown
        self.shown_as: tuple[int, int | None] | None = None


class Reporter:
    """The progress of one command; ``with`` it so the end is reported (and a bar closed) whatever happens."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.current: _Phase | None = None

    def phase(self, name: str, unit: str = "bytes", part: int = 0, parts: int = 1) -> ProgressFn:
        """The callback of a phase; ``part`` of ``parts``: where the phase sits on the plain lines' one scale."""
        state = self.current = _Phase(name, unit, part, parts)
        return lambda done, total, **detail: self._update(state, done, total, detail)

    def stages(self, *stages: tuple[str, str]) -> ProgressFn:
        """One callback for phases the engine reports through the same callback, one after the other: a call
        whose total differs from the previous one's starts the next stage (``(name, unit)`` each)."""
        states = [_Phase(name, unit, 0, 1) for name, unit in stages]
        self.current = states[0]
        at = [0]

        def progress(done: int, total: int | None, **detail: object) -> None:
            state = states[at[0]]
            if state.shown_as is not None and total != state.total and at[0] + 1 < len(states):
                at[0] += 1
                state = states[at[0]]
                state.began = time.monotonic()
            self._update(state, done, total, detail)

        return progress

    def _update(self, state: _Phase, done: int, total: int | None, detail: dict[str, object]) -> None:
        now = time.monotonic()
        with self.lock:
            if done < state.done:  # the engine started the phase over (e.g. a backup retried another way)
                state.rate, state.began = Rate(), now
            if not state.rate.samples and now > state.began:  # the phase's start: a rate from the first call on
                state.rate.add(state.began, 0)
            state.done, state.total, state.detail = done, total, detail
            state.rate.add(now, done)
            self.current = state
            final = total is not None and done >= total
            if (now - state.shown >= self._every() or final) and state.shown_as != (done, total):
                state.shown, state.shown_as = now, (done, total)
                self.show(state, now)

    def _every(self) -> float:
        return self.interval

    def show(self, state: _Phase, now: float) -> None:
        raise NotImplementedError

    def end(self, ok: bool) -> None:
        """The command ended (``ok``: without an error)."""

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.end(exc_type is None)


class _Silent(Reporter):
    def _update(self, state: _Phase, done: int, total: int | None, detail: dict[str, object]) -> None:
        pass


class _Plain(Reporter):
    def __init__(self, interval: float, out: IO[str]) -> None:
        super().__init__(interval)
        self.out = out

    def show(self, state: _Phase, now: float) -> None:
        done, total = state.done, state.total
        if state.parts > 1:  # one scale for all parts, as the lines always counted a restore and its read-back
            done, total = state.part * (total or 0) + done, state.parts * total if total is not None else None
        more = "".join(f" {key}={value}" for key, value in state.detail.items())
        print(f"progress done={done} total={total if total is not None else '?'}{more}", file=self.out, flush=True)


class _Json(Reporter):
    def __init__(self, interval: float, out: IO[str]) -> None:
        super().__init__(interval)
        self.out = out

    def show(self, state: _Phase, now: float) -> None:
        rate = state.rate.per_second()
        eta = state.rate.eta(state.done, state.total)
        self._line(
            {
                "event": "progress",
                "phase": state.name,
                "unit": state.unit,
                "done": state.done,
                "total": state.total,
                "rate_bps": round(rate) if rate is not None and state.unit == "bytes" else None,
                "eta_s": round(eta, 1) if eta is not None else None,
            }
            | state.detail
        )

    def end(self, ok: bool) -> None:
        last = self.current
        self._line(
            {
                "event": "end",
                "ok": ok,
                "elapsed_s": round(time.monotonic() - self.started, 3),
                "phase": last.name if last else None,
                "done": last.done if last else None,
                "total": last.total if last else None,
            }
        )

    def _line(self, doc: dict) -> None:
        self.out.write(json.dumps(doc) + "\n")
        self.out.flush()


class _Bar(Reporter):
    """rich's live display on the terminal; log records printed meanwhile go above the bars."""

    def __init__(self, interval: float, out: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        super().__init__(interval)
        self.out = out
        self.bars = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(),
            TextColumn("{task.fields[amount]}"),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[eta]}"),
            console=Console(file=out),
            refresh_per_second=1 / BAR_REDRAW_S,
        )
        self.tasks: dict[int, object] = {}
        self.moved: list[logging.StreamHandler] = []
        self.bars.start()
        self._log_above()

    def _every(self) -> float:
        return BAR_REDRAW_S

    def show(self, state: _Phase, now: float) -> None:
        task = self.tasks.get(id(state))
        if task is None:
            task = self.tasks[id(state)] = self.bars.add_task(state.name, total=None, amount="", rate="", eta="")
        rate, eta = state.rate.per_second(), state.rate.eta(state.done, state.total)
        self.bars.update(
            task,
            completed=state.done,
            total=state.total,
            amount=_amount(state),
            rate=_per_second(rate, state.unit),
            eta=f"ETA {_clock(eta)}" if eta is not None else "ETA -:--:--",
        )

    def end(self, ok: bool) -> None:
        with self.lock:
            self.bars.stop()
            for handler in self.moved:
                handler.setStream(self.out)

    def _log_above(self) -> None:
        """Log handlers writing to the terminal write through the live display (printed above the bars)."""
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is self.out:
                handler.setStream(_Above(self.bars.console))
                self.moved.append(handler)


class _Above:
    """A text stream for log handlers that prints through the live display."""

    def __init__(self, console) -> None:
        self.console = console

    def write(self, text: str) -> int:
        self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        return len(text)

    def flush(self) -> None:
        pass


def _amount(state: _Phase) -> str:
    if state.unit == "bytes":
        return f"{human_bytes(state.done)} / {human_bytes(state.total, missing='?')}"
    return f"{state.done}/{state.total if state.total is not None else '?'} {state.unit}"


def _per_second(rate: float | None, unit: str) -> str:
    if rate is None:
        return "-"
    return f"{human_bytes(rate)}/s" if unit == "bytes" else f"{rate:.1f} {unit}/s"


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def open_reporter(mode: str, interval: float, out: IO[str] | None = None) -> Reporter:
    """The reporter of ``--progress mode`` writing to ``out`` (default stderr)."""
    out = out if out is not None else sys.stderr
    if mode == "auto":
        mode = "bar" if _is_terminal(out) else "plain"
    if mode == "bar":
        return _Bar(interval, out)
    if mode == "plain":
        return _Plain(interval, out)
    if mode == "json":
        return _Json(interval, out)
    return _Silent(interval)


def _is_terminal(out: IO[str]) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
