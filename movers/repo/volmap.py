"""The volume map: which chunk holds each byte of a backed-up volume.

A map is an ordered list of non-overlapping entries ``(volume offset, length, chunk id,
offset in chunk)``; bytes no entry covers are holes (zeros). The map is cut into pages by
address range (``page_size`` bytes of volume each) and pages are grouped into directories
of ``DIR_FANOUT`` page slots. Pages and directories are content-addressed immutable objects
(``maps/<id[:2]>/<id>``), so an incremental rewrites only the pages its changes touch and
the directories above them; every other page is shared with the parent by id.

Pages also carry the block digests of ``movers.repo.digests`` (or none: all unknown).
Located pages (format version 2) also carry where each chunk they use is stored, so a reader
needs no chunk index: ``(chunk id, pack id, offset in pack, stored length, raw length, flags)``.

Byte formats (little-endian)::

    page:      b"CBTMAP\\x01" '<QQII' (page start, page length, n entries, digest count)
               zstd(n x '<QI32sI' entries, then digest count x 16-byte digests)
    located:   b"CBTMAP\\x02" '<QQIII' (page start, page length, n entries, digest count, n chunks)
               zstd(entries, digests as above, then n chunks x '<32s32sQIIB' locations)
    directory: b"CBTDIR\\x01" '<I' (n slots) zstd(n x '<32sI' (page id or zeros, entry count))
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

import zstandard

from movers.errors import IntegrityError
from movers.repo.digests import DIGEST_LEN
from movers.repo.index import ChunkLocation

PAGE_MAGIC = b"CBTMAP\x01"
LOCATED_PAGE_MAGIC = b"CBTMAP\x02"
DIR_MAGIC = b"CBTDIR\x01"
MAP_PREFIX = "maps/"
DIR_FANOUT = 256
NO_PAGE = bytes(32)
_PAGE_HEAD = struct.Struct("<QQII")
_LOCATED_HEAD = struct.Struct("<QQIII")
_LOCATION = struct.Struct("<32s32sQIIB")
_ENTRY = struct.Struct("<QI32sI")
_DIR_HEAD = struct.Struct("<I")
_SLOT = struct.Struct("<32sI")

# (volume offset, length, chunk id, offset inside the chunk)
Entry = tuple[int, int, bytes, int]
Range = tuple[int, int]  # [start, end)


def map_key(object_id: bytes) -> str:
    h = object_id.hex()
    return f"{MAP_PREFIX}{h[:2]}/{h}"


def _zstd(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3, write_checksum=True).compress(raw)


def _unzstd(data: bytes, what: str) -> bytes:
    try:
        return zstandard.ZstdDecompressor().decompress(data)
    except zstandard.ZstdError as err:
        raise IntegrityError(f"{what} does not decompress: {err}") from None


Locations = Mapping[bytes, ChunkLocation]  # chunk id -> where it is stored


def encode_page(
    page_start: int,
    page_len: int,
    entries: Sequence[Entry],
    digests: bytes = b"",
    locations: Locations | None = None,
) -> tuple[bytes, bytes]:
    """Return ``(page id, page bytes)``; ``digests`` is the concatenated block digests.

    With ``locations`` (which must locate every chunk an entry uses) the page is a located page.
    """
    if len(digests) % DIGEST_LEN:
        raise ValueError("digests must be whole digests")
    body = b"".join(_ENTRY.pack(*e) for e in entries) + digests
    if locations is None:
        head = PAGE_MAGIC + _PAGE_HEAD.pack(page_start, page_len, len(entries), len(digests) // DIGEST_LEN)
    else:
        used = sorted({e[2] for e in entries})
        body += b"".join(_LOCATION.pack(cid, *locations[cid]) for cid in used)
        head = LOCATED_PAGE_MAGIC + _LOCATED_HEAD.pack(
            page_start, page_len, len(entries), len(digests) // DIGEST_LEN, len(used)
        )
    data = head + _zstd(body)
    return hashlib.sha256(data).digest(), data


def decode_page(data: bytes, expected_id: bytes | None = None) -> tuple[int, int, list[Entry], bytes]:
    """Return ``(page start, page length, entries, digests)``; verifies the id when given."""
    return decode_located_page(data, expected_id)[:4]


def decode_located_page(
    data: bytes, expected_id: bytes | None = None
) -> tuple[int, int, list[Entry], bytes, dict[bytes, ChunkLocation] | None]:
    """``decode_page`` plus the page's chunk locations (None for a page of format version 1).

    A located page that does not locate every chunk its entries use is damaged.
    """
    if expected_id is not None and hashlib.sha256(data).digest() != expected_id:
        raise IntegrityError(f"map page {expected_id.hex()[:16]} does not match its hash")
    if data.startswith(PAGE_MAGIC):
        start, length, n, n_digests = _PAGE_HEAD.unpack_from(data, len(PAGE_MAGIC))
        n_located, body_at = None, len(PAGE_MAGIC) + _PAGE_HEAD.size
    elif data.startswith(LOCATED_PAGE_MAGIC):
        start, length, n, n_digests, n_located = _LOCATED_HEAD.unpack_from(data, len(LOCATED_PAGE_MAGIC))
        body_at = len(LOCATED_PAGE_MAGIC) + _LOCATED_HEAD.size
    else:
        raise IntegrityError("object is not a map page of a known version")
    body = _unzstd(data[body_at:], "map page")
    split = n * _ENTRY.size
    table = split + n_digests * DIGEST_LEN
    if len(body) != table + (n_located or 0) * _LOCATION.size:
        raise IntegrityError("map page is truncated")
    entries = list(_ENTRY.iter_unpack(body[:split]))
    if n_located is None:
        return start, length, entries, body[split:table], None
    locations = {cid: ChunkLocation(*rest) for cid, *rest in _LOCATION.iter_unpack(body[table:])}
    if any(e[2] not in locations for e in entries):
        raise IntegrityError("map page does not locate every chunk it uses")
    return start, length, entries, body[split:table], locations


def encode_dir(slots: Sequence[tuple[bytes, int]]) -> tuple[bytes, bytes]:
    """``slots`` are ``(page id or NO_PAGE, entry count)``. Returns ``(dir id, bytes)``."""
    body = b"".join(_SLOT.pack(pid, n) for pid, n in slots)
    data = DIR_MAGIC + _DIR_HEAD.pack(len(slots)) + _zstd(body)
    return hashlib.sha256(data).digest(), data


def decode_dir(data: bytes, expected_id: bytes | None = None) -> list[tuple[bytes, int]]:
    if expected_id is not None and hashlib.sha256(data).digest() != expected_id:
        raise IntegrityError(f"map directory {expected_id.hex()[:16]} does not match its hash")
    if not data.startswith(DIR_MAGIC):
        raise IntegrityError("object is not a map directory of a known version")
    (n,) = _DIR_HEAD.unpack_from(data, len(DIR_MAGIC))
    body = _unzstd(data[len(DIR_MAGIC) + _DIR_HEAD.size :], "map directory")
    if len(body) != n * _SLOT.size:
        raise IntegrityError("map directory is truncated")
    return list(_SLOT.iter_unpack(body))


def overlay(parent: Iterable[Entry], covered: Sequence[Range], new: Iterable[Entry]) -> list[Entry]:
    """The map after a backup that re-read the ``covered`` ranges and found ``new`` entries.

    ``parent`` entries outside ``covered`` survive (clipped where a covered range cuts them);
    inside ``covered`` only ``new`` entries exist (what they do not cover is a hole).
    ``covered`` is sorted and non-overlapping; ``new`` lies inside ``covered``.
    """
    out: list[Entry] = []
    ci = 0
    nc = len(covered)
    for voff, length, cid, coff in parent:
        end = voff + length
        while ci < nc and covered[ci][1] <= voff:
            ci += 1
        pos = voff
        j = ci
        while pos < end:
            if j >= nc or covered[j][0] >= end:
                out.append((pos, end - pos, cid, coff + pos - voff))
                break
            cs, ce = covered[j]
            if cs > pos:
                out.append((pos, cs - pos, cid, coff + pos - voff))
            pos = max(pos, ce)
            j += 1
    out.extend(new)
    out.sort(key=itemgetter(0))
    return out


def check_entries(entries: Sequence[Entry], start: int, end: int) -> None:
    """Raise ``IntegrityError`` unless entries are ascending, disjoint and inside [start, end)."""
    pos = start
    for voff, length, _cid, _coff in entries:
        if voff < pos or length <= 0 or voff + length > end:
            raise IntegrityError(f"map entry at volume offset {voff} is out of order or out of range")
        pos = voff + length
