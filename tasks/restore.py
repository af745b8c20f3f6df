"""Thin Prefect tasks over ``movers.repo.selection`` and ``movers.kube.restore``: inputs and results are plain
data (targets travel as ``Target.to_dict()``)."""

from __future__ import annotations

import time
from typing import Any

from prefect import get_run_logger, task

from movers.kube import restore as r
from tasks import retry_if_retriable
from tasks.kube import ProgressArtifact, api_client, progress_key


@task(name="select-backups", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def select_backups(repo_url: str, namespace: str, pvcs: list[str] | None, backup: str) -> dict[str, Any]:
    """``{"how", "run", "volumes": [...]}``, each volume ``{pvc, volume, backup_id, capacity_bytes, storage_class,
    volume_mode, created}`` as recorded (``movers.repo.selection.select``)."""
    from movers.repo.repository import Repository
    from movers.repo.selection import select
    from movers.repo.store import open_store

    sel = select(Repository.open(open_store(repo_url)), namespace, pvcs, backup)
    (get_run_logger().warning if sel.run is None else get_run_logger().info)("restoring %s", sel.how)
    volumes = [{"pvc": s.pvc, "volume": s.manifest.volume.id, "backup_id": s.manifest.backup_id,
                "capacity_bytes": s.manifest.capacity_bytes, "storage_class": s.manifest.volume.storage_class,
                "volume_mode": s.manifest.volume.volume_mode, "created": s.manifest.created}
               for s in sel.volumes]  # fmt: skip
    return {"how": sel.how, "run": sel.run, "volumes": volumes}


@task(name="plan-restore")
def plan_restore(kubeconfig: str | None, namespace: str, volumes: list[dict[str, Any]], run_id: str,
                 options: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """The checked targets (``movers.kube.restore.plan_targets``; ``options``: storage_class, overwrite,
    hand_over, repo_secret, service_account); refuses before anything is created."""
    targets = r.plan_targets(api_client(kubeconfig), namespace, volumes, run_id, **options)
    log = get_run_logger()
    for t in targets:
        log.info("%s: backup %s of %s -> %s/%s (%s, class %s%s)%s", t.pvc, t.backup_id, t.volume, namespace,
                 t.pvc, t.volume_mode, t.storage_class, ", replacing the existing claim" if t.replace else "",
                 "".join(f"; {n}" for n in t.notes))  # fmt: skip
    return [t.to_dict() for t in targets]


@task(name="write-volume", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def write_volume(kubeconfig: str | None, namespace: str, run_id: str, target: dict[str, Any], mover: dict[str, Any],
                 repo_secret: str, timeout: float = 3600.0) -> dict[str, Any]:  # fmt: skip
    """Restore one volume into its new Block claim from a writer pod; the mover's result plus ``wall_s``."""
    t = r.Target.from_dict(target)
    what = f"restore of {t.volume} backup {t.backup_id} into {namespace}/{t.pvc} ({run_id})"
    progress = ProgressArtifact("restore-" + progress_key(namespace, t.pvc), what)
    started = time.monotonic()
    result = r.write_volume(api_client(kubeconfig), namespace, run_id, t, image=mover["image"],
                            service_account=mover["service_account"], repo_secret=repo_secret, timeout=timeout,
                            resources=mover.get("resources"), node_selector=mover.get("node_selector"),
                            on_log_line=progress.on_line)  # fmt: skip
    progress.set(100.0)
    return {**result, "wall_s": round(time.monotonic() - started, 3)}


@task(name="finish-volume")
def finish_volume(kubeconfig: str | None, namespace: str, run_id: str, target: dict[str, Any]) -> dict[str, Any]:
    """Hand the written volume to its final claim and mark it restored (``movers.kube.restore.finish_volume``)."""
    return r.finish_volume(api_client(kubeconfig), namespace, run_id, r.Target.from_dict(target))


@task(name="discard-restore")
def discard_restore(kubeconfig: str | None, namespace: str, run_id: str, targets: list[dict[str, Any]],
                    failed: bool) -> dict[str, list[str]]:  # fmt: skip
    """Writer pods always; after a failure also the run's claims and volumes, except restored volumes whose
    overwritten claim is already gone (kept with policy Retain, logged)."""
    api = api_client(kubeconfig)
    keep = r.kept_after_failure(api, namespace, run_id, [r.Target.from_dict(t) for t in targets]) if failed else []
    for pvc in keep:
        get_run_logger().error("%s/%s: the claim it replaced is gone; keeping the restored volume (labelled"
                               " cbt-mover.io/run=%s, policy Retain) for you to bind",
                               namespace, pvc, run_id)  # fmt: skip
    return r.discard_run(api, namespace, run_id, everything=failed, keep=keep)
