"""Thin Prefect tasks over ``movers.repo.selection`` and ``movers.restore``: they hand each other typed objects
(the ``Selection``, each ``Target``, what a writer ``Written`` and a finish ``Finished``), never dicts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from prefect import get_run_logger, task

from movers import restore as r
from movers.kube.pods import PodTimeouts
from movers.kube.workloads import ScaleBack, Scaled
from movers.policy.model import MoverSettings
from movers.repo.manifest import APP_TAG
from movers.repo.selection import Selection
from movers.restore import quiesce
from movers.restore.app_request import RestoreAppRequest
from movers.values import human_bytes
from reporting.progress import ProgressArtifact, progress_key
from reporting.runs import PodLog
from tasks import retry_if_retriable
from tasks.kube import api_client
from tasks.repository import KeySource, open_repository


@dataclass(frozen=True)
class Written:
    """A writer pod's outcome (``movers.restore.write_volume``): bytes written (data and zeros), fetched from the
    repository and compared on the device (a claim from the kept snapshot), the volume's capacity, the write's and
    the read-back's seconds, and the task's wall time; ``path``: how what differs was found (``WriteResult.path``:
    ``cbt`` or ``compare`` in place) and ``cbt_fallback`` why not by the CBT the plan chose."""

    written_bytes: int | None
    capacity_bytes: int | None
    duration_s: float | None
    readback_s: float | None
    wall_s: float
    fetched_bytes: int | None = None
    compared_bytes: int | None = None
    path: str | None = None
    cbt_fallback: str | None = None


@dataclass(frozen=True)
class Finished:
    """A volume given its final claim (``movers.restore.finish_volume``): the claim, its PV, whether it replaced
    an existing claim, the PV's fsType and required node affinity, and notes (e.g. restored elsewhere)."""

    pvc: str
    pv: str
    replaced: bool
    fs_type: str | None
    node_affinity: dict[str, Any] | None
    notes: list[str]


def application(selection: Selection) -> str | None:
    """The application the selected backups were made of, when they all name the same one."""
    apps = {s.manifest.tags.get(APP_TAG) for s in selection.volumes} - {None}
    return apps.pop() if len(apps) == 1 else None


@task(name="select-backups", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def select_backups(request: RestoreAppRequest, key: KeySource | None = None) -> Selection:
    """``movers.repo.selection.select(...)`` (a whole-app "latest" is the newest complete run; a partial
    run needs ``allow_partial``); logs which run was taken and why (a newer partial run, missing PVCs). The
    repository is opened with the key of ``key`` (``tasks.repository``)."""
    from movers.repo.selection import select

    repo = open_repository(request.repo, key)
    sel = select(repo, request.namespace, request.pvcs, request.backup, allow_partial=request.allow_partial)
    log = get_run_logger()
    for note in sel.notes:
        log.warning("%s", note)
    if sel.missing:
        log.warning(
            "restoring the partial %s (allow_partial): PVC(s) %s are not in it", sel.how, ", ".join(sel.missing)
        )
    (log.warning if sel.run is None else log.info)("restoring %s", sel.how)
    return sel


def writer_settings(request: RestoreAppRequest) -> MoverSettings:
    """The writer pods' settings: the ``mover`` section of the request's ``policy_path`` when it gives one, overridden
    by the settings the request gives, validated as a policy's mover section (a ``PolicyError`` names the field)."""
    from movers.policy.model import load_policy, parse_mover

    section = load_policy(request.policy_path).mover.model_dump() if request.policy_path else {}
    return parse_mover(section | request.writer_given(), request.policy_path or "restore-app parameters")


@task(name="plan-restore")
def plan_restore(
    kubeconfig: str | None, namespace: str, selection: Selection, run_id: str, options: r.RestoreOptions
) -> list[r.Target]:
    """The checked targets of the ``selection``'s volumes (``movers.restore.plan_targets``); refuses before
    anything is created."""
    volumes = [v.to_dict() for v in selection.volumes]
    targets = r.plan_targets(api_client(kubeconfig), namespace, volumes, run_id, options)
    log = get_run_logger()
    for t in targets:
        log.info(
            "%s: backup %s of %s -> %s/%s (%s, class %s%s)%s",
            t.pvc,
            t.backup_id,
            t.volume,
            namespace,
            t.pvc,
            t.volume_mode,
            t.storage_class,
            ", replacing the existing claim" if t.replace else "",
            "".join(f"; {n}" for n in t.notes),
        )
    return targets


@task(name="scale-down")
def scale_down(kubeconfig: str | None, namespace: str, claims: list[str], timeout: float) -> list[Scaled]:
    """The workloads using ``claims`` scaled to 0, their pods gone (``movers.restore.quiesce.stop_users``);
    ``QuiesceFailed`` carries those already scaled down."""
    scaled = quiesce.stop_users(api_client(kubeconfig), namespace, claims, timeout)
    get_run_logger().info("scaled down %s", ", ".join(f"{s.workload} (from {s.replicas})" for s in scaled) or "nothing")
    return scaled


@task(name="scale-back")
def scale_back(kubeconfig: str | None, scaled: list[Scaled]) -> ScaleBack:
    """Every workload of ``scaled`` back to its recorded replicas (``movers.restore.quiesce.start_again``; never
    raises: a failure is in the answer and logged as an error)."""
    back = quiesce.start_again(api_client(kubeconfig), scaled)
    log = get_run_logger()
    (log.error if back.failed else log.info)("%s", quiesce.describe(back))
    return back


@task(
    name="write-volume",
    task_run_name="restore {namespace}/{target.pvc}",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_retriable,
)
def write_volume(
    kubeconfig: str | None,
    namespace: str,
    run_id: str,
    target: r.Target,
    writer: MoverSettings,
    repo_secret: str,
    timeout: float = 3600.0,
) -> Written:
    """``movers.restore.write_volume`` of one target with a progress artifact, the writer's log records
    forwarded (``reporting.runs.PodLog``) and its outcome in one line."""
    t = target
    what = f"restore of {t.volume} backup {t.backup_id} into {namespace}/{t.pvc} ({run_id})"
    progress = ProgressArtifact(
        "restore-" + progress_key(namespace, t.pvc), what, "written, then read back: the total counts the volume twice"
    )
    log = get_run_logger()
    pod_log = PodLog(log, f"{namespace}/{t.pvc}")

    def on_log_line(line: str) -> None:
        pod_log.on_line(line)
        progress.on_line(line)

    started = time.monotonic()
    api = api_client(kubeconfig)
    run = r.WriterRun(namespace, run_id, writer, repo_secret, timeouts=PodTimeouts(start=600.0, total=timeout))
    result = r.write_volume(api, run, t, on_log_line=on_log_line)
    progress.finish()
    if result.cbt_fallback:
        log.warning("%s/%s: not in place by CBT: %s; compared instead", namespace, t.pvc, result.cbt_fallback)
    log.info(
        "%s/%s: restored backup %s of %s (%s): wrote %s in %.1f s, read back identical",
        namespace,
        t.pvc,
        t.backup_id,
        t.volume,
        result.path,
        human_bytes(result.written_bytes),
        result.duration_s,
    )
    return Written(
        written_bytes=result.written_bytes + result.zeroed_bytes,
        fetched_bytes=result.fetched_bytes,
        compared_bytes=result.compared_bytes,
        capacity_bytes=result.capacity_bytes,
        duration_s=result.duration_s,
        readback_s=result.readback.duration_s if result.readback is not None else None,
        wall_s=round(time.monotonic() - started, 3),
        path=result.path,
        cbt_fallback=result.cbt_fallback,
    )


@task(name="finish-volume", task_run_name="finish {namespace}/{target.pvc}")
def finish_volume(kubeconfig: str | None, namespace: str, run_id: str, target: r.Target) -> Finished:
    """Hand the written volume to its final claim and mark it restored (``movers.restore.finish_volume``);
    a volume restored elsewhere than its source was is logged as a warning."""
    done = Finished(**r.finish_volume(api_client(kubeconfig), namespace, run_id, target))
    for note in done.notes:
        get_run_logger().warning("%s/%s: %s", namespace, done.pvc, note)
    return done


@task(name="discard-restore")
def discard_restore(
    kubeconfig: str | None, namespace: str, run_id: str, targets: list[r.Target], failed: bool
) -> dict[str, list[str]]:
    """Writer pods (and the snapshots of live claims of a restore in place) always; after a failure also the run's
    claims and volumes, except restored volumes whose overwritten claim is already gone (kept with policy Retain,
    logged)."""
    api = api_client(kubeconfig)
    keep = r.kept_after_failure(api, namespace, run_id, targets) if failed else []
    for pvc in keep:
        get_run_logger().error(
            "%s/%s: the claim it replaced is gone; keeping the restored volume (labelled"
            " cbt-mover.io/run=%s, policy Retain) for you to bind",
            namespace,
            pvc,
            run_id,
        )
    in_place = any(t.in_place for t in targets)
    return r.discard_run(api, namespace, run_id, everything=failed, keep=keep, snapshots=in_place)
