"""pytest fixtures for a moto S3 server running as a subprocess on loopback.

* ``moto_server`` (session): starts ``moto_server`` on 127.0.0.1 with a free port, waits until it
  answers HTTP, yields a ``MotoServer`` (``endpoint_url``, ``client()``), and stops it in every
  outcome (teardown, or the kernel's parent-death signal on Linux if pytest is killed).
* ``s3_bucket`` (function): a fresh, uniquely named bucket on that server; yields
  ``(endpoint_url, bucket)`` and empties and deletes the bucket afterwards.

Nothing global is changed: credentials (``CREDENTIALS``, region ``REGION``) are passed explicitly.
"""

from __future__ import annotations

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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
STARTUP_TIMEOUT = 30.0


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str
    process: subprocess.Popen

    def client(self):
        """A plain boto3 S3 client for this server (fake credentials, path-style)."""
        return s3_client(self.endpoint_url)


def s3_client(endpoint_url: str):
    """A plain boto3 S3 client for the test server (fake credentials, path-style)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
        **CREDENTIALS,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(port: int) -> list[str]:
    script = Path(sys.executable).with_name("moto_server")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "moto.server"]
    return [*base, "-H", "127.0.0.1", "-p", str(port)]


def _wait_ready(proc: subprocess.Popen, url: str, deadline: float) -> bool:
    """Poll ``url`` until any HTTP answer; False if the process exits or the deadline passes."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with opener.open(url, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # an HTTP error status still means the server is serving
        except OSError:
            time.sleep(0.05)  # poll interval, not a fixed wait
    return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: have the kernel SIGTERM the server if pytest dies without running teardown."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    with tempfile.TemporaryFile() as log:
        for _ in range(3):  # the free port may be taken between probing and binding
            port = _free_port()
            proc = subprocess.Popen(
                _command(port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
            try:
                endpoint = f"http://127.0.0.1:{port}"
                if _wait_ready(proc, endpoint + "/", time.monotonic() + STARTUP_TIMEOUT):
                    yield MotoServer(endpoint, proc)
                    return
            finally:
                _stop(proc)
        log.seek(0)
        output = log.read().decode(errors="replace")[-2000:]
    pytest.fail(f"moto_server did not start; last output:\n{output}")


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> Iterator[tuple[str, str]]:
    client = s3_client(moto_server.endpoint_url)
    bucket = f"test-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield moto_server.endpoint_url, bucket
    finally:
        for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)
