"""The ``maintain-repo`` flow: expire backups by retention, consolidate each volume's newest backup when its restore
would fetch much dead data (``movers.pipeline.consolidate``), prune what no kept backup references, verify.

Retention comes from backup policies (each policy's ``retention`` applies to the backups that policy made of
the volumes of its namespace: volume ids are ``<namespace>/<pvc>``) and/or explicit ``keep_*`` parameters,
which override the policies' rules; without policies, explicit rules apply to every backup (each policy's
counted separately). Application backups are judged a whole run at a time (``movers.repo.retention``).
Policies that cover the same claims each keep their own backups by their own rules. Backups of a policy
not given (e.g. one that was deleted) and backups made outside a policy are left alone (retire them with
``cbt-mover forget --policy NAME``, or a run without policies and with explicit rules).

An encrypted repository's key comes from the repository Secret ``key_secret`` (``namespace/name``, e.g. the
credentials Secret of a policy backing up into the repository), read through the API (``tasks.repository``);
without it, from the worker's environment (as for the CLI).

Artifacts: the retention table (one row per backup: kept and why, or forgotten), the consolidation table (one row
per volume: what a restore of its newest backup fetches, before and after), the prune report,
the verify result, a failure artifact after a failure. Events ``cbt-mover.maintenance.started|completed|failed``
about ``cbt-mover.repository.<url>`` (``reporting.events``). The run FAILS when verify finds damage, after the
artifacts.
"""

# no `from __future__ import annotations`: a served flow run gets the flow by cloudpickle, which keeps only
# the globals its code uses, so a string annotation naming the request's model could not be resolved there

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from flows import _run
from movers.errors import IntegrityError
from movers.maintenance.request import RULES, MaintenanceRequest
from movers.pipeline.verify import VerifyReport
from movers.policy.model import BackupPolicy, load_policy
from reporting import events, runs
from reporting import maintenance_report as report
from tasks.maintenance import (
    KeepRules,
    Pruned,
    consolidate_repo,
    forget_backups,
    prune_repo,
    repo_volumes,
    verify_repo,
)
from tasks.repository import KeySource, describe, key_source

SHOWN = 20  # damage entries carried in the result and the events (all are in the verify artifact)
# (keep rules, volumes (None: every volume), the policy whose backups they judge (None: each policy's))
Groups = list[tuple[dict[str, int], list[str] | None, str | None]]


KIND = "maintenance"


def _run_name() -> str:
    """``<run id> <repository URL without credentials>`` (``reporting.runs``), from the request as given (the name
    is only a label)."""
    given = flow_run.parameters.get("request") or {}
    repo = given.repo if isinstance(given, MaintenanceRequest) else given.get("repo", "repo")
    return runs.run_name(KIND, report.public_url(str(repo)))


def retention_groups(
    repo_url: str, volumes: list[str], policies: list[BackupPolicy], overrides: dict[str, int | None]
) -> tuple[Groups, list[str]]:
    """``[(rules, volumes or None for all, policy name or None for every policy)]`` to forget with, and notes on
    what was left out (pure).

    Each policy's rules, with the non-None ``overrides`` replacing them, apply to the backups that policy made
    of the volumes of its namespace (``movers.repo.retention``: a backup records its policy): overlapping
    policies each keep their own backups by their own rules. Without policies, the ``overrides`` apply to
    every backup (each policy's counted separately). Backups of a policy not given, and backups made outside
    any policy, are kept (``cbt-mover forget --policy NAME`` retires them).
    """
    notes: list[str] = []
    if not policies:
        rules = {k: v for k, v in overrides.items() if v}
        return ([(rules, None, None)] if rules else []), ([] if rules else ["no retention rule given: nothing expired"])
    groups: Groups = []
    seen: set[tuple[str, str]] = set()
    for policy in policies:
        if policy.repository.url.rstrip("/") != repo_url.rstrip("/"):
            notes.append(f"policy {policy.name}: its repository is {policy.repository.url}, not this one; skipped")
            continue
        if (policy.namespace, policy.name) in seen:
            notes.append(f"policy {policy.name} of {policy.namespace} is given twice: the first one's rules apply")
            continue
        seen.add((policy.namespace, policy.name))
        rules = {
            k: n
            for k in RULES
            if (n := (overrides[k] if overrides.get(k) is not None else getattr(policy.retention, k)) or 0)
        }
        covered = [v for v in volumes if v.startswith(f"{policy.namespace}/")]
        if not covered:
            notes.append(f"policy {policy.name}: no backups of namespace {policy.namespace}")
        elif not rules:
            notes.append(f"policy {policy.name}: the rules keep every backup; skipped")
        else:
            groups.append((rules, covered, policy.name))
    notes.append("backups of policies not given here, and made outside a policy, are kept")
    return groups, notes


def key_for(request: MaintenanceRequest, kubeconfig: str | None) -> KeySource | None:
    """Where the run reads the repository key: the Secret the request's ``key_secret`` names, else None (the
    worker's environment)."""
    ref = request.key_secret_ref()
    return key_source(kubeconfig, *ref) if ref else None


@flow(name="maintain-repo", flow_run_name=_run_name, log_prints=True)
def maintain_repo(request: MaintenanceRequest, kubeconfig: str | None = None) -> dict[str, Any]:
    """Forget expired backups of ``request.repo``, prune (after ``grace``), then verify (``verify``, ``sample``), as
    ``request`` says (``movers.maintenance.request``; its fields are the deployment's form). ``kubeconfig``:
    the cluster the key Secret is read from (None: in-cluster, else the default kubeconfig).

    A prune that waits ``lock_wait`` for another prune of the same repository (another run's, or a CLI prune: the
    repository's prune lock) is skipped (reported), not failed. Raises ``IntegrityError`` when verify finds damage.
    """
    repo, dry_run = request.repo, request.dry_run
    public = report.public_url(repo)
    run = _run.Run.start(
        KIND,
        lambda run_id: events.repository_resource(public, KIND, run_id),
        {"repository": public, "dry_run": dry_run},
        runs.Progress(step="maintain", thawed="not applicable: maintenance freezes no application"),
        {"prune": request.prune, "verify": request.verify},
        repository=public,
    )
    summary: dict[str, Any] = {}
    with run.guard(
        f"maintenance {run.id} of {public}", report.artifact_key(repo, "failure"), lambda err: _run.Failure(summary)
    ):
        summary = _maintain(request, kubeconfig, run.progress)
        summary["run_id"], summary["duration_s"] = run.id, run.seconds()
        checked = summary["verify"]
        if checked is not None and not checked["ok"]:
            run.progress.step = "verify"
            raise IntegrityError(f"verify of {public} found damage: " + "; ".join(checked["errors"][:5]))
    run.complete(summary)
    return summary


PRUNE_SHOWN = (
    "packs_deleted",
    "map_objects_deleted",
    "bytes_deleted",
    "packs_in_grace",
    "dead_bytes",
    "packs_repacked",
    "duration_s",
)
VERIFY_SHOWN = ("mode", "sample", "seed", "backups_checked", "packs_read", "fetched_bytes")


def _maintain(asked: MaintenanceRequest, kubeconfig: str | None, progress: runs.Progress) -> dict[str, Any]:
    log, repo, dry_run = get_run_logger(), asked.repo, asked.dry_run
    public = report.public_url(repo)
    policies = [load_policy(p) for p in asked.policy_paths]
    key = key_for(asked, kubeconfig)
    log.info("repository key (if it is encrypted): from %s", describe(key))

    progress.step = "retention"
    volumes = repo_volumes(repo, key)  # forget never removes a volume's newest backup: the consolidation's too
    groups, notes = retention_groups(repo, volumes, policies, asked.rule_overrides())
    for note in notes:
        log.info("retention: %s", note)
    results = [
        (rules, forget_backups(repo, vols, KeepRules(**rules), dry_run=dry_run, key=key, policy=name))
        for rules, vols, name in groups
    ]
    rows = report.retention_rows(results)
    create_table_artifact(
        key=report.artifact_key(repo, "retention"),
        table=rows or [{"note": "; ".join(notes)}],
        description=f"retention of {public}" + " (dry run)" * dry_run,
    )
    forgotten = sum(len(r.deleted) for _rules, r in results)

    consolidated = None
    progress.step = "consolidate"
    if asked.consolidate:
        consolidated = consolidate_repo(repo, volumes, asked.dead_fraction, dry_run, asked.lock_wait, key)
        create_table_artifact(
            key=report.artifact_key(repo, "consolidate"),
            table=report.consolidation_rows(consolidated),
            description=f"consolidation of the newest backups of {public}" + " (dry run)" * dry_run,
        )

    pruned = None
    progress.step = "prune"
    if asked.prune:
        would_forget = [key for _rules, r in results for key in r.deleted] if dry_run else None
        pruned = prune_repo(repo, asked.grace, dry_run, asked.lock_wait, would_forget, key)
        create_table_artifact(
            key=report.artifact_key(repo, "prune"),
            table=report.prune_rows(pruned),
            description=f"prune of {public} (grace {asked.grace:.0f} s)",
        )
    checked = None
    progress.step = "verify"
    if asked.verify != "off":
        checked = verify_repo(repo, asked.verify, asked.sample, asked.seed, key)
        create_markdown_artifact(
            key=report.artifact_key(repo, "verify"),
            description="verify of " + public,
            markdown=report.verify_markdown(repo, checked),
        )
    return {
        "repository": public,
        "dry_run": dry_run,
        "notes": notes,
        "forgotten": forgotten,
        "kept": sum(r["action"] == "keep" for r in rows),
        "consolidate": None if consolidated is None else consolidated.to_dict(),
        "prune": None if pruned is None else _prune_summary(pruned),
        "verify": None if checked is None else _verify_summary(checked),
    }


def _prune_summary(pruned: Pruned) -> dict[str, Any]:
    """The prune's part of the run's result and events: why it was skipped, or its main counters."""
    done = pruned.report
    return {"skipped": pruned.skipped} | {k: None if done is None else getattr(done, k) for k in PRUNE_SHOWN}


def _verify_summary(checked: VerifyReport) -> dict[str, Any]:
    """The verify's part of the run's result and events: the verdict, what was read, the first ``SHOWN`` errors,
    damage entries and warnings, how many damage entries in all."""
    return (
        {"ok": checked.ok}
        | {k: getattr(checked, k) for k in VERIFY_SHOWN}
        | {k: getattr(checked, k)[:SHOWN] for k in ("errors", "damage", "warnings")}
        | {"damaged": len(checked.damage)}
    )
