"""Thin Prefect tasks over ``movers.repo``: what the repository knows about a volume."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from tasks import retry_if_retriable


@task(name="latest-base-handle", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def latest_base_handle(repo_url: str, volume_id: str) -> str | None:
    """The CSI snapshot handle recorded in ``volume_id``'s latest backup (the next delta's base), or None."""
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    latest = Repository.open(open_store(repo_url)).latest(volume_id)
    return latest.snapshot.snapshot_handle if latest is not None and latest.snapshot is not None else None


@task(name="plan-member")
def plan_member(volume_id: str, base_handle: str | None, audience: str | None, cbt_enabled: str = "auto"
                ) -> dict[str, Any]:  # fmt: skip
    """cbt-delta (CBT and a base), cbt-allocated (CBT, no base) or scan; logged, never silent."""
    if cbt_enabled == "off" or audience is None:
        plan = {"change_source": "scan", "base_handle": None, "audience": None,
                "why": "CBT disabled by policy" if cbt_enabled == "off" else "no SnapshotMetadataService"}  # fmt: skip
    elif base_handle:
        plan = {"change_source": "cbt-delta", "base_handle": base_handle, "audience": audience,
                "why": f"delta since {base_handle}"}  # fmt: skip
    else:
        plan = {"change_source": "cbt-allocated", "base_handle": None, "audience": audience,
                "why": "no earlier backup with a snapshot handle"}  # fmt: skip
    get_run_logger().info("%s: planned %s (%s)", volume_id, plan["change_source"], plan["why"])
    return plan
