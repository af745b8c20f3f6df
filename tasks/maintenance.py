"""Thin Prefect tasks over repository maintenance: retention (forget), consolidation, prune and verify.

Results are typed (``Forgotten``, ``Pruned``, the engine's ``VerifyReport``); keep rules travel as
``movers.repo.retention.Policy``. Each task opens the repository from its URL itself (storage credentials
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
from dataclasses import asdict, dataclass
from typing import Any

from prefect import get_run_logger, task

from movers.pipeline.consolidate import DEAD_FRACTION, ConsolidationResult
from movers.pipeline.verify import VerifyReport
from movers.repo.prune import PruneReport
from movers.repo.retention import ForgetReport
from movers.repo.retention import Policy as KeepRules
from tasks import retry_if_retriable
from tasks.repository import KeySource, open_repository

HOUR = 3600


@dataclass(frozen=True)
class Forgotten:
    """What a forget did (``movers.repo.retention.ForgetReport``) and the named volumes that had no backups."""

    report: ForgetReport
    missing: list[str]

    @property
    def deleted(self) -> list[str]:
        """The manifest keys deleted (a dry run's: that would be)."""
        return self.report.deleted

    def to_dict(self) -> dict[str, Any]:
        """``ForgetReport.to_dict()`` plus ``missing``: what a flow's result shows."""
        return {**self.report.to_dict(), "missing": self.missing}


@dataclass(frozen=True)
class Pruned:
    """A prune's report, or why it did not run (``skipped``: another prune held the lock)."""

    dry_run: bool
    report: PruneReport | None
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``PruneReport.to_dict()`` plus ``skipped`` (None), or ``{"dry_run", "skipped"}``."""
        if self.report is None:
            return {"dry_run": self.dry_run, "skipped": self.skipped}
        return {**self.report.to_dict(), "skipped": None}


@dataclass(frozen=True)
class Consolidated:
    """Each volume's consolidation (``movers.pipeline.consolidate.ConsolidationResult``), or why none ran
    (``skipped``: a prune held the repository's prune lock)."""

    results: list[ConsolidationResult]
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The totals a flow's result shows."""
        return {
            "skipped": self.skipped,
            "backups": len(self.results),
            "consolidated": sum(1 for r in self.results if r.rewritten_bytes),
            "rewritten_bytes": sum(r.rewritten_bytes for r in self.results),
            "stored_bytes": sum(r.stored_bytes for r in self.results),
        }


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
    volumes: list[str] | None,
    rules: KeepRules,
    dry_run: bool = False,
    key: KeySource | None = None,
    policy: str | None = None,
) -> Forgotten:
    """Expire backups by the keep ``rules`` (``movers.repo.retention.forget_each``: an application's runs whole,
    other backups per volume) of ``volumes`` (None: every volume of the repository); ``policy``: only the backups
    that policy made (None: each policy's backups, counted separately).

    Returns the ``ForgetReport`` (``dry_run``, ``deleted`` manifest keys, each volume's kept and expired backups,
    each application run judged, manifests kept because they cannot be read) and the named volumes without
    backups (logged, not an error). No rule at all: ``UsageError``.
    """
    from movers.repo.retention import forget_each

    repo = open_repository(repo_url, key)
    result, missing = forget_each(repo, volumes, dry_run=dry_run, policy=policy, **asdict(rules))
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
    return Forgotten(result, missing)


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
) -> Pruned:
    """Prune the repository under its prune lock: its ``PruneReport``, or ``skipped``: why nothing was done (another
    prune held the lock for ``lock_wait_s``).
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
        return Pruned(dry_run, None, str(err))
    get_run_logger().info("prune: %s", report)
    return Pruned(dry_run, report)


@task(
    name="consolidate-repo",
    retries=1,
    retry_delay_seconds=30,
    retry_condition_fn=retry_if_retriable,
    timeout_seconds=12 * HOUR,
)
def consolidate_repo(
    repo_url: str,
    volumes: list[str],
    dead_fraction: float = DEAD_FRACTION,
    dry_run: bool = False,
    lock_wait_s: float = 600,
    key: KeySource | None = None,
) -> Consolidated:
    """Consolidate the newest backup of each of ``volumes`` (``movers.pipeline.consolidate``): one result each, or
    ``skipped`` when a prune held the prune lock for ``lock_wait_s``."""
    from movers.errors import PruneLockedError
    from movers.pipeline.consolidate import ConsolidationOptions, consolidate

    repo = open_repository(repo_url, key)
    options = ConsolidationOptions(dead_fraction=dead_fraction, dry_run=dry_run, lock_wait_s=lock_wait_s)
    results = []
    try:
        for volume in volumes:
            results.append(consolidate(repo, volume, "latest", options))
            get_run_logger().info("consolidation: %s", results[-1])
    except PruneLockedError as err:
        get_run_logger().warning("not consolidating %s now: %s", repo_url, err)
        return Consolidated(results, str(err))
    return Consolidated(results)


@task(
    name="verify-repo",
    retries=2,
    retry_delay_seconds=30,
    retry_condition_fn=retry_if_retriable,
    timeout_seconds=24 * HOUR,
)
def verify_repo(
    repo_url: str, mode: str = "sampled", sample: float = 0.05, seed: int | None = None, key: KeySource | None = None
) -> VerifyReport:
    """Verify every backup of the repository: ``mode`` "full" reads all referenced data, "sampled"
    checks every map and reads about ``sample`` of the packs whole. The ``VerifyReport`` (``ok``, ``errors``,
    ``damage`` with volume/backup/offset, ``warnings``, counters, ``seed``)."""
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
    return report
