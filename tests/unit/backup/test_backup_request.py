"""movers.backup.request: the mover pod's contract, checked when built (no cluster, no device, no repository)."""

from __future__ import annotations

import pytest

from movers.backup.request import REQUEST_ENV, BackupRequest, BackupResult
from movers.errors import UsageError
from movers.pipeline.stats import BackupStats


def _request(**changes) -> dict:
    return {
        "volume": {"id": "ns/data", "namespace": "ns", "pvc": "data"},
        "snapshot": {"volume_snapshot": "snap", "namespace": "ns"},
        "changes": {"source": "cbt", **changes},
        "device": "/dev/xvda",
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_request(parent="b0", full=True), "--parent names the backup to build on"),
        (_request(parent="b0"), "--parent with CBT needs --base-handle"),
        ({**_request(), "snapshot": {}}, "CBT needs --namespace and --snapshot"),
        ({**_request(), "zstd_level": 23}, "--zstd-level must be between 1 and 22"),
        (_request(source="scan", extents="x.jsonl"), "--extents FILE is the extents change source"),
        ({**_request(), "volume": {"id": " bad"}}, "volume id"),
        ({**_request(), "tags": {"-x": "y"}}, "--tag"),
    ],
)
def test_a_request_the_cli_could_not_express_is_refused_with_its_line(doc, message):
    with pytest.raises(UsageError, match=message):
        BackupRequest.model_validate(doc)


def test_the_request_travels_whole_through_the_env(monkeypatch, caplog):
    doc = _request(base_handle="h0", parent="b0")
    doc["volume"] |= {"volume_mode": "Block", "fs_type": "ext4", "labels": {}}
    request = BackupRequest.model_validate({**doc, "run_pvcs": ["wal", "data", "wal"]})
    assert request.volume.fs_type is None and request.volume.labels is None and "--fs-type ext4 ignored" in caplog.text
    assert request.run_pvcs == ["data", "wal"]
    monkeypatch.setenv(REQUEST_ENV, request.model_dump_json())
    assert BackupRequest.from_env() == request
    monkeypatch.setenv(REQUEST_ENV, '{"volume": {}}')
    with pytest.raises(UsageError, match="not a backup request this mover reads"):
        BackupRequest.from_env()
    monkeypatch.delenv(REQUEST_ENV)
    with pytest.raises(UsageError, match="not set"):
        BackupRequest.from_env()


def test_the_result_declares_backup_stats_counters_once():
    stats = BackupStats(read_bytes=10, stored_bytes=4).as_dict()
    result = BackupResult(backup_id="b1", volume="ns/data", mode="full", change_source="scan", **stats)
    out = result.as_output()
    assert set(stats) <= set(out) and (out["read_bytes"], out["stored_bytes"]) == (10, 4)
    assert {"cbt", "cbt_fallback"}.isdisjoint(out), "only when there is one, as the CLI always printed"
    assert {"parent", "capacity_bytes", "snapshot_handle", "pv_volume_handle", "tags", "requests"} <= set(out)
    assert BackupResult.model_validate(out) == result
