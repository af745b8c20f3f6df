"""A store in a local folder (``file:///path``): one file per key, written atomically."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from movers.errors import AccessDeniedError, ObjectNotFound, PermanentStoreError, TransientStoreError
from movers.repo.store.base import validate_key


def _translate(err: OSError, key: str) -> Exception:
    if err.errno == errno.ENOENT:
        return ObjectNotFound(f"object {key} not found")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return AccessDeniedError(f"access denied to {key}: {err.strerror}")
    if err.errno in (errno.EINTR, errno.EAGAIN, errno.EBUSY):
        return TransientStoreError(f"local store error on {key}: {err.strerror}")
    return PermanentStoreError(f"local store error on {key}: {err.strerror}")


class LocalStore:
    """Objects are files under ``root``; ``put`` writes a temp file, fsyncs and renames it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:
            raise _translate(err, key) from None

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except OSError as err:
            raise _translate(err, key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return os.pread(f.fileno(), length, offset)
        except OSError as err:
            raise _translate(err, key) from None

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except OSError as err:
            raise _translate(err, key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[str]:
        # Walk only the deepest directory that the prefix fully names.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base_dir if base_dir else self.root
        if not start.is_dir():
            return
        keys = []
        for dirpath, _dirs, files in os.walk(start):
            rel_dir = os.path.relpath(dirpath, self.root)
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        yield from sorted(keys)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as err:
            raise _translate(err, key) from None

    def describe(self) -> str:
        return f"file://{self.root}"

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"
