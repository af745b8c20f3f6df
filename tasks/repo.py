"""Thin Prefect tasks over ``movers.repo``: what the repository knows about a volume."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from movers.backup.plan import VolumePlan
from tasks import retry_if_retriable
from tasks.repository import KeySource, describe, open_repository


@task(name="check-repository", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def check_repository(repo_url: str, key: KeySource | None = None) -> None:
    """Preflight: the repository opens with the flow's own environment (storage credentials, endpoint) and the
    key of ``key`` (``tasks.repository``: the repository Secret the mover pods mount). A missing bucket, a
    bucket without a repository, rejected credentials, a wrong key or none for an encrypted repository: a
    ``PreflightError`` of one line with the cause's exit code (6 for a key), not retried; an unreachable
    endpoint is retried first."""
    from movers.errors import MoverError, PreflightError

    try:
        repo = open_repository(repo_url, key)
    except MoverError as err:
        if err.retriable:
            raise
        raise PreflightError(f"the repository {repo_url} cannot be used: {err}", err.exit_code) from None
    if repo.config.encrypted:
        get_run_logger().info("repository %s: encrypted, opened with the key of %s", repo_url, describe(key))


@task(
    name="choose-base",
    task_run_name="base {volume_id}",
    retries=2,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_retriable,
)
def choose_base(
    repo_url: str,
    volume_id: str,
    pv_handle: str | None,
    pv_uid: str | None,
    key: KeySource | None = None,
    kubeconfig: str | None = None,
) -> dict[str, Any]:
    """The next CBT delta's base of ``volume_id``, whose source is now volume ``pv_handle`` (PV ``pv_uid``): the
    newest backup of that volume whose snapshot still exists in the cluster of ``kubeconfig``
    (``movers.repo.lineage.choose_base`` with ``movers.backup.bases.SnapshotCheck``): ``{"handle", "reason",
    "snapshot", "parent"}``, handle None for a full backup, snapshot the base's VolumeSnapshot name, parent the
    backup (id) the delta builds on."""
    from movers.backup.bases import SnapshotCheck
    from movers.repo.lineage import choose_base as choose
    from tasks.kube import api_client

    check = SnapshotCheck(api_client(kubeconfig))
    choice = choose(open_repository(repo_url, key), volume_id, pv_handle, pv_uid, check.missing)
    return {"handle": choice.handle, "reason": choice.reason, "snapshot": choice.snapshot, "parent": choice.backup_id}


PLANNED = {
    "cbt-delta": "incremental from the CBT delta",
    "cbt-allocated": "full from the CBT allocated blocks",
    "scan": "full by reading the whole volume (scan)",
}


@task(name="plan-member", task_run_name="plan {volume_id}")
def plan_member(
    volume_id: str,
    base: dict[str, Any],
    audience: str | None,
    no_cbt: str | None = None,
    max_results: int = 4096,
    snapshot: str | None = None,
    by_name: bool = False,
) -> VolumePlan:
    """``movers.backup.plan.VolumePlan.of``, said in one line of the run's log with its reason (a plan is never
    silent): ``ns/pvc: plan incremental from the CBT delta of snapshot S: delta since backup B ...``."""
    plan = VolumePlan.of(base, audience, no_cbt, max_results, by_name)
    of = f" of snapshot {snapshot}" if snapshot else ""
    get_run_logger().info("%s: plan %s%s: %s", volume_id, PLANNED[plan.change_source], of, plan.why)
    return plan
