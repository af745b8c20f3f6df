"""Thin Prefect tasks over ``movers.kube`` / ``movers.hooks``: inputs are the run's ``BackupPolicy`` and the typed
results of the tasks before (the preflight's ``Preflight``, the snapshot set's ``Snapshots``, a ``Member`` to move),
never dicts; they turn them into the plain data the movers' functions take.

Every task takes ``kubeconfig`` (None: in-cluster, then ``KUBECONFIG`` / ``~/.kube/config``) and
builds its API client itself (cached per process), so that task inputs stay serialisable.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from prefect import get_run_logger, task

from movers.backup import movers as backup
from movers.backup import preflight
from movers.backup import snapshots as snapshotset
from movers.backup.plan import VolumePlan
from movers.backup.request import BackupResult
from movers.kube import cleanup, client
from movers.kube import manifests as m
from movers.policy.model import BackupPolicy
from reporting.progress import ProgressArtifact, progress_key
from reporting.runs import PodLog
from tasks import retry_if_retriable

KEPT_LABEL = snapshotset.KEPT_LABEL


@dataclass(frozen=True)
class SnapshotMember:
    """A member VolumeSnapshot of the run's set (``snapshotset.member``): its claim, name, content, CSI handle and
    driver, restore size and its content's ``spec.sourceVolumeMode``."""

    pvc: str
    snapshot: str
    content: str | None
    handle: str | None
    driver: str
    restore_size: Any
    source_volume_mode: str | None


@dataclass(frozen=True)
class Snapshots:
    """The run's snapshot set (``snapshotset.take``), its members and why the preflight chose its path."""

    taken: snapshotset.SnapshotSet
    members: list[SnapshotMember]
    reason: str

    @property
    def freeze_s(self) -> float:
        """Every freeze window together, seconds."""
        return round(sum(self.taken.freezes), 3)


@dataclass(frozen=True)
class Recorded:
    """What every mover of a run records and writes with: the run's claims, its group snapshot, the application, the
    manifest tags (run, app, policy), the repository and the credentials Secret's key names (the preflight's
    ``secret_keys``: the key files its pod mounts)."""

    run_pvcs: list[str]
    group_snapshot: str | None
    app: str
    tags: dict[str, str]
    repo: str
    secret_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Member:
    """A member of the snapshot set as its mover takes it: its snapshot, its claim (the preflight's ``Source``:
    class, size, mode, labels, its PV's identity) and what the run records."""

    snapshot: SnapshotMember
    source: preflight.Source
    recorded: Recorded

    @property
    def pvc(self) -> str:
        return self.snapshot.pvc

    def plain(self) -> dict[str, Any]:
        """The member as ``movers.backup.movers.move_volume`` reads it (plain data)."""
        claim = ("storage_class", "size", "volume_mode", "identity", "labels")
        return (
            dataclasses.asdict(self.snapshot)
            | {f: getattr(self.source, f) for f in claim}
            | dataclasses.asdict(self.recorded)
        )


@functools.lru_cache(maxsize=8)
def api_client(kubeconfig: str | None = None):
    """One client per kubeconfig for the tasks of a flow run (``movers.kube.client.api_client`` builds it; a
    def of this module, not a wrapped alias: a served flow is pickled by reference)."""
    return client.api_client(kubeconfig)


@task(name="check-permissions")
def check_permissions(kubeconfig: str | None, policy: BackupPolicy) -> None:
    """Preflight, first: may the run's identity make every call of a run (``preflight.check_permissions``)?"""
    preflight.check_permissions(api_client(kubeconfig), policy)


@task(name="inspect-cluster", retries=2, retry_delay_seconds=2, retry_condition_fn=retry_if_retriable)
def inspect_cluster(kubeconfig: str | None, policy: BackupPolicy) -> preflight.Preflight:
    """Preflight: the claims, the mover identity, the snapshot path, classes and CBT (``preflight.inspect``)."""
    log = get_run_logger()
    found = preflight.inspect(api_client(kubeconfig), policy)
    log.info("snapshot path %s: %s", found.path, found.path_reason)
    for driver, cbt in found.cbt.items():
        for why in filter(None, (cbt.unavailable, found.path == preflight.GROUP and cbt.group_members)):
            log.warning("CBT unavailable for %s: %s (its volumes are scanned)", driver, why)
    for line in [*found.warnings, *([found.fallback_problem] if found.fallback_problem else [])]:
        log.warning(line)
    return found


@task(name="snapshot-set")
def take_snapshots(kubeconfig: str | None, run_id: str, policy: BackupPolicy, found: preflight.Preflight) -> Snapshots:
    """The claims ``found`` (the preflight's) snapshotted under a freeze bounded by the policy (``snapshotset.take``)
    by the path it chose, with each member (``snapshotset.member``)."""
    from movers.hooks import app_hooks

    api, namespace = api_client(kubeconfig), policy.namespace
    hookset = app_hooks(
        api,
        namespace,
        policy.hooks,
        use_pod_annotations=policy.use_pod_annotations,
        default_timeout=policy.timeouts.hook,
    )
    labels = m.run_labels(run_id, app=policy.name)
    request = snapshotset.Request.of(run_id, labels, policy, dataclasses.asdict(found))
    log = get_run_logger()
    done = snapshotset.take(api, namespace, request, hookset, log)
    for line in done.hooks:
        log.info(line)
    log.info("freeze window(s) %s s; %d member snapshot(s)", done.freezes, len(done.snapshots))
    members = [SnapshotMember(**snapshotset.member(api, namespace, s)) for s in done.snapshots]
    return Snapshots(done, members, found.path_reason)


@task(
    name="move-volume",
    task_run_name="move {policy.namespace}/{member.pvc}",
    retries=1,
    retry_delay_seconds=2,
    retry_condition_fn=retry_if_retriable,
)
def move_volume(
    kubeconfig: str | None, run_id: str, member: Member, plan: VolumePlan, policy: BackupPolicy
) -> BackupResult:
    """``movers.backup.movers.move_volume`` of one member with a progress artifact fed from the mover's log; the
    mover's own log records forwarded (``reporting.runs.PodLog``) and its outcome said in one line."""
    log = get_run_logger()
    namespace, pvc = policy.namespace, member.pvc
    volume = f"{namespace}/{pvc}"
    planned = f"planned {plan.change_source}: {plan.why}"
    progress = ProgressArtifact(progress_key(namespace, pvc), f"backup of {volume} ({run_id})", planned)
    pod_log = PodLog(log, volume)

    def on_log_line(line: str) -> None:
        pod_log.on_line(line)
        progress.on_line(line)

    result = backup.move_volume(
        api_client(kubeconfig), run_id, member.plain(), plan, policy, on_log_line=on_log_line, logger=log
    )
    progress.finish()
    log.info("%s", outcome_line(volume, result))
    return result


def outcome_line(volume: str, r: BackupResult) -> str:
    """A mover's outcome in one line: ``ns/pvc: incremental-cbt done (cbt-delta): changed 12.0 MiB, read ...,
    uploaded ... in 4.1 s, backup id B`` and the fallback's reason when it took another change source."""
    from movers.values import human_bytes

    sizes = ", ".join(
        f"{what} {human_bytes(n)}"
        for what, n in (("changed", r.changed_bytes), ("read", r.read_bytes), ("uploaded", r.stored_bytes))
    )
    fallback = f"; fallback: {r.cbt_fallback}" if r.cbt_fallback else ""
    took = f"in {r.duration_s:.1f} s, backup id {r.backup_id}"
    return f"{volume}: {r.mode} done ({r.change_source}): {sizes} {took}{fallback}"


@task(name="cleanup-run")
def cleanup_run(
    kubeconfig: str | None, namespace: str, run_id: str, timeout: float = 60.0, keep_retained: bool = False
) -> dict[str, list[str]]:
    """Delete everything labelled with the run (pods, PVCs, snapshots); what was deleted (and, ``keep_retained``,
    the Retain contents left behind under ``"retained"``: ``cleanup.delete_by_label``)."""
    deleted = cleanup.delete_by_label(
        api_client(kubeconfig),
        namespace,
        f"{m.RUN_LABEL}={run_id}",
        wait=True,
        timeout=timeout,
        keep_retained=keep_retained,
    )
    for line in deleted.get("retained", []):
        get_run_logger().warning("left behind (retained_snapshots: keep): %s", line)
    return deleted


@task(name="keep-base-snapshots")
def keep_base_snapshots(
    kubeconfig: str | None,
    namespace: str,
    app: str,
    kind: str,
    version: str | None,
    names: list[str],
    keep_retained: bool = False,
) -> snapshotset.Retired:
    """Keep this run's snapshots as the next delta's base and delete the ones kept before (``snapshotset.keep``);
    each Retain content left behind (``keep_retained``) is a warning."""
    done = snapshotset.keep(api_client(kubeconfig), namespace, app, kind, version, names, keep_retained)
    log = get_run_logger()
    log.info("kept %s as the next base; deleted %s", names, done.deleted or "nothing")
    for content in done.retained:
        log.warning("left behind (retained_snapshots: keep): %s", content.describe())
    return done
