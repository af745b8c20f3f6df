"""A restore's end: hand each written volume to the claim the application uses and mark it restored
(``finish_volume``), note a volume restored elsewhere than its source (``placement_note``), and clean up after
a run (``discard_run``; a failed run keeps the volumes whose replaced claim is gone: ``kept_after_failure``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from movers.errors import MoverError, NotFoundError
from movers.kube import apply as k
from movers.kube import manifests as m
from movers.kube import retained
from movers.kube.volumes import rebind_volume
from movers.restore.plan import DEFAULT_FS_TYPE, PVC_LABEL, Target, labels_of


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
            m.Handover(target.pvc, target.volume_mode, target.fs_type or DEFAULT_FS_TYPE, target.replace),
            labels=labels_of(run_id, target.pvc, target.app),
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
    api,
    namespace: str,
    run_id: str,
    *,
    everything: bool,
    keep: Sequence[str] = (),
    timeout: float = 120.0,
    snapshots: bool = False,
) -> dict[str, list[str]]:
    """Delete the run's writer pods and, with ``snapshots`` (a restore in place: ``movers.restore.live``), the
    snapshots of live claims it left; with ``everything`` (a failed run) also its claims and volumes,
    except those labelled with a PVC in ``keep`` (left with policy Retain). Returns kind -> names."""
    selector = f"{m.RUN_LABEL}={run_id}"
    done: dict[str, list[str]] = {}
    for pod in k.list_objects(api, "Pod", namespace, selector):
        k.delete_and_wait(api, "Pod", namespace, pod["metadata"]["name"], timeout)
        done.setdefault("Pod", []).append(pod["metadata"]["name"])
    for snap in k.list_objects(api, "VolumeSnapshot", namespace, selector) if snapshots else ():
        retained.delete(api, namespace, "VolumeSnapshot", snap["metadata"]["name"], timeout=timeout)
        done.setdefault("VolumeSnapshot", []).append(snap["metadata"]["name"])
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
