"""Claims and volumes: a source volume's identity (``PvIdentity``, ``source_identity``), the default
StorageClass, waiting for a claim to bind, the last Warning event about some objects (``last_warning``), and
``rebind_volume``, which hands the volume of one claim to a new claim of another volume mode.

Errors are ``apply.KubeError`` / ``apply.ConflictError``; ``wait_claim_bound`` names the last
Warning event about a claim that did not bind.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from movers.kube.manifests import Handover

from movers.kube.apply import ConflictError, KubeError, create, delete_and_wait, find, get, list_objects, merge_patch

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


@dataclass(frozen=True)
class PvIdentity:
    """What a backup records about its source volume, read from the PV bound to the source claim. The field names
    are the manifest's (``movers.repo.manifest.VolumeIdentity``, the backup request's
    ``movers.backup.request.SourceVolume``): ``pv_volume_handle`` is the PV's ``spec.csi.volumeHandle``, the
    volume's identity a CBT delta's base is checked against (``movers.repo.lineage``)."""

    pv_name: str | None = None
    pv_uid: str | None = None  # metadata.uid: a re-created PV of the same name differs
    pv_volume_handle: str | None = None  # spec.csi.volumeHandle
    csi_driver: str | None = None  # spec.csi.driver
    fs_type: str | None = None  # spec.csi.fsType; None for a Block volume or when not set
    node_affinity: dict[str, Any] | None = None  # spec.nodeAffinity.required (a NodeSelector); None: none


def source_identity(pv: Mapping[str, Any]) -> PvIdentity:
    """The ``PvIdentity`` of ``pv`` (a PersistentVolume as read): a field the PV lacks is None, and so is the
    ``fs_type`` of a Block volume."""
    meta, spec = pv.get("metadata") or {}, pv.get("spec") or {}
    csi = spec.get("csi") or {}
    block = spec.get("volumeMode") == "Block"
    return PvIdentity(
        pv_name=meta.get("name"),
        pv_uid=meta.get("uid"),
        pv_volume_handle=csi.get("volumeHandle"),
        csi_driver=csi.get("driver"),
        fs_type=None if block else (csi.get("fsType") or None),
        node_affinity=(spec.get("nodeAffinity") or {}).get("required") or None,
    )


def default_storage_class(api_client) -> str | None:
    """The cluster's default StorageClass (the newest one annotated default, as admission picks), or None."""
    classes = [
        c
        for c in list_objects(api_client, "StorageClass", None)
        if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
    ]
    classes.sort(key=lambda c: c["metadata"].get("creationTimestamp") or "")
    return classes[-1]["metadata"]["name"] if classes else None


def last_warning(api_client, namespace: str, objects: Iterable[tuple[str, str]]) -> str:
    """``": <reason>: <message>"`` of the newest Warning event in ``namespace`` about any of ``objects``
    (kind, name), e.g. the scheduler's FailedScheduling about a pod or the provisioner's ProvisioningFailed
    about its claim; ``""`` when there is none."""
    wanted = set(objects)

    def about(event: Mapping[str, Any]) -> bool:
        involved = event.get("involvedObject") or {}
        return event.get("type") == "Warning" and (involved.get("kind"), involved.get("name")) in wanted

    def when(event: Mapping[str, Any]) -> str:
        stamps = (event.get(key) for key in ("lastTimestamp", "eventTime", "firstTimestamp"))
        return next((s for s in stamps if s), None) or (event.get("metadata") or {}).get("creationTimestamp") or ""

    events = sorted(filter(about, list_objects(api_client, "Event", namespace)), key=when)
    return f": {events[-1].get('reason')}: {events[-1].get('message')}" if events else ""


def wait_claim_bound(api_client, namespace: str, name: str, timeout: float = 120.0, interval: float = 0.2) -> dict:
    """Poll PVC ``name`` until Bound; return it. On timeout a ``KubeError`` (retriable) names the claim's
    phase and the last Warning event about it (e.g. the provisioner's ProvisioningFailed)."""
    deadline = time.monotonic() + timeout
    while True:
        pvc = get(api_client, "PersistentVolumeClaim", namespace, name)
        phase = (pvc.get("status") or {}).get("phase")
        if phase == "Bound" and (pvc.get("spec") or {}).get("volumeName"):
            return pvc
        if time.monotonic() >= deadline:
            raise KubeError(
                f"PersistentVolumeClaim {namespace}/{name} not bound after {timeout:g} s (phase {phase})"
                f"{last_warning(api_client, namespace, [('PersistentVolumeClaim', name)])}"
            )
        time.sleep(interval)


@dataclass(frozen=True)
class Rebound:
    claim: str  # the new claim (Bound)
    volume: str  # its new PV
    volume_handle: str
    replaced: bool  # an existing claim of that name was deleted first


def rebind_volume(
    api_client,
    namespace: str,
    claim: str,
    handover: Handover,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> Rebound:
    """Hand the volume of Bound claim ``claim`` to a new claim ``handover.claim`` (``new_claim``) of
    ``handover.volume_mode`` (same namespace; a Filesystem one of ``handover.fs_type`` unless the PV records one).

    A PV's ``volumeMode`` is immutable and a PV binds one claim for life, so, in this order (each step
    leaves the data on a PV whose policy keeps it):

    1. the PV gets reclaim policy Retain (and ``labels``, so a failed run finds it);
    2. ``handover.replace_existing``: an existing claim ``new_claim`` is deleted (the caller checked that no pod
       uses it; its own volume follows its reclaim policy). Without it an existing claim is a
       ``ConflictError`` before anything changed;
    3. ``claim`` is deleted (its PV turns Released, the storage stays);
    4. a new PV (``manifests.rebound_pv``, name ``<old PV>-<mode>``) pre-bound to ``new_claim``;
    5. ``new_claim`` (``manifests.prebound_pvc``, the PV's class and capacity), waited for until Bound;
    6. the old PV object is deleted (Retain: the storage stays, now under the new PV);
    7. the new PV gets the old PV's original reclaim policy back.

    Any error leaves the objects as they are (all labelled) for the caller's cleanup.
    """
    from movers.kube.manifests import ClaimedVolume, prebound_pvc, rebound_pv, reclaim_policy_patch

    new_claim, volume_mode, replace_existing = handover.claim, handover.volume_mode, handover.replace_existing

    if find(api_client, "PersistentVolumeClaim", namespace, new_claim) is not None and not replace_existing:
        raise ConflictError(f"PersistentVolumeClaim {namespace}/{new_claim} already exists", 409)
    source = get(api_client, "PersistentVolumeClaim", namespace, claim)
    old_name = (source.get("spec") or {}).get("volumeName")
    if not old_name or (source.get("status") or {}).get("phase") != "Bound":
        raise KubeError(f"PersistentVolumeClaim {namespace}/{claim} is not bound to a volume", 409)
    old = get(api_client, "PersistentVolume", None, old_name)
    policy = (old.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Delete"
    merge_patch(
        api_client,
        "PersistentVolume",
        None,
        old_name,
        {**reclaim_policy_patch("Retain"), "metadata": {"labels": dict(labels or {})}},
    )
    replaced = replace_existing and delete_and_wait(api_client, "PersistentVolumeClaim", namespace, new_claim, timeout)
    delete_and_wait(api_client, "PersistentVolumeClaim", namespace, claim, timeout)
    new_pv = rebound_pv(f"{old_name}-{volume_mode.lower()}"[:253], old, namespace, handover, labels=labels)
    create(api_client, new_pv)
    spec = new_pv["spec"]
    create(api_client, prebound_pvc(new_claim, namespace, ClaimedVolume.of(new_pv), labels, annotations))
    wait_claim_bound(api_client, namespace, new_claim, timeout)
    delete_and_wait(api_client, "PersistentVolume", None, old_name, timeout)
    merge_patch(api_client, "PersistentVolume", None, new_pv["metadata"]["name"], reclaim_policy_patch(policy))
    return Rebound(new_claim, new_pv["metadata"]["name"], spec["csi"]["volumeHandle"], bool(replaced))
