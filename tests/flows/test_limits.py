"""``deploy.limits`` on Prefect's test server: the caps on mover and writer pods created once (``make pools`` and the
test harness run it), numbers changed only where given (a node limit too), the per-node number kept in the
Variable that runs create a new node's limit from (``tasks.caps``); bad flags are one line with exit code 2."""

from __future__ import annotations

import pytest

from deploy.limits import ensure_limits, main
from tasks import caps


@pytest.fixture
def prefect(prefect_api):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        yield client


def _limit(client, name: str) -> int:
    return client.read_global_concurrency_limit_by_name(name).limit


def test_created_once_then_changed_only_where_given(prefect):
    assert set(ensure_limits().values()) == {"unchanged"}  # the harness ran it
    assert (_limit(prefect, "cbt-mover-movers"), _limit(prefect, "cbt-mover-writers")) == (8, 8)
    assert caps.read_settings(prefect) == caps.CapSettings()

    node = caps.node_limit(caps.MOVERS, "node-test-limits")
    assert caps.ensure_limit(prefect, node, caps.read_settings(prefect).per_node(caps.MOVERS))
    assert not caps.ensure_limit(prefect, node, 5)  # it exists: an operator's number is left alone
    try:
        done = ensure_limits(movers=6, movers_per_node=2, classes={"gold": 3}, roles=(caps.MOVERS,))
        assert done["cbt-mover-movers"] == "updated" and done["cbt-mover-writers"] == "unchanged", done
        assert done[node] == "updated" and done["cbt-mover-movers-class-gold"] == "created", done
        assert (_limit(prefect, "cbt-mover-movers"), _limit(prefect, node)) == (6, 2)
        assert caps.read_settings(prefect).movers_per_node == 2  # the number a new node's limit gets
        assert ensure_limits()["cbt-mover-movers"] == "unchanged"  # not given: the operator's 6 stays
        assert _limit(prefect, "cbt-mover-movers") == 6
    finally:
        ensure_limits(movers=8, movers_per_node=1)
        for name in (node, "cbt-mover-movers-class-gold"):
            prefect.delete_global_concurrency_limit_by_name(name)
    assert caps.read_settings(prefect) == caps.CapSettings()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--class", "gold"], "--class takes NAME=N"),
        (["--driver", "ebs=-1"], "--driver takes NAME=N"),
        (["--movers-per-node", "-1"], "--movers-per-node must be 0 or more"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv, said, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and said in err, err
