"""Thin Prefect tasks over ``movers.repo``: what the repository knows about a volume."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from movers.kube.backup import VolumePlan
from tasks import retry_if_retriable


def _open(repo_url: str):
    from movers.repo.keys import Credentials
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    return Repository.open(open_store(repo_url), Credentials.gather())  # an encrypted one's key: as the CLI's


@task(name="check-repository", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def check_repository(repo_url: str) -> None:
    """Preflight: the repository opens with the flow's own environment (credentials, endpoint). A missing
    bucket, a bucket without a repository, rejected credentials: a ``PreflightError`` of one line with the
    cause's exit code; an unreachable endpoint is retried first."""
    from movers.errors import MoverError, PreflightError

    try:
        _open(repo_url)
    except MoverError as err:
        if err.retriable:
            raise
        raise PreflightError(f"the repository {repo_url} cannot be used: {err}", err.exit_code) from None


@task(name="choose-base", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def choose_base(repo_url: str, volume_id: str, pv_handle: str | None, pv_uid: str | None) -> dict[str, Any]:
    """The next CBT delta's base of ``volume_id``, whose source is now volume ``pv_handle`` (PV ``pv_uid``):
    ``{"handle", "reason"}``, handle None for a full backup (``movers.repo.lineage.choose_base``)."""
    from movers.repo.lineage import choose_base as choose

    choice = choose(_open(repo_url), volume_id, pv_handle, pv_uid)
    return {"handle": choice.handle, "reason": choice.reason}


@task(name="plan-member")
def plan_member(
    volume_id: str, base: dict[str, Any], audience: str | None, no_cbt: str | None = None, max_results: int = 4096
) -> VolumePlan:
    """``movers.kube.backup.VolumePlan.of``, said in the run's log (a plan is never silent)."""
    plan = VolumePlan.of(base, audience, no_cbt, max_results)
    get_run_logger().info("%s: planned %s (%s)", volume_id, plan.change_source, plan.why)
    return plan
