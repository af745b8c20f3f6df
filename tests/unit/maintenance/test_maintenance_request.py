"""``movers.maintenance.request.MaintenanceRequest``: the ``maintain-repo`` run's one typed request (pure)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from movers.maintenance.request import MaintenanceRequest


def test_a_grace_takes_the_one_duration_syntax_and_zero():
    graces = [MaintenanceRequest(repo="s3://b", grace=g).grace for g in (0, "90m", "24h", "7d", "1.5s")]
    assert graces == [0, 5400, 86400, 604800, 1.5]
    assert MaintenanceRequest(repo="s3://b").grace == 86400, "a day by default"


@pytest.mark.parametrize("bad", ["cbt-mover-repo", "shop/", "/x", "a/b/c", "Shop/x"])
def test_a_key_secret_is_namespace_slash_name(bad):
    with pytest.raises(ValidationError, match="must be namespace/name of a Secret"):
        MaintenanceRequest(repo="s3://b", key_secret=bad)


def test_the_secret_reference_and_the_rule_overrides():
    request = MaintenanceRequest(repo="s3://b", key_secret="shop/cbt-mover-repo", keep_daily=7)
    assert request.key_secret_ref() == ("shop", "cbt-mover-repo")
    assert MaintenanceRequest(repo="s3://b").key_secret_ref() is None
    assert request.rule_overrides() == {"keep_last": None, "keep_daily": 7, "keep_weekly": None, "keep_monthly": None}
