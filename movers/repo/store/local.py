"""A store in a local folder (``file:///path``): one file per key, written atomically."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from movers.errors import AccessDeniedError, ObjectNotFound, PermanentStoreError, TransientStoreError
from movers.repo.store.base import TEMPORARY_MAX_AGE_S, TEMPORARY_PREFIX, validate_key
from movers.repo.store.counting import LIST_PAGE_KEYS, RequestCounts

log = logging.getLogger(__name__)
CREATE_LOCK_STALE_S = 60.0  # a create lock this old was left by a killed writer
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP}  # what link(2) says on filesystems without them


def _translate(err: OSError, key: str) -> Exception:
    if err.errno == errno.ENOENT:
        return ObjectNotFound(f"object {key} not found")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return AccessDeniedError(f"access denied to {key}: {err.strerror}")
    if err.errno in (errno.EINTR, errno.EAGAIN, errno.EBUSY):
        return TransientStoreError(f"local store error on {key}: {err.strerror}")
    return PermanentStoreError(f"local store error on {key}: {err.strerror}")


def _sync_directory(path: Path) -> None:
    """fsync a directory, so a name just linked or renamed into it survives a power loss (the contract says a
    ``put`` that returned is durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _create_lock(path: Path, wait_s: float = 10.0) -> Iterator[None]:
    """Hold the lock file that serialises creating ``path`` where hard links are missing."""
    name = hashlib.sha256(path.name.encode()).hexdigest()[:32]
    lock = path.parent / f"{TEMPORARY_PREFIX}create-{name}"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            break
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime > CREATE_LOCK_STALE_S:
                    lock.unlink(missing_ok=True)  # its holder was killed: it renames in milliseconds
                    continue
            except FileNotFoundError:
                continue
            if time.monotonic() > deadline:
                raise TransientStoreError(
                    f"{path.name} is being created by another writer (lock {lock.name})"
                ) from None
            time.sleep(0.01)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


class LocalStore:
    """Objects are files under ``root``. A write goes to a temporary file (``.tmp-*`` beside the
    object, fsynced) that ``put`` renames into place and ``put_new`` (and ``create``, the same) hard-links
    into place: the link fails if the key exists, so creating a key is atomic and happens at most once. On
    a filesystem without hard links they take a lock file beside the key (``.tmp-create-*``, created with
    O_EXCL; one older than ``CREATE_LOCK_STALE_S`` is a killed writer's and is broken), check, then rename.
    A writer killed mid-write leaves its temporary file: ``list`` never shows it and
    ``sweep_temporaries`` (called by prune) deletes it once it is old."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._hard_links = True  # False once the filesystem refused one
        self.requests = RequestCounts()

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    @staticmethod
    def _write_temporary(path: Path, data: bytes) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMPORARY_PREFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return tmp

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self.requests.add("put")
        try:
            tmp = self._write_temporary(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            _sync_directory(path.parent)
        except OSError as err:
            raise _translate(err, key) from None

    def put_new(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        self.requests.add("put")
        if path.is_file():  # the common "already stored" case without writing anything
            return False
        try:
            tmp = self._write_temporary(path, data)
            try:
                return self._create(tmp, path)
            finally:
                Path(tmp).unlink(missing_ok=True)
        except OSError as err:
            raise _translate(err, key) from None

    def _create(self, tmp: str, path: Path) -> bool:
        """Give the complete file ``tmp`` the name ``path`` unless that exists; True if it did."""
        if self._hard_links:
            try:
                os.link(tmp, path)
                _sync_directory(path.parent)
                return True
            except FileExistsError:
                if path.is_dir():  # a key that is a prefix of other keys: as put would fail
                    raise IsADirectoryError(errno.EISDIR, "is a directory") from None
                return False
            except OSError as err:
                if err.errno not in _NO_HARD_LINKS:
                    raise
                log.info(
                    "%s: no hard links on this filesystem (%s): creating a key takes a lock file", self, err.strerror
                )
                self._hard_links = False
        with _create_lock(path):
            if path.is_file():
                return False
            os.replace(tmp, path)
            _sync_directory(path.parent)
        return True

    def create(self, key: str, data: bytes) -> bool:
        """``put_new``: it never rewrites a key (see the class docstring)."""
        return self.put_new(key, data)

    def get(self, key: str) -> bytes:
        path = self._path(key)
        self.requests.add("get")
        try:
            return path.read_bytes()
        except OSError as err:
            raise _translate(err, key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        path = self._path(key)
        self.requests.add("range_get")
        try:
            with open(path, "rb") as f:
                return os.pread(f.fileno(), length, offset)
        except OSError as err:
            raise _translate(err, key) from None

    def size(self, key: str) -> int:
        path = self._path(key)
        self.requests.add("head")
        try:
            return path.stat().st_size
        except OSError as err:
            raise _translate(err, key) from None

    def exists(self, key: str) -> bool:
        path = self._path(key)
        self.requests.add("head")
        return path.is_file()

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix`` in byte order, walking the directories as it goes (one directory's names in
        memory at a time, never the whole listing); LIST pages counted as S3 would return them."""
        # Walk only the deepest directory that the prefix fully names.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base_dir if base_dir else self.root
        self.requests.add("list_pages")
        if not start.is_dir():
            return
        listed = 0
        for key in self._walk(start, f"{base_dir}/" if base_dir else "", prefix):
            listed += 1
            if listed > LIST_PAGE_KEYS and listed % LIST_PAGE_KEYS == 1:
                self.requests.add("list_pages")
            yield key

    def _walk(self, directory: Path, rel: str, prefix: str) -> Iterator[str]:
        """The keys under ``directory`` (whose keys start with ``rel``) that start with ``prefix``, in byte order:
        a directory's names sorted with ``/`` after a subdirectory's name, as its keys continue (symbolic links to
        directories are not followed, as ``os.walk`` does not)."""
        names = []
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir():
                    if not entry.is_symlink():
                        names.append((f"{entry.name}/", entry.path))
                elif not entry.name.startswith(TEMPORARY_PREFIX):
                    names.append((entry.name, None))
        names.sort()
        for name, path in names:
            key = rel + name
            if path is None:
                if key.startswith(prefix):
                    yield key
            elif key.startswith(prefix) or prefix.startswith(key):
                yield from self._walk(Path(path), key, prefix)

    def delete(self, key: str) -> None:
        path = self._path(key)
        self.requests.add("delete")
        try:
            path.unlink(missing_ok=True)
        except OSError as err:
            raise _translate(err, key) from None

    def sweep_temporaries(self, older_than_s: float = TEMPORARY_MAX_AGE_S) -> tuple[int, int]:
        """Delete the temporary files (``.tmp-*``, never listed) that writers killed mid-write left:
        those last modified more than ``older_than_s`` ago (a live write keeps its file fresh and
        renames it moments after its last byte). Returns ``(files, bytes)`` removed."""
        cutoff = time.time() - older_than_s
        files = size = 0
        for dirpath, _dirs, names in os.walk(self.root):
            for name in names:
                if not name.startswith(TEMPORARY_PREFIX):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    stat = os.stat(path)
                    if stat.st_mtime >= cutoff:
                        continue
                    os.unlink(path)
                except FileNotFoundError:  # renamed into place or removed meanwhile
                    continue
                except OSError as err:
                    log.warning("cannot remove the temporary file %s: %s", path, err.strerror)
                    continue
                files, size = files + 1, size + stat.st_size
        if files:
            log.info("removed %d temporary file(s), %d bytes, left by interrupted writes in %s", files, size, self)
        return files, size

    def describe(self) -> str:
        return f"file://{self.root}"

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"
