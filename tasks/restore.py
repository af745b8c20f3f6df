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
def select_backups(
    repo_url: str, namespace: str, pvcs: list[str] | None, backup: str, allow_partial: bool = False
) -> dict[str, Any]:
    """``{"how", "run", "app", "missing", "notes", "volumes": [...]}``, each volume ``{pvc, volume, backup_id,
    capacity_bytes, storage_class, volume_mode, fs_type, node_affinity, labels, app, created}`` as recorded
    (``movers.repo.selection.select``: a whole-app "latest" is the newest complete run; a partial run
    needs ``allow_partial``). Logs which run was taken and why (a newer partial run, missing PVCs)."""
    from movers.repo.manifest import APP_TAG
    from movers.repo.repository import Repository
    from movers.repo.selection import select
    from movers.repo.store import open_store

    sel = select(Repository.open(open_store(repo_url)), namespace, pvcs, backup, allow_partial=allow_partial)
    log = get_run_logger()
    for note in sel.notes:
        log.warning("%s", note)
    if sel.missing:
        log.warning(
            "restoring the partial %s (allow_partial): PVC(s) %s are not in it", sel.how, ", ".join(sel.missing)
        )
    (log.warning if sel.run is None else log.info)("restoring %s", sel.how)
    volumes = [
        {
            "pvc": s.pvc,
            "volume": s.manifest.volume.id,
            "backup_id": s.manifest.backup_id,
            "capacity_bytes": s.manifest.capacity_bytes,
            "storage_class": s.manifest.volume.storage_class,
            "volume_mode": s.manifest.volume.volume_mode,
            "fs_type": s.manifest.volume.fs_type,
            "node_affinity": s.manifest.volume.node_affinity,
            "labels": s.manifest.volume.labels,
            "app": s.manifest.tags.get(APP_TAG),
            "created": s.manifest.created,
        }
        for s in sel.volumes
    ]
    apps = {v["app"] for v in volumes if v["app"]}
    app = apps.pop() if len(apps) == 1 else None
    return {
        "how": sel.how,
        "run": sel.run,
        "app": app,
        "missing": list(sel.missing),
        "notes": list(sel.notes),
        "volumes": volumes,
    }


def writer_settings(policy_path: str | None = None, **given: Any) -> dict[str, Any]:
    """The writer pods' settings ``{image, service_account, resources, node_selector, tolerations, affinity}``:
    the policy's ``mover`` section when ``policy_path`` is given, overridden by the non-None ``given`` ones,
    validated as a policy's mover section (``movers.policy.parse_mover``; a ``PolicyError`` names the
    field). Without a policy and without ``resources``, ``resources`` is None (the writer's default)."""
    from movers.policy import load_policy, parse_mover

    section = load_policy(policy_path).mover.model_dump() if policy_path else {}
    section |= {key: value for key, value in given.items() if value is not None}
    mover = parse_mover(section, policy_path or "restore-app parameters")
    settings = {key: getattr(mover, key) for key in ("image", "service_account", "node_selector", "tolerations")}
    settings["affinity"] = mover.affinity
    settings["resources"] = mover.resources if policy_path or given.get("resources") is not None else None
    return settings


@task(name="plan-restore")
def plan_restore(
    kubeconfig: str | None, namespace: str, volumes: list[dict[str, Any]], run_id: str, options: dict[str, Any]
) -> list[dict[str, Any]]:
    """The checked targets (``movers.kube.restore.plan_targets``; ``options``: storage_class, overwrite,
    hand_over, repo_secret, service_account); refuses before anything is created."""
    targets = r.plan_targets(api_client(kubeconfig), namespace, volumes, run_id, **options)
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
    return [t.to_dict() for t in targets]


@task(name="write-volume", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def write_volume(
    kubeconfig: str | None,
    namespace: str,
    run_id: str,
    target: dict[str, Any],
    mover: dict[str, Any],
    repo_secret: str,
    timeout: float = 3600.0,
) -> dict[str, Any]:
    """Restore one volume into its new Block claim from a writer pod (``mover``: ``writer_settings``); the
    mover's result plus ``wall_s``. The pod must be scheduled within ``min(timeout, 600)`` s."""
    t = r.Target.from_dict(target)
    what = f"restore of {t.volume} backup {t.backup_id} into {namespace}/{t.pvc} ({run_id})"
    progress = ProgressArtifact("restore-" + progress_key(namespace, t.pvc), what)
    started = time.monotonic()
    result = r.write_volume(
        api_client(kubeconfig),
        namespace,
        run_id,
        t,
        image=mover["image"],
        service_account=mover["service_account"],
        repo_secret=repo_secret,
        timeout=timeout,
        resources=mover.get("resources"),
        node_selector=mover.get("node_selector"),
        tolerations=mover.get("tolerations"),
        affinity=mover.get("affinity"),
        on_log_line=progress.on_line,
    )
    progress.set(100.0)
    return {**result, "wall_s": round(time.monotonic() - started, 3)}


@task(name="finish-volume")
def finish_volume(kubeconfig: str | None, namespace: str, run_id: str, target: dict[str, Any]) -> dict[str, Any]:
    """Hand the written volume to its final claim and mark it restored (``movers.kube.restore.finish_volume``);
    a volume restored elsewhere than its source was is logged as a warning."""
    done = r.finish_volume(api_client(kubeconfig), namespace, run_id, r.Target.from_dict(target))
    for note in done["notes"]:
        get_run_logger().warning("%s/%s: %s", namespace, done["pvc"], note)
    return done


@task(name="discard-restore")
def discard_restore(
    kubeconfig: str | None, namespace: str, run_id: str, targets: list[dict[str, Any]], failed: bool
) -> dict[str, list[str]]:
    """Writer pods always; after a failure also the run's claims and volumes, except restored volumes whose
    overwritten claim is already gone (kept with policy Retain, logged)."""
    api = api_client(kubeconfig)
    keep = r.kept_after_failure(api, namespace, run_id, [r.Target.from_dict(t) for t in targets]) if failed else []
    for pvc in keep:
        get_run_logger().error(
            "%s/%s: the claim it replaced is gone; keeping the restored volume (labelled"
            " cbt-mover.io/run=%s, policy Retain) for you to bind",
            namespace,
            pvc,
            run_id,
        )
    return r.discard_run(api, namespace, run_id, everything=failed, keep=keep)
