"""A restore's writers: each volume written from a writer pod into a new Block claim (``write_volume``), read
back before any existing claim is touched.

Binding: the new claim is created together with its writer pod, and the writer waits for the pod to be
scheduled (``write_volume``), never for the claim first: a WaitForFirstConsumer class binds the claim
only once a pod using it is scheduled. A writer that is not scheduled in time fails with the last
Warning about it or its claim (the scheduler's FailedScheduling, the provisioner's ProvisioningFailed).

Placement: the writer pod *prefers* the nodes the source volume's recorded node affinity
(``volume.node_affinity``, the PV's required NodeSelector) allows (``writer_affinity``), so that a
node-local or zonal volume is provisioned where the application ran; a cluster without such nodes
still restores, elsewhere, and ``movers.restore.finish.finish_volume`` notes it (``placement_note``).

In place by CBT (``Target.cbt``, ``movers.restore.live``): the live claim is snapshotted first (``live_snapshot``,
deleted afterwards in every outcome) and the writer pod asks the SnapshotMetadata service for the delta itself, as
a backup's mover does: ``--kube`` and a projected token of the service's audience (``manifests.mover_pod``). When
the snapshot of the live claim fails, the writer compares instead and the result says why (``cbt_fallback``).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from movers import podcontract
from movers.errors import EXIT_INCOMPATIBLE
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import repokey
from movers.kube.pods import PodFailed, PodNotScheduled, PodTimeouts, PodWaitErrors, run_scheduled
from movers.kube.podspec import DEVICE_PATH, MoverProfile, MoverTask, RepoAccess
from movers.kube.snapshots import patch_content_annotation
from movers.restore.live import live_snapshot
from movers.restore.plan import Target, labels_of
from movers.restore.request import REQUEST_ENV, CbtDelta, RestoreRequest, WriteResult

if TYPE_CHECKING:
    from movers.policy.model import MoverSettings

PLACEMENT_WEIGHT = 100  # the writer's preference for the source volume's nodes (the maximum weight)


class WriterError(PodFailed):
    """A writer pod failed (``pods.PodFailed``: its exit status and the retry rule)."""


class WriterNotScheduled(PodNotScheduled):
    """A writer pod was not scheduled in time (``pods.wait_scheduled``)."""


def pod_name(run_id: str, pvc: str) -> str:
    """The writer pod of ``pvc``: ``<run id>-<pvc>`` when that is a DNS label (the pod's hostname), else its
    dots turned into ``-``, cut to fit and ``-`` + 8 hex digits of its SHA-256: distinct per PVC."""
    name = f"{run_id}-{pvc}"
    if len(name) <= 63 and "." not in name:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name.replace('.', '-')[:54].rstrip('-')}-{digest}"


def writer_affinity(recorded: Mapping[str, Any] | None, affinity: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The writer pod's affinity: ``affinity`` (the writer settings' own) plus one preferred node-affinity
    term (weight ``PLACEMENT_WEIGHT``) per term of ``recorded``, the source PV's required NodeSelector, so
    that the scheduler places the writer, and so a WaitForFirstConsumer volume, where the source lived
    when a node there fits (preferred: elsewhere otherwise)."""
    terms = [
        t for t in (recorded or {}).get("nodeSelectorTerms") or [] if t.get("matchExpressions") or t.get("matchFields")
    ]
    if not terms:
        return copy.deepcopy(dict(affinity)) if affinity else None
    out = copy.deepcopy(dict(affinity or {}))
    node = out.setdefault("nodeAffinity", {})
    key = "preferredDuringSchedulingIgnoredDuringExecution"
    node[key] = [*(node.get(key) or []), *({"weight": PLACEMENT_WEIGHT, "preference": copy.deepcopy(t)} for t in terms)]
    return out


def writer_request(target: Target, *, verify_device: bool = True, cbt: CbtDelta | None = None) -> RestoreRequest:
    """The ``RestoreRequest`` of ``target``'s writer: its backup of its volume onto the pod's Block device
    (``podspec.DEVICE_PATH``), read back with ``verify_device``; a claim provisioned from the kept snapshot, or the
    claim itself in place, is compared with the backup and only what differs written (``overwrite: if-changed``),
    or with ``cbt`` only the ranges that delta names. The operator's CLI builds the same one from its flags
    (``movers.cli.restore.restore_request``)."""
    return RestoreRequest(
        volume=target.volume,
        backup=target.backup_id,
        device=DEVICE_PATH,
        verify_device=verify_device,
        overwrite="if-changed" if target.snapshot or target.in_place else "always",
        cbt=cbt,
    )


@dataclass(frozen=True)
class WriterRun:
    """What the writer pods of one restore run share: the target ``namespace``, the ``run_id``, the ``writer``
    settings (flow parameters or a policy's mover section), the repository credentials Secret ``repo_secret``,
    the pods' ``timeouts`` (``pods.run_scheduled``) and ``verify_device`` (read each device back)."""

    namespace: str
    run_id: str
    writer: MoverSettings
    repo_secret: str
    timeouts: PodTimeouts = PodTimeouts(start=600.0, total=3600.0)
    verify_device: bool = True
    snapshot_timeout: float = 300.0  # in place by CBT: the live claim's snapshot ready within this


def writer_pod(
    run: WriterRun, target: Target, repo_keys: Sequence[str] = (), cbt: CbtDelta | None = None
) -> dict[str, Any]:
    """The writer pod of ``target`` (``pod_name``): ``cbt-mover restore`` of its request (``writer_request``,
    rendered whole into the pod as one env value, ``REQUEST_ENV``) onto the claim ``target.write_claim``, the
    repository key files ``repo_keys`` of Secret ``run.repo_secret`` (``manifests.mover_pod``), no API token (a
    writer), the run's labels (``labels_of``), ``run.writer``'s image, ServiceAccount, resources and placement
    (flow parameters or a policy's mover section) with the source volume's placement added to its affinity
    (``writer_affinity``); its deadline ``run.timeouts.total``. With ``cbt`` (in place by CBT: ``target.cbt``) the
    writer asks for that delta with ``--kube`` and a projected token of the service's audience, as a mover does."""
    run_id, writer = run.run_id, run.writer
    request = writer_request(target, verify_device=run.verify_device, cbt=cbt)
    audience = target.cbt.audience if cbt is not None and target.cbt is not None else None
    return m.mover_pod(
        pod_name(run_id, target.pvc),
        run.namespace,
        profile=MoverProfile.of(writer, affinity=writer_affinity(target.node_affinity, writer.affinity)),
        task=MoverTask(
            args=m.restore_args(request_env=REQUEST_ENV, extra=["--progress-interval", "1"], cbt=audience is not None),
            env={REQUEST_ENV: request.model_dump_json()},
            device_path=request.device,
            pvc=target.write_claim,
            role=m.WRITER,
            cbt_audience=audience,
            active_deadline_seconds=int(run.timeouts.total),
        ),
        repo=RepoAccess(run.repo_secret, repo_keys),
        labels=labels_of(run_id, target.pvc, target.app),
    )


def write_volume(
    api, run: WriterRun, target: Target, *, on_log_line: Callable[[str], None] | None = None
) -> WriteResult:
    """A new Block claim ``target.write_claim`` of the recorded capacity and class, and a writer pod
    (``writer_pod``, with the key files Secret ``run.repo_secret`` holds now: ``repokey.key_names``) restoring
    the backup onto it (and reading it back with ``run.verify_device``); the writer's result, parsed by the class
    it wrote it with.

    The claim and the pod are created together and the pod is waited for (``pods.run_scheduled``: scheduled
    within ``run.timeouts.start`` s, running within as long again, finished within ``run.timeouts.total`` s in
    all): a WaitForFirstConsumer claim binds when the pod is scheduled. The pod is deleted in every outcome (a
    retry starts a fresh one); the claim stays for ``finish_volume`` or ``discard_run``. ``WriterError`` names the
    exit code and the log tail (or, exit ``EXIT_INCOMPATIBLE``, a result this flow cannot read: another image
    version); ``WriterNotScheduled`` / ``pods.PodNotStarted`` (not retried) /
    ``PodTimeoutError`` (not retried) the last Warning about the pod and about its claim.

    In place by CBT (``target.cbt``): the writer's pod runs while the snapshot of the live claim exists
    (``live.live_snapshot``, named as the pod, deleted afterwards in every outcome); when that snapshot fails the
    writer compares instead, and the result's ``cbt_fallback`` says why.
    """
    namespace, run_id = run.namespace, run.run_id
    labels = labels_of(run_id, target.pvc, target.app)
    if target.in_place and target.cbt is not None:
        name, cbt = pod_name(run_id, target.pvc), target.cbt
        timeout = run.snapshot_timeout
        with live_snapshot(api, namespace, name, target.pvc, cbt.snapshot_class, labels, timeout) as live:
            if live.name is None:
                result = _write(api, run, target, labels, on_log_line)
                return result.model_copy(update={"cbt_fallback": live.why})
            delta = CbtDelta(
                namespace=namespace, snapshot=live.name, base_handle=cbt.base_handle, base_snapshot=cbt.base_snapshot
            )
            return _write(api, run, target, labels, on_log_line, delta)
    return _write(api, run, target, labels, on_log_line)


def _write(
    api,
    run: WriterRun,
    target: Target,
    labels: Mapping[str, str],
    on_log_line: Callable[[str], None] | None,
    cbt: CbtDelta | None = None,
) -> WriteResult:
    namespace = run.namespace
    if target.snapshot_content:  # a Block claim from a Filesystem source's snapshot (KEP-3141); harmless otherwise
        patch_content_annotation(api, target.snapshot_content)
    size, storage_class = m.quantity(target.capacity_bytes), target.storage_class or None
    if not target.in_place:  # in place: the existing claim is the target
        claim = m.block_pvc(target.write_claim, namespace, size, storage_class, labels, snapshot=target.snapshot)
        k.create(api, claim)
    repo_keys = repokey.key_names(k.find(api, "Secret", namespace, run.repo_secret) or {})
    pod = writer_pod(run, target, repo_keys, cbt)
    name = pod["metadata"]["name"]
    k.delete_and_wait(api, "Pod", namespace, name)  # a failed attempt's pod
    try:
        res = run_scheduled(
            api,
            pod,
            target.write_claim,
            run.timeouts,
            errors=PodWaitErrors(what="writer pod", not_scheduled=WriterNotScheduled),
            on_log_line=on_log_line,
        )
    finally:
        k.delete_and_wait(api, "Pod", namespace, name)
    if not res.succeeded or not isinstance(res.result, dict):
        raise WriterError(
            f"writer pod {namespace}/{name} failed (exit {res.exit_code}): {res.message.strip()}\n"
            + "\n".join(res.log_tail),
            res.exit_code,
        )
    try:
        return WriteResult.model_validate(res.result)
    except ValidationError as err:  # not retried: the volume is written, a new pod would write it again
        bad = podcontract.summary(err)
        raise WriterError(
            f"writer pod {namespace}/{name} wrote a result this flow cannot read ({bad}): is its image another"
            " version?",
            EXIT_INCOMPATIBLE,
        ) from None
