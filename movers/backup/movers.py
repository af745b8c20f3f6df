"""The backup's mover of one volume (no Prefect): a Block claim from a member's snapshot and the mover pod that
backs it up, as ``movers.restore.writers`` is the restore's.

* ``volume_request``: the member's ``movers.backup.request.BackupRequest``, as its plan says
  (``movers.backup.plan.VolumePlan``); the operator's CLI builds the same one from its flags;
* ``mover_objects``: the reader claim and the mover pod of a member, its request rendered whole into the pod as
  one env value (``REQUEST_ENV``) (pure: checked without a cluster);
* ``move_volume``: creates them, waits for the pod to be scheduled (``timeouts.pvc_bound``), running
  (``timeouts.start``) and finished (``timeouts.mover``); the mover's result (``BackupResult``, parsed by the
  class the mover wrote it with: what it did and why), or ``MoverPodFailed``
  (one line; ``pods.PodFailed``'s retry rule).

A member is plain data (``tasks.kube.Member``: the snapshot set's member with the claim's class, size,
mode, labels, PV identity, the run's claims, tags, app, repository and the credentials Secret's key names as the
preflight read them); ``policy`` is the
run's ``movers.policy.model.BackupPolicy`` (its mover section, credentials Secret and timeouts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from movers import podcontract
from movers.backup.plan import VolumePlan
from movers.backup.request import REQUEST_ENV, BackupRequest, BackupResult, Changes, SourceSnapshot, SourceVolume
from movers.errors import EXIT_INCOMPATIBLE, NotFoundError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import pods, repokey, snapshots
from movers.kube.names import derived_name
from movers.kube.podspec import DEVICE_PATH, MoverProfile, MoverTask, RepoAccess
from movers.kube.volumes import PvIdentity

if TYPE_CHECKING:
    from movers.policy.model import BackupPolicy


class MoverPodFailed(pods.PodFailed):
    """A backup's mover pod did not succeed (``pods.PodFailed``: its exit status and the retry rule)."""


def volume_request(member: Mapping[str, Any], plan: VolumePlan, namespace: str) -> BackupRequest:
    """The ``BackupRequest`` of a member's mover, as its plan says: the source claim's identity (its PV's
    ``volumes.PvIdentity``, field for field), the member's snapshot, the planned change source (``scan``, else CBT
    with the planned base, its VolumeSnapshot name, the delta's parent and ``max_results``), the run's tags and
    claims."""
    pv: PvIdentity = member.get("identity") or PvIdentity()
    cbt = plan.change_source != "scan"
    return BackupRequest(
        volume=SourceVolume(
            id=f"{namespace}/{member['pvc']}",
            namespace=namespace,
            pvc=member["pvc"],
            pv_volume_handle=pv.pv_volume_handle,
            csi_driver=pv.csi_driver,
            storage_class=member.get("storage_class"),
            volume_mode=member.get("volume_mode"),
            pv_name=pv.pv_name,
            pv_uid=pv.pv_uid,
            fs_type=pv.fs_type,
            node_affinity=pv.node_affinity,
            labels=member.get("labels"),
        ),
        snapshot=SourceSnapshot(
            volume_snapshot=member["snapshot"],
            namespace=namespace,
            snapshot_handle=member.get("handle"),
            group_snapshot=member.get("group_snapshot"),
        ),
        changes=Changes(
            source="cbt" if cbt else "scan",
            base_handle=plan.base_handle,
            base_snapshot=plan.base_snapshot,
            parent=plan.parent if plan.change_source == "cbt-delta" else None,
            **({"cbt_max_results": plan.max_results} if plan.max_results is not None else {}),
        ),
        device=DEVICE_PATH,
        tags=member.get("tags") or {},
        run_pvcs=member.get("run_pvcs"),
    )


def mover_objects(
    run_id: str, member: Mapping[str, Any], plan: VolumePlan, policy: BackupPolicy, repo_keys: Sequence[str] = ()
) -> tuple[dict, dict]:
    """The claim the mover reads (from the member's snapshot, in the source claim's class: the cluster's
    default may belong to another driver, which cannot restore it; sized from restoreSize or the source
    claim's capacity) and the mover pod (the policy's placement, a projected CBT token when CBT is planned,
    the repository key files ``repo_keys`` of the credentials Secret), both named
    ``names.derived_name(run_id, pvc)``."""
    namespace, mover, pvc = policy.namespace, policy.mover, member["pvc"]
    name = derived_name(run_id, pvc)  # valid and distinct whatever the PVC's name
    labels = m.run_labels(run_id, app=member.get("app"), **{m.PVC_LABEL: m.label_value(pvc)})
    size = m.reader_claim_size(member["restore_size"], member.get("size"))
    claim = m.pvc_from_snapshot(name, namespace, member["snapshot"], size, member.get("storage_class"), labels)
    request = volume_request(member, plan, namespace)
    args = m.backup_args(
        request_env=REQUEST_ENV,
        cbt=request.changes.source == "cbt",
        repo=member.get("repo"),
        extra=["--progress-interval", f"{mover.progress_interval:g}"],
    )
    pod = m.mover_pod(
        name,
        namespace,
        profile=MoverProfile.of(mover),
        task=MoverTask(
            args=args,
            pvc=name,
            device_path=request.device,
            env={REQUEST_ENV: request.model_dump_json()},
            cbt_audience=plan.audience,
            active_deadline_seconds=int(policy.timeouts.mover),
        ),
        repo=RepoAccess(policy.repository.credentials_secret, repo_keys),
        labels=labels,
    )
    return claim, pod


def move_volume(
    api,
    run_id: str,
    member: Mapping[str, Any],
    plan: VolumePlan,
    policy: BackupPolicy,
    *,
    on_log_line: Callable[[str], None] | None = None,
    logger: logging.Logger | logging.LoggerAdapter | None = None,
) -> BackupResult:
    """Back up one member: its claim and mover pod (``mover_objects``, with the key files among the credentials
    Secret's key names the preflight read, the member's ``secret_keys``: ``repokey.key_files``; the Secret is not
    read again), the pod scheduled within the policy's ``timeouts.pvc_bound`` (``pods.PodNotScheduled`` names
    FailedScheduling), running within ``timeouts.start``
    (``pods.PodNotStarted`` names the Warning that says why: FailedAttachVolume, FailedMount, an image pull) and
    finished within ``timeouts.mover`` (``pods.PodTimeoutError``); none of these is retried. The mover's result.
    A Filesystem source's snapshot content is first marked for a Block claim (KEP-3141). The pod of an earlier
    attempt of the run, finished or not, is deleted first, so that a retry runs in a fresh pod. A failed
    pod is ``MoverPodFailed`` (one line; its log tail goes to ``logger`` at DEBUG)."""
    log = logger or logging.getLogger(__name__)
    if member.get("source_volume_mode") == "Filesystem":
        snapshots.patch_content_annotation(api, member["content"])
    namespace = policy.namespace
    claim, pod = mover_objects(run_id, member, plan, policy, repokey.key_files(member.get("secret_keys") or ()))
    name, timeouts = pod["metadata"]["name"], policy.timeouts
    k.create(api, claim)
    _replace_earlier_pod(api, pod, log)
    try:
        res = pods.run_scheduled(
            api,
            pod,
            name,
            pods.PodTimeouts(start=timeouts.pvc_bound, running=timeouts.start, total=timeouts.mover),
            errors=pods.PodWaitErrors(what="mover pod"),
            on_log_line=on_log_line,
        )
    except NotFoundError:
        raise MoverPodFailed(
            f"mover pod {namespace}/{name} disappeared while running (deleted or evicted)", None
        ) from None
    if not res.succeeded or not res.result:
        # its log records reached the caller's on_log_line already; the raw tail is for debugging
        log.debug("mover pod %s/%s: the last lines of its log:\n%s", namespace, name, "\n".join(res.log_tail))
        why = " ".join(res.message.split()) or "no message"
        raise MoverPodFailed(
            f"mover pod {namespace}/{name} for {member['pvc']} failed (exit {res.exit_code}): {why}", res.exit_code
        )
    try:
        return BackupResult.model_validate(res.result)
    except ValidationError as err:  # not retried: a new pod would commit another backup and write it again
        bad = podcontract.summary(err)
        raise MoverPodFailed(
            f"mover pod {namespace}/{name} wrote a result this flow cannot read ({bad}): is its image another version?",
            EXIT_INCOMPATIBLE,
        ) from None


def _replace_earlier_pod(api, pod: Mapping[str, Any], log, timeout: float = 60.0) -> None:
    """Delete the pod of ``pod``'s name left by an earlier attempt of the same run (finished, still waiting or
    running) and wait until it is gone: a retry never waits again on the pod that failed it. A pod of that name
    from elsewhere is left for ``apply.create`` to refuse."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    earlier = k.find(api, "Pod", namespace, name)
    if earlier is None:
        return
    run = pod["metadata"]["labels"].get(m.RUN_LABEL)
    if ((earlier.get("metadata") or {}).get("labels") or {}).get(m.RUN_LABEL) != run:
        return
    phase = (earlier.get("status") or {}).get("phase") or "Pending"
    log.info("deleting the pod %s/%s of an earlier attempt (%s)", namespace, name, phase)
    k.delete_and_wait(api, "Pod", namespace, name, timeout)
