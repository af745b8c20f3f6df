"""A real Prefect server with its UI (``prefect server start``) on a free loopback port, with its own
temporary ``PREFECT_HOME`` (sqlite database, profiles): for tests and screenshots of the UI.

``make ui`` runs the same server in the foreground on a fixed port with its state in ``.prefect/``
(``python -m deploy.prefect_server --home .prefect --port 4200``); ``PrefectServer`` is thrown away with
its home when it stops. Analytics are off; nothing of the user's ``~/.prefect`` is read or written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PREFECT = (sys.executable, "-m", "prefect")  # the CLI of the Prefect this process imports


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(home: Path, port: int) -> dict[str, str]:
    """The environment of a server (and its clients' settings removed): state in ``home``, UI on, no analytics."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return env | {
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "true",
        "PREFECT_SERVER_UI_API_URL": f"http://127.0.0.1:{port}/api",
    }


def healthy(api_url: str) -> bool:
    """Whether the Prefect API at ``api_url`` answers its health check now."""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def wait_healthy(api_url: str, timeout: float = 180.0) -> None:
    """Wait until the Prefect API at ``api_url`` is healthy; ``RuntimeError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not healthy(api_url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no healthy Prefect API at {api_url} after {timeout:.0f} s")
        time.sleep(0.2)


class PrefectServer:
    """``prefect server start`` on loopback; ``url`` (the UI), ``api_url``. A context manager: started and
    healthy on enter (``RuntimeError`` with the server's output if it is not within ``timeout`` seconds), the
    process group stopped and the home removed on exit."""

    def __init__(self, timeout: float = 180.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api"
        self.timeout = timeout
        self._home = Path(tempfile.mkdtemp(prefix="cbt-mover-prefect-ui-"))
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> PrefectServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, wait: bool = True) -> None:
        """Start the server; with ``wait``, return once it is healthy (else ``wait_healthy`` does)."""
        self._started = time.monotonic()
        log = open(self._home / "server.log", "wb")  # noqa: SIM115  (the child writes it; closed right after)
        with log:
            self._proc = subprocess.Popen(
                [*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=server_env(self._home, self.port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers with it, stopped as a group
            )
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        """Wait until the API answers its health check; ``RuntimeError`` with the server's output if it exits or
        does not answer within ``timeout`` seconds of ``start``."""
        deadline = self._started + self.timeout
        while not healthy(self.api_url):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Prefect server did not start on {self.url}:\n{self.output()[-3000:]}")
            time.sleep(0.2)

    def output(self) -> str:
        """What the server printed so far."""
        try:
            return (self._home / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after 20 s) and remove its home."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # anything of the group that outlived the server
            except ProcessLookupError:
                pass
        shutil.rmtree(self._home, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    """``make ui``: the server in the foreground with its state in ``--home``, on loopback port ``--port``."""
    parser = argparse.ArgumentParser(prog="python -m deploy.prefect_server")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--port", type=int, default=4200)
    args = parser.parse_args(argv)
    args.home.mkdir(parents=True, exist_ok=True)
    command = [*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(args.port)]
    os.execvpe(command[0], command, server_env(args.home.resolve(), args.port))


if __name__ == "__main__":
    main()
