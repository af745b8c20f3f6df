"""Chunk compression: the bytes of one chunk as it sits inside a pack.

A chunk is identified by the repository's content hash of its raw bytes (32 bytes,
``movers.repo.contenthash``). Stored form is a zstd frame, or the raw bytes when compression does
not shrink them (flag ``RAW``). ``decode_chunk`` always verifies the id and raises
``IntegrityError`` on any mismatch.
"""

from __future__ import annotations

import threading

import zstandard

from movers.errors import IntegrityError
from movers.repo.contenthash import ContentHash

ZSTD = 0
RAW = 1

_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "decompressor", None)
    if dec is None:
        dec = _local.decompressor = zstandard.ZstdDecompressor()
    return dec


def encode_chunk(data: bytes | memoryview, level: int) -> tuple[bytes, int]:
    """Return ``(stored bytes, flags)`` for raw chunk ``data``. Thread-safe."""
    packed = _compressor(level).compress(data)
    if len(packed) >= len(data):
        return bytes(data), RAW
    return packed, ZSTD


def decode_chunk(
    stored: bytes | memoryview, flags: int, raw_len: int, expected_id: bytes, content_hash: ContentHash
) -> bytes | memoryview:
    """Return the raw bytes of a stored chunk, verified against ``expected_id`` (a ``content_hash`` chunk id). A
    ``RAW`` chunk is returned as ``stored`` itself (no copy: a view stays a view of the caller's buffer)."""
    try:
        if flags == RAW:
            raw = stored
        elif flags == ZSTD:
            raw = _decompressor().decompress(stored, max_output_size=raw_len)
        else:
            raise IntegrityError(f"chunk {expected_id.hex()[:16]} has unknown flags {flags}")
    except zstandard.ZstdError as err:
        raise IntegrityError(f"chunk {expected_id.hex()[:16]} does not decompress: {err}") from None
    if len(raw) != raw_len or content_hash.chunk_id(raw) != expected_id:
        raise IntegrityError(f"chunk {expected_id.hex()[:16]} does not match its hash")
    return raw
