"""ExtentAssembler's raw fast path (flat.proto) agrees with the real decoding of any response (hypothesis; the
examples and helpers are tests/unit/cbt/test_cbt_stream.py's)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.cbt.test_cbt_stream import msg, outcome

values = st.one_of(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, (1 << 63) - 1), st.just(4096))
tuples = st.lists(st.tuples(values, values), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from([1 << 20, 1 << 62]), tuples), max_size=4))
def test_raw_fast_path_agrees_with_the_message_decoding(spec):
    messages = [msg(t, btype, cap) for btype, cap, t in spec]
    slow = outcome(lambda a, m: a.feed(m), messages)
    fast = outcome(lambda a, m: a.feed_raw(m.SerializeToString()), messages)
    assert fast == slow
