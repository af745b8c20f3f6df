"""Thin Prefect tasks over ``movers.kube.kevents``: the Kubernetes Events a run leaves on the PVCs it backed up or
restored, or failed to. Best effort: a task never fails; what could not be recorded is one warning in the run's
log."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from movers.kube import apply, kevents
from movers.policy.model import BackupPolicy
from movers.values import selector_string
from reporting.best_effort import best_effort
from tasks.kube import api_client


def _post(kubeconfig: str | None, notes: list[kevents.Note]) -> int:
    log = get_run_logger()
    recorded, problem = 0, None
    with best_effort(f"Kubernetes Events: 0 of {len(notes)} recorded", log):  # no client: still never fails the run
        recorded, problem = kevents.post(api_client(kubeconfig), notes)
    if problem:
        log.warning("Kubernetes Events: %d of %d recorded: %s", recorded, len(notes), problem)
    return recorded


@task(name="kube-events-backup")
def record_backup_events(kubeconfig: str | None, run_id: str, repo: str, rows: list[dict[str, Any]]) -> int:
    """A ``BackedUp`` Event on each PVC of ``rows`` (the backup flow's summary rows); how many were recorded."""
    return _post(kubeconfig, kevents.backed_up(run_id, repo, rows))


@task(name="kube-events-backup-failed")
def record_backup_failure(kubeconfig: str | None, policy: BackupPolicy, run_id: str, error: str) -> int:
    """A ``BackupFailed`` Event on each PVC the policy selects; how many were recorded."""
    ns = policy.namespace
    claims = None
    with best_effort("Kubernetes Events: none recorded", get_run_logger()):
        claims = apply.list_objects(
            api_client(kubeconfig), "PersistentVolumeClaim", ns, selector_string(policy.pvc_selector)
        )
    if claims is None:
        return 0
    pvcs = sorted(c["metadata"]["name"] for c in claims)
    return _post(kubeconfig, kevents.backup_failed(ns, pvcs, run_id, policy.repository.url, error))


@task(name="kube-events-restore")
def record_restore_events(
    kubeconfig: str | None, namespace: str, run_id: str, repo: str, rows: list[dict[str, Any]]
) -> int:
    """A ``Restored`` Event on each restored claim (``rows``: pvc, volume, backup_id, written_bytes)."""
    return _post(kubeconfig, kevents.restored(namespace, run_id, repo, rows))


@task(name="kube-events-restore-failed")
def record_restore_failure(
    kubeconfig: str | None, namespace: str, pvcs: list[str], run_id: str, backup: str, error: str
) -> int:
    """A ``RestoreFailed`` Event on each of ``pvcs`` that exists in ``namespace``."""
    return _post(kubeconfig, kevents.restore_failed(namespace, pvcs, run_id, backup, error))
