"""The ``restore-files`` flow: copy chosen paths of chosen volumes of an application's backup into a Filesystem
claim, without restoring the volumes.

Order (``movers.files.cluster`` has the details):

1. check before creating anything: the run's own permissions (SelfSubjectAccessReviews), the target claim (an
   existing one: Filesystem mode, not used by a running pod unless ReadWriteMany; a new one: not there yet);
2. select the backups as ``restore-app`` does (``movers.repo.selection``): ``latest`` is the newest backup run
   with a backup of every PVC asked for; a run id; or one volume's backup id;
3. create the new target claim, when the request asks for one;
4. one files pod per volume, one after the other (they share the target claim): ``cbt-mover files cp`` of its
   paths into ``<directory>/<pvc>/`` of the claim (``directory`` defaults to ``restored-<run id>``), unprivileged
   (the Pod Security ``restricted`` profile: ``movers.kube.filespod``), reading only what those files and the
   filesystem's metadata occupy from the repository.

The files pods are deleted in every outcome. After a failure (or a cancellation/crash) the claim the run created is
deleted too (the backup still holds every file; the same request runs again); an existing target claim is never
deleted, and what a failed run copied into it stays under the run's directory (the failure report names it).

Reported: a table of what was copied (``files-<namespace>``: volume, path, kind, size) and a markdown report
(``files-<namespace>-report``: per volume its backup, where its files went, bytes copied and stored bytes
fetched); a failure artifact (``files-<namespace>-failure``) after a failure; Prefect events
``cbt-mover.files.started|completed|failed`` about ``cbt-mover.namespace.<namespace>`` (``reporting.events``).
"""

# no `from __future__ import annotations`: a served flow run gets the flow by cloudpickle (flows/restore.py)

import logging
from typing import Any

from prefect import get_run_logger

from flows import _run
from flows._run import best_effort
from movers.files.restore_request import RestoreFilesRequest
from reporting import events, files_report, runs
from tasks.files import check_target, copy_files, create_claim, discard_run, pod_settings, select_backups
from tasks.repository import key_source

KIND = "files"


def _given(parameters: dict[str, Any]) -> dict[str, Any]:
    """A run's request as given, as a mapping (the model in the run's own process, its JSON from the API)."""
    request = parameters.get("request") or {}
    return request.model_dump() if isinstance(request, RestoreFilesRequest) else request


def _run_name() -> str:
    """``<run id> <namespace>/<pvcs> from <backup> into <claim>`` (a label: a request that does not validate is
    named by what it gives)."""
    from prefect.runtime import flow_run

    p = _given(flow_run.parameters)
    pvcs = "+".join(str(v.get("pvc")) for v in p.get("volumes") or [] if isinstance(v, dict))
    claim = (p.get("target") or {}).get("claim") if isinstance(p.get("target"), dict) else None
    return runs.run_name(KIND, f"{p.get('namespace')}/{pvcs} from {p.get('backup') or 'latest'} into {claim}")


def _abandon_run(run: _run.Abandoned) -> None:
    """Best effort after a cancelled/crashed run: delete its files pods and the claim it created. Never raises."""
    from movers.files import cluster
    from tasks.kube import api_client

    given = _given(run.params)
    ns = given.get("namespace")
    with best_effort(f"run {run.id} ({run.why}): cleanup of {ns} failed", run.log, logging.ERROR):
        request = RestoreFilesRequest.model_validate(given)
        deleted = cluster.discard_run(api_client(run.params.get("kubeconfig")), ns, run.id, request.target, True)
        run.log.info("run %s (%s): deleted %s", run.id, run.why, deleted)
    if ns:
        run.failed(events.namespace_resource(ns, KIND, run.id))


on_cancellation, on_crashed = _run.state_hooks(KIND, _abandon_run, __name__)


@_run.run_flow("restore-files", _run_name, (on_cancellation, on_crashed))
def restore_files(request: RestoreFilesRequest, kubeconfig: str | None = None) -> dict[str, Any]:
    """Copy ``request``'s paths out of the backups of ``request.namespace`` from ``request.repo`` into its target
    claim (``movers.files.restore_request``; its fields are the deployment's form). ``kubeconfig``: the cluster
    (None: in-cluster, else the default kubeconfig).

    Returns ``{"run_id", "namespace", "claim", "directory", "selected", "backup_run", "duration_s", "volumes":
    [{"pvc", "into", "result"}]}`` (``result``: the files pod's ``FilesResult`` as JSON data).
    """
    ns = request.namespace
    run = _run.Run.start(
        KIND,
        lambda run_id: events.namespace_resource(ns, KIND, run_id),
        {"namespace": ns, "claim": request.target.claim, "backup": request.backup},
        runs.Progress(thawed="not applicable: copying files freezes no application"),
        {"pvcs": request.pvcs, "repository": request.repo},
        namespace=ns,
    )
    related = events.volumes_related([f"{ns}/{pvc}" for pvc in request.pvcs])

    def failure(err: BaseException) -> _run.Failure:
        where = f"{ns}/{request.target.claim}:{request.directory_of(run.id)}"
        return _run.Failure({"reason": runs.error_line(err), "into": where}, related)

    with run.guard(f"restore-files {run.id} of {ns}", f"files-{ns}-failure", failure):
        result = _copy(request, kubeconfig, run)
    result["duration_s"] = run.seconds()
    summary = {v["pvc"]: {k: v["result"][k] for k in ("copied_bytes", "fetched_bytes")} for v in result["volumes"]}
    run.complete({k: v for k, v in result.items() if k != "volumes"} | {"volumes": summary}, related)
    return result


def _copy(request: RestoreFilesRequest, kubeconfig: str | None, run: _run.Run) -> dict[str, Any]:
    """Check, select, create the claim, copy each volume (cleaning up in every outcome) and report."""
    log, ns, progress = get_run_logger(), request.namespace, run.progress
    directory = request.directory_of(run.id)
    copied: list[files_report.CopiedVolume] = []
    with _run.cleanup_after(run, lambda failed: discard_run(kubeconfig, request, run.id, failed)):
        progress.step = "check"
        settings = pod_settings(request)
        check_target(kubeconfig, request, settings.service_account)
        progress.step = "select"
        selected = select_backups(request, key_source(kubeconfig, ns, request.repo_secret))
        if selected.run:
            runs.tag_flow_run([f"backup-run:{selected.run}"])
        if request.target.new is not None:
            progress.step = "create claim"
            create_claim(kubeconfig, request, run.id)
        for volume in request.volumes:
            progress.step = f"copy {volume.pvc}"
            result = copy_files(kubeconfig, request, run.id, volume, selected, settings)
            copied.append(files_report.CopiedVolume(volume.pvc, f"{directory}/{volume.pvc}", result))
    progress.step = "report"
    report = files_report.FilesRun(
        ns, run.id, request.repo, selected.how, request.target.claim, request.target.new is not None
    )
    files_report.publish(report, copied)
    log.info("restore-files %s done: %s", run.id, ", ".join(f"{c.pvc} {c.result.entries} entries" for c in copied))
    return {
        "run_id": run.id,
        "namespace": ns,
        "claim": request.target.claim,
        "directory": directory,
        "selected": selected.how,
        "backup_run": selected.run,
        "volumes": [{"pvc": c.pvc, "into": c.into, "result": c.result.model_dump(mode="json")} for c in copied],
    }
