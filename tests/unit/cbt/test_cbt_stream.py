"""ExtentAssembler: validation and coalescing of SnapshotMetadata responses (pure, no network)."""

from __future__ import annotations

import pytest

from movers.cbt._pb import schema_pb2 as pb
from movers.cbt.stream import ExtentAssembler
from movers.errors import CbtProtocolError, UsageError

K = 4096


def msg(tuples, btype=pb.FIXED_LENGTH, capacity=1 << 20):
    return pb.GetMetadataDeltaResponse(
        block_metadata_type=btype,
        volume_capacity_bytes=capacity,
        block_metadata=[pb.BlockMetadata(byte_offset=o, size_bytes=s) for o, s in tuples],
    )


def run(messages, **kw):
    asm = ExtentAssembler(**kw)
    out = []
    for m in messages:
        out += asm.feed(m)
    out += asm.finish()
    return out, asm


def test_fixed_blocks_coalesce_across_messages():
    out, asm = run([msg([(0, K), (K, K), (3 * K, K)]), msg([(4 * K, K), (10 * K, K)])])
    assert out == [(0, 2 * K), (3 * K, 2 * K), (10 * K, K)]
    assert asm.tuples == 5 and asm.messages == 2 and asm.capacity == 1 << 20


def test_variable_extents_taken_as_is_and_adjacent_merged():
    out, _ = run([msg([(0, 3 * K), (5 * K, 100)], pb.VARIABLE_LENGTH), msg([(5 * K + 100, 50)], pb.VARIABLE_LENGTH)])
    assert out == [(0, 3 * K), (5 * K, 150)]


@pytest.mark.parametrize(
    "messages, fragment",
    [
        ([msg([(K, K), (0, K)])], "message #1 tuple #1: byte_offset 0"),
        ([msg([(0, 2 * K)], pb.VARIABLE_LENGTH), msg([(K, K)], pb.VARIABLE_LENGTH)], "message #2 tuple #0"),
        ([msg([(0, K), (K, 2 * K)])], "FIXED_LENGTH size 8192 differs"),
        ([msg([(0, K)]), msg([(K, K)], pb.VARIABLE_LENGTH)], "changed from FIXED_LENGTH to VARIABLE_LENGTH"),
        ([msg([(0, K)]), msg([(K, K)], capacity=2 << 20)], "volume_capacity_bytes changed"),
        ([msg([(0, 0)], pb.VARIABLE_LENGTH)], "size_bytes 0 is not positive"),
        ([msg([(1 << 20, K)])], "past the volume capacity"),
        ([msg([(0, K)], btype=pb.UNKNOWN)], "unknown block_metadata_type"),
    ],
)
def test_violations_name_the_offending_message(messages, fragment):
    with pytest.raises(CbtProtocolError, match=fragment):
        run(messages)


def test_fixed_block_past_capacity_is_clamped():
    out, _ = run([msg([(0, K), (K, K)], capacity=K + 100)])
    assert out == [(0, K + 100)]


def test_device_smaller_than_volume_is_a_clear_error():
    with pytest.raises(UsageError, match="smaller than"):
        run([msg([(0, K), (8 * K, K)])], clamp_to=4 * K)
    out, _ = run([msg([(0, K), (K, K)])], clamp_to=K + 10)
    assert out == [(0, K + 10)]


def test_resent_tuples_after_resume_are_dropped_or_clipped():
    asm = ExtentAssembler()
    out = asm.feed(msg([(0, K), (K, K)], pb.VARIABLE_LENGTH))
    asm.resumed_at(asm.end)  # a new call starting at 2K; the server re-sends from 0 and straddles
    out += asm.feed(msg([(0, K), (K, 2 * K), (5 * K, K)], pb.VARIABLE_LENGTH))
    out += asm.finish()
    assert out == [(0, 3 * K), (5 * K, K)]
    # after the first accepted tuple, going backwards is a violation again
    with pytest.raises(CbtProtocolError):
        asm.feed(msg([(0, K)], pb.VARIABLE_LENGTH))


def test_empty_stream_has_no_capacity():
    out, asm = run([])
    assert out == [] and asm.capacity is None


# -- the raw fast path (flat.proto) must agree with the real decoding in every case (a property run of it:
# tests/functional/test_cbt_stream_property.py) -------------------------------------------------------------


def outcome(feed, messages):
    asm = ExtentAssembler()
    out = []
    try:
        for m in messages:
            out += feed(asm, m)
        out += asm.finish()
    except (CbtProtocolError, UsageError) as err:
        return type(err).__name__, str(err)
    return out, asm.tuples, asm.messages


def test_raw_fast_path_with_an_empty_submessage_and_unsorted_offsets():
    # found by hypothesis: the (0, 0) tuple encodes as an empty submessage; with unsorted offsets the length
    # accounting used to miscount by exactly its two bytes, and the fast path named the wrong tuple
    messages = [msg([(4096, 4096), (0, 0), (16384, 1), (1, 1)])]
    assert outcome(lambda a, m: a.feed_raw(m.SerializeToString()), messages) == outcome(
        lambda a, m: a.feed(m), messages
    )


def test_raw_fast_path_does_not_misread_submessage_boundaries():
    # (o1, size 0) then (offset 0, s2) flatten to [8, o1, 16, s2]: one valid-looking tuple; the length check
    # sends it to the real decoding, which reports the zero size
    bad = msg([(8 * K, 0), (0, K)], pb.VARIABLE_LENGTH)
    with pytest.raises(CbtProtocolError, match="size_bytes 0"):
        ExtentAssembler().feed_raw(bad.SerializeToString())
    with pytest.raises(CbtProtocolError, match="does not decode"):
        ExtentAssembler().feed_raw(b"\x1a\x05\x08")
