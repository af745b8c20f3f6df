"""Thin Prefect tasks over repository maintenance: retention (forget), prune and verify.

Inputs and results are plain data. Each task opens the repository from its URL itself (storage credentials
from the environment; an encrypted repository's key from ``key``, ``tasks.repository.KeySource``, or without one
from the environment, as for the CLI). Damage that verify finds is in its result, never raised:
the caller decides (the ``maintain-repo`` flow fails after writing its artifacts). Only errors the
movers mark retriable (a store that is unavailable for a while) are retried.

Two prunes of one repository never overlap: the engine's prune holds the repository's prune lock, an
object in the repository itself (``movers.repo.prunelock``), so a CLI prune and a flow's prune exclude
each other too. ``prune_repo`` waits for it, then skips (reports why) when another prune still holds it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prefect import get_run_logger, task

from tasks import retry_if_retriable
from tasks.repository import KeySource, open_repository

HOUR = 3600


def _log_progress(what: str, interval: float = 30.0) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback that logs at most once per ``interval`` seconds, and the end."""
    log, last = get_run_logger(), [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= interval or done >= total:
            last[0] = now
            log.info("%s: %d/%d", what, done, total)

    return progress


@task(name="repo-volumes", retries=2, retry_delay_seconds=5, retry_condition_fn=retry_if_retriable, timeout_seconds=600)
def repo_volumes(repo_url: str, key: KeySource | None = None) -> list[str]:
    """The ids of the volumes that have backups in the repository, sorted."""
    return open_repository(repo_url, key).volumes()


@task(
    name="forget-backups", retries=2, retry_delay_seconds=5, retry_condition_fn=retry_if_retriable, timeout_seconds=1800
)
def forget_backups(
    repo_url: str,
    volumes: list[str] | None = None,
    keep_last: int | None = None,
    keep_daily: int | None = None,
    keep_weekly: int | None = None,
    keep_monthly: int | None = None,
    dry_run: bool = False,
    key: KeySource | None = None,
    policy: str | None = None,
) -> dict[str, Any]:
    """Expire backups by the keep rules (``movers.repo.retention.forget_each``: an application's runs whole, other
    backups per volume) of ``volumes`` (None: every volume of the repository); ``policy``: only the backups that
    policy made (None: each policy's backups, counted separately).

    Returns ``movers.repo.retention.ForgetReport.to_dict()`` (``dry_run``, ``deleted`` manifest keys,
    ``volumes``: ``[{volume, kept: [{backup_id, created, reasons, run, policy}], expired: [ids]}]``, ``runs``: each
    application run judged, ``unreadable``: manifests kept because they cannot be read) plus
    ``missing``: named volumes without backups (logged, not an error). No rule at all: ``UsageError``.
    """
    from movers.repo.retention import forget_each

    repo = open_repository(repo_url, key)
    rules = {"keep_last": keep_last, "keep_daily": keep_daily, "keep_weekly": keep_weekly, "keep_monthly": keep_monthly}
    result, missing = forget_each(repo, volumes, dry_run=dry_run, policy=policy, **rules)
    for r in result.runs:
        verdict = (
            f"keep ({', '.join(r.reasons)})"
            if r.kept
            else f"{'would forget' if dry_run else 'forgot'} ({r.why_forgotten})"
        )
        get_run_logger().info("%s: %s", r.describe(), verdict)
    for v in result.volumes:
        get_run_logger().info(
            "%s: keep %d, %s %d", v.volume, len(v.kept), "would forget" if dry_run else "forgot", len(v.expired)
        )
    if missing:
        get_run_logger().warning("no backups of %s in %s: nothing to expire", ", ".join(missing), repo.describe())
    return {**result.to_dict(), "missing": missing}


@task(
    name="prune-repo",
    retries=1,
    retry_delay_seconds=30,
    retry_condition_fn=retry_if_retriable,
    timeout_seconds=12 * HOUR,
)
def prune_repo(
    repo_url: str,
    grace_s: float = 86400,
    dry_run: bool = False,
    lock_wait_s: float = 600,
    assume_forgotten: list[str] | None = None,
    key: KeySource | None = None,
) -> dict[str, Any]:
    """Prune the repository under its prune lock: ``movers.repo.prune.PruneReport.to_dict()`` plus
    ``skipped`` (None, or why nothing was done: another prune held the lock for ``lock_wait_s``).
    ``assume_forgotten``: with ``dry_run``, manifest keys a forget's dry run named (count them as gone)."""
    from movers.errors import PruneLockedError
    from movers.repo.prune import prune

    try:
        report = prune(
            open_repository(repo_url, key),
            grace_s=grace_s,
            dry_run=dry_run,
            progress=_log_progress("marked backups"),
            assume_forgotten=assume_forgotten or (),
            lock_wait_s=lock_wait_s,
        )
    except PruneLockedError as err:
        get_run_logger().warning("not pruning %s now: %s", repo_url, err)
        return {"dry_run": dry_run, "skipped": str(err)}
    get_run_logger().info("prune: %s", report)
    return {**report.to_dict(), "skipped": None}


@task(
    name="verify-repo",
    retries=2,
    retry_delay_seconds=30,
    retry_condition_fn=retry_if_retriable,
    timeout_seconds=24 * HOUR,
)
def verify_repo(
    repo_url: str, mode: str = "sampled", sample: float = 0.05, seed: int | None = None, key: KeySource | None = None
) -> dict[str, Any]:
    """Verify every backup of the repository: ``mode`` "full" reads all referenced data, "sampled"
    checks every map and reads about ``sample`` of the packs whole. ``VerifyReport.to_dict()``
    (``ok``, ``errors``, ``damage`` with volume/backup/offset, ``warnings``, counters, ``seed``)."""
    from movers.errors import UsageError
    from movers.pipeline.verify import run_verify, run_verify_sampled

    repo = open_repository(repo_url, key)
    refs = repo.list_backups()
    if mode == "full":
        report = run_verify(repo, refs, progress=_log_progress("verified backups"))
    elif mode == "sampled":
        report = run_verify_sampled(repo, refs, sample, seed, progress=_log_progress("verify (backups, then bytes)"))
    else:
        raise UsageError(f"verify mode must be full or sampled, not {mode!r}")
    get_run_logger().info(
        "verify %s: %s, %d damaged, %d warning(s)",
        mode,
        "ok" if report.ok else "DAMAGED",
        len(report.errors),
        len(report.warnings),
    )
    return report.to_dict()
