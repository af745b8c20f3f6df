"""A read-only FUSE view of one backup's volume: one image file, served by a lazy ``BackupReader``.

``serve(reader, mountpoint, name, ...)`` mounts ``mountpoint`` (read-only, in the foreground, with libfuse's
multithreaded loop, so concurrent reads are served concurrently) showing exactly one regular file, ``name``: the
volume as an image of ``reader.size`` bytes, mode 0444, owned by the mounting user, its times the backup's. It
returns once the mount is gone: after SIGINT, SIGTERM or SIGHUP (libfuse's own handlers end the loop, then it
unmounts) or after an unmount from outside (``fusermount3 -u``, ``umount``). ``on_ready`` is called once the kernel
has opened the mount (FUSE's INIT), before the first request is answered.

Reads are the reader's (each chunk fetched once while in its bounded cache, verified, read-ahead for sequential
readers); the kernel keeps what it read in its page cache (the image never changes: ``kernel_cache``) and asks in
requests of up to 1 MiB. A read the reader cannot serve (a damaged chunk, an unavailable store) fails with EIO
after one error line naming the volume range; the mount keeps serving other reads. Every change (write, truncate,
create, chmod, ...) is refused with EROFS, besides the ``ro`` mount option. Each read's range is logged at DEBUG.

libfuse 3 is loaded (by mfusepy, over ctypes) only when ``serve`` or ``check_fuse`` runs: no ``/dev/fuse`` or no
loadable libfuse raises ``FuseUnavailable`` (exit code 2). ``FUSE_LIBRARY_PATH`` names the library to load
(mfusepy's setting).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType

from movers.errors import MoverError, UsageError
from movers.pipeline.lazy import BackupReader

log = logging.getLogger(__name__)

FUSE_DEVICE = "/dev/fuse"
NAME_MAX = 255  # bytes of one file name on Linux
MAX_READ = 1 << 20  # bytes the kernel may ask in one read (what libfuse 3's buffers take)
MAX_THREADS = 16  # libfuse's worker threads at most, and idle ones kept (3.14 complains of an unset idle limit)
CACHE_TIMEOUT = 86400.0  # seconds the kernel may keep names and attributes: nothing in the view ever changes


class FuseUnavailable(UsageError):
    """FUSE cannot be used on this machine: no ``/dev/fuse``, or libfuse 3 cannot be loaded (exit code 2)."""


def check_fuse() -> ModuleType:
    """mfusepy, loaded over this machine's libfuse; ``FuseUnavailable`` when there is none."""
    if not os.path.exists(FUSE_DEVICE):
        raise FuseUnavailable(
            f"FUSE is not available here: no {FUSE_DEVICE} (load the fuse module, or give a container the device)"
        )
    try:
        import mfusepy
    except (OSError, AttributeError) as err:  # mfusepy raises these at import when libfuse is missing or unusable
        raise FuseUnavailable(
            f"FUSE is not available here: libfuse 3 cannot be loaded ({err}); install fuse3"
        ) from None
    return mfusepy


def image_name(volume_id: str) -> str:
    """The image's file name for ``volume_id``: the id with ``/`` replaced by ``_``, then ``.img``
    (``ns/pvc`` -> ``ns_pvc.img``); an id too long for one file name is cut and ends with 12 hex digits of its
    SHA-256 instead."""
    safe = volume_id.replace("/", "_").replace("\0", "_")
    name = f"{safe}.img"
    if len(name.encode()) <= NAME_MAX:
        return name
    digest = hashlib.sha256(volume_id.encode()).hexdigest()[:12]
    return f"{safe.encode()[: NAME_MAX - 17].decode(errors='ignore')}-{digest}.img"


def check_mountpoint(directory: str) -> Path:
    """``directory`` if it is an existing, empty directory; else ``UsageError`` naming what is wrong."""
    path = Path(directory)
    if not path.exists():
        raise UsageError(f"mount point {directory} does not exist (create an empty directory)")
    if not path.is_dir():
        raise UsageError(f"mount point {directory} is not a directory")
    try:
        if any(path.iterdir()):
            raise UsageError(f"mount point {directory} is not empty")
    except PermissionError:
        raise UsageError(f"mount point {directory} cannot be read (permission denied)") from None
    return path.absolute()


def backup_time(created: str) -> float:
    """Seconds since the epoch of a manifest's ``created`` (ISO 8601); 0 when it does not parse."""
    try:
        return datetime.fromisoformat(created).timestamp()
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class MountResult:
    """What ``cbt-mover mount`` prints once unmounted: the view's image and what its reads fetched (stored bytes,
    gaps of coalesced GETs included) in how long (from the command's start)."""

    volume: str
    backup_id: str
    image: str
    fetched_bytes: int
    chunks_fetched: int
    duration_s: float

    def as_output(self) -> dict:
        return asdict(self)


class ImageView:
    """mfusepy's operations of the view (see the module doc): one directory holding the image ``name``."""

    use_ns = True  # times in nanoseconds (mfusepy's current interface)

    def __init__(
        self, reader: BackupReader, name: str, mtime: float, volume: str, on_ready: Callable[[], None]
    ) -> None:
        self.reader, self.name, self.volume = reader, name, volume
        self._path = "/" + name
        self._ns = int(mtime * 1e9)
        self._uid, self._gid = os.getuid(), os.getgid()
        self._on_ready = on_ready
        self.ready = threading.Event()

    def init_with_config(self, conn, config) -> None:
        if conn is not None:
            conn.max_read = MAX_READ  # the mount option's value: libfuse refuses a mount where the two differ
        if config is not None:
            config.kernel_cache = 1
            config.attr_timeout = config.entry_timeout = config.negative_timeout = CACHE_TIMEOUT
        self.ready.set()
        self._on_ready()

    def getattr(self, path: str, _fh=None) -> dict:
        times = {"st_atime": self._ns, "st_mtime": self._ns, "st_ctime": self._ns}
        owner = {"st_uid": self._uid, "st_gid": self._gid}
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2, "st_size": 0, **owner, **times}
        if path == self._path:
            size = self.reader.size
            return {
                "st_mode": stat.S_IFREG | 0o444,
                "st_nlink": 1,
                "st_size": size,
                "st_blocks": -(-size // 512),
                "st_blksize": 1 << 20,
                **owner,
                **times,
            }
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))

    def readdir(self, path: str, _fh) -> list[str]:
        if path != "/":
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        return [".", "..", self.name]

    def open(self, path: str, flags: int) -> int:
        if path != self._path:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return 0

    def read(self, path: str, size: int, offset: int, _fh) -> bytes:
        log.debug("read [%d, %d)", offset, offset + size)
        try:
            return self.reader.read(offset, size)
        except MoverError as err:
            log.error("cannot read bytes [%d, %d) of volume %s: %s", offset, offset + size, self.volume, err)
        except Exception as err:  # noqa: BLE001 - one line per failed read, the mount serves on
            log.error(
                "cannot read bytes [%d, %d) of volume %s: %s: %s",
                offset,
                offset + size,
                self.volume,
                type(err).__name__,
                err,
            )
            log.debug("read failed", exc_info=True)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    def statfs(self, _path: str) -> dict:
        blocks = -(-self.reader.size // 4096)
        return {
            "f_bsize": 4096,
            "f_frsize": 4096,
            "f_blocks": blocks,
            "f_bfree": 0,
            "f_bavail": 0,
            "f_files": 1,
            "f_ffree": 0,
            "f_namemax": NAME_MAX,
        }

    def _refuse(self, *_args) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    write = truncate = create = mknod = mkdir = unlink = rmdir = symlink = rename = link = _refuse
    chmod = chown = utimens = setxattr = removexattr = fallocate = _refuse


def serve(
    reader: BackupReader,
    mountpoint: Path,
    name: str,
    *,
    mtime: float,
    volume: str,
    on_ready: Callable[[], None] = lambda: None,
    allow_other: bool = False,
) -> None:
    """Mount the view at ``mountpoint`` and serve it until it is unmounted (see the module doc). Raises
    ``FuseUnavailable`` without FUSE, ``UsageError`` when the mount itself fails (libfuse names why on stderr)."""
    mfusepy = check_fuse()
    view = ImageView(reader, name, mtime, volume, on_ready)
    options = {"ro": True, "default_permissions": True, "max_read": MAX_READ, "allow_other": allow_other}
    options["max_threads"] = options["max_idle_threads"] = MAX_THREADS
    try:
        mfusepy.FUSE(view, str(mountpoint), foreground=True, fsname="cbt-mover", **options)  # multithreaded
    except RuntimeError as err:
        if not view.ready.is_set():
            raise UsageError(f"cannot mount FUSE at {mountpoint} (libfuse's reason is above; status {err})") from None
        # libfuse 3.14 reports a loop ended by a signal as a failure (status 8): the mount is gone all the same
        log.debug("the FUSE loop ended with status %s", err)
