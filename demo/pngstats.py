"""What a screenshot shows, roughly, without an imaging library: a PNG's size and how many distinct colours it
has (a blank or spinner-only page has a handful; a page of text, tables and graphs hundreds or more).

Decodes 8-bit RGB/RGBA, non-interlaced PNGs (what Chromium writes) with ``zlib`` and the PNG row filters.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunks(data: bytes):
    pos = len(SIGNATURE)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        yield data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _unfilter(kind: int, row: bytearray, prev: bytes, bpp: int) -> bytearray:
    if kind == 0:
        return row
    if kind == 2:
        return bytearray((x + p) & 255 for x, p in zip(row, prev, strict=True))
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        if kind == 1:
            row[i] = (row[i] + left) & 255
        elif kind == 3:
            row[i] = (row[i] + ((left + prev[i]) >> 1)) & 255
        else:
            row[i] = (row[i] + _paeth(left, prev[i], prev[i - bpp] if i >= bpp else 0)) & 255
    return row


def png_stats(path: Path, step: int = 4) -> dict[str, int]:
    """``{"width", "height", "bytes", "colours"}`` of a PNG; ``colours`` counts the distinct colours of every
    ``step``-th pixel of every row. ``ValueError`` if it is not an 8-bit RGB(A) non-interlaced PNG."""
    data = Path(path).read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG")
    chunks = list(_chunks(data))
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise ValueError(f"{path}: depth {depth}, colour type {colour_type}, interlace {interlace}: not decoded")
    bpp = 4 if colour_type == 6 else 3
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = width * bpp
    prev = bytes(stride)
    colours = set()
    for y in range(height):
        start = y * (stride + 1)
        row = _unfilter(raw[start], bytearray(raw[start + 1 : start + 1 + stride]), prev, bpp)
        colours.update(bytes(row[x : x + bpp]) for x in range(0, stride, bpp * step))
        prev = row
    return {"width": width, "height": height, "bytes": len(data), "colours": len(colours)}
