"""Restoring backups into a cluster: plan and check the targets, write each volume from a writer pod,
then hand it to the claim the application uses; and clean up after a failed run.

The order keeps data safe: every check runs before anything is created (``plan_targets``); every
volume is written and read back into a *new* Block claim (``write_volume``) before any existing claim
is touched; only then does ``finish_volume`` give the volume its final claim (the original name, the
recorded volume mode) and mark it restored (``manifests.RESTORED_FROM``). Everything a run creates
carries its run label and ``cbt-mover.io/pvc=<pvc>``, so ``discard_run`` finds it.

``overwrite``: an existing claim of a target's name is replaced only after the new volume is complete
and verified; a claim that a running pod uses is refused up front. The old claim's volume then follows
its own reclaim policy (Delete: it is gone). Without ``overwrite`` an existing claim is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from movers import errors
from movers.errors import MoverError, NotFoundError, UsageError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube.pods import pods_using_claim, run_pod_to_completion
from movers.kube.volumes import default_storage_class, rebind_volume, wait_claim_bound

PVC_LABEL = "cbt-mover.io/pvc"


class RestoreRefused(UsageError):
    """The restore cannot start as asked; the message lists every reason. Nothing was created."""


class WriterError(k.KubeError):
    """A writer pod failed; ``retriable`` when the mover's exit code says the store was unavailable."""

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.retriable = exit_code in (None, errors.EXIT_UNAVAILABLE)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Target:
        return cls(**{**doc, "notes": tuple(doc.get("notes") or ())})


def labels_of(run_id: str, pvc: str, app: str | None = None) -> dict[str, str]:
    """A restore run's labels for the objects of one PVC (``app``: the restored application, part-of)."""
    return m.run_labels(run_id, app=app, **{PVC_LABEL: pvc})


def pod_name(run_id: str, pvc: str) -> str:
    return f"{run_id}-{pvc}"[:63].rstrip("-.")


def plan_targets(api, namespace: str, volumes: Sequence[Mapping[str, Any]], run_id: str, *,
                 storage_class: str | None = None, overwrite: bool = False, hand_over: bool | None = None,
                 repo_secret: str, service_account: str) -> list[Target]:  # fmt: skip
    """Check that ``volumes`` (``pvc``, ``volume``, ``backup_id``, ``capacity_bytes``, ``storage_class``,
    ``volume_mode`` as recorded) can be restored into ``namespace``; the targets, or ``RestoreRefused``
    listing every problem (missing namespace, ServiceAccount, Secret or StorageClass, an existing claim
    without ``overwrite`` or one a pod uses, a hand-over of a recorded Block volume).

    ``hand_over`` None: Filesystem when the recorded mode is Filesystem, else Block (also when no mode
    was recorded). ``storage_class`` overrides the recorded class; without either, the cluster default.
    """
    problems: list[str] = []
    if k.find(api, "Namespace", None, namespace) is None:
        raise RestoreRefused(f"namespace {namespace} does not exist: create it, with ServiceAccount"
                             f" {service_account} and the repository Secret {repo_secret}")  # fmt: skip
    for kind, name in (("ServiceAccount", service_account), ("Secret", repo_secret)):
        if k.find(api, kind, namespace, name) is None:
            problems.append(f"{kind} {namespace}/{name} does not exist (the writer pods need it)")
    default_class = default_storage_class(api)
    classes: dict[str, bool] = {}
    targets = []
    for vol in volumes:
        pvc, notes = vol["pvc"], []
        sc = storage_class or vol.get("storage_class") or default_class
        if not (storage_class or vol.get("storage_class")):
            notes.append(f"no storage class recorded: using the cluster default {default_class}")
        if sc is None:
            problems.append(f"{pvc}: no storage class recorded and the cluster has no default: pass storage_class")
        elif classes.setdefault(sc, k.find(api, "StorageClass", None, sc) is not None) is False:
            problems.append(f"{pvc}: StorageClass {sc} does not exist in this cluster: pass storage_class")
        recorded = vol.get("volume_mode")
        if recorded is None:
            notes.append("no volume mode recorded: restoring as Block")
        if hand_over and recorded == "Block":
            problems.append(f"{pvc}: recorded as a Block volume, it cannot be handed to a Filesystem claim")
        mode = "Filesystem" if (hand_over if hand_over is not None else recorded == "Filesystem") else "Block"
        existing = k.find(api, "PersistentVolumeClaim", namespace, pvc)
        if existing is not None and not overwrite:
            problems.append(f"PersistentVolumeClaim {namespace}/{pvc} exists: pass overwrite to replace it")
        elif existing is not None:
            users = pods_using_claim(api, namespace, pvc)
            if users:
                problems.append(f"PersistentVolumeClaim {namespace}/{pvc} is used by pod(s) {', '.join(users)}:"
                                " stop them before overwriting it")  # fmt: skip
        direct = existing is None and mode == "Block"
        write_claim = pvc if direct else f"{pvc}-{run_id}"[:253].rstrip("-.")
        targets.append(Target(pvc, vol["volume"], vol["backup_id"], int(vol["capacity_bytes"]), sc or "", mode,
                              write_claim, existing is not None, tuple(notes)))  # fmt: skip
    if problems:
        raise RestoreRefused(f"cannot restore into {namespace}: " + "; ".join(problems))
    return targets


def write_volume(
    api,
    namespace: str,
    run_id: str,
    target: Target,
    *,
    image: str,
    service_account: str,
    repo_secret: str,
    timeout: float = 3600.0,
    verify_device: bool = True,
    resources: Mapping[str, Any] | None = None,
    node_selector: Mapping[str, str] | None = None,
    on_log_line: Callable[[str], None] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    affinity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A new Block claim ``target.write_claim`` of the recorded capacity and class, and a writer pod
    restoring the backup onto it (and reading it back with ``verify_device``); the mover's result JSON.

    The writer pod is deleted in every outcome (a retry starts a fresh one); the claim stays for
    ``finish_volume`` or ``discard_run``. ``WriterError`` names the exit code and the log tail.
    ``tolerations`` / ``affinity`` place the writer pod (the policy's mover settings).
    """
    labels = labels_of(run_id, target.pvc)
    k.create(api, m.block_pvc(target.write_claim, namespace, m.quantity(target.capacity_bytes),
                              target.storage_class or None, labels))  # fmt: skip
    wait_claim_bound(api, namespace, target.write_claim, timeout=min(timeout, 300.0))
    extra = ["--progress-interval", "1", *(["--verify-device"] if verify_device else [])]
    args = m.restore_args(volume=target.volume, backup=target.backup_id, extra=extra)
    name = pod_name(run_id, target.pvc)
    pod = m.mover_pod(
        name,
        namespace,
        image=image,
        args=args,
        pvc=target.write_claim,
        service_account=service_account,
        repo_secret=repo_secret,
        resources=resources,
        labels=labels,
        node_selector=node_selector,
        active_deadline_seconds=int(timeout),
        tolerations=tolerations,
        affinity=affinity,
    )
    k.delete_and_wait(api, "Pod", namespace, name)  # a failed attempt's pod
    try:
        res = run_pod_to_completion(api, pod, timeout=timeout, on_log_line=on_log_line)
    finally:
        k.delete_and_wait(api, "Pod", namespace, name)
    if not res.succeeded or not isinstance(res.result, dict):
        raise WriterError(f"writer pod {namespace}/{name} failed (exit {res.exit_code}): {res.message.strip()}\n"
                          + "\n".join(res.log_tail), res.exit_code)  # fmt: skip
    return res.result


def finish_volume(api, namespace: str, run_id: str, target: Target, timeout: float = 120.0) -> dict[str, Any]:
    """Give the written volume its final claim and mark it restored; ``{"pvc", "pv", "replaced"}``.

    A temporary claim is handed over (``volumes.rebind_volume``) to ``target.pvc`` in ``target.volume_mode``,
    replacing an existing claim when ``target.replace``. The ``RESTORED_FROM`` annotation is set last: a
    claim without it is not a complete restore.
    """
    patch = m.restored_patch(target.volume, target.backup_id, run_id)
    if target.write_claim == target.pvc:
        claim = k.merge_patch(api, "PersistentVolumeClaim", namespace, target.pvc, patch)
        return {"pvc": target.pvc, "pv": claim["spec"].get("volumeName"), "replaced": False}
    got = rebind_volume(api, namespace, target.write_claim, target.pvc, target.volume_mode,
                        labels=labels_of(run_id, target.pvc), replace_existing=target.replace,
                        timeout=timeout)  # fmt: skip
    k.merge_patch(api, "PersistentVolumeClaim", namespace, target.pvc, patch)
    return {"pvc": got.claim, "pv": got.volume, "replaced": got.replaced}


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


def discard_run(api, namespace: str, run_id: str, *, everything: bool, keep: Sequence[str] = (),
                timeout: float = 120.0) -> dict[str, list[str]]:  # fmt: skip
    """Delete the run's writer pods; with ``everything`` (a failed run) also its claims and volumes,
    except those labelled with a PVC in ``keep`` (left with policy Retain). Returns kind -> names."""
    selector = f"{m.RUN_LABEL}={run_id}"
    done: dict[str, list[str]] = {}
    for pod in k.list_objects(api, "Pod", namespace, selector):
        k.delete_and_wait(api, "Pod", namespace, pod["metadata"]["name"], timeout)
        done.setdefault("Pod", []).append(pod["metadata"]["name"])
    if not everything:
        return done

    def mine(obj: Mapping[str, Any]) -> bool:
        return (obj["metadata"].get("labels") or {}).get(PVC_LABEL) not in keep

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
