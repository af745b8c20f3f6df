"""Pack objects: many stored chunks in one immutable, self-describing object.

Layout (all integers little-endian)::

    b"CBTPACK\\x01"                       8-byte header
    chunk 0 stored bytes | chunk 1 | ...  (see movers.repo.chunks)
    trailer: zstd frame (with checksum) of N entries '<32sQIIB'
             (chunk id, offset in pack, stored length, raw length, flags)
    footer:  '<I8s' (trailer length, b"CBTPEND\\x01")

A pack's id is the sha256 of all its bytes; its key is ``packs/<id[:2]>/<id>``. Reading the
last ``FOOTER_LEN`` bytes then the trailer recovers the pack's index without reading data, so
packs uploaded by a backup that crashed before writing its index are found and reused.

A sealed pack (encrypted repositories, random ids; ``movers.repo.crypto.PackSeal``) has the header
``b"CBTPACK\x02"``, each chunk's stored bytes sealed on their own (entries' offsets and stored lengths are
of the sealed bytes, so ranged reads work as before) and its trailer sealed; header and footer stay plain.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import zstandard

from movers.errors import IntegrityError
from movers.repo.crypto import SEAL_OVERHEAD, PackSeal

HEADER = b"CBTPACK\x01"
SEALED_HEADER = b"CBTPACK\x02"  # same length as HEADER
FOOTER_MAGIC = b"CBTPEND\x01"
# one entry of a trailer or an index object: chunk id, offset in the pack, stored length, raw length, flags
ENTRY = struct.Struct("<32sQIIB")
_FOOTER = struct.Struct("<I8s")
FOOTER_LEN = _FOOTER.size
PACK_PREFIX = "packs/"


@dataclass(frozen=True, slots=True)
class PackEntry:
    """Where one chunk lives inside a pack."""

    chunk_id: bytes
    offset: int
    stored_len: int
    raw_len: int
    flags: int


def pack_key(pack_id: bytes) -> str:
    h = pack_id.hex()
    return f"{PACK_PREFIX}{h[:2]}/{h}"


def pack_id_from_key(key: str) -> bytes:
    try:
        return bytes.fromhex(key.rsplit("/", 1)[-1])
    except ValueError:
        raise IntegrityError(f"unexpected object {key} among packs") from None


class PackBuilder:
    """Accumulates stored chunks; ``finish`` returns ``(pack id, pack bytes, entries)``.

    The pack id is the sha256 of the pack's bytes, or ``pack_id`` when one is given up front (format
    version 2 names packs at random, so a chunk's location is known as soon as it is added). With ``seal``
    (needs a ``pack_id``) ``add`` takes a chunk's stored bytes as unsealed and returns where its sealed
    bytes will be; ``finish`` seals (it runs on the uploading thread).
    """

    def __init__(self, pack_id: bytes | None = None, seal: PackSeal | None = None) -> None:
        if seal is not None and pack_id is None:
            raise ValueError("a sealed pack is named up front")
        self.pack_id = pack_id
        self.seal = seal
        self._parts: list[bytes] = [SEALED_HEADER if seal else HEADER]
        self._size = len(HEADER)
        self.entries: list[PackEntry] = []

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, cid: bytes, stored: bytes, raw_len: int, flags: int) -> PackEntry:
        entry = PackEntry(cid, self._size, len(stored) + (SEAL_OVERHEAD if self.seal else 0), raw_len, flags)
        self.entries.append(entry)
        self._parts.append(stored)
        self._size += entry.stored_len
        return entry

    def finish(self) -> tuple[bytes, bytes | bytearray, list[PackEntry]]:
        """``(pack id, pack bytes, entries)``; a sealed pack's bytes are a ``bytearray`` (sealed in place)."""
        raw = encode_entries(self.entries)
        trailer = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(raw)
        if self.seal is not None:
            return self.pack_id, self._sealed(self.seal, self.seal.seal_trailer(trailer)), self.entries
        self._parts.append(trailer)
        self._parts.append(_FOOTER.pack(len(trailer), FOOTER_MAGIC))
        data = b"".join(self._parts)
        self._parts = []
        return self.pack_id or hashlib.sha256(data).digest(), data, self.entries

    def _sealed(self, seal: PackSeal, trailer: bytes) -> bytearray:
        data = bytearray(self._size + len(trailer) + FOOTER_LEN)
        view = memoryview(data)
        view[: len(SEALED_HEADER)] = SEALED_HEADER
        for e, stored in zip(self.entries, self._parts[1:], strict=True):
            seal.seal_chunk_into(e.chunk_id, stored, view[e.offset : e.offset + e.stored_len])
        view[self._size : self._size + len(trailer)] = trailer
        view[self._size + len(trailer) :] = _FOOTER.pack(len(trailer), FOOTER_MAGIC)
        self._parts = []
        return data


def encode_entries(entries: Iterable[PackEntry]) -> bytes:
    """``entries`` as consecutive ``ENTRY`` records (a trailer's or an index object's)."""
    return b"".join(ENTRY.pack(e.chunk_id, e.offset, e.stored_len, e.raw_len, e.flags) for e in entries)


def trailer_location(footer: bytes, pack_size: int) -> tuple[int, int]:
    """From the last ``FOOTER_LEN`` bytes of a pack, return ``(trailer offset, length)``; a footer whose trailer
    would not fit between the header and the footer of a pack of ``pack_size`` bytes is damaged (so what a
    footer claims is never read or allocated beyond the pack's own size)."""
    if len(footer) != FOOTER_LEN:
        raise IntegrityError("pack footer is truncated")
    length, magic = _FOOTER.unpack(footer)
    if magic != FOOTER_MAGIC or length + FOOTER_LEN + len(HEADER) > pack_size:
        raise IntegrityError("pack footer is damaged")
    return pack_size - FOOTER_LEN - length, length


FRAMING_TAIL = 64 * 1024  # read_framing reads this much of a pack's end at once: the footer and most trailers


def read_framing(read: Callable[[int, int], bytes], size: int, seal: PackSeal | None = None) -> list[PackEntry]:
    """Check the framing of a pack of ``size`` bytes read through ``read(offset, length)``: its header, its footer,
    its trailer (decompressed, and opened with ``seal`` for a sealed pack) and that the trailer's entries lie
    within its data; return the entries. ``IntegrityError`` naming the first damaged part. Reads the header and
    at most ``FRAMING_TAIL`` bytes of the end, then what more of the trailer the footer claims (bounded by
    ``size``)."""
    if size < len(HEADER) + FOOTER_LEN:
        raise IntegrityError(f"pack is truncated ({size} bytes)")
    check_header(read(0, len(HEADER)), seal is not None)
    tail_start = max(len(HEADER), size - FRAMING_TAIL)
    tail = read(tail_start, size - tail_start)
    offset, length = trailer_location(tail[-FOOTER_LEN:], size)
    at = offset - tail_start
    trailer = tail[at : at + length] if at >= 0 else read(offset, length)
    entries = parse_trailer(trailer, seal)
    check_entries(entries, offset)
    return entries


def check_header(header: bytes, sealed: bool) -> None:
    """``IntegrityError`` unless ``header`` (a pack's first ``len(HEADER)`` bytes) is the one a pack of its
    repository starts with (``SEALED_HEADER`` when its chunks are ``sealed``)."""
    expected = SEALED_HEADER if sealed else HEADER
    if header != expected:
        raise IntegrityError(f"pack header is damaged ({bytes(header)!r}, not {expected!r})")


def check_entries(entries: Iterable[PackEntry], trailer_offset: int) -> None:
    """``IntegrityError`` unless every entry lies between the header and the trailer (at ``trailer_offset``)."""
    for e in entries:
        if e.offset < len(HEADER) or e.offset + e.stored_len > trailer_offset:
            raise IntegrityError(
                f"pack trailer is damaged: chunk {e.chunk_id.hex()[:16]} at {e.offset}+{e.stored_len} lies outside"
                f" the pack's data ({len(HEADER)}..{trailer_offset})"
            )


def parse_trailer(trailer: bytes, seal: PackSeal | None = None) -> list[PackEntry]:
    """Decode a pack trailer into its entries (opening it first with the pack's ``seal``)."""
    if seal is not None:
        trailer = seal.open_trailer(trailer)
    try:
        raw = zstandard.ZstdDecompressor().decompress(trailer)
    except zstandard.ZstdError as err:
        raise IntegrityError(f"pack trailer does not decompress: {err}") from None
    if len(raw) % ENTRY.size:
        raise IntegrityError("pack trailer has a partial entry")
    return [PackEntry(*fields) for fields in ENTRY.iter_unpack(raw)]
