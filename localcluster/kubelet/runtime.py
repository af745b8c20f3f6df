"""Container processes: start, log capture, stop, termination messages.

Logs are written as the CRI runtimes write them, one record per line:
``<RFC3339Nano time> <stdout|stderr> <F|P> <content>`` (P: the content continues in the next
record, i.e. the process wrote no newline there). Each container instance has its own file, so
``previous=true`` works after restarts. ``read_records`` parses them for ``pods/log``.

Processes get their own session (process group): stopping sends SIGTERM to the group, SIGKILL
after the grace period, and whatever is left in the group when the main process ends is killed,
as the end of a container's PID namespace would.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from localcluster.kubelet.sandbox import Launch

MESSAGE_MAX = 4096  # upstream's cap on a termination message file
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048  # FallbackToLogsOnError: the tail of the log, the smaller of both
_CHUNK = 16384


def now_nano(t: float | None = None) -> str:
    t = time.time() if t is None else t
    dt = datetime.datetime.fromtimestamp(t, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


def parse_time(stamp: str) -> float:
    base, _, frac = stamp.rstrip("Z").partition(".")
    dt = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.UTC)
    return dt.timestamp() + (float("0." + frac) if frac else 0.0)


class LogFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = open(path, "ab", buffering=0)  # noqa: SIM115  (closed by close())

    def record(self, stream: str, data: bytes, partial: bool) -> None:
        self._f.write(f"{now_nano()} {stream} {'P' if partial else 'F'} ".encode() + data + b"\n")

    async def pump(self, reader: asyncio.StreamReader, stream: str) -> None:
        pending = b""
        while True:
            chunk = await reader.read(_CHUNK)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self.record(stream, line, False)
            while len(pending) >= _CHUNK:
                self.record(stream, pending[:_CHUNK], True)
                pending = pending[_CHUNK:]
        if pending:
            self.record(stream, pending, True)

    def close(self) -> None:
        self._f.close()


@dataclass
class Record:
    time: str
    stream: str
    partial: bool
    content: bytes

    def text(self) -> bytes:
        return self.content if self.partial else self.content + b"\n"


def parse_record(line: bytes) -> Record | None:
    parts = line.rstrip(b"\n").split(b" ", 3)
    if len(parts) < 3:
        return None
    content = parts[3] if len(parts) > 3 else b""
    return Record(parts[0].decode(), parts[1].decode(), parts[2] == b"P", content)


def read_records(path: Path) -> Iterator[Record]:
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.endswith(b"\n"):
                    rec = parse_record(line)
                    if rec is not None:
                        yield rec
    except FileNotFoundError:
        return


class Process:
    """One started container instance (or exec): the asyncio process and its log pumps."""

    def __init__(self, proc: asyncio.subprocess.Process, pumps: list[asyncio.Task]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pumps = pumps

    @classmethod
    async def start(cls, launch: Launch, log: LogFile, track: Callable[[int], None] | None = None) -> Process:
        """Start the shim (``shim.py run PLAN READYFD``) and return once it exec'd the container's
        argv (mounts done), or failed to. ``track`` gets the pid (= process group) at once."""
        ready_r, ready_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *launch.argv,
                str(ready_w),
                env=launch.env,
                cwd=launch.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=(ready_w,),
            )
            os.close(ready_w)
            ready_w = -1
            if track is not None:
                track(proc.pid)
            assert proc.stdout is not None and proc.stderr is not None
            pumps = [
                asyncio.create_task(log.pump(proc.stdout, "stdout")),
                asyncio.create_task(log.pump(proc.stderr, "stderr")),
            ]
            await asyncio.to_thread(os.read, ready_r, 1)  # end of file: exec'd, or exited
        finally:
            os.close(ready_r)
            if ready_w >= 0:
                os.close(ready_w)
        return cls(proc, pumps)

    async def wait(self) -> int:
        """The exit code as Kubernetes reports it (128 + signal for a killed process)."""
        rc = await self.proc.wait()
        kill_group(self.pid, signal.SIGKILL)  # what is left of the container goes with it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self.pumps, return_exceptions=True), 2.0)
        for task in self.pumps:
            task.cancel()
        return rc if rc >= 0 else 128 - rc

    async def stop(self, grace: float) -> None:
        if self.proc.returncode is not None:
            return
        kill_group(self.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), max(grace, 0.0))
        except TimeoutError:
            kill_group(self.pid, signal.SIGKILL)
            await self.proc.wait()


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def gone(pid: int) -> bool:
    """The process has exited (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def end_daemons(pids: list[int], grace: float = 10.0) -> None:
    """Wait for daemons told to stop (a FUSE daemon's parent-death SIGTERM) to exit; SIGTERM again after
    ``grace``/2 seconds and SIGKILL their groups after ``grace`` (blocking; call from a thread)."""
    deadline = time.monotonic() + grace
    nudged = False
    while True:
        left = [p for p in pids if not gone(p)]
        if not left:
            return
        now = time.monotonic()
        if now > deadline:
            for pid in left:
                kill_group(pid, signal.SIGKILL)
            return
        if not nudged and now > deadline - grace / 2:
            nudged = True
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
        time.sleep(0.01)


def termination_message(path: Path, policy: str, exit_code: int, log_path: Path | None) -> str:
    message = ""
    try:
        with open(path, "rb") as f:
            message = f.read(MESSAGE_MAX).decode(errors="replace")
    except OSError:
        pass
    if not message and policy == "FallbackToLogsOnError" and exit_code != 0 and log_path is not None:
        message = log_tail(log_path, FALLBACK_LINES, FALLBACK_BYTES)
    return message


def log_tail(path: Path, lines: int, max_bytes: int) -> str:
    text = b"".join(r.text() for r in read_records(path))
    tail = b"".join(text.splitlines(keepends=True)[-lines:])
    return tail[-max_bytes:].decode(errors="replace")
