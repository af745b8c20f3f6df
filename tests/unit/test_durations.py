"""movers.values: the one duration syntax of policies, hooks, annotations, flags and parameters."""

from __future__ import annotations

import pytest

from movers.values import parse_duration as dur


def test_go_durations_numbers_and_days():
    assert dur("30s") == 30 and dur("1m30s") == 90 and dur("1h") == 3600 and dur("1.5h") == 5400
    assert dur("250ms") == pytest.approx(0.25) and dur("2m0.5s") == pytest.approx(120.5) and dur("0") == 0
    assert dur("10us") == pytest.approx(1e-5) and dur("5µs") == pytest.approx(5e-6) and dur("-1s") == -1
    assert dur(".5s") == 0.5 and dur(7) == 7.0 and dur(0.5) == 0.5 and dur(" 90m ") == 5400
    assert dur("30") == 30 and dur("7d") == 7 * 86400 and dur("1d12h") == 36 * 3600 and dur("1.5d") == 36 * 3600
    for bad in ("", "s", "d", "1.2.3s", "--1s", "7d-1h", "soon", "5 minutes", True, None, [1]):
        with pytest.raises(ValueError, match="is not a duration"):
            dur(bad)


def test_go_syntax_only_needs_a_unit():
    """Velero's annotations are Go durations: a bare number other than 0 is not one."""
    assert dur("0", bare_numbers=False) == 0 and dur("30s", bare_numbers=False) == 30
    with pytest.raises(ValueError, match="'30' is not a duration"):
        dur("30", bare_numbers=False)


def test_one_syntax_everywhere():
    """A policy field and a hook's timeout take the same strings (500ms was a hook's only); a prune's grace too
    (tests/flows/test_flow_parameters.py)."""
    from movers.policy.hooks import HookSpec
    from movers.policy.model import parse_policy

    doc = {
        "name": "p",
        "namespace": "ns",
        "pvc_selector": {"matchLabels": {"app": "db"}},
        "repository": {"url": "s3://b/r"},
        "timeouts": {"hook": "500ms", "mover": "1d"},
    }
    policy = parse_policy(doc)
    assert (policy.timeouts.hook, policy.timeouts.mover) == (0.5, 86400)
    hook = HookSpec.model_validate(
        {"name": "h", "pod_selector": {"app": "db"}, "command": ["x"], "timeout": "1d"}
    ).hook()
    assert hook.timeout_s == 86400
