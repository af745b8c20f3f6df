"""Restoring backups into a cluster: plan and check the targets, write each volume from a writer pod,
then hand it to the claim the application uses; and clean up after a failed run.

The order keeps data safe: every check runs before anything is created (``plan_targets``: first the
run's own permissions, ``required_permissions`` through SelfSubjectAccessReviews, then the objects);
every volume is written and read back into a *new* Block claim (``write_volume``) before any existing
claim is touched; only then does ``finish_volume`` give the volume its final claim (the original name,
the recorded volume mode and fsType) and mark it restored (``manifests.RESTORED_FROM``). Everything a
run creates carries its run label, the ``app.kubernetes.io/*`` labels (part-of: the backed-up
application when the run recorded it) and ``cbt-mover.io/pvc=<label_value(pvc)>``, so ``discard_run``
finds it.

Binding: the new claim is created together with its writer pod, and the writer waits for the pod to be
scheduled (``write_volume``), never for the claim first: a WaitForFirstConsumer class binds the claim
only once a pod using it is scheduled. A writer that is not scheduled in time fails with the last
Warning about it or its claim (the scheduler's FailedScheduling, the provisioner's ProvisioningFailed).

Placement: the writer pod *prefers* the nodes the source volume's recorded node affinity
(``volume.node_affinity``, the PV's required NodeSelector) allows (``writer_affinity``), so that a
node-local or zonal volume is provisioned where the application ran; a cluster without such nodes
still restores, elsewhere, and ``finish_volume`` notes it (``placement_note``).

``overwrite``: an existing claim of a target's name is replaced only after the new volume is complete
and verified; a claim that a running pod uses is refused up front. The old claim's volume then follows
its own reclaim policy (Delete: it is gone). Without ``overwrite`` an existing claim is refused.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from movers.errors import MoverError, NotFoundError, UsageError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import repokey
from movers.kube.access import Check, denied
from movers.kube.pods import (
    PodFailed,
    PodNotScheduled,
    pods_using_claim,
    run_scheduled,
)
from movers.kube.volumes import default_storage_class, rebind_volume

if TYPE_CHECKING:
    from movers.policy.model import MoverSettings

PVC_LABEL = m.PVC_LABEL
DEFAULT_FS_TYPE = "ext4"  # external-provisioner's default for Filesystem volumes
FS_TYPE_PARAMETERS = ("csi.storage.k8s.io/fstype", "fstype")  # StorageClass parameters (keys case-insensitive)
PLACEMENT_WEIGHT = 100  # the writer's preference for the source volume's nodes (the maximum weight)


class RestoreRefused(UsageError):
    """The restore cannot start as asked; the message lists every reason. Nothing was created."""


class PermissionsMissing(k.ForbiddenError):
    """The run's identity lacks permissions the restore needs (exit code 6); nothing was created."""


class WriterError(PodFailed):
    """A writer pod failed (``pods.PodFailed``: its exit status and the retry rule)."""


class WriterNotScheduled(PodNotScheduled):
    """A writer pod was not scheduled in time (``pods.wait_scheduled``)."""


@dataclass(frozen=True)
class Target:
    pvc: str  # the claim the application uses afterwards (the original name)
    volume: str  # the repository's volume id
    backup_id: str
    capacity_bytes: int
    storage_class: str  # what the new claim asks for (given, recorded, or the cluster default)
    volume_mode: str  # the final claim's mode: Block, or Filesystem when the volume is handed over
    write_claim: str  # the Block claim the writer pod writes: ``pvc`` itself, or a temporary claim
    replace: bool  # an existing claim ``pvc`` is replaced once the data is written
    notes: tuple[str, ...] = ()  # fallbacks taken (no recorded class, ...), for the logs
    fs_type: str | None = None  # the Filesystem hand-over's fsType (recorded, else the class's); None: Block
    node_affinity: dict[str, Any] | None = None  # the source PV's required NodeSelector, as recorded
    app: str | None = None  # the backed-up application (the run's cbt-mover.io/app tag), for part-of
    labels: dict[str, str] | None = None  # the source claim's labels, as recorded: the restored claim's

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Target:
        return cls(**{**doc, "notes": tuple(doc.get("notes") or ())})


def bounded_name(text: str, limit: int) -> str:
    """``text`` when it has at most ``limit`` characters, else its beginning and ``-`` + 8 hex digits of
    its SHA-256: names cut to fit stay distinct (``text`` is a valid name but for its length)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9].rstrip('-.')}-{digest}"


def labels_of(run_id: str, pvc: str, app: str | None = None) -> dict[str, str]:
    """A restore run's labels for the objects of one PVC (``app``: the restored application, part-of);
    the PVC label is ``manifests.label_value(pvc)`` (a claim name may be longer than a label value)."""
    return m.run_labels(run_id, app=app, **{PVC_LABEL: m.label_value(pvc)})


def pod_name(run_id: str, pvc: str) -> str:
    """The writer pod of ``pvc``: ``<run id>-<pvc>`` when that is a DNS label (the pod's hostname), else its
    dots turned into ``-``, cut to fit and ``-`` + 8 hex digits of its SHA-256: distinct per PVC."""
    name = f"{run_id}-{pvc}"
    if len(name) <= 63 and "." not in name:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name.replace('.', '-')[:54].rstrip('-')}-{digest}"


def write_claim_name(pvc: str, run_id: str) -> str:
    """The temporary Block claim a writer fills before the hand-over: ``<pvc>-<run id>``, a valid claim name
    distinct from ``pvc`` whatever its length."""
    return bounded_name(f"{pvc}-{run_id}", 253)


def required_permissions(namespace: str, repo_secret: str, service_account: str) -> list[Check]:
    """Every call a restore into ``namespace`` makes with the run's identity (plan, write, hand-over,
    clean-up), as ``access.Check``s for the preflight."""
    ns = namespace
    checks = [
        Check("get", "", "namespaces", name=ns),
        Check("get", "", "serviceaccounts", namespace=ns, name=service_account),
        Check("get", "", "secrets", namespace=ns, name=repo_secret),
    ]
    checks += [Check(verb, "storage.k8s.io", "storageclasses") for verb in ("get", "list")]
    checks += [
        Check(verb, "", "persistentvolumeclaims", namespace=ns) for verb in ("get", "list", "create", "patch", "delete")
    ]
    checks += [Check(verb, "", "pods", namespace=ns) for verb in ("get", "list", "watch", "create", "delete")]
    checks += [Check("get", "", "pods", "log", namespace=ns), Check("list", "", "events", namespace=ns)]
    checks += [Check(verb, "", "persistentvolumes") for verb in ("get", "list", "create", "patch", "delete")]
    return checks


def check_permissions(api, namespace: str, repo_secret: str, service_account: str) -> None:
    """``PermissionsMissing`` (one line naming every refused call) unless the identity of ``api`` may make
    every call of ``required_permissions``."""
    refused = denied(api, required_permissions(namespace, repo_secret, service_account))
    if refused:
        raise PermissionsMissing(
            f"cannot restore into {namespace}: this identity lacks {len(refused)}"
            f" permission(s) the restore needs (nothing was created): {'; '.join(refused)}",
            403,
        )


def handover_fs_type(recorded: str | None, storage_class: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """The fsType a Filesystem hand-over gives the volume, and a note when it was not recorded: the
    recorded one; else the class's ``csi.storage.k8s.io/fstype`` (or the deprecated ``fstype``); else ext4."""
    if recorded:
        return recorded, None
    name = ((storage_class or {}).get("metadata") or {}).get("name")
    params = {str(key).lower(): value for key, value in ((storage_class or {}).get("parameters") or {}).items()}
    for key in FS_TYPE_PARAMETERS:
        if params.get(key):
            return params[key], f"no fsType recorded: handing over as {params[key]} (StorageClass {name}'s {key})"
    return DEFAULT_FS_TYPE, f"no fsType recorded and StorageClass {name} names none: handing over as ext4"


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


def _terms(selector: Mapping[str, Any] | None) -> frozenset:
    def req(r: Mapping[str, Any]) -> tuple:
        return r.get("key"), r.get("operator"), tuple(sorted(r.get("values") or ()))

    return frozenset(
        (frozenset(map(req, t.get("matchExpressions") or ())), frozenset(map(req, t.get("matchFields") or ())))
        for t in (selector or {}).get("nodeSelectorTerms") or ()
    )


def describe_selector(selector: Mapping[str, Any] | None) -> str:
    """A NodeSelector in one line, e.g. ``topology.kubernetes.io/zone In [zone-a]`` (terms joined by ``or``)."""
    terms = []
    for t in (selector or {}).get("nodeSelectorTerms") or ():
        reqs = [*(t.get("matchExpressions") or ()), *(t.get("matchFields") or ())]
        terms.append(
            ", ".join(f"{r.get('key')} {r.get('operator')} [{', '.join(r.get('values') or ())}]" for r in reqs)
        )
    return " or ".join(terms) or "any node"


def placement_note(recorded: Mapping[str, Any] | None, pv: Mapping[str, Any]) -> str | None:
    """A note when the restored volume ``pv`` is bound to other nodes than the source volume was
    (``recorded``); None when it lives where the source did, or anywhere."""
    restored = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    if not _terms(recorded) or not _terms(restored) or _terms(recorded) == _terms(restored):
        return None
    return (
        f"restored on {describe_selector(restored)}, not where the source volume was"
        f" ({describe_selector(recorded)}): no node there took the writer pod; pods using it must run"
        " where it is"
    )


def plan_targets(
    api,
    namespace: str,
    volumes: Sequence[Mapping[str, Any]],
    run_id: str,
    *,
    storage_class: str | None = None,
    overwrite: bool = False,
    hand_over: bool | None = None,
    repo_secret: str,
    service_account: str,
) -> list[Target]:
    """Check that ``volumes`` (``pvc``, ``volume``, ``backup_id``, ``capacity_bytes``, ``storage_class``,
    ``volume_mode``, optionally ``fs_type``, ``node_affinity`` and ``app`` as recorded) can be restored
    into ``namespace``; the targets, or ``PermissionsMissing`` (the identity may not make every call the
    restore makes), or ``RestoreRefused`` listing every problem (missing namespace, ServiceAccount, Secret
    or StorageClass, an existing claim without ``overwrite`` or one a pod uses, a hand-over of a recorded
    Block volume).

    ``hand_over`` None: Filesystem when the recorded mode is Filesystem, else Block (also when no mode
    was recorded). ``storage_class`` overrides the recorded class; without either, the cluster default.
    A Filesystem target's fsType: ``handover_fs_type``.
    """
    check_permissions(api, namespace, repo_secret, service_account)
    problems: list[str] = []
    if k.find(api, "Namespace", None, namespace) is None:
        raise RestoreRefused(
            f"namespace {namespace} does not exist: create it, with ServiceAccount"
            f" {service_account} and the repository Secret {repo_secret}"
        )
    for kind, name in (("ServiceAccount", service_account), ("Secret", repo_secret)):
        if k.find(api, kind, namespace, name) is None:
            problems.append(f"{kind} {namespace}/{name} does not exist (the writer pods need it)")
    default_class = default_storage_class(api)
    classes: dict[str, dict[str, Any] | None] = {}
    targets = []
    for vol in volumes:
        pvc, notes = vol["pvc"], []
        sc = storage_class or vol.get("storage_class") or default_class
        if not (storage_class or vol.get("storage_class")):
            notes.append(f"no storage class recorded: using the cluster default {default_class}")
        if sc is not None and sc not in classes:
            classes[sc] = k.find(api, "StorageClass", None, sc)
        if sc is None:
            problems.append(f"{pvc}: no storage class recorded and the cluster has no default: pass storage_class")
        elif classes[sc] is None:
            problems.append(f"{pvc}: StorageClass {sc} does not exist in this cluster: pass storage_class")
        recorded = vol.get("volume_mode")
        if recorded is None:
            notes.append("no volume mode recorded: restoring as Block")
        if hand_over and recorded == "Block":
            problems.append(f"{pvc}: recorded as a Block volume, it cannot be handed to a Filesystem claim")
        mode = "Filesystem" if (hand_over if hand_over is not None else recorded == "Filesystem") else "Block"
        fs_type = None
        if mode == "Filesystem":
            fs_type, note = handover_fs_type(vol.get("fs_type"), classes.get(sc) if sc else None)
            notes += [note] if note else []
        existing = k.find(api, "PersistentVolumeClaim", namespace, pvc)
        if existing is not None and not overwrite:
            problems.append(f"PersistentVolumeClaim {namespace}/{pvc} exists: pass overwrite to replace it")
        elif existing is not None:
            users = pods_using_claim(api, namespace, pvc)
            if users:
                problems.append(
                    f"PersistentVolumeClaim {namespace}/{pvc} is used by pod(s) {', '.join(users)}:"
                    " stop them before overwriting it"
                )
        direct = existing is None and mode == "Block"
        write_claim = pvc if direct else write_claim_name(pvc, run_id)
        targets.append(
            Target(
                pvc,
                vol["volume"],
                vol["backup_id"],
                int(vol["capacity_bytes"]),
                sc or "",
                mode,
                write_claim,
                existing is not None,
                tuple(notes),
                fs_type,
                copy.deepcopy(vol.get("node_affinity")) or None,
                vol.get("app"),
                dict(vol.get("labels") or {}) or None,
            )
        )
    if problems:
        raise RestoreRefused(f"cannot restore into {namespace}: " + "; ".join(problems))
    return targets


def writer_pod(
    namespace: str,
    run_id: str,
    target: Target,
    writer: MoverSettings,
    repo_secret: str,
    *,
    timeout: float = 3600.0,
    verify_device: bool = True,
    repo_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The writer pod of ``target`` (``pod_name``): ``cbt-mover restore`` of its backup onto the claim
    ``target.write_claim`` (reading the device back with ``verify_device``), the repository key files
    ``repo_keys`` of Secret ``repo_secret`` (``manifests.mover_pod``), no API token (a writer),
    the run's labels (``labels_of``), ``writer``'s image, ServiceAccount, resources and placement (flow
    parameters or a policy's mover section) with the source volume's placement added to its affinity
    (``writer_affinity``)."""
    extra = ["--progress-interval", "1", *(["--verify-device"] if verify_device else [])]
    return m.mover_pod(
        pod_name(run_id, target.pvc),
        namespace,
        image=writer.image,
        args=m.restore_args(volume=target.volume, backup=target.backup_id, extra=extra),
        pvc=target.write_claim,
        service_account=writer.service_account,
        repo_secret=repo_secret,
        repo_keys=repo_keys,
        resources=writer.resources,
        labels=labels_of(run_id, target.pvc, target.app),
        node_selector=writer.node_selector,
        active_deadline_seconds=int(timeout),
        tolerations=writer.tolerations,
        affinity=writer_affinity(target.node_affinity, writer.affinity),
        role=m.WRITER,
    )


def write_volume(
    api,
    namespace: str,
    run_id: str,
    target: Target,
    writer: MoverSettings,
    repo_secret: str,
    *,
    timeout: float = 3600.0,
    start_timeout: float = 600.0,
    verify_device: bool = True,
    on_log_line: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """A new Block claim ``target.write_claim`` of the recorded capacity and class, and a writer pod
    (``writer_pod``, with the key files Secret ``repo_secret`` holds now: ``repokey.key_names``) restoring the
    backup onto it (and reading it back with ``verify_device``); the mover's
    result JSON.

    The claim and the pod are created together and the pod is waited for (``pods.run_scheduled``: scheduled
    within ``start_timeout`` s, running within ``start_timeout`` s more, finished within ``timeout`` s in all):
    a WaitForFirstConsumer claim binds when the pod is scheduled. The pod is deleted in every outcome (a retry
    starts a fresh one); the claim stays for ``finish_volume`` or ``discard_run``. ``WriterError`` names the
    exit code and the log tail; ``WriterNotScheduled`` / ``pods.PodNotStarted`` (not retried) /
    ``PodTimeoutError`` (not retried) the last Warning about the pod and about its claim.
    """
    labels = labels_of(run_id, target.pvc, target.app)
    k.create(
        api,
        m.block_pvc(
            target.write_claim, namespace, m.quantity(target.capacity_bytes), target.storage_class or None, labels
        ),
    )
    repo_keys = repokey.key_names(k.find(api, "Secret", namespace, repo_secret) or {})
    pod = writer_pod(
        namespace,
        run_id,
        target,
        writer,
        repo_secret,
        timeout=timeout,
        verify_device=verify_device,
        repo_keys=repo_keys,
    )
    name = pod["metadata"]["name"]
    k.delete_and_wait(api, "Pod", namespace, name)  # a failed attempt's pod
    try:
        res = run_scheduled(
            api,
            pod,
            target.write_claim,
            start_timeout=start_timeout,
            timeout=timeout,
            what="writer pod",
            error=WriterNotScheduled,
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
    return res.result


def finish_volume(api, namespace: str, run_id: str, target: Target, timeout: float = 120.0) -> dict[str, Any]:
    """Give the written volume its final claim and mark it restored; ``{"pvc", "pv", "replaced", "fs_type",
    "node_affinity", "notes"}`` (the restored PV's fsType and required node affinity; ``placement_note``).

    A temporary claim is handed over (``volumes.rebind_volume``) to ``target.pvc`` in ``target.volume_mode``
    with ``target.fs_type``, replacing an existing claim when ``target.replace``. The ``RESTORED_FROM``
    annotation and the source claim's recorded labels (``manifests.restored_patch``) are set last: a claim
    without the annotation is not a complete restore.
    """
    patch = m.restored_patch(target.volume, target.backup_id, run_id, target.labels)
    if target.write_claim == target.pvc:
        claim = k.merge_patch(api, "PersistentVolumeClaim", namespace, target.pvc, patch)
        pv_name, replaced = claim["spec"].get("volumeName"), False
    else:
        got = rebind_volume(
            api,
            namespace,
            target.write_claim,
            target.pvc,
            target.volume_mode,
            labels=labels_of(run_id, target.pvc, target.app),
            replace_existing=target.replace,
            fs_type=target.fs_type or DEFAULT_FS_TYPE,
            timeout=timeout,
        )
        k.merge_patch(api, "PersistentVolumeClaim", namespace, target.pvc, patch)
        pv_name, replaced = got.volume, got.replaced
    pv = k.get(api, "PersistentVolume", None, pv_name)
    note = placement_note(target.node_affinity, pv)
    return {
        "pvc": target.pvc,
        "pv": pv_name,
        "replaced": replaced,
        "fs_type": ((pv.get("spec") or {}).get("csi") or {}).get("fsType"),
        "node_affinity": ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required"),
        "notes": [note] if note else [],
    }


def kept_after_failure(api, namespace: str, run_id: str, targets: Sequence[Target]) -> list[str]:
    """PVCs whose restored volume a failed run must keep: an overwrite already deleted the claim it
    replaced, so the restored data is the only copy left."""
    kept = []
    for t in targets:
        if not t.replace:
            continue
        claim = k.find(api, "PersistentVolumeClaim", namespace, t.pvc)
        if claim is None or ((claim["metadata"].get("labels") or {}).get(m.RUN_LABEL) == run_id):
            kept.append(t.pvc)
    return kept


def discard_run(
    api, namespace: str, run_id: str, *, everything: bool, keep: Sequence[str] = (), timeout: float = 120.0
) -> dict[str, list[str]]:
    """Delete the run's writer pods; with ``everything`` (a failed run) also its claims and volumes,
    except those labelled with a PVC in ``keep`` (left with policy Retain). Returns kind -> names."""
    selector = f"{m.RUN_LABEL}={run_id}"
    done: dict[str, list[str]] = {}
    for pod in k.list_objects(api, "Pod", namespace, selector):
        k.delete_and_wait(api, "Pod", namespace, pod["metadata"]["name"], timeout)
        done.setdefault("Pod", []).append(pod["metadata"]["name"])
    if not everything:
        return done

    kept = {m.label_value(pvc) for pvc in keep}

    def mine(obj: Mapping[str, Any]) -> bool:
        return (obj["metadata"].get("labels") or {}).get(PVC_LABEL) not in kept

    for claim in filter(mine, k.list_objects(api, "PersistentVolumeClaim", namespace, selector)):
        k.delete_and_wait(api, "PersistentVolumeClaim", namespace, claim["metadata"]["name"], timeout)
        done.setdefault("PersistentVolumeClaim", []).append(claim["metadata"]["name"])
    for pv in filter(mine, k.list_objects(api, "PersistentVolume", None, selector)):
        name = pv["metadata"]["name"]
        try:  # Delete: the storage goes with the (released) volume
            k.merge_patch(api, "PersistentVolume", None, name, m.reclaim_policy_patch("Delete"))
            k.delete_and_wait(api, "PersistentVolume", None, name, timeout)
        except NotFoundError:
            pass
        done.setdefault("PersistentVolume", []).append(name)
    return done


def describe_error(err: BaseException) -> str:
    """One line for events and artifacts (MoverErrors carry their user message)."""
    text = str(err) if isinstance(err, MoverError) else f"{type(err).__name__}: {err}"
    return text.splitlines()[0] if text else type(err).__name__
