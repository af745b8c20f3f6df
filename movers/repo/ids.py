"""Compact tables of 32-byte ids (chunk, pack and map object ids): what prune and verify hold per id.

A Python ``set`` of ``bytes`` ids costs about 100 bytes per id; these cost the id's 32 bytes plus about 8 of hash
slots. ``IdHash`` is the hash: open addressing with linear probing over the records of a caller's buffer (record
``i``'s id is its first 32 bytes), at most ``LOAD`` full, a 4-byte record number and a 1-byte tag per slot (so a
probe rarely compares ids). It is a multimap: records with the same id are all found (a byte per record says
whether its id has other records, so a lookup of an id with one record stops at it). ``IdSet`` is a growable set
of ids numbered in the order they were added. Lookups may run in several threads at once, but nothing may add
meanwhile (an addition is several steps).
Slots use Python's ``hash`` of the id, so the slot layout differs between processes: nothing may depend on the
order ``IdHash.find`` returns records in (it is sorted).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator

ID_LEN = 32
LOAD = 0.7  # most slots used: a lookup probes about 2 slots (6 when the id is absent)
_ID = struct.Struct(f"{ID_LEN}s")


def _size_for(count: int) -> int:
    return max(8, int(count / LOAD) + 1)


class IdHash:
    """Hash slots over the records of ``buf`` (``stride`` bytes each, the id first) for up to ``capacity`` of them.

    ``insert(n)`` adds record ``n`` (whose id is already in ``buf``); ``find(id)`` returns every record number
    inserted with that id, ascending. ``buf`` may grow (a bytearray) but its records must not change.
    """

    __slots__ = ("buf", "capacity", "count", "copies", "size", "slots", "stride", "tags")

    def __init__(self, buf: bytearray | bytes, stride: int, capacity: int) -> None:
        self.buf, self.stride, self.capacity = buf, stride, capacity
        self.size = _size_for(capacity)
        self.slots = array("I", bytes(4 * self.size))  # record number + 1; 0: empty
        self.tags = bytearray(self.size)  # bits 48-55 of the id's hash
        self.copies = bytearray(len(buf) // stride)  # record number -> 1 when other records have its id
        self.count = 0

    def insert(self, n: int, key: bytes | None = None) -> None:
        """Add record ``n`` (``key``: its id, when the caller has it as bytes already)."""
        if self.count >= self.capacity:
            raise OverflowError(f"IdHash holds at most {self.capacity} records")
        if key is None:
            at = n * self.stride
            key = bytes(self.buf[at : at + ID_LEN])
        if n >= len(self.copies):
            self.copies.extend(bytes(max(n + 1, 2 * len(self.copies)) - len(self.copies)))
        h = hash(key)
        size, slots, tags, buf, stride = self.size, self.slots, self.tags, self.buf, self.stride
        tag = (h >> 48) & 0xFF
        pos = h % size
        while m := slots[pos]:
            if tags[pos] == tag:
                at = (m - 1) * stride
                if buf[at : at + ID_LEN] == key:
                    self.copies[m - 1] = self.copies[n] = 1
            pos = pos + 1 if pos + 1 < size else 0
        slots[pos] = n + 1
        tags[pos] = tag
        self.count += 1

    def find(self, key: bytes) -> list[int]:
        """The numbers of the records whose id is ``key``, ascending (usually none or one)."""
        h = hash(key)
        size, slots, tags, buf, stride = self.size, self.slots, self.tags, self.buf, self.stride
        tag = (h >> 48) & 0xFF
        pos = h % size
        found = []
        while n := slots[pos]:
            if tags[pos] == tag:
                at = (n - 1) * stride
                if buf[at : at + ID_LEN] == key:
                    if not found and not self.copies[n - 1]:
                        return [n - 1]
                    found.append(n - 1)
            pos = pos + 1 if pos + 1 < size else 0
        if len(found) > 1:
            found.sort()
        return found

    def first(self, key: bytes) -> int:
        """The number of one record whose id is ``key`` (any of them when several), or -1."""
        h = hash(key)
        size, slots, tags, buf, stride = self.size, self.slots, self.tags, self.buf, self.stride
        tag = (h >> 48) & 0xFF
        pos = h % size
        while n := slots[pos]:
            if tags[pos] == tag:
                at = (n - 1) * stride
                if buf[at : at + ID_LEN] == key:
                    return n - 1
            pos = pos + 1 if pos + 1 < size else 0
        return -1


class IdSet:
    """A set of 32-byte ids, each numbered (from 0) in the order it was first added. Memory: 32 bytes per id plus
    the hash (``IdHash``: about 8 bytes per id, up to twice that just after growing)."""

    __slots__ = ("_hash", "ids")

    def __init__(self, capacity: int = 0) -> None:
        self.ids = bytearray()
        self._hash = IdHash(self.ids, ID_LEN, max(16, capacity))

    def __len__(self) -> int:
        return len(self.ids) // ID_LEN

    def __contains__(self, key: bytes) -> bool:
        return self._hash.first(key) >= 0

    def __iter__(self) -> Iterator[bytes]:
        for (key,) in _ID.iter_unpack(self.ids):
            yield key

    def index(self, key: bytes) -> int:
        """The number of ``key``, or -1 when it is not in the set."""
        return self._hash.first(key)

    def add(self, key: bytes) -> int:
        """Add ``key`` (32 bytes) unless present; return its number."""
        n = self._hash.first(key)
        if n >= 0:
            return n
        if len(key) != ID_LEN:
            raise ValueError(f"an id is {ID_LEN} bytes, not {len(key)}")
        n = len(self.ids) // ID_LEN
        if n >= self._hash.capacity:
            self._grow(2 * self._hash.capacity)
        self.ids += key
        self._hash.insert(n, key)
        return n

    def id(self, n: int) -> bytes:
        return bytes(self.ids[n * ID_LEN : (n + 1) * ID_LEN])

    def _grow(self, capacity: int) -> None:
        grown = IdHash(self.ids, ID_LEN, capacity)
        for n, (key,) in enumerate(_ID.iter_unpack(self.ids)):
            grown.insert(n, key)
        self._hash = grown


def sorted_by_id(ids: IdSet, numbers: Iterable[int]) -> array:
    """``numbers`` (of ids in ``ids``) in ascending id order, sorted a leading byte at a time (few ids in memory
    as ``bytes`` at once when ids are uniform: hashes, random pack names)."""
    buckets = [array("I") for _ in range(256)]
    raw = ids.ids
    for n in numbers:
        buckets[raw[n * ID_LEN]].append(n)
    ordered = array("I")
    for bucket in buckets:
        ordered.extend(sorted(bucket, key=ids.id))
    return ordered
