"""Thin Prefect tasks over ``movers.files.cluster`` for the ``restore-files`` flow: they hand each other typed objects
(the request, the ``Selection``, each volume's ``FilesResult``), never dicts."""

from __future__ import annotations

from prefect import get_run_logger, task

from movers.files import cluster as files
from movers.files.request import FilesResult
from movers.files.restore_request import RestoreFilesRequest, VolumePaths
from movers.kube.pods import PodTimeouts
from movers.kube.podspec import MoverProfile
from movers.policy.model import MoverSettings
from movers.repo.manifest import APP_TAG
from movers.repo.selection import Selection
from movers.restore.plan import labels_of
from movers.values import human_bytes
from reporting.runs import PodLog
from tasks import retry_if_retriable
from tasks.kube import api_client
from tasks.repository import KeySource, open_repository


def pod_settings(request: RestoreFilesRequest) -> MoverSettings:
    """The files pods' settings: the ``mover`` section of the request's ``policy_path`` when it gives one,
    overridden by the settings the request gives, validated as a policy's mover section."""
    from movers.policy.model import load_policy, parse_mover

    section = load_policy(request.policy_path).mover.model_dump() if request.policy_path else {}
    return parse_mover(section | request.writer_given(), request.policy_path or "restore-files parameters")


@task(name="check-files-target")
def check_target(kubeconfig: str | None, request: RestoreFilesRequest, service_account: str) -> None:
    """The run's permissions, then its target claim (``movers.files.cluster``); refuses before anything is
    created."""
    api, ns, new = api_client(kubeconfig), request.namespace, request.target.new is not None
    files.check_permissions(api, ns, service_account, request.repo_secret, new)
    files.check_target(api, ns, request.target, service_account)


@task(name="select-backups", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def select_backups(request: RestoreFilesRequest, key: KeySource | None) -> Selection:
    """The backups of the PVCs asked for (``movers.repo.selection.select``: ``latest`` is the newest run with a
    backup of each); logs which."""
    from movers.repo.selection import select

    repo = open_repository(request.repo, key)
    sel = select(repo, request.namespace, request.pvcs, request.backup)
    log = get_run_logger()
    for note in sel.notes:
        log.warning("%s", note)
    (log.warning if sel.run is None else log.info)("copying files of %s", sel.how)
    return sel


@task(name="create-files-claim")
def create_claim(kubeconfig: str | None, request: RestoreFilesRequest, run_id: str) -> None:
    """The new target claim, labelled with the run (``movers.files.cluster.create_claim``)."""
    files.create_claim(
        api_client(kubeconfig), request.namespace, request.target, labels_of(run_id, request.target.claim)
    )
    get_run_logger().info("created claim %s/%s (%s)", request.namespace, request.target.claim, request.target.new)


@task(
    name="copy-files",
    task_run_name="files of {request.namespace}/{volume.pvc}",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_retriable,
)
def copy_files(
    kubeconfig: str | None,
    request: RestoreFilesRequest,
    run_id: str,
    volume: VolumePaths,
    selection: Selection,
    settings: MoverSettings,
) -> FilesResult:
    """``movers.files.cluster.copy_files`` of one volume's paths into ``<directory>/<pvc>`` of the target, the
    pod's log records forwarded (``reporting.runs.PodLog``), its outcome in one line."""
    ns = request.namespace
    chosen = next(s for s in selection.volumes if s.pvc == volume.pvc)
    dest = files.destination(request.directory_of(run_id), volume.pvc)
    asked = request.files_request(volume, chosen.manifest.volume.id, chosen.manifest.backup_id, dest)
    run = files.FilesRun(
        ns,
        run_id,
        MoverProfile.of(settings),
        request.repo_secret,
        request.target.claim,
        PodTimeouts(start=min(600.0, request.timeout), total=request.timeout),
    )
    log = get_run_logger()
    labels = labels_of(run_id, volume.pvc, chosen.manifest.tags.get(APP_TAG))
    result = files.copy_files(
        api_client(kubeconfig),
        run,
        volume.pvc,
        asked,
        labels=labels,
        on_log_line=PodLog(log, f"{ns}/{volume.pvc}").on_line,
    )
    log.info(
        "%s/%s: copied %d entries (%s) of backup %s into %s/%s:%s, fetched %s",
        ns,
        volume.pvc,
        result.entries,
        human_bytes(result.copied_bytes),
        result.backup_id,
        ns,
        request.target.claim,
        dest,
        human_bytes(result.fetched_bytes),
    )
    return result


@task(name="discard-files-run")
def discard_run(
    kubeconfig: str | None, request: RestoreFilesRequest, run_id: str, failed: bool
) -> dict[str, list[str]]:
    """The run's files pods always; after a failure the claim it created (``movers.files.cluster.discard_run``)."""
    return files.discard_run(api_client(kubeconfig), request.namespace, run_id, request.target, failed)
