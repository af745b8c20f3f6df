"""Block devices and image files: size, positional IO and zeroing ranges."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import struct
from collections.abc import Iterable

from movers.errors import NotFoundError, UsageError

BLKGETSIZE64 = 0x80081272
BLKROGET = 0x125E
BLKZEROOUT = 0x127F
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
ZERO_BLOCK = bytes(4 << 20)


def open_device(path: str, write: bool = False) -> int:
    """Open ``path``, a block device or regular file, for positional IO; errors (a directory, a FIFO,
    a missing path, no permission, ...) become one-line ``MoverError``s."""
    _check_kind(path, _stat(path))
    flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise NotFoundError(f"device {path} does not exist") from None
    except PermissionError:
        raise UsageError(f"no permission to open device {path} for {'writing' if write else 'reading'}") from None
    except OSError as err:
        raise UsageError(f"cannot open device {path} for {'writing' if write else 'reading'}: {err.strerror}") from None
    try:
        _check_kind(path, os.fstat(fd))  # replaced since the stat: what was opened counts
    except UsageError:
        os.close(fd)
        raise
    return fd


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise NotFoundError(f"device {path} does not exist") from None
    except OSError as err:
        raise UsageError(f"cannot use {path} as a device: {err.strerror}") from None


def _check_kind(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} is a directory, not a device or image file")
    if not (stat.S_ISBLK(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise UsageError(f"{path} is neither a block device nor a regular file")


def check_source(path: str) -> None:
    """What a backup checks before any work: ``path`` is a readable, non-empty block device or
    regular file (``NotFoundError`` when it does not exist, ``UsageError`` otherwise)."""
    fd = open_device(path)
    try:
        if device_size(fd) <= 0:
            raise UsageError(f"device {path} is empty")
    finally:
        os.close(fd)


def check_target(path: str) -> None:
    """What a restore checks before any work, changing nothing: ``path`` is a block device or regular
    file it may open for writing, or does not exist in a directory where it may create it
    (``UsageError`` otherwise)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise UsageError(f"cannot create restore target {path}: directory {parent} does not exist") from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(f"cannot create restore target {path}: no permission to write in {parent}") from None
        return
    except OSError as err:
        raise UsageError(f"cannot use restore target {path}: {err.strerror}") from None
    fd = open_device(path, write=True)
    try:
        if is_read_only(fd):
            raise ReadOnly(f"restore target {path} is a read-only block device")
    finally:
        os.close(fd)


def is_read_only(fd: int) -> bool:
    """Whether ``fd`` is a block device set read-only (``BLKROGET``): Linux opens one for writing, and then
    refuses every write (EPERM)."""
    if not is_block_device(fd):
        return False
    try:
        return struct.unpack("i", fcntl.ioctl(fd, BLKROGET, b"\0" * 4))[0] != 0
    except OSError:  # a device that cannot tell: its first write says
        return False


def is_block_device(fd: int) -> bool:
    return stat.S_ISBLK(os.fstat(fd).st_mode)


def device_size(fd: int) -> int:
    """Size in bytes of a block device or regular file."""
    if is_block_device(fd):
        buf = fcntl.ioctl(fd, BLKGETSIZE64, b"\0" * 8)
        return struct.unpack("<Q", buf)[0]
    return os.fstat(fd).st_size


def is_hole(fd: int, offset: int, length: int) -> bool:
    """Whether ``[offset, offset+length)`` of a regular file is a hole (SEEK_DATA finds no
    data before its end). False when the filesystem cannot tell."""
    try:
        return os.lseek(fd, offset, os.SEEK_DATA) >= offset + length
    except OSError as err:
        return err.errno == errno.ENXIO  # no data at or after offset


def prefetch(fd: int, ranges: Iterable[tuple[int, int]]) -> None:
    """Ask the kernel to start reading ``(offset, length)`` ranges now (``POSIX_FADV_WILLNEED``), so many small
    reads that follow are served from the page cache instead of waiting for the device one by one. A hint: where
    it is not supported nothing happens."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        for offset, length in ranges:
            advise(fd, offset, length, os.POSIX_FADV_WILLNEED)
    except OSError:
        return


def pread_exact(fd: int, length: int, offset: int) -> bytes:
    """Read exactly ``length`` bytes at ``offset`` (short reads are continued)."""
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            raise UsageError(f"device ended at {offset + got} while reading {length} bytes at {offset}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class NoRoom(UsageError):
    """The target cannot take what is written to it: its filesystem is full (ENOSPC), a quota is met
    (EDQUOT) or the file would pass the largest size allowed (EFBIG). Bad input (exit 2), like a
    target device smaller than the backup: retrying does not help, more room or another target does."""


class ReadOnly(UsageError):
    """The target refuses writes: a read-only block device (EPERM), a read-only filesystem (EROFS), or no
    permission (EACCES). Bad input (exit 2): another target, or one made writable, does."""


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_READ_ONLY = (errno.EPERM, errno.EROFS, errno.EACCES)


def _no_room(err: OSError, what: str) -> UsageError | OSError:
    """The ``UsageError`` for a write the target refused (``NoRoom``, ``ReadOnly``), else ``err`` itself."""
    if err.errno in _READ_ONLY:
        return ReadOnly(f"the target refuses writes ({err.strerror}) {what}")
    return NoRoom(f"{err.strerror} {what}") if err.errno in _NO_ROOM else err


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``; ``NoRoom`` when the target has no room for it."""
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n
    except OSError as err:
        raise _no_room(err, f"writing at offset {offset}") from None


def resize(fd: int, size: int) -> None:
    """Set a regular file's size to ``size`` bytes; ``NoRoom`` when it cannot be that large."""
    try:
        os.ftruncate(fd, size)
    except OSError as err:
        raise _no_room(err, f"making the target {size} bytes long") from None


def sync(fd: int) -> None:
    """fsync ``fd``; ``NoRoom`` when the data written could not be stored (NFS, thin provisioning)."""
    try:
        os.fsync(fd)
    except OSError as err:
        raise _no_room(err, "flushing the target") from None


_libc = None
_SYNC_FILE_RANGE_WRITE = 0x2


def _c_library() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        # the C library the interpreter is linked with, by its symbols (dlopen(NULL)); not ctypes.util.find_library,
        # which runs ldconfig in a subprocess: a cost in every restore's start
        libc = ctypes.CDLL(None, use_errno=True)
        for name, argtypes in (
            ("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
            ("sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]),
        ):
            if hasattr(libc, name):  # Linux only
                getattr(libc, name).argtypes = argtypes
        _libc = libc
    return _libc


def _fallocate(fd: int, mode: int, offset: int, length: int) -> bool:
    libc = _c_library()
    return hasattr(libc, "fallocate") and libc.fallocate(fd, mode, offset, length) == 0


def start_writeback(fd: int) -> None:
    """Start writing ``fd``'s dirty pages to the device now (``sync_file_range(SYNC_FILE_RANGE_WRITE)``) instead of
    when the kernel's dirty limits or the final ``sync`` force it, so a long write overlaps with the writeback and
    the final ``sync`` has little left to do. A hint, durable nothing: errors and systems without it are ignored
    (``sync`` still reports any write error)."""
    libc = _c_library()
    if hasattr(libc, "sync_file_range"):
        libc.sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def zero_range(fd: int, offset: int, length: int) -> None:
    """Make ``[offset, offset+length)`` read as zeros: BLKZEROOUT on block devices, hole
    punching on files, writing zeros where neither works."""
    if length <= 0:
        return
    try:
        if is_block_device(fd):
            fcntl.ioctl(fd, BLKZEROOUT, struct.pack("<QQ", offset, length))
            return
        if _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length):
            return
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL):
            raise _no_room(err, f"zeroing {length} bytes at offset {offset}") from None
    end = offset + length
    while offset < end:
        n = min(len(ZERO_BLOCK), end - offset)
        pwrite_all(fd, memoryview(ZERO_BLOCK)[:n], offset)
        offset += n
