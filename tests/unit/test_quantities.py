"""movers.values: the one Kubernetes quantity parser (exact, as the API server's)."""

from __future__ import annotations

import pytest

from movers.values import parse_quantity, quantity_bytes


def test_sizes_are_exact_bytes():
    # a float-based parser gave ...992 for 2**53 + 1 bytes, and 0.1Gi-style fractions off by rounding
    assert quantity_bytes("9007199254740993") == 9007199254740993
    assert quantity_bytes("1.5Gi") == 3 << 29 and quantity_bytes("500M") == 500_000_000 and quantity_bytes(4096) == 4096
    assert quantity_bytes("0.1Ki") == 103 and quantity_bytes(None) is None  # a fraction of a byte rounds up


def test_one_syntax_for_policies_and_manifests():
    from movers.kube import manifests as m
    from movers.policy.model import PolicyError, parse_policy

    assert parse_quantity("500m") < parse_quantity("1") and parse_quantity("1e3") == parse_quantity("1k")
    for bad in ("lots", "1 Gi", "None", "", True, None):
        with pytest.raises(ValueError):
            parse_quantity(bad)
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        m.reader_claim_size("None", None)
    doc = {
        "name": "p",
        "namespace": "ns",
        "pvc_selector": {"matchLabels": {"app": "db"}},
        "repository": {"url": "s3://b/r"},
    }
    ok = parse_policy({**doc, "mover": {"resources": {"requests": {"cpu": "1000m"}, "limits": {"cpu": "1"}}}})
    assert ok.mover.resources["limits"] == {"cpu": "1"}
    with pytest.raises(PolicyError, match="above the limit"):
        parse_policy({**doc, "mover": {"resources": {"requests": {"memory": "1025Mi"}, "limits": {"memory": "1Gi"}}}})
