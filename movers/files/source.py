"""The bytes of a volume as the libyal readers take them: random access, and the engine's errors kept.

* ``RandomAccess``: what a volume's bytes come from: ``size`` and ``read(offset, length)`` (the lazy backup reader,
  ``movers.pipeline.lazy.BackupReader``; ``ImageFile`` for a local image).
* ``Source``: a ``RandomAccess`` that remembers the first ``MoverError`` its reads raised. The libyal readers call
  our file objects from C and turn whatever they raise into an ``OSError`` whose text is a chain of C function
  names; ``Source.reraise()`` puts the original error (e.g. the reader's ``IntegrityError`` for a damaged chunk,
  exit code 4) back in front of the user.
* ``SliceFile``: the file object the libyal readers open (``read``/``seek``/``tell``/``get_size``/``get_offset``)
  over ``[offset, offset + length)`` of a ``Source``: the whole volume, a partition or a physical volume.
"""

from __future__ import annotations

import io
import os
from typing import Protocol

from movers.errors import MoverError


class RandomAccess(Protocol):
    """Random-access reads of a volume of ``size`` bytes; ``read`` returns ``length`` bytes (fewer only at the end)."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, length: int) -> bytes: ...


class ImageFile:
    """A local image file as a ``RandomAccess`` (tests, and tools that read an image that is on disk)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, max(0, min(length, self.size - offset)), offset)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ImageFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Source:
    """``reader``'s bytes, remembering the first ``MoverError`` a read raised (``failure``; see the module doc)."""

    def __init__(self, reader: RandomAccess) -> None:
        self._reader = reader
        self.size = reader.size
        self.failure: MoverError | None = None

    def read(self, offset: int, length: int) -> bytes:
        try:
            return self._reader.read(offset, length)
        except MoverError as err:
            if self.failure is None:
                self.failure = err
            raise

    def reraise(self) -> None:
        """Raise the remembered failure, if any (call it where a libyal call failed)."""
        if self.failure is not None:
            raise self.failure


class SliceFile:
    """A file object over ``[offset, offset + length)`` of ``source`` (see the module doc)."""

    def __init__(self, source: Source, offset: int = 0, length: int | None = None) -> None:
        self.source, self.offset = source, offset
        self.length = source.size - offset if length is None else length
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        left = max(0, self.length - self._pos)
        size = left if size is None or size < 0 else min(size, left)
        if size == 0:
            return b""
        data = self.source.read(self.offset + self._pos, size)
        self._pos += len(data)
        return data

    def pread(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of the slice (fewer at its end), the position unchanged."""
        size = max(0, min(size, self.length - offset))
        return self.source.read(self.offset + offset, size) if size else b""

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.length}[whence]
        if base + offset < 0:
            raise OSError(f"seek to a negative offset ({base + offset})")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def get_offset(self) -> int:
        return self._pos

    def get_size(self) -> int:
        return self.length
