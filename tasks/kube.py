"""Thin Prefect tasks over ``movers.kube`` / ``movers.hooks``: inputs and results are plain data.

Every task takes ``kubeconfig`` (None: in-cluster, then ``KUBECONFIG`` / ``~/.kube/config``) and
builds its API client itself (cached per process), so that task inputs stay serialisable.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import threading
import time
from typing import Any

from prefect import get_run_logger, task

from movers.errors import NotFoundError
from movers.kube import apply as k
from movers.kube import cleanup, client, pods, preflight, snapshots, snapshotset
from movers.kube import manifests as m
from movers.kube.names import derived_name
from tasks import retry_if_retriable

# a member of the snapshot set as plain data (snapshotset.member: pvc, snapshot, content, handle, driver,
# restore_size, source_volume_mode); the flow adds before moving it the claim's storage_class, size, volume_mode and
# labels, its PV's identity (volumes.source_identity), the run's claims (run_pvcs), the manifest tags (run, app), the
# application (app) and the repository (repo)
Member = dict[str, Any]

KEPT_LABEL = snapshotset.KEPT_LABEL


@functools.lru_cache(maxsize=8)
def api_client(kubeconfig: str | None = None):
    """One client per kubeconfig for the tasks of a flow run (``movers.kube.client.api_client`` builds it; a
    def of this module, not a wrapped alias: a served flow is pickled by reference)."""
    return client.api_client(kubeconfig)


@task(name="check-permissions")
def check_permissions(kubeconfig: str | None, namespace: str, settings: dict[str, Any]) -> None:
    """Preflight, first: may the run's identity make every call of a run (``preflight.check_permissions``)?"""
    preflight.check_permissions(api_client(kubeconfig), namespace, settings)


@task(name="inspect-cluster", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def inspect_cluster(kubeconfig: str | None, namespace: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Preflight: the claims, the mover identity, the snapshot path, classes and CBT (``preflight.inspect``)."""
    log = get_run_logger()
    found = preflight.inspect(api_client(kubeconfig), namespace, settings)
    log.info("snapshot path %s: %s", found.path, found.path_reason)
    for driver, cbt in found.cbt.items():
        for why in filter(None, (cbt.unavailable, found.path == preflight.GROUP and cbt.group_members)):
            log.warning("CBT unavailable for %s: %s (its volumes are scanned)", driver, why)
    for line in [*found.warnings, *([found.fallback_problem] if found.fallback_problem else [])]:
        log.warning(line)
    return dataclasses.asdict(found)


@task(name="snapshot-set")
def take_snapshots(
    kubeconfig: str | None, namespace: str, run_id: str, app: str, settings: dict[str, Any], plan: dict[str, Any]
) -> dict[str, Any]:
    """The claims' snapshots under a freeze bounded by the policy (``snapshotset.take``): its result as plain
    data, with ``members`` (``snapshotset.member`` of each) and ``freeze_s`` (every freeze window together)."""
    from movers.hooks import app_hooks

    api = api_client(kubeconfig)
    hookset = app_hooks(api, namespace, settings.get("hooks"), use_pod_annotations=settings["use_pod_annotations"],
                        default_timeout=settings["timeouts"]["hook"])  # fmt: skip
    request = snapshotset.Request.of(run_id, m.run_labels(run_id, app=app), settings, plan)
    log = get_run_logger()
    done = snapshotset.take(api, namespace, request, hookset, log)
    for line in done.hooks:
        log.info(line)
    log.info("freeze window(s) %s s; %d member snapshot(s)", done.freezes, len(done.snapshots))
    members = [snapshotset.member(api, namespace, s) for s in done.snapshots]
    return dataclasses.asdict(done) | {"members": members, "freeze_s": round(sum(done.freezes), 3)}


def progress_key(namespace: str, pvc: str) -> str:
    """The progress artifact key of a volume: lowercase, only ``[a-z0-9-]``."""
    return "progress-" + re.sub(r"[^a-z0-9-]+", "-", f"{namespace}-{pvc}".lower()).strip("-")


_PROGRESS = re.compile(r"progress done=(\d+) total=(\d+|\?)")


class ProgressArtifact:
    """A Prefect progress artifact fed from the mover's ``progress done=N total=M`` log lines (called
    from the log follower thread), updated at most once per ``interval`` s; best effort."""

    def __init__(self, key: str, description: str, interval: float = 1.0) -> None:
        from prefect.artifacts import create_progress_artifact

        self.interval, self.last, self.lock = interval, 0.0, threading.Lock()
        self.artifact_id = create_progress_artifact(progress=0.0, key=key, description=description)

    def on_line(self, line: str) -> None:
        match = _PROGRESS.search(line)
        if not match or match.group(2) == "?":
            return
        total = int(match.group(2))
        percent = min(100.0, 100.0 * int(match.group(1)) / total) if total else 100.0
        with self.lock:
            now = time.monotonic()
            if now - self.last < self.interval:
                return
            self.last = now
        self.set(percent)

    def set(self, percent: float) -> None:
        from prefect.artifacts import update_progress_artifact

        try:
            update_progress_artifact(artifact_id=self.artifact_id, progress=round(percent, 1))
        except Exception as err:  # noqa: BLE001  (progress is informational)
            logging.getLogger(__name__).warning("progress artifact update failed: %s", err)


@task(name="move-volume", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def move_volume(kubeconfig: str | None, namespace: str, run_id: str, member: Member, plan: dict[str, Any],
                mover: dict[str, Any], repo_secret: str, timeout: float = 3600.0,
                start_timeout: float = 300.0) -> dict[str, Any]:  # fmt: skip
    """A Block PVC from the member's snapshot and a mover pod backing it up; the pod's result JSON.

    ``plan``: ``{"change_source", "base_handle", "audience", "why", "max_results"}`` (tasks.repo.plan_member).
    The claim and the pod are named ``names.derived_name(run_id, pvc)``; the pod takes the policy's node
    selector, tolerations and affinity (``mover``). The pod must be scheduled, its claim bound with it, within
    ``start_timeout`` s (policy ``timeouts.pvc_bound``; ``pods.PodNotScheduled`` names the scheduler's or the
    provisioner's last Warning), and finish within ``timeout`` s (``timeouts.mover``). A failed pod is one
    line (its log tail is logged).
    """
    log = get_run_logger()
    api = api_client(kubeconfig)
    pvc = member["pvc"]
    labels = m.run_labels(run_id, app=member.get("app"), **{"cbt-mover.io/pvc": m.label_value(pvc)})
    if member.get("source_volume_mode") == "Filesystem":
        snapshots.patch_content_annotation(api, member["content"])
    read_pvc = derived_name(run_id, pvc)  # the claim and the pod: valid and distinct whatever the PVC's name
    # the source claim's class (the cluster default may belong to another driver, which cannot restore this
    # snapshot), sized from restoreSize or, when the driver leaves it out, the source claim's capacity
    size = m.reader_claim_size(member["restore_size"], member.get("size"))
    claim = m.pvc_from_snapshot(read_pvc, namespace, member["snapshot"], size, member.get("storage_class"), labels)
    k.create(api, claim)
    args = m.backup_args(volume=f"{namespace}/{pvc}", namespace=namespace, snapshot=member["snapshot"], pvc=pvc,
                         repo=member.get("repo"), base_handle=plan.get("base_handle"),
                         scan=plan["change_source"] == "scan", snapshot_handle=member.get("handle"),
                         group_snapshot=member.get("group_snapshot"),
                         storage_class=member.get("storage_class"), volume_mode=member.get("volume_mode"),
                         tags=member.get("tags"), run_pvcs=member.get("run_pvcs"), pvc_labels=member.get("labels"),
                         cbt_max_results=plan.get("max_results"),
                         **(member.get("identity") or {}),
                         extra=["--progress-interval", f"{mover.get('progress_interval', 1.0):g}"])  # fmt: skip
    pod = m.mover_pod(
        read_pvc,
        namespace,
        image=mover["image"],
        args=args,
        pvc=read_pvc,
        service_account=mover["service_account"],
        repo_secret=repo_secret,
        cbt_audience=plan.get("audience"),
        resources=mover.get("resources"),
        labels=labels,
        node_selector=mover.get("node_selector"),
        tolerations=mover.get("tolerations"),
        affinity=mover.get("affinity"),
        active_deadline_seconds=int(timeout),
    )
    progress = ProgressArtifact(progress_key(namespace, pvc), f"backup of {namespace}/{pvc} ({run_id})")

    def on_log_line(line: str) -> None:
        log.debug("%s: %s", pvc, line)
        progress.on_line(line)

    _clear_finished_pod(api, namespace, read_pvc)  # an earlier attempt's pod, so that a retry runs anew
    try:
        k.create(api, pod)
        pods.wait_scheduled(api, namespace, read_pvc, read_pvc, min(start_timeout, timeout), what="mover pod")
        res = pods.run_pod_to_completion(api, pod, timeout=timeout, on_log_line=on_log_line)
    except NotFoundError:
        raise MoverPodFailed(f"mover pod {namespace}/{read_pvc} disappeared while running (deleted or evicted)",
                             None) from None  # fmt: skip
    if not res.succeeded or not res.result:
        log.error("mover pod %s/%s: the last lines of its log:\n%s", namespace, read_pvc, "\n".join(res.log_tail))
        why = " ".join(res.message.split()) or "no message"
        raise MoverPodFailed(
            f"mover pod {namespace}/{read_pvc} for {pvc} failed (exit {res.exit_code}): {why}", res.exit_code
        )
    progress.set(100.0)
    return res.result


class MoverPodFailed(pods.PodFailed):
    """A backup's mover pod did not succeed (``pods.PodFailed``: its exit status and the retry rule)."""


def _clear_finished_pod(api, namespace: str, name: str, timeout: float = 60.0) -> None:
    """Delete pod ``name`` if it exists and has finished, and wait until it is gone."""
    pod = k.find(api, "Pod", namespace, name)
    if pod is None or (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
        return
    get_run_logger().info("deleting the finished pod %s/%s of an earlier attempt", namespace, name)
    k.delete_and_wait(api, "Pod", namespace, name, timeout)


@task(name="cleanup-run")
def cleanup_run(kubeconfig: str | None, namespace: str, run_id: str, timeout: float = 60.0) -> dict[str, list[str]]:
    """Delete everything labelled with the run (pods, PVCs, snapshots); what was deleted."""
    return cleanup.delete_by_label(api_client(kubeconfig), namespace, f"{m.RUN_LABEL}={run_id}", wait=True,
                                   timeout=timeout)  # fmt: skip


@task(name="keep-base-snapshots")
def keep_base_snapshots(kubeconfig: str | None, namespace: str, app: str, kind: str, version: str | None,
                        names: list[str]) -> list[str]:  # fmt: skip
    """Keep this run's snapshots as the next delta's base and delete the ones kept before (``snapshotset.keep``)."""
    gone = snapshotset.keep(api_client(kubeconfig), namespace, app, kind, version, names)
    get_run_logger().info("kept %s as the next base; deleted %s", names, gone or "nothing")
    return gone
