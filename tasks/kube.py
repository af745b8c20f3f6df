"""Thin Prefect tasks over ``movers.kube`` / ``movers.hooks``: inputs and results are plain data.

Every task takes ``kubeconfig`` (None: in-cluster, then ``KUBECONFIG`` / ``~/.kube/config``) and
builds its API client itself (cached per process), so that task inputs stay serialisable.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from typing import Any

from prefect import get_run_logger, task

from movers.errors import NotFoundError
from movers.kube import apply as k
from movers.kube import cleanup, pods, snapshots
from movers.kube import manifests as m
from tasks import retry_if_retriable

# a member of the snapshot set as plain data: pvc, snapshot, content, handle, driver, restore_size, source_volume_mode;
# the flow adds the PVC's storage_class, size and volume_mode and the manifest tags (run, app) before moving it
Member = dict[str, Any]

KEPT_LABEL = "cbt-mover.io/kept-for"  # a kept base snapshot (its run label removed): value = the app's name


@functools.lru_cache(maxsize=8)
def api_client(kubeconfig: str | None = None):
    from kubernetes import config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
        from kubernetes import client

        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()


def selector_string(selector: dict[str, Any]) -> str:
    """A LabelSelector dict in the API's ``labelSelector`` query syntax."""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                      "DoesNotExist": f"!{key}"}[op])  # fmt: skip
    return ",".join(parts)


@task(name="discover-pvcs", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def discover_pvcs(kubeconfig: str | None, namespace: str, selector: dict[str, Any]) -> list[dict[str, Any]]:
    """The PVCs of ``namespace`` that ``selector`` matches: name, volume mode, size, storage class."""
    items = k.list_objects(api_client(kubeconfig), "PersistentVolumeClaim", namespace, selector_string(selector))
    return [{"name": p["metadata"]["name"], "volume_mode": p["spec"].get("volumeMode", "Filesystem"),
             "size": ((p.get("status") or {}).get("capacity") or {}).get("storage")
             or p["spec"]["resources"]["requests"]["storage"],
             "storage_class": p["spec"].get("storageClassName")} for p in items]  # fmt: skip


def _member_of(api, namespace: str, snapshot: str) -> Member:
    from movers.cbt.discovery import resolve_snapshot

    ref = resolve_snapshot(api, namespace, snapshot)
    content = k.get(api, "VolumeSnapshotContent", None, ref.content)
    return {"pvc": ref.source_pvc, "snapshot": snapshot, "content": ref.content, "handle": ref.handle,
            "driver": ref.driver, "restore_size": ref.restore_size,
            "source_volume_mode": (content.get("spec") or {}).get("sourceVolumeMode")}  # fmt: skip


@task(name="quiesce-and-snapshot")
def quiesce_and_snapshot(kubeconfig: str | None, namespace: str, selector: dict[str, Any], pvcs: list[str],
                         run_id: str, name: str, hooks: dict[str, Any], use_pod_annotations: bool = False,
                         group_class: str | None = None, snapshot_class: str | None = None,
                         timeout: float = 300.0) -> dict[str, Any]:  # fmt: skip
    """Pre hooks, a VolumeGroupSnapshot (or one VolumeSnapshot per PVC) until cut, post hooks ALWAYS, then
    the wait for readiness.

    Returns ``{"kind", "group", "members": [Member], "freeze_s", "hooks": [str]}``.
    """
    from movers.hooks import annotation_hooks, hookset_from_policy, quiesced

    log = get_run_logger()
    api = api_client(kubeconfig)
    hookset = hookset_from_policy(hooks or {})
    if use_pod_annotations:
        hookset = hookset + annotation_hooks(api, namespace)
    labels = m.run_labels(run_id)
    version = k.served_group_snapshot_version(api)
    snapshot_names: list[str] = []
    # frozen only until the point in time is cut (creationTime); readiness is awaited after the thaw
    with quiesced(api, namespace, hookset) as q:
        if version:
            k.create(api, m.volume_group_snapshot(name, namespace, selector, group_class, version, labels))
            snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", namespace, name, timeout, version, until="cut")
        else:
            log.warning("the cluster serves no VolumeGroupSnapshot API: one VolumeSnapshot per PVC while frozen")
            for pvc in pvcs:
                snap = f"{name}-{pvc}"[:253]
                k.create(api, m.volume_snapshot(snap, namespace, pvc, snapshot_class, labels))
                snapshot_names.append(snap)
            for snap in snapshot_names:
                snapshots.wait_snapshot_ready(api, "VolumeSnapshot", namespace, snap, timeout=timeout, until="cut")
    if version:
        vgs = snapshots.wait_snapshot_ready(api, "VolumeGroupSnapshot", namespace, name, timeout=timeout,
                                            version=version)  # fmt: skip
    else:
        for snap in snapshot_names:
            snapshots.wait_snapshot_ready(api, "VolumeSnapshot", namespace, snap, timeout=timeout)
    if version:
        snapshot_names = [x.snapshot for x in snapshots.group_members(api, vgs)]
    members = [_member_of(api, namespace, s) for s in snapshot_names]
    done = [r.describe() for r in q.pre_results + q.post_results]
    for line in done:
        log.info(line)
    log.info("freeze window %.3f s; %d member snapshot(s)", q.freeze_s or 0.0, len(members))
    return {"kind": "VolumeGroupSnapshot" if version else "VolumeSnapshot", "group": name if version else None,
            "group_version": version, "members": members, "freeze_s": q.freeze_s, "hooks": done}  # fmt: skip


@task(name="cbt-audience")
def cbt_audience(kubeconfig: str | None, driver: str) -> str | None:
    """The SnapshotMetadataService audience of ``driver``, or None when CBT is unavailable."""
    from movers.cbt.discovery import snapshot_metadata_service
    from movers.errors import CbtUnavailableError, NotFoundError

    try:
        return snapshot_metadata_service(api_client(kubeconfig), driver).audience
    except (CbtUnavailableError, NotFoundError) as err:
        get_run_logger().warning("CBT unavailable for driver %s: %s", driver, err)
        return None


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
                mover: dict[str, Any], repo_secret: str, timeout: float = 3600.0) -> dict[str, Any]:  # fmt: skip
    """A Block PVC from the member's snapshot and a mover pod backing it up; the pod's result JSON.

    ``plan``: ``{"change_source", "base_handle", "audience"}`` (see tasks.repo.plan_member).
    """
    log = get_run_logger()
    api = api_client(kubeconfig)
    pvc, labels = member["pvc"], m.run_labels(run_id, **{"cbt-mover.io/pvc": member["pvc"]})
    if member.get("source_volume_mode") == "Filesystem":
        snapshots.patch_content_annotation(api, member["content"])
    read_pvc = f"{run_id}-{pvc}"[:63].rstrip("-")
    # the source claim's class (the cluster default may belong to another driver, which cannot restore this
    # snapshot), sized from restoreSize or, when the driver leaves it out, the source claim's capacity
    size = m.reader_claim_size(member["restore_size"], member.get("size"))
    claim = m.pvc_from_snapshot(read_pvc, namespace, member["snapshot"], size, member.get("storage_class"), labels)
    k.create(api, claim)
    args = m.backup_args(volume=f"{namespace}/{pvc}", namespace=namespace, snapshot=member["snapshot"], pvc=pvc,
                         base_handle=plan.get("base_handle"), storage_class=member.get("storage_class"),
                         volume_mode=member.get("volume_mode"), tags=member.get("tags"),
                         extra=["--progress-interval", f"{mover.get('progress_interval', 1.0):g}"])  # fmt: skip
    pod = m.mover_pod(read_pvc, namespace, image=mover["image"], args=args, pvc=read_pvc,
                      service_account=mover["service_account"], repo_secret=repo_secret,
                      cbt_audience=plan.get("audience"), resources=mover.get("resources"), labels=labels,
                      node_selector=mover.get("node_selector"), active_deadline_seconds=int(timeout))  # fmt: skip
    progress = ProgressArtifact(progress_key(namespace, pvc), f"backup of {namespace}/{pvc} ({run_id})")

    def on_log_line(line: str) -> None:
        log.debug("%s: %s", pvc, line)
        progress.on_line(line)

    _clear_finished_pod(api, namespace, read_pvc)  # an earlier attempt's pod, so that a retry runs anew
    try:
        res = pods.run_pod_to_completion(api, pod, timeout=timeout, on_log_line=on_log_line)
    except NotFoundError:
        raise MoverPodFailed(f"mover pod {namespace}/{read_pvc} disappeared while running (deleted or evicted)",
                             None) from None  # fmt: skip
    if not res.succeeded or not res.result:
        raise MoverPodFailed(f"mover pod {namespace}/{read_pvc} failed (exit {res.exit_code}): {res.message.strip()}"
                             f"\n" + "\n".join(res.log_tail), res.exit_code)  # fmt: skip
    progress.set(100.0)
    return res.result


class MoverPodFailed(k.KubeError):
    """A mover or writer pod did not succeed. Retriable unless its exit code says the input, the
    repository or the credentials are wrong (exit codes 2-4 and 6-9: a retry would fail the same way);
    killed, evicted, deleted, crashed and "storage unavailable" (5) pods are retried."""

    PERMANENT_EXIT_CODES = frozenset({2, 3, 4, 6, 7, 8, 9})

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.exit_code_of_pod = exit_code
        self.retriable = exit_code not in self.PERMANENT_EXIT_CODES


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
    """Keep this run's snapshots as the next delta's base (run label off, ``KEPT_LABEL=app`` on) and
    delete the previously kept ones of ``app``; returns the names deleted."""
    api = api_client(kubeconfig)
    version = version or "v1"
    old = [o["metadata"]["name"] for o in k.list_objects(api, kind, namespace, f"{KEPT_LABEL}={app}", version)]
    for name in names:
        k.patch_labels(api, kind, namespace, name, {m.RUN_LABEL: None, KEPT_LABEL: app}, version)
    gone = [o for o in old if o not in names]
    for name in gone:
        k.delete(api, kind, namespace, name, version)
    logging.getLogger(__name__).debug("kept %s, deleted %s", names, gone)
    return gone
