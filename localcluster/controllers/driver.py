"""A CSI-like driver's control plane: external-provisioner + the PV controller's binding + pv/pvc protection.

``VolumeController(kube, plugin)`` (``plugin``: the driver's ``CsiPlugin``; one controller per driver) watches
PVCs, PVs, Pods, VolumeSnapshots and VolumeSnapshotContents and acts only on its driver's objects: claims whose
StorageClass (the default class when ``storageClassName`` is unset) names the driver as provisioner, claims and
PVs whose PV is the driver's. For those:

- adds ``kubernetes.io/pvc-protection`` (the admission plugin's job);
- WaitForFirstConsumer classes: until the claim has the annotation ``volume.kubernetes.io/selected-node`` (the
  scheduler sets it for a pod that uses the claim) nothing is provisioned and the PV controller's Normal Event
  ``WaitForFirstConsumer`` ("waiting for first consumer to be created before binding") is recorded. Then (and at
  once for Immediate classes) the storage-provisioner annotations and a Normal ``ExternalProvisioning`` Event;
- provisions (Events ``Provisioning`` then ``ProvisioningSucceeded``): a PV ``pvc-<claim uid>`` with ``spec.csi``
  (driver, volumeHandle, ``fsType`` for Filesystem from the class parameter ``csi.storage.k8s.io/fstype`` or the
  deprecated ``fstype``, ext4 when absent; both keys is an error), capacity, accessModes, volumeMode, reclaim
  policy, mountOptions and class, ``claimRef`` (with uid), annotation ``pv.kubernetes.io/provisioned-by``,
  finalizers ``kubernetes.io/pv-protection`` and (policy Delete) ``external-provisioner.volume.kubernetes.io/
  finalizer``, and ``nodeAffinity`` requiring the driver's topology key to have the value the volume was created
  in; then binds both ways (PV phase Bound; claim ``volumeName``, bind-completed/bound-by-controller annotations,
  phase Bound, capacity, accessModes);
- topology (external-provisioner with its default --immediate-topology): the driver's topology keys come from the
  CSINode objects the kubelets publish, their values from the nodes' labels. With a selected node, that node's
  segment (its name for hostpath, its zone for disk). A selected node without a CSINode (e.g. gone) is a Warning
  ``ProvisioningFailed`` ('failed to get selected CSINode <node>: csinode.storage.k8s.io "<node>" not found') and
  the selected-node annotation is removed, so the scheduler picks again (upstream's ProvisioningReschedule); a
  CSINode without the driver (its node plugin does not run there) is "error generating accessibility
  requirements: no topology key found for node <node>", and a node lacking the keys' labels "... topology labels
  from selected node map[...] does not match topology keys from CSINode [...]", both retried with the node kept
  (upstream's ProvisioningNoChange). Immediate classes: one of the segments of the nodes that run the driver,
  sorted and rotated by upstream's FNV-1 hash of the claim's name (StatefulSet-style names
  ``<claim>-<set>-<n>`` spread by ``n``), so the choice is deterministic; no CSINode with the driver is "error
  generating accessibility requirements: no available topology found", retried. Restores from snapshots are
  placed the same way (snapshots are readable everywhere);
- a ``VolumeSnapshot`` data source (``dataSourceRef`` or ``dataSource``) must be bound to a content of this driver,
  ready and with a handle; the volume is a copy of that snapshot. Refused, the claim stays Pending with a Warning
  ``ProvisioningFailed`` Event (upstream's messages, "error getting handle for DataSource Type VolumeSnapshot by
  Name <vs>: ...") and is retried with backoff and whenever the snapshot or its content changes: a content of
  another driver, a requested size below the snapshot's restoreSize (skipped when the snapshot has none; the
  driver then refuses a snapshot larger than the request as InvalidArgument, "Volume provisioning failed with
  infeasible error. Retries will be delayed. rpc error: ..."), and (KEP-3141) a volumeMode other than the
  content's ``sourceVolumeMode`` unless the content is annotated
  ``snapshot.storage.kubernetes.io/allow-volume-mode-change: "true"``;
- on claim deletion: ``pvc-protection`` is removed once no running pod uses the claim; when the claim is gone
  the PV turns Released; reclaim policy Delete removes the backing file and the PV, Retain keeps both (a
  Released PV deleted by the user loses its ``pv-protection`` finalizer; its file stays, as storage would);
- static, pre-bound volumes (the PV controller's part): a claim with ``spec.volumeName`` naming a PV of this
  driver binds to it when the PV is free or its ``claimRef`` names the claim (the claim's uid is filled in),
  the volume modes match, the classes match (an unset class is the default class, as the admission plugin
  would set it) and the PV is large enough; otherwise the claim stays Pending with a Warning ``FailedBinding``
  / ``VolumeMismatch`` event. A PV may reuse the volume handle of an older, Released one (that is how a volume
  is handed to a new claim, e.g. with another volumeMode);
- every PV of this driver gets ``kubernetes.io/pv-protection`` (the admission plugin's job), removed on
  deletion unless a claim is bound to it; ``external-provisioner.volume.kubernetes.io/finalizer`` is removed
  from a PV whose reclaim policy is not Delete (KEP-2644: the provisioner only guards volumes it would delete).

Events of the PV controller's part come from ``persistentvolume-controller``, the provisioner's from
``<driver>_csi-provisioner``. Simplified: no allowedTopologies, no cloning from a PVC (``ProvisioningFailed``), no
expansion, no matching of unbound claims to free PVs without ``volumeName``; where a pod may run is the
scheduler's business (PV nodeAffinity), this controller never looks at pods' nodes.
"""

from __future__ import annotations

import logging
import time

from localcluster.controllers import names as n
from localcluster.controllers.kube import (
    CSI_NODE,
    NODE,
    POD,
    PV,
    PVC,
    STORAGE_CLASS,
    VS,
    VSC,
    Kube,
    Obj,
    format_quantity,
    parse_quantity,
    ref_of,
)
from localcluster.controllers.plugin import CsiError, CsiPlugin
from localcluster.controllers.runtime import Controller, Key, Pending, WatchSpec
from localcluster.drivers import ANN_FSTYPE

log = logging.getLogger(__name__)


PV_CONTROLLER = "persistentvolume-controller"


class Refused(Pending):
    """Provisioning is refused for a reason the user must fix (recorded as a ProvisioningFailed event), retried."""


class Reschedule(Exception):  # noqa: N818 (upstream's ProvisioningReschedule state)
    """Provisioning on the selected node is impossible: the claim goes back to the scheduler."""


class VolumeController(Controller):
    name = "csi-volumes"

    def __init__(self, kube: Kube, plugin: CsiPlugin) -> None:
        super().__init__(kube)
        self.plugin = plugin
        self.driver = plugin.driver
        self.name = f"csi-volumes-{self.driver}"
        self.identity = f"{int(time.time() * 1000)}-{self.driver}"

    def watches(self) -> list[WatchSpec]:
        def pvc_keys(type_, obj):
            md = obj["metadata"]
            yield ("pvc", md["namespace"], md["name"])
            if type_ == "DELETED" and (obj.get("spec") or {}).get("volumeName"):
                yield ("pv", "", obj["spec"]["volumeName"])

        def pv_keys(_type, obj):
            yield ("pv", "", obj["metadata"]["name"])
            ref = (obj.get("spec") or {}).get("claimRef") or {}
            if ref.get("name"):
                yield ("pvc", ref.get("namespace", ""), ref["name"])

        def pod_keys(_type, obj):
            for vol in (obj.get("spec") or {}).get("volumes") or []:
                claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
                if claim:
                    yield ("pvc", obj["metadata"]["namespace"], claim)

        def vs_keys(_type, obj):
            yield ("restores-of", obj["metadata"]["namespace"], obj["metadata"]["name"])

        def vsc_keys(_type, obj):
            ref = (obj.get("spec") or {}).get("volumeSnapshotRef") or {}
            if ref.get("name") and ref.get("namespace"):
                yield ("restores-of", ref["namespace"], ref["name"])

        return [
            WatchSpec(PVC, pvc_keys),
            WatchSpec(PV, pv_keys),
            WatchSpec(POD, pod_keys),
            WatchSpec(VS, vs_keys),
            WatchSpec(VSC, vsc_keys),
        ]

    def reconcile(self, key: Key) -> float | None:
        kind, namespace, name = key
        if kind == "pvc":
            return self._claim(namespace, name)
        if kind == "pv":
            return self._volume(name)
        if kind == "restores-of":  # claims waiting for this snapshot
            for pvc in self.kube.list(PVC, namespace)[0]:
                source = _data_source(pvc)
                if source and source.get("name") == name and (pvc.get("status") or {}).get("phase") == "Pending":
                    self.enqueue(("pvc", namespace, pvc["metadata"]["name"]))
        return None

    # ---- claims ----------------------------------------------------------------------------------------

    def _mine(self, pvc: Obj) -> bool:
        """Whether this driver's controllers own the claim: its PV is this driver's, or (no PV) its class is."""
        volume = (pvc.get("spec") or {}).get("volumeName")
        pv = self.kube.get(PV, volume) if volume else None
        if pv is not None:
            return ((pv.get("spec") or {}).get("csi") or {}).get("driver") == self.driver
        sc = self._storage_class(pvc)
        return sc is not None and sc.get("provisioner") == self.driver

    def _claim(self, namespace: str, name: str) -> None:
        pvc = self.kube.get(PVC, name, namespace)
        if pvc is None:
            return
        md = pvc["metadata"]
        finalizers = list(md.get("finalizers") or [])
        if md.get("deletionTimestamp"):
            if n.FIN_PVC_PROTECTION in finalizers and self._mine(pvc) and not self._in_use(pvc):
                self.kube.set_finalizers(PVC, pvc, [f for f in finalizers if f != n.FIN_PVC_PROTECTION])
            return
        if (pvc.get("spec") or {}).get("volumeName"):
            return self._claim_of_volume(pvc, finalizers)
        sc = self._storage_class(pvc)
        if sc is None or sc.get("provisioner") != self.driver:
            return
        if n.FIN_PVC_PROTECTION not in finalizers:
            pvc = self.kube.set_finalizers(PVC, pvc, [*finalizers, n.FIN_PVC_PROTECTION])
        if (pvc.get("status") or {}).get("phase") == "Bound":
            return
        anns = pvc["metadata"].get("annotations") or {}
        selected = anns.get(n.ANN_SELECTED_NODE) or ""
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not selected:
            waiting = "waiting for first consumer to be created before binding"
            self.kube.event(PVC, pvc, "Normal", "WaitForFirstConsumer", waiting, component=PV_CONTROLLER)
            return
        pv = self.kube.get(PV, n.pv_name(pvc["metadata"]["uid"]))
        if pv is None:
            if anns.get(n.ANN_STORAGE_PROVISIONER) != self.driver:
                provisioner = {n.ANN_STORAGE_PROVISIONER: self.driver, n.ANN_BETA_STORAGE_PROVISIONER: self.driver}
                pvc = self.kube.patch(PVC, name, {"metadata": {"annotations": provisioner}}, namespace)
            self.kube.event(
                PVC,
                pvc,
                "Normal",
                "ExternalProvisioning",
                f"Waiting for a volume to be created either by the external provisioner '{self.driver}'"
                " or manually by the system administrator. If volume creation is delayed, please verify"
                " that the provisioner is running and correctly registered.",
                component=PV_CONTROLLER,
            )
            pv = self._provision_claim(pvc, sc, selected)
            if pv is None:
                return
        self._bind(pvc, pv)

    def _provision_claim(self, pvc: Obj, sc: Obj, selected: str) -> Obj | None:
        """The new PV, or None when the claim went back to the scheduler (its selected node was removed)."""
        md = pvc["metadata"]
        message = f'External provisioner is provisioning volume for claim "{md["namespace"]}/{md["name"]}"'
        self.kube.event(PVC, pvc, "Normal", "Provisioning", message)
        try:
            return self._provision(pvc, sc, selected)
        except Reschedule as exc:
            self.kube.event(PVC, pvc, "Warning", "ProvisioningFailed", str(exc))
            # give the claim back to the scheduler: remove the selected node (upstream's rescheduleProvisioning)
            self.kube.patch(
                PVC, md["name"], {"metadata": {"annotations": {n.ANN_SELECTED_NODE: None}}}, md["namespace"]
            )
            return None
        except Refused as exc:
            self.kube.event(PVC, pvc, "Warning", "ProvisioningFailed", str(exc))
            raise

    def _claim_of_volume(self, pvc: Obj, finalizers: list[str]) -> None:
        """A claim naming its volume (``spec.volumeName``): bind it to that PV if the PV is this driver's."""
        volume = pvc["spec"]["volumeName"]
        pv = self.kube.get(PV, volume)
        if pv is None:
            raise Pending(f'volume "{volume}" of claim {pvc["metadata"]["name"]} not found')
        if ((pv.get("spec") or {}).get("csi") or {}).get("driver") != self.driver:
            return
        if n.FIN_PVC_PROTECTION not in finalizers:
            pvc = self.kube.set_finalizers(PVC, pvc, [*finalizers, n.FIN_PVC_PROTECTION])
        if (pvc.get("status") or {}).get("phase") == "Bound":
            return
        try:
            pv = self._claim_static(pvc, pv)
        except Refused as exc:
            reason = "VolumeMismatch" if "volumeMode" in str(exc) else "FailedBinding"
            self.kube.event(PVC, pvc, "Warning", reason, str(exc), component=PV_CONTROLLER)
            raise
        self._bind(pvc, pv)

    def _claim_static(self, pvc: Obj, pv: Obj) -> Obj:
        """Check that ``pv`` may be bound to ``pvc`` (upstream's messages) and point its claimRef at the claim."""
        md, spec, pv_spec, name = pvc["metadata"], pvc["spec"], pv["spec"], pv["metadata"]["name"]
        ref = pv_spec.get("claimRef") or {}
        if ref and (
            (ref.get("name"), ref.get("namespace")) != (md["name"], md["namespace"])
            or ref.get("uid") not in (None, "", md["uid"])
        ):
            raise Refused(f'volume "{name}" already bound to a different claim.')
        if (spec.get("volumeMode") or "Filesystem") != (pv_spec.get("volumeMode") or "Filesystem"):
            raise Refused(
                "Cannot bind PersistentVolume to requested PersistentVolumeClaim due to incompatible volumeMode."
            )
        wanted = spec.get("storageClassName")
        if wanted is None:
            default = self._storage_class(pvc)
            wanted = default["metadata"]["name"] if default is not None else ""
        if wanted != (pv_spec.get("storageClassName") or ""):
            raise Refused(f'Cannot bind to requested volume "{name}": storageClassName does not match')
        try:
            size = parse_quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage") or 0)
            capacity = parse_quantity((pv_spec.get("capacity") or {}).get("storage") or 0)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        if capacity < size:
            raise Refused(f'Cannot bind to requested volume "{name}": requested PV is too small')
        if ref.get("uid") != md["uid"]:
            pv = self.kube.patch(PV, name, {"spec": {"claimRef": ref_of(PVC, pvc)}})
        return pv

    def _storage_class(self, pvc: Obj) -> Obj | None:
        name = (pvc.get("spec") or {}).get("storageClassName")
        if name == "":
            return None  # explicitly no class: static binding only
        if name is not None:
            return self.kube.get(STORAGE_CLASS, name)
        defaults = [
            sc
            for sc in self.kube.list(STORAGE_CLASS)[0]
            if (sc["metadata"].get("annotations") or {}).get(n.ANN_DEFAULT_STORAGE_CLASS) == "true"
        ]
        return max(defaults, key=lambda sc: sc["metadata"].get("creationTimestamp", ""), default=None)

    def _in_use(self, pvc: Obj) -> bool:
        md = pvc["metadata"]
        for pod in self.kube.list(POD, md["namespace"])[0]:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for vol in (pod.get("spec") or {}).get("volumes") or []:
                if (vol.get("persistentVolumeClaim") or {}).get("claimName") == md["name"]:
                    return True
        return False

    def _provision(self, pvc: Obj, sc: Obj, selected: str) -> Obj:
        spec, md = pvc["spec"], pvc["metadata"]
        pv_name = n.pv_name(md["uid"])
        mode = spec.get("volumeMode") or "Filesystem"
        fstype = _fstype(sc)
        try:
            size = parse_quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage"))
        except ValueError as exc:
            raise Refused(str(exc)) from None
        snapshot = self._snapshot_source(pvc, size, mode, sc["metadata"]["name"])
        topology = self._topology(pvc, selected)
        try:
            handle, capacity = self.plugin.create_volume(pv_name, size, mode, snapshot)
        except CsiError as exc:
            if exc.code == "InvalidArgument":
                infeasible = "Volume provisioning failed with infeasible error. Retries will be delayed."
                raise Refused(f"{infeasible} {exc}") from None
            raise Refused(str(exc)) from None
        policy = sc.get("reclaimPolicy") or "Delete"
        csi = {
            "driver": self.driver,
            "volumeHandle": handle,
            "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": self.identity},
        }
        if mode == "Filesystem":
            csi["fsType"] = fstype
        body = {
            "metadata": {
                "name": pv_name,
                "annotations": {
                    n.ANN_PROVISIONED_BY: self.driver,
                    "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                    "volume.kubernetes.io/provisioner-deletion-secret-namespace": "",
                },
                "finalizers": [n.FIN_PV_PROTECTION] + ([n.FIN_PROVISIONER] if policy == "Delete" else []),
            },
            "spec": {
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "capacity": {"storage": format_quantity(capacity)},
                "csi": csi,
                "persistentVolumeReclaimPolicy": policy,
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": mode,
                "claimRef": ref_of(PVC, pvc),
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": key, "operator": "In", "values": [value]} for key, value in topology
                                ]
                            }
                        ]
                    }
                },
            },
        }
        if sc.get("mountOptions"):
            body["spec"]["mountOptions"] = sc["mountOptions"]
        try:
            pv = self.kube.create(PV, body)
        except Exception:
            if self.kube.get(PV, pv_name) is None:
                self.plugin.delete_volume(handle)
            raise
        self.kube.event(PVC, pvc, "Normal", "ProvisioningSucceeded", f"Successfully provisioned volume {pv_name}")
        return pv

    def _topology(self, pvc: Obj, selected: str) -> tuple[tuple[str, str], ...]:
        """The topology segment (sorted (key, value) pairs) the volume is created in: external-provisioner's
        accessibility requirements (topology keys from the CSINode objects the kubelets publish, values from the
        nodes' labels) with a driver that creates the volume in the first preferred segment: the selected node's
        (WaitForFirstConsumer), else one of the segments of the nodes that run the driver, sorted and rotated by a
        hash of the claim's name (upstream's StatefulSet spreading)."""
        prefix = "error generating accessibility requirements: "
        if selected:
            csinode = self.kube.get(CSI_NODE, selected)
            if csinode is None:  # NotFound: the claim goes back to the scheduler
                raise Reschedule(
                    f'failed to get selected CSINode {selected}: csinode.storage.k8s.io "{selected}" not found'
                )
            keys = self._topology_keys(csinode)
            if not keys:  # the driver's node plugin does not run there: retried, the node stays selected
                raise Refused(f"{prefix}no topology key found for node {selected}")
            node = self.kube.get(NODE, selected)
            labels = (node or {}).get("metadata", {}).get("labels") or {}
            if any(k not in labels for k in keys):
                raise Refused(
                    f"{prefix}topology labels from selected node {_go_map(labels)} does not match topology"
                    f" keys from CSINode [{' '.join(keys)}]"
                )
            return tuple(sorted((k, labels[k]) for k in keys))
        keys = next(
            (
                k
                for c in sorted(self.kube.list(CSI_NODE)[0], key=lambda c: c["metadata"]["name"])
                if (k := self._topology_keys(c))
            ),
            [],
        )
        if not keys:  # the driver has not registered on any node
            raise Refused(f"{prefix}no available topology found")
        terms = sorted(
            {
                tuple(sorted((k, labels[k]) for k in keys))
                for node in self.kube.list(NODE)[0]
                if all(k in (labels := node["metadata"].get("labels") or {}) for k in keys)
            }
        )
        if not terms:
            raise Refused(f"{prefix}topologyKeys [{' '.join(keys)}] were not found on any nodes")
        digest, index = _name_hash_and_index(pvc["metadata"]["name"])
        return terms[((digest + index) & 0xFFFFFFFF) % len(terms)]

    def _topology_keys(self, csinode: Obj) -> list[str]:
        drivers = (csinode.get("spec") or {}).get("drivers") or []
        return next((d.get("topologyKeys") or [] for d in drivers if d.get("name") == self.driver), [])

    def _snapshot_source(self, pvc: Obj, size: int, mode: str, sc_name: str) -> str | None:
        """The snapshot handle to restore from, or None; ``Refused`` when it cannot be used (yet)."""
        source = _data_source(pvc)
        if source is None:
            return None
        try:
            return self._snapshot_handle(pvc, source, size, mode, sc_name)
        except Refused as exc:
            raise Refused(
                f"error getting handle for DataSource Type VolumeSnapshot by Name {source.get('name')}: {exc}"
            ) from None

    def _snapshot_handle(self, pvc: Obj, source: Obj, size: int, mode: str, sc_name: str) -> str:
        md = pvc["metadata"]
        kind, group = source.get("kind"), source.get("apiGroup") or ""
        if (kind, group) != ("VolumeSnapshot", n.SNAPSHOT_GROUP):
            raise Refused(f"data source {group}/{kind} {source.get('name')} is not supported by {self.driver}")
        if source.get("namespace") not in (None, md["namespace"]):
            raise Refused("cross-namespace data sources are not supported")
        snap = source["name"]
        vs = self.kube.get(VS, snap, md["namespace"])
        if vs is None:
            raise Refused(
                f"error getting snapshot {snap} from api server: volumesnapshots.snapshot.storage.k8s.io"
                f' "{snap}" not found'
            )
        if vs["metadata"].get("deletionTimestamp") and n.FIN_VS_AS_SOURCE not in (
            vs["metadata"].get("finalizers") or []
        ):
            raise Refused(f"snapshot {snap} is being deleted")
        status = vs.get("status") or {}
        content_name = status.get("boundVolumeSnapshotContentName")
        if not content_name:
            raise Refused(f"snapshot {snap} not bound")
        vsc = self.kube.get(VSC, content_name)
        if vsc is None:
            raise Refused(f"error getting snapshotcontent {content_name} for snapshot {snap}")
        ref = vsc["spec"].get("volumeSnapshotRef") or {}
        if (ref.get("name"), ref.get("namespace"), ref.get("uid")) != (snap, md["namespace"], vs["metadata"]["uid"]):
            raise Refused(f"snapshotcontent {content_name} for snapshot {snap} is bound to a different snapshot")
        if vsc["spec"].get("driver") != self.driver:
            raise Refused(
                f"snapshotcontent {content_name} for snapshot {snap} is not handled by CSI driver of"
                f" StorageClass {sc_name}"
            )
        if status.get("readyToUse") is not True:
            raise Refused(f"snapshot {snap} is not Ready")
        handle = (vsc.get("status") or {}).get("snapshotHandle")
        if not handle:
            raise Refused(f"snapshot handle {snap} is not available")
        source_mode = vsc["spec"].get("sourceVolumeMode")
        allowed = (vsc["metadata"].get("annotations") or {}).get(n.ANN_ALLOW_MODE_CHANGE) == "true"
        if source_mode and source_mode != mode and not allowed:
            raise Refused(
                f"requested volume {md['namespace']}/{md['name']} modifies the mode of the source volume"
                f" but does not have permission to do so. {n.ANN_ALLOW_MODE_CHANGE} annotation is not"
                f" present on snapshotcontent {content_name}"
            )
        restore = parse_quantity(status["restoreSize"]) if status.get("restoreSize") is not None else None
        if restore is not None and size < restore:
            raise Refused(
                f"requested volume size {size} is less than the size {restore} for the source snapshot {snap}"
            )
        if self.plugin.snapshot_size(handle) is None:
            raise Refused(f"snapshot {snap} (handle {handle}) does not exist in the storage")
        return handle

    def _bind(self, pvc: Obj, pv: Obj) -> None:
        md = pvc["metadata"]
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if ref.get("uid") != md["uid"]:
            raise Pending(f"PV {pv['metadata']['name']} is bound to another claim")
        if (pv.get("status") or {}).get("phase") != "Bound":
            self.kube.patch(PV, pv["metadata"]["name"], {"status": {"phase": "Bound"}}, status=True)
        name, namespace = md["name"], md["namespace"]
        if (pvc.get("spec") or {}).get("volumeName") != pv["metadata"]["name"] or (md.get("annotations") or {}).get(
            n.ANN_BIND_COMPLETED
        ) != "yes":
            self.kube.patch(
                PVC,
                name,
                {
                    "metadata": {"annotations": {n.ANN_BIND_COMPLETED: "yes", n.ANN_BOUND_BY_CONTROLLER: "yes"}},
                    "spec": {"volumeName": pv["metadata"]["name"]},
                },
                namespace,
            )
        self.kube.patch(
            PVC,
            name,
            {
                "status": {
                    "phase": "Bound",
                    "accessModes": pv["spec"].get("accessModes"),
                    "capacity": pv["spec"]["capacity"],
                }
            },
            namespace,
            status=True,
        )

    # ---- volumes -----------------------------------------------------------------------------------------

    def _volume(self, name: str) -> None:
        pv = self.kube.get(PV, name)
        if pv is None or ((pv.get("spec") or {}).get("csi") or {}).get("driver") != self.driver:
            return
        pv = self._pv_finalizers(pv)
        spec, md = pv["spec"], pv["metadata"]
        ref = spec.get("claimRef") or {}
        claim = self.kube.get(PVC, ref["name"], ref.get("namespace")) if ref.get("name") else None
        if claim is not None and claim["metadata"]["uid"] == ref.get("uid"):
            if (claim.get("spec") or {}).get("volumeName") == name and (pv.get("status") or {}).get("phase") != "Bound":
                self.kube.patch(PV, name, {"status": {"phase": "Bound"}}, status=True)
            return  # bound (or being bound by the claim's reconcile); protected while bound
        finalizers = list(md.get("finalizers") or [])
        if not ref.get("uid"):  # never bound (a static PV, free or pre-bound): nothing protects it
            if md.get("deletionTimestamp") and n.FIN_PV_PROTECTION in finalizers:
                self.kube.set_finalizers(PV, pv, [f for f in finalizers if f != n.FIN_PV_PROTECTION])
            elif not md.get("deletionTimestamp") and (pv.get("status") or {}).get("phase") in (None, "", "Pending"):
                self.kube.patch(PV, name, {"status": {"phase": "Available"}}, status=True)
            return
        phase = (pv.get("status") or {}).get("phase")
        if phase not in ("Released", "Failed"):
            pv = self.kube.patch(PV, name, {"status": {"phase": "Released"}}, status=True)
        if spec.get("persistentVolumeReclaimPolicy") == "Delete":
            self.plugin.delete_volume(spec["csi"]["volumeHandle"])
            keep = [f for f in finalizers if f not in (n.FIN_PROVISIONER, n.FIN_PV_PROTECTION)]
            if keep != finalizers:
                pv = self.kube.set_finalizers(PV, pv, keep)
            self.kube.delete(PV, name)
        elif md.get("deletionTimestamp") and n.FIN_PV_PROTECTION in finalizers:
            self.kube.set_finalizers(PV, pv, [f for f in finalizers if f != n.FIN_PV_PROTECTION])

    def _pv_finalizers(self, pv: Obj) -> Obj:
        """pv-protection on every live PV of the driver; the provisioner's finalizer only under policy Delete."""
        md = pv["metadata"]
        finalizers = list(md.get("finalizers") or [])
        wanted = list(finalizers)
        if not md.get("deletionTimestamp") and n.FIN_PV_PROTECTION not in wanted:
            wanted.append(n.FIN_PV_PROTECTION)
        if (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") != "Delete" and n.FIN_PROVISIONER in wanted:
            wanted.remove(n.FIN_PROVISIONER)
        return self.kube.set_finalizers(PV, pv, wanted) if wanted != finalizers else pv


def _fstype(sc: Obj) -> str:
    """The class's fsType (``csi.storage.k8s.io/fstype``, or the deprecated ``fstype``), ext4 when absent
    (external-provisioner's default for Filesystem volumes)."""
    found = [v for k, v in (sc.get("parameters") or {}).items() if k.lower() == "fstype" or k == ANN_FSTYPE]
    if len(found) > 1:
        raise Refused(f'fstype specified in parameters with both "fstype" and "{ANN_FSTYPE}" keys')
    return found[0] if found and found[0] else "ext4"


def _go_map(labels: dict[str, str]) -> str:
    """Go's ``%v`` of a map[string]string (keys sorted)."""
    return "map[" + " ".join(f"{k}:{v}" for k, v in sorted(labels.items())) + "]"


def _name_hash_and_index(name: str) -> tuple[int, int]:
    """external-provisioner's getPVCNameHashAndIndexOffset: FNV-1 (32 bit) of the claim's name, or of its
    StatefulSet part and the replica index for names ending in ``-<n>``."""
    base, index = name, 0
    head, dash, tail = name.rpartition("-")
    if dash and tail.isascii() and tail.isdigit() and int(tail) < 1 << 32:
        index, base = int(tail), head.rpartition("-")[2]
    digest = 2166136261
    for byte in base.encode():
        digest = ((digest * 16777619) & 0xFFFFFFFF) ^ byte
    return digest, index


def _data_source(pvc: Obj) -> Obj | None:
    spec = pvc.get("spec") or {}
    return spec.get("dataSourceRef") or spec.get("dataSource") or None
