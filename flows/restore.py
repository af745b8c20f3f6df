"""The ``restore-app`` flow: restore one PVC, some PVCs or a whole application backup into the same or another
namespace.

Order (``movers.restore`` has the details):

1. select the backups (``movers.repo.selection``): ``backup="latest"`` is the newest backup run that covers
   the PVCs asked for (with none named: the newest COMPLETE run of the application, a newer partial run
   being named in the logs and the report), or each PVC's latest backup for repositories without run tags
   (logged as a warning); a run id; or one volume's backup id. A partial run (a mover of it failed) is
   restored as a whole application only with ``allow_partial``, else the run fails here, naming the
   missing PVCs;
2. check everything before creating anything: the run's own permissions (SelfSubjectAccessReviews for
   every call the restore makes), target namespace, ServiceAccount and repository Secret in it, storage
   classes, existing claims (refused unless ``overwrite``; refused when a pod uses them);
3. write every volume into a NEW Block claim of the recorded capacity and class from a writer pod that
   verifies every chunk and reads the device back (``--verify-device``), ``parallelism`` at a time. The
   claim and the pod are created together (a WaitForFirstConsumer claim binds when the pod is scheduled);
   the pod prefers the nodes where the source volume lived (its recorded node affinity), and takes the
   writer settings (``node_selector``, ``tolerations``, ``affinity``, or a policy's ``mover`` section);
4. only when all are written: give each volume its final claim (the original name; handed over to a
   Filesystem claim with the recorded fsType when the recorded mode is Filesystem or ``hand_over``; an
   existing claim replaced when ``overwrite``) and mark it ``cbt-mover.io/restored-from=<volume>@<backup id>``.
   ``in_place`` writes onto the claims themselves; with ``scale_down`` the Deployments and StatefulSets whose pods
   use them are scaled to 0 before the write (replicas recorded on each) and ALWAYS back after it, also when it
   fails (``movers.restore.quiesce``; the report and the failure report say which, and plainly any not scaled
   back, with the replicas to restore).
   A volume restored elsewhere than its source lived is noted (logs, report).

Everything the run creates carries ``cbt-mover.io/run=<run id>``. Writer pods are deleted in every outcome;
after a failure (or cancellation/crash) the claims and volumes the run created are deleted too, except a
restored volume whose overwritten claim was already deleted (kept, logged). Nothing that existed before is
deleted unless ``overwrite`` was asked for.

Reported: a progress artifact per volume (``restore-progress-<ns>-<pvc>``), a summary table (``restore-<ns>``)
and a markdown report (``restore-<ns>-report``) naming the backup run and linking its flow run (found by its
``run:<id>`` tag); a failure artifact (``restore-<ns>-failure``) after a failure; Prefect events
``cbt-mover.restore.started|completed|failed`` about ``cbt-mover.namespace.<target namespace>`` (``reporting.events``).
"""

# no `from __future__ import annotations`: a served flow run gets the flow by cloudpickle, which keeps only
# the globals its code uses, so string annotations naming the policy's models could not be resolved there

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prefect import get_run_logger
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run

from flows import _run
from flows._run import best_effort
from movers.kube.workloads import ScaleBack, Scaled
from movers.repo.selection import Selection
from movers.restore import Target, quiesce
from movers.restore.app_request import RestoreAppRequest
from reporting import events, restore_report, runs
from tasks.kevents import record_restore_events, record_restore_failure
from tasks.repository import key_source
from tasks.restore import (
    Finished,
    Written,
    application,
    discard_restore,
    finish_volume,
    plan_restore,
    scale_back,
    scale_down,
    select_backups,
    write_volume,
    writer_settings,
)

KIND = "restore"


def _given(parameters: dict[str, Any]) -> dict[str, Any]:
    """A run's request as given, as a mapping: the model in the run's own process, its JSON from the API (the
    run's name and its cancellation/crash hooks read it, whether it validates or not)."""
    request = parameters.get("request") or {}
    return request.model_dump() if isinstance(request, RestoreAppRequest) else request


def _run_name() -> str:
    """``<run id> <namespace>[/<pvcs>] from <backup>[ into <target>]`` (``reporting.runs``), from the request as
    given (the name is only a label: a request that does not validate is named by its namespace)."""
    p = _given(flow_run.parameters)
    what = "+".join(p.get("pvcs") or [])
    target = p.get("target_namespace")
    into = f" into {target}" if target and target != p.get("namespace") else ""
    return runs.run_name(
        KIND, f"{p.get('namespace')}{'/' + what if what else ''} from {p.get('backup') or 'latest'}{into}"
    )


def run_id_for(flow_run_id: Any) -> str:
    """The run id (``cbt-mover.io/run`` label value) of a flow run: derived from its id only (state hooks
    recompute it; ``reporting.runs.run_id_for``)."""
    return runs.run_id_for(KIND, flow_run_id)


def _abandon_run(run: _run.Abandoned) -> None:
    """Best effort after a cancelled/crashed run: delete the writer pods, claims and volumes of the run; with
    ``scale_down``, scale the workloads it left scaled down back (``movers.restore.quiesce.recover``). Never raises
    (errors are logged)."""
    from movers import restore as r
    from tasks.kube import api_client

    given = _given(run.params)
    source = given.get("namespace")
    ns = given.get("target_namespace") or source
    with best_effort(f"run {run.id} ({run.why}): cleanup of {ns} failed", run.log, logging.ERROR):
        api, in_place = api_client(run.params.get("kubeconfig")), bool(given.get("in_place"))
        deleted = r.discard_run(api, ns, run.id, everything=True, snapshots=in_place)
        run.log.info("run %s (%s): deleted %s", run.id, run.why, deleted)
    if given.get("scale_down") and ns:  # the workloads it scaled down, back to their recorded replicas
        with best_effort(f"run {run.id} ({run.why}): scaling back in {ns} failed", run.log, logging.ERROR):
            back = quiesce.recover(api_client(run.params.get("kubeconfig")), ns, given.get("pvcs"))
            (run.log.error if back.failed else run.log.info)("run %s (%s): %s", run.id, run.why, quiesce.describe(back))
    if ns:
        run.failed(events.namespace_resource(ns, KIND, run.id, source_namespace=source))


# Prefect calls them after a cancellation or a crash: delete the run's objects
on_cancellation, on_crashed = _run.state_hooks(KIND, _abandon_run, __name__)


@_run.run_flow("restore-app", _run_name, (on_cancellation, on_crashed))
def restore_app(request: RestoreAppRequest, kubeconfig: str | None = None) -> dict[str, Any]:
    """Restore backups of ``request.namespace`` (as recorded at backup) from ``request.repo`` into its target
    namespace, as ``request`` says (``movers.restore.app_request``; its fields are the deployment's form).

    Writer pods: ``image``, ``service_account``, ``node_selector`` (Linux nodes by default), ``tolerations``
    (e.g. for a tainted node pool) and ``affinity`` (nodeAffinity), each as in a policy's ``mover`` section;
    with ``policy_path`` that policy's ``mover`` section supplies what is not given. A writer pod must be scheduled
    within ``min(timeout, 600)`` s, then running within as long again: else it fails naming the Warning that says
    why, e.g. FailedAttachVolume, and is not retried. ``kubeconfig``: the cluster (None: in-cluster, else the
    default kubeconfig).
    Returns ``{"run_id", "namespace", "target_namespace", "selected", "backup_run", "backup_flow_run", "notes",
    "scaled_workloads", "duration_s", "volumes": [row]}`` (``backup_flow_run``: ``{"id", "name", "url"}`` or None;
    ``scaled_workloads``: ``Stopped.rows``).
    """
    namespace, target, backup = request.namespace, request.target, request.backup
    run = _run.Run.start(
        KIND,
        lambda run_id: events.namespace_resource(target, KIND, run_id, source_namespace=namespace),
        {"source_namespace": namespace, "target_namespace": target, "backup": backup},
        runs.Progress(thawed="not applicable: a restore freezes no application"),
        {"pvcs": request.pvcs, "repository": request.repo},
        namespace=target,
        source_namespace=namespace,
    )
    found = Found()  # the backups selected and the backup run's flow run, once known

    def failure(err: BaseException) -> _run.Failure:
        from movers.restore import describe_error

        reason, pvcs_ = describe_error(err), found.pvcs or request.pvcs or []
        related = events.volumes_related([f"{target}/{pvc}" for pvc in pvcs_]) + found.related()
        then = functools.partial(record_restore_failure, kubeconfig, target, pvcs_, run.id, backup, reason)
        return _run.Failure({"reason": reason}, related, then)

    with run.guard(f"restore {run.id} of {namespace} into {target}", f"restore-{target}-failure", failure):
        result = _restore(request, kubeconfig, run, found)
    result["duration_s"] = run.seconds()
    volumes = {f"{target}/{r['pvc']}": _event_row(r) for r in result["volumes"]}
    run.complete(
        {k: v for k, v in result.items() if k != "volumes"} | {"volumes": volumes},
        events.volumes_related(sorted(volumes)) + found.related(),
    )
    return result


@dataclass
class Found:
    """What the run found, once known: the selected PVCs, the backup run they come from and that run's flow run
    (``reporting.runs.find_flow_run``)."""

    pvcs: list[str] = field(default_factory=list)
    backup_run: str | None = None
    backup_flow_run: runs.FlowRunLink | None = None

    def select(self, selection: Selection) -> None:
        """Record the ``selection``'s PVCs, its backup run and that run's flow run."""
        self.pvcs = [v.pvc for v in selection.volumes]
        self.backup_run = selection.run
        self.backup_flow_run = runs.find_flow_run(selection.run) if selection.run else None

    def related(self) -> list[dict[str, str]]:
        """The related resources of the backup run (``reporting.events.backup_related``)."""
        return events.backup_related(self.backup_run, self.backup_flow_run.id if self.backup_flow_run else None)

    def link(self) -> str:
        """`` (backup flow run NAME: URL)`` for the logs and the report, or nothing when it is not known."""
        run = self.backup_flow_run
        if not run:
            return ""
        return f" (backup flow run {run.name}" + (f": {run.url})" if run.url else ")")


def _event_row(row: dict[str, Any]) -> dict[str, Any]:
    """A volume's part of the ``completed`` event."""
    keys = ("volume", "backup_id", "source", "written_bytes", "fetched_bytes", "capacity_bytes", "duration_s")
    keys += ("volume_mode", "replaced", "path")
    return {k: row.get(k) for k in keys}


def _restore(asked: RestoreAppRequest, kubeconfig: str | None, run: _run.Run, found: Found) -> dict[str, Any]:
    """Check, select, plan, write, finish (cleaning up in every outcome) and report; the run's result.
    ``run.progress`` records the step and what was cleaned up; ``found`` the selected PVCs, backup run and its flow
    run."""
    log = get_run_logger()
    target, run_id, progress = asked.target, run.id, run.progress
    targets: list[Target] = []
    with _run.cleanup_after(run, lambda failed: discard_restore(kubeconfig, target, run_id, targets, failed)):
        progress.step = "check"
        mover = writer_settings(asked)
        # the key the writer pods will mount: the repository Secret in the target namespace
        key = key_source(kubeconfig, target, asked.repo_secret)
        progress.step = "select"
        selected = select_backups(asked, key)
        found.select(selected)
        if found.backup_run:
            app = application(selected)
            runs.tag_flow_run([f"backup-run:{found.backup_run}", *([f"app:{app}"] if app else [])])
        options = asked.options(mover.service_account)
        progress.step = "plan"
        targets = plan_restore(kubeconfig, target, selected, run_id, options)
        log.info("run %s: restoring %s of %s into %s%s", run_id, selected.how, asked.namespace, target, found.link())

        def write(t: Target) -> PrefectFuture:
            return write_volume.submit(kubeconfig, target, run_id, t, mover, asked.repo_secret, asked.timeout)

        with _stopped(asked, kubeconfig, target, targets, run) as stopped:
            progress.step = "write"
            written = _run.waves(targets, asked.parallelism, write)
            progress.step = "finish"
            finished = [finish_volume(kubeconfig, target, run_id, t) for t in targets]
    progress.step = "report"
    rows = [_row(t, w, f) for t, w, f in zip(targets, written, finished, strict=True)]
    record_restore_events(kubeconfig, target, run_id, asked.repo, rows)
    backup_run = f"Backup run `{found.backup_run}`{found.link()}." if found.backup_run else ""
    application_line = quiesce.describe(stopped.back) if stopped.back is not None else ""
    restore_report.publish(
        restore_report.RestoreRun(asked.namespace, target, run_id, asked.repo, selected, backup_run, application_line),
        rows,
    )
    log.info("restore %s done: %s", run_id, ", ".join(f"{r['pvc']} {r['written_bytes']} B" for r in rows))
    return {
        "run_id": run_id,
        "namespace": asked.namespace,
        "target_namespace": target,
        "selected": selected.how,
        "backup_run": found.backup_run,
        "backup_flow_run": dataclasses.asdict(found.backup_flow_run) if found.backup_flow_run else None,
        "notes": list(selected.notes),
        "scaled_workloads": stopped.rows(),
        "volumes": rows,
    }


def _source_reason(target: Target, written: Written) -> str | None:
    """Why the volume was restored as it was: the plan's reason, or why the CBT it chose was not used."""
    if written.cbt_fallback:
        return f"{written.cbt_fallback}: the claim's own volume compared with the backup instead"
    return target.source_reason


@dataclass
class Stopped:
    """The workloads a ``scale_down`` run scaled down (``scaled``) and what scaling them back did (``back``; None
    until it ran)."""

    scaled: list[Scaled] = field(default_factory=list)
    back: ScaleBack | None = None

    def rows(self) -> list[dict[str, Any]]:
        """Per workload: ``workload``, ``replicas`` (to return to), ``scaled_back``, ``error`` (why not)."""
        if self.back is None:
            return []
        failed = {s.workload: why for s, why in self.back.failed}
        return [
            {"workload": str(s.workload), "replicas": s.replicas, "scaled_back": s.workload not in failed}
            | {"error": failed.get(s.workload)}
            for s in self.scaled
        ]


@contextlib.contextmanager
def _stopped(
    asked: RestoreAppRequest, kubeconfig: str | None, namespace: str, targets: list[Target], run: _run.Run
) -> Iterator[Stopped]:
    """With ``asked.scale_down``: the workloads using the targets' claims (in place, or replaced by ``overwrite``:
    then down while the new volumes are written too) scaled to 0 and their pods gone
    (step ``scale down``) around the block, then ALWAYS scaled back to their recorded replicas, also when the
    block or the scaling down failed; what that did is the failure report's Application line
    (``run.progress.thawed``). Without it: nothing."""
    stopped = Stopped()
    if not asked.scale_down:
        yield stopped
        return
    run.progress.step = "scale down"
    claims = [t.pvc for t in targets]  # written in place or replaced; a claim that does not exist has no users
    try:
        try:
            stopped.scaled = scale_down(kubeconfig, namespace, claims, asked.timeout)
        except quiesce.QuiesceFailed as err:
            stopped.scaled = err.scaled
            raise
        yield stopped
    finally:
        if stopped.scaled:
            stopped.back = scale_back(kubeconfig, stopped.scaled)
            run.progress.thawed = quiesce.describe(stopped.back)


def _row(target: Target, written: Written, finished: Finished) -> dict[str, Any]:
    seconds = written.duration_s or 0.0
    return {
        "pvc": target.pvc,
        "volume": target.volume,
        "backup_id": target.backup_id,
        "volume_mode": target.volume_mode,
        "storage_class": target.storage_class,
        "pv": finished.pv,
        "replaced": finished.replaced,
        "source": target.source,
        "source_reason": _source_reason(target, written),
        "path": written.path,
        "written_bytes": written.written_bytes,
        "fetched_bytes": written.fetched_bytes,
        "compared_bytes": written.compared_bytes,
        "capacity_bytes": written.capacity_bytes,
        "duration_s": seconds,
        "mib_per_s": round((written.written_bytes or 0) / seconds / (1 << 20), 1) if seconds else None,
        "readback_s": written.readback_s,
        "wall_s": written.wall_s,
        "fs_type": finished.fs_type,
        "node_affinity": finished.node_affinity,
        "notes": [*target.notes, *finished.notes],
    }
