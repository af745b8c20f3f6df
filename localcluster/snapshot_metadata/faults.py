"""Fault injection for the local SnapshotMetadata server: knobs a test turns, and how a call applies them.

``Faults`` is mutable at any time from any thread (plain attribute writes, or ``update(**knobs)`` to change
several atomically). Each RPC takes a ``CallPlan`` snapshot when it starts (``Faults.plan()``), so a change applies
to the calls that start afterwards. Message indexes are 0-based and count the messages of one call.

- ``fail_with`` + ``fail_times``: the next ``fail_times`` calls fail at start (before validation) with that code.
- ``cut_after_messages`` + ``cut_times`` + ``cut_code``: the next ``cut_times`` calls are aborted with
  ``cut_code`` (default UNAVAILABLE) once they have sent that many messages; a stream that ends before is not
  cut, one that has exactly that many gets the error instead of its clean end. Later calls (a resuming client)
  run normally.
- ``delay_between_messages``: seconds to wait before every message but the first (ends early on server stop).
- ``resend_overlap_blocks``: a call with ``starting_offset > 0`` starts that many blocks earlier (the spec lets a
  server re-send tuples before the resume point).
- ``bad_order_at_message``: that message's last tuple is replaced by a copy of the tuple before it in the stream
  (appended as a duplicate when there is none), so offsets go backwards.
- ``change_type_at_message``: that message carries the other block_metadata_type.
- ``change_capacity_at_message``: that message carries volume_capacity_bytes + block_size.
- ``past_capacity``: one final message holds a tuple ``(k * block_size, block_size)``, ``k = capacity //
  block_size``, which ends past the capacity (as drivers with coarser blocks do); skipped when the stream already
  ended at or past that block.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields

import grpc

from localcluster.snapshot_metadata.stream import Batch


@dataclass(frozen=True)
class CallPlan:
    """The faults one call applies, fixed when it starts."""

    fail_with: grpc.StatusCode | None = None
    cut_after_messages: int | None = None
    cut_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    delay_between_messages: float = 0.0
    resend_overlap_blocks: int = 0
    bad_order_at_message: int | None = None
    change_type_at_message: int | None = None
    change_capacity_at_message: int | None = None
    past_capacity: bool = False

    @property
    def reshapes(self) -> bool:
        """Whether the messages differ from the plain stream (not just their timing or end)."""
        at = (self.bad_order_at_message, self.change_type_at_message, self.change_capacity_at_message)
        return self.past_capacity or at != (None, None, None)


@dataclass
class Faults:
    cut_after_messages: int | None = None
    cut_times: int = 1
    cut_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    fail_with: grpc.StatusCode | None = None
    fail_times: int = 1
    delay_between_messages: float = 0.0
    resend_overlap_blocks: int = 0
    bad_order_at_message: int | None = None
    change_type_at_message: int | None = None
    change_capacity_at_message: int | None = None
    past_capacity: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, **knobs) -> Faults:
        """Set several knobs atomically (no call sees half of them)."""
        names = {f.name for f in fields(self)} - {"_lock"}
        unknown = set(knobs) - names
        if unknown:
            raise TypeError(f"unknown fault knobs: {sorted(unknown)}")
        with self._lock:
            for name, value in knobs.items():
                setattr(self, name, value)
        return self

    def reset(self) -> Faults:
        """Back to no faults at all."""
        defaults = Faults()
        return self.update(**{f.name: getattr(defaults, f.name) for f in fields(self) if f.name != "_lock"})

    def plan(self) -> CallPlan:
        """The faults of a call starting now; consumes one of ``fail_times`` / ``cut_times`` when they apply."""
        with self._lock:
            fail = None
            if self.fail_with is not None and self.fail_times > 0:
                self.fail_times -= 1
                fail = self.fail_with
            cut = None
            if fail is None and self.cut_after_messages is not None and self.cut_times > 0:
                self.cut_times -= 1
                cut = self.cut_after_messages
            return CallPlan(
                fail_with=fail,
                cut_after_messages=cut,
                cut_code=self.cut_code,
                delay_between_messages=self.delay_between_messages,
                resend_overlap_blocks=self.resend_overlap_blocks,
                bad_order_at_message=self.bad_order_at_message,
                change_type_at_message=self.change_type_at_message,
                change_capacity_at_message=self.change_capacity_at_message,
                past_capacity=self.past_capacity,
            )


def shape(plan: CallPlan, batches: Iterator[Batch], block_size: int, capacity: int) -> Iterator[Batch]:
    """Apply the tuple-level faults (bad order, past capacity) to the batches of one call."""
    prev: tuple[int, int] | None = None  # the last tuple of the previous batch
    last_end = 0
    for i, batch in enumerate(batches):
        if i == plan.bad_order_at_message:
            before = batch[-2] if len(batch) >= 2 else prev
            batch = [*batch[:-1], before] if before is not None else [*batch, batch[-1]]
        prev = batch[-1]
        last_end = max(last_end, prev[0] + prev[1])
        yield batch
    if plan.past_capacity:
        k = capacity // block_size
        if last_end <= k * block_size:
            yield [(k * block_size, block_size)]
