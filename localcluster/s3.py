"""A moto S3 server in its own process on loopback, started and stopped as a context manager.

``with moto_s3() as s3:`` yields an ``S3Server`` with ``endpoint_url`` and ``env`` (the
variables a child process needs: fake credentials, region, endpoint). The server is
terminated (then killed) in every outcome.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    process: subprocess.Popen = field(repr=False)

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(port: int) -> list[str]:
    script = Path(sys.executable).with_name("moto_server")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "moto.server"]
    return [*base, "-H", "127.0.0.1", "-p", str(port)]


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    """Poll ``url`` until any HTTP answer; False if ``proc`` exits or the time runs out."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with opener.open(url, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # an error status still means the server is serving
        except OSError:
            time.sleep(0.05)  # poll interval
    return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the kernel SIGTERMs the server if its parent dies without cleaning up."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def moto_s3(timeout: float = 30.0) -> Iterator[S3Server]:
    """Run a moto S3 server on 127.0.0.1 for the duration of the block."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryFile() as log:
        for _attempt in range(3):  # the free port may be taken between probing and binding
            port = free_port()
            proc = subprocess.Popen(
                _command(port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                if wait_http(url, timeout, proc):
                    yield S3Server(url, proc)
                    return
            finally:
                stop(proc)
        log.seek(0)
        tail = log.read()[-2000:].decode(errors="replace")
    raise RuntimeError(f"moto S3 server did not start: {tail}")
