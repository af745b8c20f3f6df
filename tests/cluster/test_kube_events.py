"""``movers.kube.kevents`` against the API emulator: the Events a run records are the ones client-go's
``tools/record`` makes (read back through the ``kubernetes`` client as ``kubectl describe`` reads them), and
posting them is best effort (a missing object is skipped, a refusal stops it with one problem, nothing raises)."""

from __future__ import annotations

import pytest

from localcluster.kubeapi.testing import serve
from movers.kube import kevents

NOW_NS = 1_767_225_600_123_456_789  # 2026-01-01T00:00:00.123456789Z


@pytest.fixture
def kube(tmp_path):
    with serve(tmp_path) as k:
        k.core.create_namespace({"metadata": {"name": "shop"}})
        k.core.create_namespaced_persistent_volume_claim(
            "shop",
            {
                "metadata": {"name": "db"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            },
        )
        yield k


def _describe_events(kube, namespace, pvc):
    """The Events ``kubectl describe pvc`` lists: those whose involvedObject is the claim (by uid)."""
    claim = kube.core.read_namespaced_persistent_volume_claim(pvc, namespace)
    selector = (
        f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={pvc},involvedObject.uid={claim.metadata.uid}"
    )
    return claim, kube.core.list_namespaced_event(namespace, field_selector=selector).items


def test_a_backed_up_event_is_what_tools_record_makes(kube):
    rows = [{"volume": "shop/db", "mode": "incremental-cbt", "backup_id": "B1", "changed_bytes": 12 << 20}]
    notes = kevents.backed_up("backup-0123", "s3://bucket/repo", rows)
    assert kevents.post(kube.client, notes, clock=lambda: NOW_NS) == (1, None)

    claim, [event] = _describe_events(kube, "shop", "db")
    assert (event.type, event.reason, event.source.component, event.count) == ("Normal", "BackedUp", "cbt-mover", 1)
    assert (
        event.message == "incremental-cbt backup B1 of shop/db to s3://bucket/repo (12.0 MiB changed, run backup-0123)"
    )
    assert event.metadata.name == f"db.{NOW_NS:x}" and event.metadata.namespace == "shop"
    ref = event.involved_object
    assert (ref.kind, ref.api_version, ref.namespace, ref.name) == ("PersistentVolumeClaim", "v1", "shop", "db")
    assert (ref.uid, ref.resource_version) == (claim.metadata.uid, claim.metadata.resource_version)
    assert event.reporting_component == "cbt-mover" and event.event_time is None
    assert (
        event.first_timestamp == event.last_timestamp
        and event.first_timestamp.isoformat() == "2026-01-01T00:00:00+00:00"
    )


def test_a_long_error_is_cut_to_the_api_s_note_limit(kube):
    notes = kevents.backup_failed("shop", ["db"], "backup-0123", "s3://bucket/repo", "x" * 5000)
    assert kevents.post(kube.client, notes) == (1, None)
    _claim, [event] = _describe_events(kube, "shop", "db")
    assert event.type == "Warning" and event.reason == "BackupFailed"
    assert len(event.message) == kevents.MESSAGE_LIMIT and event.message.endswith("x...")


def test_best_effort_a_missing_claim_is_skipped_and_a_refusal_stops_with_one_problem(kube):
    notes = kevents.restored(
        "shop", "restore-1", "s3://b/r", [{"pvc": p, "volume": f"src/{p}", "backup_id": "B"} for p in ("gone", "db")]
    )
    assert kevents.post(kube.client, notes) == (1, None)  # "gone" does not exist: no Event, no problem

    kube.core.create_namespaced_service_account("shop", {"metadata": {"name": "runner"}})
    kube.grant("shop", "shop/runner", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]}])
    with kube.as_service_account("shop", "runner") as runner:
        recorded, problem = kevents.post(runner, notes[1:] * 3)
    assert recorded == 0 and problem.startswith("creating Event shop/db.") and " 403 " in problem, problem
    assert len(_describe_events(kube, "shop", "db")[1]) == 1
