"""movers.restore.request: the writer pod's contract, checked when built (no cluster, no device, no repository)."""

from __future__ import annotations

import pytest

from movers.errors import EXIT_USAGE, UsageError
from movers.pipeline.readback import ReadbackStats
from movers.pipeline.stats import RestoreStats
from movers.restore.request import REQUEST_ENV, RestoreRequest, WriteResult

CBT = {"namespace": "shop", "snapshot": "live", "base_handle": "snap-1"}


def _request(**changes) -> dict:
    return {"volume": "shop/data", "device": "/dev/xvda", **changes}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_request(volume=" bad"), "volume id ' bad' is not valid"),
        (_request(volume="x" * 300), "is too long"),
        (_request(cbt=CBT), "needs --overwrite if-changed"),
        (_request(cbt=CBT, overwrite="if-changed", extents="f"), "and no --extents"),
    ],
)
def test_a_request_the_cli_could_not_express_is_refused_with_its_line(doc, message):
    with pytest.raises(UsageError, match=message) as caught:
        RestoreRequest.model_validate(doc)
    assert caught.value.exit_code == EXIT_USAGE


def test_a_request_has_the_cli_s_defaults_and_refuses_what_it_does_not_know():
    request = RestoreRequest.model_validate(_request())
    assert (request.backup, request.assume_zeroed, request.verify_device, request.workers) == (
        "latest",
        False,
        False,
        4,
    )
    with pytest.raises(ValueError, match="workers"):
        RestoreRequest.model_validate(_request(workers=0))
    with pytest.raises(ValueError, match="extra"):
        RestoreRequest.model_validate(_request(overwrite_all=True))


def test_the_request_travels_whole_through_the_env(monkeypatch):
    request = RestoreRequest(volume="shop/data", backup="b1", device="/dev/xvda", assume_zeroed=True, workers=2)
    monkeypatch.setenv(REQUEST_ENV, request.model_dump_json())
    assert RestoreRequest.from_env() == request
    by_cbt = RestoreRequest.model_validate(_request(overwrite="if-changed", cbt=CBT))
    monkeypatch.setenv(REQUEST_ENV, by_cbt.model_dump_json())
    assert RestoreRequest.from_env() == by_cbt and by_cbt.cbt is not None and by_cbt.cbt.max_results == 4096
    monkeypatch.setenv(REQUEST_ENV, '{"volume": "shop/data"}')
    with pytest.raises(UsageError, match="not a restore request this writer reads .*device"):
        RestoreRequest.from_env()
    monkeypatch.delenv(REQUEST_ENV)
    with pytest.raises(UsageError, match="not set"):
        RestoreRequest.from_env()


def test_the_result_declares_the_stats_counters_once():
    stats = RestoreStats(capacity_bytes=16, written_bytes=10, duration_s=0.5).as_dict()
    result = WriteResult(backup_id="b1", volume="shop/data", mode="full", requests={"get": 3}, **stats)
    out = result.as_output()
    assert set(out) == {"backup_id", "volume", "mode", "path", "requests", *stats}, (
        "no readback without --verify-device"
    )
    assert (out["written_bytes"], out["duration_s"]) == (10, 0.5)
    assert WriteResult.model_validate(out) == result
    readback = ReadbackStats(checked_bytes=10, duration_s=0.25).as_dict()
    checked = WriteResult.model_validate({**out, "readback": readback})
    assert checked.as_output()["readback"] == readback
    assert checked.readback is not None and checked.readback.duration_s == 0.25
    fell_back = WriteResult.model_validate({**out, "path": "compare", "cbt_fallback": "refused"}).as_output()
    assert (fell_back["path"], fell_back["cbt_fallback"]) == ("compare", "refused")
    newer = WriteResult.model_validate({**out, "new_counter": 1})
    assert newer.as_output()["new_counter"] == 1, "a newer writer's keys are kept"
