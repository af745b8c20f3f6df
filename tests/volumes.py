"""Test helpers: image files with controlled content, and a store that records reads."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator

BLOCK = 4096


def make_image(path, size: int, seed: int = 1, data_fraction: float = 0.5) -> None:
    """A sparse image of ``size`` bytes: random and text-like 64 KiB runs, the rest holes."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.truncate(size)
        for off in range(0, size, 64 * 1024):
            roll = rng.random()
            if roll >= data_fraction:
                continue
            n = min(64 * 1024, size - off)
            if roll < data_fraction / 2:
                data = rng.randbytes(n)
            else:
                data = (f"line {rng.randrange(10**6)} value={rng.random():.6f}\n" * (n // 20 + 1)).encode()[:n]
            os.pwrite(f.fileno(), data, off)


def write_blocks(path, offsets, seed: int = 2, length: int = BLOCK) -> list[tuple[int, int]]:
    """pwrite random bytes at each offset; returns the written extents, sorted and coalesced."""
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        for off in offsets:
            os.pwrite(f.fileno(), rng.randbytes(length), off)
    return coalesce(sorted((o, length) for o in set(offsets)))


def coalesce(extents) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for off, length in extents:
        if out and off <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], off + length - out[-1][0])
        else:
            out.append([off, length])
    return [(o, n) for o, n in out]


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class RecordingStore:
    """Wraps a store and records which keys were read and written."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.reads: Counter[str] = Counter()
        self.listed: Counter[str] = Counter()  # prefixes listed
        self.written: list[str] = []
        self.bytes_written = 0
        self._lock = threading.Lock()

    def put(self, key, data):
        self.inner.put(key, data)
        with self._lock:
            self.written.append(key)
            self.bytes_written += len(data)

    def put_new(self, key, data):
        written = self.inner.put_new(key, data)
        if written:
            with self._lock:
                self.written.append(key)
                self.bytes_written += len(data)
        return written

    def create(self, key, data):
        written = self.inner.create(key, data)
        if written:
            with self._lock:
                self.written.append(key)
                self.bytes_written += len(data)
        return written

    def get(self, key):
        with self._lock:
            self.reads[key] += 1
        return self.inner.get(key)

    def get_range(self, key, offset, length):
        with self._lock:
            self.reads[key] += 1
        return self.inner.get_range(key, offset, length)

    def size(self, key):
        return self.inner.size(key)

    def exists(self, key):
        return self.inner.exists(key)

    def list(self, prefix=""):
        with self._lock:
            self.listed[prefix] += 1
        return self.inner.list(prefix)

    def delete(self, key):
        self.inner.delete(key)

    def describe(self):
        return self.inner.describe()

    def reset(self) -> None:
        with self._lock:
            self.reads.clear()
            self.listed.clear()
            self.written.clear()
            self.bytes_written = 0


@contextlib.contextmanager
def loop_device(backing, read_only: bool = False) -> Iterator[str]:
    """A loop device over the file ``backing`` (``losetup``), detached afterwards; skips the test without root or
    losetup, or when the kernel refuses one."""
    import pytest

    if shutil.which("losetup") is None or os.geteuid() != 0:
        pytest.skip("needs root and losetup")
    flags = ["--read-only"] if read_only else []
    proc = subprocess.run(["losetup", "--find", "--show", *flags, str(backing)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"losetup {' '.join(flags)} failed: {proc.stderr.strip()}")
    dev = proc.stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
