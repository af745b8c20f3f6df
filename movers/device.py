"""Block devices and image files: size, positional IO and zeroing ranges."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import stat
import struct

from movers.errors import NotFoundError, UsageError

BLKGETSIZE64 = 0x80081272
BLKZEROOUT = 0x127F
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
ZERO_BLOCK = bytes(4 << 20)


def open_device(path: str, write: bool = False) -> int:
    """Open ``path`` for positional IO; errors become one-line ``MoverError``s."""
    flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise NotFoundError(f"device {path} does not exist") from None
    except PermissionError:
        raise UsageError(f"no permission to open device {path} for {'writing' if write else 'reading'}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a device or image file") from None


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


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


_libc = None


def _fallocate(fd: int, mode: int, offset: int, length: int) -> bool:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return _libc.fallocate(fd, mode, offset, length) == 0


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
            raise
    end = offset + length
    while offset < end:
        n = min(len(ZERO_BLOCK), end - offset)
        pwrite_all(fd, memoryview(ZERO_BLOCK)[:n], offset)
        offset += n
