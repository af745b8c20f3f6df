"""kube-scheduler's VolumeBinding plugin over a snapshot of the cluster (pure functions, no API calls).

``prefilter(pod, snap)``: the pod's claims sorted as the volume binder sorts them, or the reason the
pod fits nowhere: a missing claim (``persistentvolumeclaim "x" not found``), a Lost claim, a claim
being deleted, or an unbound claim whose class binds Immediate (``pod has unbound immediate
PersistentVolumeClaims``; a claim naming its volume counts as Immediate until bound). A claim is
bound once it has ``spec.volumeName`` and the ``pv.kubernetes.io/bind-completed`` annotation.

``filter_node(claims, node, snap)``: why the node cannot take the pod's volumes (upstream's reason
strings), with what binding it would need (``NodeVolumes``):

- a bound claim's PV must exist (``node(s) unavailable due to one or more pvc(s) bound to
  non-existent pv(s)``) and its required node affinity must match the node's labels
  (``node(s) had volume node affinity conflict``);
- an unbound WaitForFirstConsumer claim annotated ``volume.kubernetes.io/selected-node`` fits only
  that node; otherwise a free PV (phase Available, no claimRef or a claimRef naming the claim, same
  class, volume mode and access modes, large enough, selector and node affinity matching; the
  smallest) is bound statically, and the rest is provisioned: the class must name a provisioner
  (not ``kubernetes.io/no-provisioner``) and its ``allowedTopologies`` must match the node
  (else ``node(s) didn't find available persistent volumes to bind``), and when the provisioner
  is a CSI driver (a CSIDriver object exists) its node plugin must run on the node: listed in the
  node's CSINode with every topology key among the node's labels. A node without it gets
  ``node(s) did not have enough free storage``, what upstream reports there when the driver
  publishes storage capacity per topology segment (as csi-driver-host-path does). A claim whose
  data source is a snapshot follows the same rule (snapshots are readable from any node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from localcluster.controllers.kube import parse_quantity
from localcluster.controllers.scheduling import label_selector_ok, node_labels, pv_affinity_ok, topology_ok

Obj = dict[str, Any]

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"

REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@dataclass
class Snapshot:
    """What one scheduling cycle reads: nodes, pods (all), claims of the pod's namespace, PVs, classes, CSI."""

    nodes: list[Obj]
    pods: list[Obj]
    pvcs: dict[str, Obj]
    pvs: dict[str, Obj]
    classes: dict[str, Obj]
    csinodes: dict[str, Obj]
    csidrivers: set[str]


@dataclass
class PodClaims:
    bound: list[Obj] = field(default_factory=list)
    delayed: list[Obj] = field(default_factory=list)


@dataclass
class NodeVolumes:
    """What binding the pod's volumes on one node takes: PVs to pre-bind (pv, claim), claims to provision."""

    static: list[tuple[Obj, Obj]] = field(default_factory=list)
    provision: list[Obj] = field(default_factory=list)


def claim_class(pvc: Obj, classes: dict[str, Obj]) -> str:
    """The claim's class; an unset one is the default class (the DefaultStorageClass admission's choice)."""
    md, spec = pvc.get("metadata") or {}, pvc.get("spec") or {}
    if (md.get("annotations") or {}).get(ANN_BETA_CLASS):
        return md["annotations"][ANN_BETA_CLASS]
    if spec.get("storageClassName") is not None:
        return spec["storageClassName"]
    defaults = [
        c for c in classes.values() if (c["metadata"].get("annotations") or {}).get(ANN_DEFAULT_CLASS) == "true"
    ]
    newest = max(defaults, key=lambda c: c["metadata"].get("creationTimestamp", ""), default=None)
    return newest["metadata"]["name"] if newest is not None else ""


def fully_bound(pvc: Obj) -> bool:
    return bool((pvc.get("spec") or {}).get("volumeName")) and ANN_BIND_COMPLETED in (
        (pvc.get("metadata") or {}).get("annotations") or {}
    )


def claim_names(pod: Obj) -> list[str]:
    return [
        v["persistentVolumeClaim"].get("claimName", "")
        for v in (pod.get("spec") or {}).get("volumes") or []
        if v.get("persistentVolumeClaim")
    ]


def prefilter(pod: Obj, snap: Snapshot) -> tuple[PodClaims | None, str | None]:
    """(the pod's claims, None), or (None, why no node can take it)."""
    claims = []
    for name in claim_names(pod):
        pvc = snap.pvcs.get(name)
        if pvc is None:
            return None, f'persistentvolumeclaim "{name}" not found'
        if (pvc.get("status") or {}).get("phase") == "Lost":
            return None, (
                f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume'
                f' "{pvc["spec"].get("volumeName", "")}"'
            )
        if pvc["metadata"].get("deletionTimestamp"):
            return None, f'persistentvolumeclaim "{name}" is being deleted'
        claims.append(pvc)
    out, immediate = PodClaims(), False
    for pvc in claims:
        if fully_bound(pvc):
            out.bound.append(pvc)
            continue
        sc = snap.classes.get(claim_class(pvc, snap.classes))
        delay = sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"
        if delay and not pvc["spec"].get("volumeName"):
            out.delayed.append(pvc)
        else:
            immediate = True
    if immediate:
        return None, UNBOUND_IMMEDIATE
    return out, None


def filter_node(claims: PodClaims, node: Obj, snap: Snapshot) -> tuple[list[str], NodeVolumes]:
    """(reasons the node does not fit, empty when it does; the binding it would take)."""
    labels, name = node_labels(node), node["metadata"]["name"]
    volumes = NodeVolumes()
    node_conflict = pv_missing = False
    for pvc in claims.bound:
        pv = snap.pvs.get(pvc["spec"]["volumeName"])
        if pv is None:
            pv_missing = True
            break
        if not pv_affinity_ok(pv, labels):
            node_conflict = True
            break
    unbound_ok, space_ok = True, True
    to_match, to_provision = [], []
    for pvc in claims.delayed:
        selected = (pvc["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE)
        if selected is not None and selected != name:
            unbound_ok = False
            to_match, to_provision = [], []
            break
        (to_provision if selected is not None else to_match).append(pvc)
    chosen: set[str] = set()
    for pvc in sorted(to_match, key=_requested):
        pv = _matching_volume(pvc, snap, labels, chosen)
        if pv is None:
            unbound_ok = False
            to_provision.append(pvc)
        else:
            chosen.add(pv["metadata"]["name"])
            volumes.static.append((pv, pvc))
    if to_provision:
        unbound_ok, space_ok = True, True
        for pvc in to_provision:
            sc = snap.classes.get(claim_class(pvc, snap.classes))
            provisioner = (sc or {}).get("provisioner") or ""
            if (
                sc is None
                or provisioner in ("", NO_PROVISIONER)
                or not topology_ok(sc.get("allowedTopologies"), labels)
            ):
                unbound_ok = False
                break
            if provisioner in snap.csidrivers and not driver_on_node(provisioner, name, labels, snap):
                space_ok = False
                break
            volumes.provision.append(pvc)
    reasons = []
    if node_conflict:
        reasons.append(REASON_NODE_CONFLICT)
    if not unbound_ok:
        reasons.append(REASON_BIND_CONFLICT)
    if not space_ok:
        reasons.append(REASON_NOT_ENOUGH_SPACE)
    if pv_missing:
        reasons.append(REASON_PV_NOT_EXIST)
    return reasons, volumes


def driver_on_node(driver: str, node: str, labels: dict[str, str], snap: Snapshot) -> bool:
    """The driver's node plugin runs on ``node`` (its CSINode lists it; its topology keys are node labels)."""
    csinode = snap.csinodes.get(node) or {}
    for entry in (csinode.get("spec") or {}).get("drivers") or []:
        if entry.get("name") == driver:
            return all(key in labels for key in entry.get("topologyKeys") or [])
    return False


def _requested(pvc: Obj) -> int:
    try:
        return parse_quantity(
            (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage") or 0
        )
    except ValueError:
        return 0


def bound_to(pv: Obj, pvc: Obj) -> bool:
    ref, md = (pv.get("spec") or {}).get("claimRef") or {}, pvc["metadata"]
    return (ref.get("name"), ref.get("namespace")) == (md["name"], md["namespace"]) and ref.get("uid") in (
        None,
        "",
        md.get("uid"),
    )


def _matching_volume(pvc: Obj, snap: Snapshot, labels: dict[str, str], chosen: set[str]) -> Obj | None:
    """``volume.FindMatchingVolume`` on the scheduler's path (delayed binding, a node given)."""
    spec = pvc.get("spec") or {}
    wanted_class = claim_class(pvc, snap.classes)
    requested, mode = _requested(pvc), spec.get("volumeMode") or "Filesystem"
    best, best_size = None, 0
    for pv in sorted(snap.pvs.values(), key=lambda v: v["metadata"]["name"]):
        pv_spec = pv.get("spec") or {}
        if pv["metadata"]["name"] in chosen or (pv_spec.get("storageClassName") or "") != wanted_class:
            continue
        if pv_spec.get("claimRef") and not bound_to(pv, pvc):
            continue
        try:
            size = parse_quantity((pv_spec.get("capacity") or {}).get("storage") or 0)
        except ValueError:
            continue
        if size < requested or (pv_spec.get("volumeMode") or "Filesystem") != mode:
            continue
        if pv["metadata"].get("deletionTimestamp"):
            continue
        affinity = pv_affinity_ok(pv, labels)
        if bound_to(pv, pvc):
            return pv if affinity else None
        if (pv.get("status") or {}).get("phase") != "Available" or pv_spec.get("claimRef"):
            continue
        if not label_selector_ok(spec.get("selector"), (pv["metadata"].get("labels") or {})) or not affinity:
            continue
        if not set(spec.get("accessModes") or []) <= set(pv_spec.get("accessModes") or []):
            continue
        if best is None or size < best_size:
            best, best_size = pv, size
    return best
