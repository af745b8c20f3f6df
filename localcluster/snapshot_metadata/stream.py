"""Turning block runs into the serialized response messages of one SnapshotMetadata stream.

``batches(runs, fixed, block_size, capacity, max_results)`` cuts ``(first_block, count)`` runs into lists of at
most ``max_results`` ``(byte_offset, size_bytes)`` tuples: one ``block_size`` tuple per block (FIXED_LENGTH) or
one tuple per run clipped to the capacity (VARIABLE_LENGTH). Empty batches are never produced.

``encode(batch, block_type, capacity)`` serializes one message. GetMetadataAllocatedResponse and
GetMetadataDeltaResponse have the same fields and numbers, so the bytes serve both RPCs (the server registers a
pass-through serializer).

``MessageCache`` keeps the complete encoded streams of immutable snapshots (synthetic ones), so a benchmark
repeating a call over millions of blocks measures the client, not this server's Python encoding (about 1 us a
tuple). A stream is stored only once fully encoded, and only within a byte budget; least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator

from movers.cbt._pb import schema_pb2 as pb

Batch = list[tuple[int, int]]  # (byte_offset, size_bytes) tuples of one message


def batches(runs: Iterable[tuple[int, int]], fixed: bool, bs: int, capacity: int, max_results: int) -> Iterator[Batch]:
    batch: Batch = []
    for first, count in runs:
        if fixed:
            off, end = first * bs, (first + count) * bs
            while off < end:
                stop = min(end, off + (max_results - len(batch)) * bs)
                batch.extend((o, bs) for o in range(off, stop, bs))
                off = stop
                if len(batch) == max_results:
                    yield batch
                    batch = []
            continue
        batch.append((first * bs, min(count * bs, capacity - first * bs)))
        if len(batch) == max_results:
            yield batch
            batch = []
    if batch:
        yield batch


def encode(batch: Batch, block_type: int, capacity: int) -> bytes:
    msg = pb.GetMetadataAllocatedResponse(block_metadata_type=block_type, volume_capacity_bytes=capacity)
    add = msg.block_metadata.add
    for offset, size in batch:
        add(byte_offset=offset, size_bytes=size)
    return msg.SerializeToString()


class MessageCache:
    """Complete encoded streams by key, within ``budget`` bytes in total (LRU)."""

    def __init__(self, budget: int = 256 << 20):
        self.budget = budget
        self._lock = threading.Lock()
        self._streams: OrderedDict[Hashable, list[bytes]] = OrderedDict()
        self._size = 0

    def get(self, key: Hashable) -> list[bytes] | None:
        with self._lock:
            stream = self._streams.get(key)
            if stream is not None:
                self._streams.move_to_end(key)
            return stream

    def through(self, key: Hashable, messages: Iterator[bytes]) -> Iterator[bytes]:
        """Yield ``messages`` and store them under ``key`` if the stream completes within the budget."""
        kept: list[bytes] | None = []
        size = 0
        for message in messages:
            if kept is not None:
                size += len(message)
                kept.append(message)
                if size > self.budget:
                    kept = None
            yield message
        if kept is not None:
            self._put(key, kept, size)

    def _put(self, key: Hashable, stream: list[bytes], size: int) -> None:
        with self._lock:
            if key in self._streams:
                return
            self._streams[key] = stream
            self._size += size
            while self._size > self.budget and self._streams:
                _, old = self._streams.popitem(last=False)
                self._size -= sum(map(len, old))
