"""Validation and coalescing of SnapshotMetadata responses into ``(offset, length)`` extents.

``ExtentAssembler`` consumes response messages in order and yields coalesced extents as soon
as they are complete. It enforces the API contract while streaming: block type and capacity
constant; tuples strictly ascending and non-overlapping; FIXED_LENGTH sizes constant; sizes
positive; nothing starting past the capacity (a tuple running past it is clamped). After a
resume (``resumed_at``), tuples ending at or before the resume point are dropped and one
straddling it is clipped, as the spec allows servers to re-send.

Messages are checked with whole-list operations; the per-tuple path runs only to clip after
a resume or to name the offending tuple of a violation.

``feed_raw`` takes the serialized response and decodes it through ``flat.proto`` (each tuple as
the integers ``[8, offset, 16, size]``, no Python object per tuple). It accepts that reading
only if the integers tile that layout *and* re-encoding them gives exactly the message's length
(so no submessage boundary, missing field or unknown field was misread); anything else is
decoded with the real message class.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress
from operator import add, attrgetter, le, sub

from google.protobuf.message import DecodeError

from movers.cbt._pb import schema_pb2 as pb
from movers.cbt._pb.flat_pb2 import FlatResponse
from movers.errors import CbtProtocolError, UsageError

TYPE_NAMES = {pb.FIXED_LENGTH: "FIXED_LENGTH", pb.VARIABLE_LENGTH: "VARIABLE_LENGTH"}
_OFFSET = attrgetter("byte_offset")
_SIZE = attrgetter("size_bytes")


class ExtentAssembler:
    def __init__(self, clamp_to: int | None = None) -> None:
        self.clamp_to = clamp_to
        self.block_type: int | None = None
        self.capacity: int | None = None
        self.fixed_size: int | None = None
        self.messages = 0
        self.tuples = 0
        self.end = 0  # end of the last tuple accepted: the resume point
        self._pending: tuple[int, int] | None = None  # (start, end) not yet emitted
        self._resume_floor: int | None = None
        # (offsets, sizes) of the last message as sent (after a resume, without those sent twice; None: all were)
        self.last_tuples: tuple[list[int], list[int]] | None = None

    def resumed_at(self, offset: int) -> None:
        """A new call starts at ``offset``: re-sent tuples before it are dropped or clipped."""
        self._resume_floor = offset

    def feed_raw(self, raw: bytes) -> list[tuple[int, int]]:
        """Like ``feed`` for a serialized GetMetadata{Allocated,Delta}Response (same layout)."""
        try:
            flat = FlatResponse.FromString(raw)
        except DecodeError:
            flat = None
        if flat is not None:
            ints = flat.block_metadata  # sliced in place: cheaper than a list of it first
            unencoded = 0
            if len(ints) and ints[0] == 16:  # a first tuple at offset 0: proto3 does not encode a zero field
                ints, unencoded = [8, 0, *ints], 2
            count, rest = divmod(len(ints), 4)
            if not rest and ints[0::4].count(8) == count and ints[2::4].count(16) == count:
                offs, sizes = ints[1::4], ints[3::4]
                btype, capacity = flat.block_metadata_type, flat.volume_capacity_bytes
                if _encoded_len(btype, capacity, offs, sizes) - unencoded == len(raw):
                    return self._accept(btype, capacity, offs, sizes)
        try:
            return self.feed(pb.GetMetadataDeltaResponse.FromString(raw))
        except DecodeError as err:
            raise CbtProtocolError(f"message #{self.messages + 1} does not decode: {err}") from None

    def feed(self, resp) -> list[tuple[int, int]]:
        """Validate one response message; return the extents it completes."""
        tuples = list(resp.block_metadata)  # one wrapper object per tuple, shared by both field reads
        offs = list(map(_OFFSET, tuples))
        sizes = list(map(_SIZE, tuples))
        return self._accept(resp.block_metadata_type, resp.volume_capacity_bytes, offs, sizes)

    def _accept(self, btype: int, capacity: int, offs: list[int], sizes: list[int]) -> list[tuple[int, int]]:
        self.messages += 1
        n = self.messages
        self._check_header(btype, capacity, n)
        self.last_tuples = ([], [])
        if not offs:
            return []
        self.tuples += len(offs)
        if self._resume_floor is not None:
            offs, sizes = self._clip_resent(offs, sizes)
            if not offs:
                self.last_tuples = None
                return []
        ends = list(map(add, offs, sizes))
        gaps = list(map(sub, offs[1:], ends[:-1]))  # gap before tuple i+1; 0 = contiguous
        self._check_tuples(offs, sizes, ends, gaps, n)
        self.last_tuples = (offs, sizes)  # references, no copy: the backup path pays nothing for the lister's forms
        if ends[-1] > self.capacity or (self.clamp_to is not None and ends[-1] > self.clamp_to):
            self._clamp(offs, ends, n)
        self.end = ends[-1]
        return self._coalesce(offs, ends, gaps)

    def finish(self) -> list[tuple[int, int]]:
        """The last pending extent, after a clean end of the stream."""
        if self._pending is None:
            return []
        start, end = self._pending
        self._pending = None
        return [(start, end - start)]

    # -- checks ----------------------------------------------------------------------------

    def _check_header(self, btype: int, capacity: int, n: int) -> None:
        if btype not in TYPE_NAMES:
            raise CbtProtocolError(f"message #{n}: unknown block_metadata_type {btype}")
        if self.block_type is None:
            self.block_type, self.capacity = btype, capacity
            if capacity <= 0:
                raise CbtProtocolError(f"message #{n}: volume_capacity_bytes {capacity} is not positive")
        elif btype != self.block_type:
            raise CbtProtocolError(
                f"message #{n}: block_metadata_type changed from {TYPE_NAMES[self.block_type]} to {TYPE_NAMES[btype]}"
            )
        elif capacity != self.capacity:
            raise CbtProtocolError(f"message #{n}: volume_capacity_bytes changed from {self.capacity} to {capacity}")

    def _check_tuples(self, offs: list[int], sizes: list[int], ends: list[int], gaps: list[int], n: int) -> None:
        if self.block_type == pb.FIXED_LENGTH:
            if self.fixed_size is None:
                self.fixed_size = sizes[0]
            if sizes.count(self.fixed_size) != len(sizes):
                i = next(i for i, s in enumerate(sizes) if s != self.fixed_size)
                raise CbtProtocolError(
                    f"message #{n} tuple #{i}: FIXED_LENGTH size {sizes[i]} differs from {self.fixed_size}"
                )
        if min(sizes) <= 0:
            i = next(i for i, s in enumerate(sizes) if s <= 0)
            raise CbtProtocolError(f"message #{n} tuple #{i}: size_bytes {sizes[i]} is not positive")
        if offs[0] < self.end or (gaps and min(gaps) < 0):
            prev = [self.end, *ends[:-1]]
            i = next(i for i, (o, p) in enumerate(zip(offs, prev, strict=True)) if o < p)
            raise CbtProtocolError(
                f"message #{n} tuple #{i}: byte_offset {offs[i]} is before the end of the previous tuple ({prev[i]}):"
                " tuples must be strictly ascending and non-overlapping"
            )

    def _clamp(self, offs: list[int], ends: list[int], n: int) -> None:
        """Clamp the last tuple to the capacity (FIXED_LENGTH blocks may run past it).
        Tuples are ascending, so only the last one can reach past a limit."""
        if offs[-1] >= self.capacity:
            i = next(i for i, o in enumerate(offs) if o >= self.capacity)
            raise CbtProtocolError(
                f"message #{n} tuple #{i}: byte_offset {offs[i]} is past the volume capacity ({self.capacity})"
            )
        if self.clamp_to is not None and offs[-1] >= self.clamp_to:
            raise UsageError(
                f"the device ({self.clamp_to} bytes) is smaller than the snapshot's volume ({self.capacity} bytes)"
            )
        ends[-1] = min(ends[-1], self.capacity, self.clamp_to if self.clamp_to is not None else ends[-1])

    def _clip_resent(self, offs: list[int], sizes: list[int]) -> tuple[list[int], list[int]]:
        floor = self._resume_floor
        out_o, out_s = [], []
        for o, s in zip(offs, sizes, strict=True):
            if floor is not None:
                if o + s <= floor:
                    continue
                if o < floor:
                    o, s = floor, o + s - floor
                floor = None
            out_o.append(o)
            out_s.append(s)
        if floor is None:
            self._resume_floor = None
        return out_o, out_s

    # -- coalescing ------------------------------------------------------------------------

    def _coalesce(self, offs: list[int], ends: list[int], gaps: list[int]) -> list[tuple[int, int]]:
        # an extent ends before every non-zero gap: whole-list operations, no per-extent Python code
        starts = [offs[0], *compress(offs[1:], gaps)]
        stops = [*compress(ends[:-1], gaps), ends[-1]]
        out: list[tuple[int, int]] = []
        if self._pending is not None:
            if self._pending[1] == starts[0]:
                starts[0] = self._pending[0]
            else:
                out.append((self._pending[0], self._pending[1] - self._pending[0]))
        self._pending = (starts[-1], stops[-1])
        del starts[-1], stops[-1]
        out.extend(zip(starts, map(sub, stops, starts), strict=True))
        return out


_VARINT_STEPS = [1 << (7 * k) for k in range(1, 10)]  # a varint grows a byte at each step


def _varints_len(ascending: list[int]) -> int:
    """Total bytes of the varints of non-negative, ascending ``ascending`` (bisection, no loop per value)."""
    n = len(ascending)
    total = n
    for step in _VARINT_STEPS:
        i = bisect_left(ascending, step)
        if i == n:
            break
        total += n - i
    return total


def _encoded_len(btype: int, capacity: int, offs: list[int], sizes: list[int]) -> int:
    """The serialized length of a response holding exactly these fields and tuples, or -1 when a
    value makes the fast accounting inapplicable (negative, a zero field, unsorted offsets)."""
    # zero or negative tuple values need no test here: omitted or 10-byte varints change the length.
    # The bisection counts varint bytes exactly only for ascending offsets: anything else is decoded the
    # slow way (where it is an order violation, reported at the right tuple).
    if btype <= 0 or capacity <= 0 or not all(map(le, offs, offs[1:])):
        return -1
    head = 2 + _varints_len([btype]) + _varints_len([capacity])
    # each tuple: field-3 tag, a one-byte length (a submessage is at most 22 bytes), two field tags
    if not sizes:
        size_bytes = 0
    elif sizes.count(sizes[0]) == len(sizes):
        size_bytes = _varints_len(sizes)
    else:
        size_bytes = _varints_len(sorted(sizes))
    return head + 4 * len(offs) + _varints_len(offs) + size_bytes
