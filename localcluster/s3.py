"""A moto S3 server in its own process on loopback, started and stopped as a context manager.

``with moto_s3() as s3:`` yields an ``S3Server`` with ``endpoint_url`` and ``env`` (the
variables a child process needs: fake credentials, region, endpoint). The server is
terminated (then killed) in every outcome.
"""

from __future__ import annotations

import contextlib
import os
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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True
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


@contextlib.contextmanager
def moto_s3(timeout: float = 30.0) -> Iterator[S3Server]:
    """Run a moto S3 server on 127.0.0.1 for the duration of the block."""
    port = free_port()
    log = tempfile.TemporaryFile()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(_command(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        if not wait_http(url, timeout, proc):
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"moto S3 server did not start on {url}: {tail}")
        yield S3Server(url, proc)
    finally:
        stop(proc)
        log.close()
