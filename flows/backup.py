"""The ``backup-app`` flow: check, quiesce an application, snapshot its PVCs at one point in time, and
back every member up to the repository from a Block-mode mover pod (CBT delta / CBT allocated / scan).

The policy comes from a policy file (``configs/policies/``) and/or the run's typed ``overrides``, which override
the file's fields (``movers.policy.overrides``). In order:

1. preflight, before anything is frozen or created (``movers.backup.preflight``): the run's own permissions
   (SelfSubjectAccessReview), the repository (with the flow's environment and, for an encrypted one, the key in
   the credentials Secret, read through the API: ``tasks.repository``), the selected claims (bound CSI
   volumes), the credentials Secret and the movers' ServiceAccount, the snapshot path and its classes, the
   drivers' CBT. A failure is one line (and the ``failed`` event);
2. per claim the base of its delta: the newest backup of the same source volume (``movers.repo.lineage``),
   else a full backup, with the reason in the plan and the summary;
3. the snapshots, under a freeze bounded by ``group_snapshot.freeze_timeout`` (``movers.backup.snapshots``):
   one VolumeGroupSnapshot where the cluster can take one (the group API served and a class for the claims'
   driver), else one VolumeSnapshot per claim; a group not cut in time is deleted after the thaw and, by
   ``group_snapshot.on_timeout``, replaced by per-claim snapshots under a new freeze, or the run fails.
   The path, its reason and any fallback are in the summary, the table and the logs;
4. a mover pod per claim, ``parallelism`` at a time, recording the source volume's identity and the run's claims.

Everything the run creates in the cluster carries ``cbt-mover.io/run=<run id>`` (and the
``app.kubernetes.io/*`` labels, part-of = the policy's name) and is deleted in every outcome (after a
failure, a cleanup error is logged and the run's own error raised); the snapshots of a successful run are
kept (run label removed) as the base of the next CBT delta, and the ones they replace are deleted. Deleting a
snapshot of a Retain class removes its contents and storage snapshots too, or with ``retained_snapshots: keep``
leaves them and reports them (``movers.kube.retained``): a warning each, the summary's ``retained`` and the table.
"""

# no `from __future__ import annotations`: a served flow run gets the flow by cloudpickle, which keeps only
# the globals its code uses, so string annotations naming the policy's models could not be resolved there

import dataclasses
import logging
from typing import Any

from prefect import get_run_logger
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run

from flows import _run
from flows._run import best_effort
from movers.backup.plan import VolumePlan
from movers.backup.preflight import DriverCbt, Source
from movers.backup.request import BackupResult
from movers.backup.snapshots import Retired
from movers.policy.model import BackupPolicy
from movers.policy.overrides import PolicyOverrides, policy_from_parameters, resolve_policy
from movers.repo.manifest import APP_TAG, POLICY_TAG, RUN_TAG
from reporting import events, report, runs
from tasks.kevents import record_backup_events, record_backup_failure
from tasks.kube import (
    Member,
    Recorded,
    Snapshots,
    check_permissions,
    cleanup_run,
    inspect_cluster,
    keep_base_snapshots,
    move_volume,
    take_snapshots,
)
from tasks.maintenance import KeepRules, forget_backups
from tasks.repository import KeySource, check_repository, choose_base, key_source, plan_member

KIND = "backup"


def _run_name() -> str:
    """``<run id> <namespace>/<app>`` (``reporting.runs``), from the policy the parameters make (else the file's
    name)."""
    p = dict(flow_run.parameters)
    try:
        policy = policy_from_parameters(p)
        what = f"{policy.namespace}/{policy.name}"
    except Exception:  # noqa: BLE001  (silent, not best_effort: the name is only a label; the run fails on it)
        what = _given(p, "namespace") or (p.get("policy_path") or "policy").rsplit("/", 1)[-1].removesuffix(".yaml")
    return runs.run_name(KIND, what)


def _given(params: dict[str, Any], key: str) -> Any:
    """The override ``key`` a run's parameters give (``overrides``: the model, or a mapping as the API holds it)."""
    overrides = params.get("overrides") or {}
    return overrides.get(key) if isinstance(overrides, dict) else getattr(overrides, key, None)


def run_id_for(flow_run_id: Any) -> str:
    """The run id (``cbt-mover.io/run`` label value) of a flow run: derived from its id only, so that
    the state hooks can recompute it (``reporting.runs.run_id_for``)."""
    return runs.run_id_for(KIND, flow_run_id)


def _abandon_run(run: _run.Abandoned) -> None:
    """Best effort after a cancelled/crashed run: the policy's post hooks (thaw), then delete everything
    labelled with the run. Never raises (errors are logged)."""
    from movers.hooks import app_hooks, run_hooks
    from movers.kube import cleanup
    from movers.kube import manifests as m
    from movers.policy.hooks import DEFAULT_TIMEOUT_S
    from tasks.kube import api_client

    log, params, said = run.log, run.params, f"run {run.id} ({run.why})"
    ns, hooks, annotations = _given(params, "namespace"), _given(params, "hooks"), False
    app, hook_timeout, keep_retained = ns, DEFAULT_TIMEOUT_S, False
    with best_effort(f"{said}: cannot resolve the policy; using the parameters", log):
        policy = policy_from_parameters(params)
        ns, hooks, annotations = policy.namespace, policy.hooks, policy.use_pod_annotations
        app, hook_timeout, keep_retained = policy.name, policy.timeouts.hook, _keep_retained(policy)
    if not ns:
        log.error("%s: no namespace known, nothing to thaw or clean up", said)
        return
    api = None
    with best_effort(f"{said}: no cluster client", log, logging.ERROR):
        api = api_client(params.get("kubeconfig"))
    if api is None:
        return
    with best_effort(f"{said}: post hooks failed", log, logging.ERROR):  # then still clean up
        hookset = app_hooks(api, ns, hooks, use_pod_annotations=annotations, default_timeout=hook_timeout)
        for result in run_hooks(api, ns, list(reversed(hookset.post)), stop_on_failure=False):
            log.info("%s: %s", said, result.describe())
    with best_effort(f"{said}: cleanup failed", log, logging.ERROR):
        deleted = cleanup.delete_by_label(api, ns, f"{m.RUN_LABEL}={run.id}", wait=True, keep_retained=keep_retained)
        log.info("%s: deleted %s", said, deleted)
    run.failed(events.app_resource(ns, app, KIND, run.id))


# Prefect calls them after a cancellation or a crash: thaw the app and delete the run's objects
on_cancellation, on_crashed = _run.state_hooks(KIND, _abandon_run, __name__)


@_run.run_flow("backup-app", _run_name, (on_cancellation, on_crashed))
def backup_app(
    policy_path: str | None = None,
    overrides: PolicyOverrides | None = None,
    forget_expired: bool = True,
    kubeconfig: str | None = None,
) -> dict[str, Any]:
    """Back up the PVCs the policy's ``pvc_selector`` matches in its namespace to its repository: the policy of
    ``policy_path`` with ``overrides`` over it (``movers.policy.overrides``; without a file, the overrides are the
    whole policy).

    ``forget_expired``: after a successful run, expire the backed-up volumes' backups by the policy's retention
    (manifests only; the maintenance flow prunes the data). ``kubeconfig``: the cluster (None: in-cluster, else the
    default kubeconfig). Emits ``cbt-mover.backup.started``, then ``.completed`` or ``.failed``
    (``reporting.events``); a failure is one ERROR line and the artifact ``backup-<app>-failure``
    (``reporting.runs.report_failure``).
    """
    log = get_run_logger()
    policy = resolve_policy(policy_path, overrides)
    ns, url, app = policy.namespace, policy.repository.url, policy.name
    run = _run.Run.start(
        KIND,
        lambda run_id: events.app_resource(ns, app, KIND, run_id),
        {"namespace": ns, "app": app, "repository": url},
        runs.Progress(),
        {"selector": policy.pvc_selector},
        namespace=ns,
        app=app,
    )
    log.info("run %s: backing up %s (selector %s) to %s", run.id, ns, policy.pvc_selector, url)

    def failure(err: BaseException) -> _run.Failure:
        related = events.volumes_related(sorted(run.progress.committed))
        return _run.Failure(related=related, then=lambda: record_backup_failure(kubeconfig, policy, run.id, str(err)))

    with run.guard(f"backup {run.id} of {ns}/{app}", f"backup-{app}-failure", failure):
        summary = _backup(policy, run, kubeconfig, forget_expired)
    summary["duration_s"] = run.seconds()
    rows = summary["volumes"]
    run.complete(
        {k: v for k, v in summary.items() if k != "volumes"} | {"volumes": {r["volume"]: _event_row(r) for r in rows}},
        events.volumes_related([r["volume"] for r in rows]),
    )
    return summary


def _event_row(row: dict[str, Any]) -> dict[str, Any]:
    """A volume's part of the ``completed`` event."""
    keys = ("mode", "backup_id", "change_source", "planned", "cbt_fallback", "why", "duration_s")
    sizes = ("changed_bytes", "read_bytes", "uploaded_bytes")
    return {k: row.get(k) for k in (*keys, *sizes)}


def _backup(policy: BackupPolicy, run: _run.Run, kubeconfig: str | None, forget_expired: bool) -> dict[str, Any]:
    """Snapshot and move (cleaning up in every outcome), expire by retention, report; the run's summary.
    ``run.progress`` records what was done, for the failure report."""
    log = get_run_logger()
    ns, url, run_id, progress = policy.namespace, policy.repository.url, run.id, run.progress
    keep_retained = _keep_retained(policy)
    with _run.cleanup_after(run, lambda failed: cleanup_run(kubeconfig, ns, run_id, keep_retained=keep_retained)):
        snap, retired, rows, secret_keys = _snapshot_and_move(policy, run_id, kubeconfig, progress)
    progress.step = "retention"
    key = key_source(kubeconfig, ns, policy.repository.credentials_secret)
    expired = forget_backups_of(url, [r["volume"] for r in rows], policy, key) if forget_expired else None
    progress.step = "report"
    report.publish(run_id, policy, snap, retired, rows, secret_keys)
    record_backup_events(kubeconfig, run_id, url, rows)
    taken = snap.taken
    if taken.fallback:
        log.warning("backup %s: snapshots per PVC after a fallback: %s", run_id, taken.fallback)
    log.info(
        "backup %s done (%s snapshots: %s): %s",
        run_id,
        taken.path,
        snap.reason,
        ", ".join(f"{r['volume']} {r['mode']}" for r in rows),
    )
    return {
        "run_id": run_id,
        "namespace": ns,
        "app": policy.name,
        "repository": url,
        "freeze_s": snap.freeze_s,
        "freezes": taken.freezes,
        "snapshots": {"path": taken.path, "reason": snap.reason, "fallback": taken.fallback, "kind": taken.kind},
        "volumes": rows,
        "expired": expired,
        "retained": [dataclasses.asdict(c) for c in retired.retained],
    }


def _snapshot_and_move(
    policy: BackupPolicy, run_id: str, kubeconfig: str | None, progress: runs.Progress
) -> tuple[Snapshots, Retired, list[dict[str, Any]], tuple[str, ...]]:
    """Preflight, plan the bases, snapshot under a bounded freeze, move every member (``parallelism`` at a
    time), keep the new base snapshots. Returns the snapshot set, the base snapshots it retired, one summary
    row per volume and the credentials Secret's key names the preflight read; ``progress`` says the step, whether
    the app was thawed and the backups committed so far."""
    log = get_run_logger()
    ns, url = policy.namespace, policy.repository.url
    # preflight: nothing is frozen or created before all of it passed; the permissions first
    check_permissions(kubeconfig, policy)
    found = inspect_cluster(kubeconfig, policy)  # the credentials Secret among the rest
    key = key_source(kubeconfig, ns, policy.repository.credentials_secret)
    check_repository(url, key)
    sources = {s.pvc: s for s in found.sources}
    bases = {pvc: choose_base(url, f"{ns}/{pvc}", s, key, kubeconfig) for pvc, s in sources.items()}
    progress.step, progress.thawed = "snapshot", "the freeze ended with the snapshot step (its post hooks always run)"
    snap = take_snapshots(kubeconfig, run_id, policy, found)
    progress.step, progress.thawed = (
        "move",
        "thawed after the snapshots were cut: " + ("; ".join(snap.taken.hooks) or "no hooks"),
    )
    members = _members(snap, sources, run_id, policy, found.secret_keys)
    plans: dict[str, VolumePlan] = {}

    def move(member: Member) -> PrefectFuture:
        cbt = found.cbt[member.snapshot.driver]
        audience, no_cbt = _cbt(cbt, snap)
        volume = f"{ns}/{member.pvc}"
        by_name = cbt.base_by_name  # a v1alpha1 service: the base by name
        plan = plan_member(
            volume, bases[member.pvc], audience, no_cbt, policy.cbt.max_results, member.snapshot.snapshot, by_name
        )
        plans[member.pvc] = plan
        return move_volume.submit(kubeconfig, run_id, member, plan, policy)

    def committed(member: Member, result: BackupResult) -> None:
        progress.committed[f"{ns}/{member.pvc}"] = result.backup_id

    results = _run.waves(members, policy.parallelism, move, committed)
    rows = []
    for member, res in zip(members, results, strict=True):
        plan = plans[member.pvc]
        rows.append(report.volume_row(f"{ns}/{member.pvc}", plan, res, report.snapshot_text(snap.taken)))
        if res.change_source != plan.change_source:
            log.warning(
                "%s: planned %s but the mover used %s (%s)",
                member.pvc,
                plan.change_source,
                res.change_source,
                res.cbt_fallback or "no reason given",
            )
    progress.step = "keep-base-snapshots"
    taken = snap.taken
    kept = [taken.group] if taken.group else [x.snapshot.snapshot for x in members]
    retired = keep_base_snapshots(
        kubeconfig, ns, policy.name, taken.kind, taken.group_version, kept, _keep_retained(policy)
    )
    return snap, retired, rows, found.secret_keys


def _keep_retained(policy: BackupPolicy) -> bool:
    """Whether the contents of a Retain class stay (and are reported) when the run deletes their snapshots."""
    return policy.retained_snapshots == "keep"


def _cbt(cbt: DriverCbt, snap: Snapshots) -> tuple[str | None, str | None]:
    """The SnapshotMetadataService audience for a member of a driver that offers ``cbt``, or None and why its CBT
    cannot work (no service, CBT off, or a group member the service cannot serve)."""
    why = cbt.unavailable or (cbt.group_members if snap.taken.kind == "VolumeGroupSnapshot" else None)
    return (None, why) if why else (cbt.audience, None)


def _members(
    snap: Snapshots, sources: dict[str, Source], run_id: str, policy: BackupPolicy, secret_keys: tuple[str, ...]
) -> list[Member]:
    """The snapshot set's members of the preflight's claims, with what their movers record: the claim (its class,
    size, mode and labels, its PV's identity), the run's claims, the group, the manifest tags, the app and the
    repository; and the credentials Secret's key names the preflight read (the key files the movers mount)."""
    taken = {x.pvc for x in snap.members}
    if set(sources) - taken:
        raise RuntimeError(f"the snapshot set has no member for PVC(s) {sorted(set(sources) - taken)}")
    if taken - set(sources):  # a claim created since the preflight: the next run takes it
        get_run_logger().warning(
            "the group snapshot also took PVC(s) %s, created since the preflight: not backed up by this run",
            sorted(taken - set(sources)),
        )
    recorded = Recorded(
        run_pvcs=sorted(sources),
        group_snapshot=snap.taken.group,
        app=policy.name,
        tags={RUN_TAG: run_id, APP_TAG: policy.name, POLICY_TAG: policy.name},
        repo=policy.repository.url,
        secret_keys=secret_keys,
    )
    return [Member(x, sources[x.pvc], recorded) for x in snap.members if x.pvc in sources]


def forget_backups_of(
    repo_url: str, volumes: list[str], policy: BackupPolicy, key: KeySource | None = None
) -> dict[str, Any] | None:
    """Expire the backups this policy made of ``volumes`` by its retention, whole runs at a time
    (``movers.repo.retention``); another policy's backups of the same claims are not touched. None when the
    policy keeps everything."""
    rules = policy.retention.rules()
    if not rules:
        get_run_logger().info("retention: the policy keeps every backup")
        return None
    return forget_backups(repo_url, volumes, KeepRules(**rules), key=key, policy=policy.name).to_dict()
