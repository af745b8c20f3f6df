"""The group snapshot controller (external-snapshotter's common controller, group part, one per cluster) and the
csi-snapshotter's group part (``GroupSnapshotSidecar``, one per driver with snapshots).

Both speak the groupsnapshot.storage.k8s.io version they are given (the cluster's preferred one: v1, v1beta2 or
v1beta1). They run only while the group snapshot feature runs (``LocalControllers(group_snapshots=True)``): with
``"unprocessed"`` the CRDs are served and nothing processes VolumeGroupSnapshots (they get no status at all), as
with the CSIVolumeGroupSnapshot feature gate off.

``GroupSnapshotController(kube, version=...)`` watches VolumeGroupSnapshots, VolumeGroupSnapshotContents and PVCs.
Like upstream:

- the class first (``checkAndUpdateGroupSnapshotClass``): a VGS with ``spec.source.selector`` naming no class gets
  the default VolumeGroupSnapshotClass of the selected PVs' driver written into ``spec.volumeGroupSnapshotClassName``;
  failures (nothing selected, a claim not bound, no default class for the driver -- e.g. a driver without group
  snapshots -- or several) set ``status.error`` only, with a Warning Event ``SetDefaultGroupSnapshotClassFailed``
  "Failed to set default group snapshot class with error cannot find default group snapshot class" (or the
  selection's message); a named class that does not exist: ``GetGroupSnapshotClassFailed``. Retried, also whenever
  a PVC of the namespace changes;
- then one VolumeGroupSnapshotContent ``groupsnapcontent-<vgs uid>`` (``source.volumeHandles`` of the selected,
  bound PVCs' PVs, ``driver``, ``deletionPolicy`` and class from the class, ``volumeGroupSnapshotRef`` with uid),
  finalizer ``volumegroupsnapshot-bound-protection`` (also for Retain), Event ``CreatingGroupSnapshot`` and
  ``status.boundVolumeGroupSnapshotContentName``; content creation failures go to ``status.error`` (readyToUse
  false) with a Warning Event ``GroupSnapshotContentCreationFailed``;
- once the sidecar has cut the group, the members, named and linked as upstream: VolumeSnapshotContent
  ``snapcontent-<h>`` and VolumeSnapshot ``snapshot-<h>``, ``h = sha256hex(vgs.uid + volumeHandle)``, in the VGS
  namespace; the VS has an ownerReference (kind VolumeGroupSnapshot, name, uid, the controller's apiVersion),
  finalizer ``volumesnapshot-in-group-protection``, ``spec.source.persistentVolumeClaimName`` (from the PV's
  claimRef, "" without one), ``status.boundVolumeSnapshotContentName``; the content has annotation
  ``groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle``, ``source.volumeHandle``, ``sourceVolumeMode``, the
  group's driver and deletionPolicy, ``volumeSnapshotRef`` (with uid), status ``snapshotHandle``,
  ``volumeGroupSnapshotHandle`` and, from the group's info list (v1beta2, v1), ``creationTime``, ``readyToUse`` and
  ``restoreSize`` when listed (v1beta1 lists handles only: the driver's csi-snapshotter fills them in). No class on
  members. The snapshot controller then fills the member VS status (``volumeGroupSnapshotName`` ...);
- the VGS status follows its content: ``boundVolumeGroupSnapshotContentName``, ``creationTime``, ``readyToUse``,
  ``error`` (the content's, e.g. the driver's refusal), and no member list;
- a bound content (its ref has a uid) not being deleted gets ``volumegroupsnapshotcontent-bound-protection``,
  whatever its policy (upstream's syncGroupSnapshotContent);
- deleting the VGS: waits while a Pending PVC restores from a member, marks the content
  ``volumegroupsnapshot-being-deleted``, deletes it when its policy is Delete (the sidecar removes every member
  snapshot file), deletes the member VolumeSnapshots (each waits until the VGS is gone; their contents follow their
  own policy, copied from the group's when they were made: a member content deleted with policy Delete does not
  remove its snapshot file, the group content's deletion does), and drops the VGS finalizer once the content is
  gone (at once for Retain, which keeps the group content, the member contents and every snapshot file). Nothing
  deletes a content whose group is gone, also when its policy is patched to Delete afterwards.

``GroupSnapshotSidecar(kube, plugin, version=..., ready_delay=0.2)`` (contents of the plugin's driver): takes every
member snapshot under the plugin's one lock at one instant (``CsiPlugin.create_group_snapshot``) and writes the
content's ``volumeGroupSnapshotHandle``, ``creationTime``, ``readyToUse`` (false, then true after ``ready_delay``)
and ``volumeSnapshotInfoList`` (v1beta2, v1: handles, creationTime, readyToUse, restoreSize when the driver reports
sizes) or ``volumeSnapshotHandlePairList`` (v1beta1: handles only). A deleted content waits while it has no
``volumegroupsnapshot-being-deleted`` annotation; then with policy Delete every member snapshot file is removed and
the status's handle, readyToUse, creationTime and error cleared; with either policy the finalizer goes. As
upstream's csi-snapshotter, it runs for a driver without the GroupController capability too (it only logs a
warning): the driver answers Unimplemented and the content gets ``status.readyToUse: false`` and ``status.error``
"Failed to create group snapshot: failed to take group snapshot of the volumes [<handles>]: "rpc error: code =
Unimplemented desc = unknown service csi.v1.GroupController"" with a Warning Event ``GroupSnapshotCreationFailed``
on the content (retried; status and Event written when the message changes); the VGS copies the error and stays not
ready.

``stale_deletion_policy=True`` (a test's switch): as the snapshot controller's, a group's deletion decides by the
policy its content had when first seen.

Simplified: no pre-provisioned group snapshots (``volumeGroupSnapshotContentName`` gets an error status), no
secrets.
"""

from __future__ import annotations

import logging
import time

from localcluster.controllers import names as n
from localcluster.controllers.kube import PV, PVC, VGS, VGS_CLASS, VGSC, VS, VSC, Kube, Obj, ref_of, rfc3339, rfc3339_ns
from localcluster.controllers.plugin import CsiPlugin
from localcluster.controllers.runtime import Controller, Key, Pending, WatchSpec
from localcluster.controllers.snapshots import default_class, go_quote, restoring_from

log = logging.getLogger(__name__)


class GroupSnapshotController(Controller):
    name = "group-snapshot-controller"

    def __init__(self, kube: Kube, *, version: str = "v1", stale_deletion_policy: bool = False) -> None:
        super().__init__(kube)
        self.version = version
        self.stale_deletion_policy = stale_deletion_policy  # as the snapshot controller's
        self.policy_seen: dict[str, str] = {}
        self.vgs, self.vgsc, self.vgs_class = VGS.at(version), VGSC.at(version), VGS_CLASS.at(version)
        self.list_field = _list_field(version)

    def watches(self) -> list[WatchSpec]:
        def vgs_keys(_type, obj):
            yield ("vgs", obj["metadata"]["namespace"], obj["metadata"]["name"])

        def vgsc_keys(_type, obj):
            yield ("vgsc", "", obj["metadata"]["name"])
            ref = (obj.get("spec") or {}).get("volumeGroupSnapshotRef") or {}
            if ref.get("name") and ref.get("namespace"):
                yield ("vgs", ref["namespace"], ref["name"])

        def pvc_keys(_type, obj):
            yield ("pvc", obj["metadata"]["namespace"], obj["metadata"]["name"])

        return [WatchSpec(self.vgs, vgs_keys), WatchSpec(self.vgsc, vgsc_keys), WatchSpec(PVC, pvc_keys)]

    def reconcile(self, key: Key) -> float | None:
        kind, namespace, name = key
        if kind == "vgs":
            return self._group(namespace, name)
        if kind == "vgsc":
            return self._content(name)
        if kind == "pvc":  # unbound groups may select it now; deleting groups may wait for restores from it
            for vgs in self.kube.list(self.vgs, namespace)[0]:
                if vgs["metadata"].get("deletionTimestamp") or not (vgs.get("status") or {}).get(
                    "boundVolumeGroupSnapshotContentName"
                ):
                    self.enqueue(("vgs", namespace, vgs["metadata"]["name"]))
        return None

    # ---- VolumeGroupSnapshotContent -------------------------------------------------------------------

    def _content(self, name: str) -> None:
        """Upstream's syncGroupSnapshotContent: a bound content (its ref has a uid) that is not being deleted gets
        ``volumegroupsnapshotcontent-bound-protection``, whatever its deletionPolicy."""
        vgsc = self.kube.get(self.vgsc, name)
        if vgsc is None or vgsc["metadata"].get("deletionTimestamp"):
            return None
        self.policy_seen.setdefault(name, vgsc["spec"].get("deletionPolicy"))
        finalizers = list(vgsc["metadata"].get("finalizers") or [])
        if (vgsc["spec"].get("volumeGroupSnapshotRef") or {}).get("uid") and n.FIN_VGSC_BOUND not in finalizers:
            self.kube.set_finalizers(self.vgsc, vgsc, [*finalizers, n.FIN_VGSC_BOUND])
        return None

    # ---- VolumeGroupSnapshot ------------------------------------------------------------------------

    def _group(self, namespace: str, name: str) -> None:
        vgs = self.kube.get(self.vgs, name, namespace)
        if vgs is None:
            return None
        if vgs["metadata"].get("deletionTimestamp"):
            return self._delete_group(vgs)
        source = (vgs.get("spec") or {}).get("source") or {}
        if source.get("volumeGroupSnapshotContentName"):
            message = "pre-provisioned group snapshots are not supported by the local cluster"
            self._error(vgs, "GroupSnapshotContentMissing", message)
            return None
        vgs = self._check_class(vgs)
        status = vgs.get("status") or {}
        content_name = status.get("boundVolumeGroupSnapshotContentName") or n.group_content_name(vgs["metadata"]["uid"])
        vgsc = self.kube.get(self.vgsc, content_name)
        if vgsc is None:
            if status.get("boundVolumeGroupSnapshotContentName"):
                self._error(vgs, "GroupSnapshotContentMissing", "VolumeGroupSnapshotContent is missing")
                return None
            try:
                vgsc = self._create_content(vgs, content_name)
            except Pending as exc:
                self._error(
                    vgs,
                    "GroupSnapshotContentCreationFailed",
                    f"failed to create group snapshot content with error {exc}",
                )
                raise
            vgs = self.kube.get(self.vgs, name, namespace) or vgs
        ref = vgsc["spec"].get("volumeGroupSnapshotRef") or {}
        if (ref.get("name"), ref.get("namespace"), ref.get("uid")) != (name, namespace, vgs["metadata"]["uid"]):
            self._error(
                vgs,
                "GroupSnapshotContentMisbound",
                f"VolumeGroupSnapshotContent [{content_name}] is bound to a different group snapshot",
            )
            return None
        finalizers = list(vgs["metadata"].get("finalizers") or [])
        if n.FIN_VGS_BOUND not in finalizers:
            vgs = self.kube.set_finalizers(self.vgs, vgs, [*finalizers, n.FIN_VGS_BOUND])
        self._create_members(vgs, vgsc)
        self._sync_status(vgs, vgsc)
        return None

    def _selected_volumes(self, vgs: Obj) -> list[Obj]:
        """The PVs of the claims the group selects (upstream's getVolumesFromVolumeGroupSnapshot and messages)."""
        md, spec = vgs["metadata"], vgs["spec"]
        selector = label_selector(spec["source"].get("selector") or {})
        pvcs = self.kube.list(PVC, md["namespace"], label_selector=selector or None)[0]
        if not pvcs:
            raise Pending(f"label selector {selector} for group snapshot not applied to any PVC")
        pvs = []
        for pvc in sorted(pvcs, key=lambda p: p["metadata"]["name"]):
            claim, volume = pvc["metadata"]["name"], (pvc.get("spec") or {}).get("volumeName") or ""
            if (pvc.get("status") or {}).get("phase") != "Bound":
                raise Pending(f"the PVC {claim} is not yet bound to a PV, will not attempt to take a group snapshot")
            pv = self.kube.get(PV, volume) if volume else None
            if pv is None:
                missing = go_quote(f'persistentvolumes "{volume}" not found')
                raise Pending(f"failed to retrieve PV {volume} from the API server: {missing}")
            pvs.append(pv)
        if not (pvs[0].get("spec") or {}).get("csi"):
            raise Pending(
                f"snapshotting non-CSI volumes is not supported, group snapshot:{md['namespace']}/{md['name']}"
            )
        return pvs

    def _check_class(self, vgs: Obj) -> Obj:
        """The group with its class resolved (upstream's checkAndUpdateGroupSnapshotClass); ``Pending`` on errors."""
        md = vgs["metadata"]
        name = (vgs.get("spec") or {}).get("volumeGroupSnapshotClassName")
        if name:
            if self.kube.get(self.vgs_class, name) is None:
                message = f'volumegroupsnapshotclass.groupsnapshot.storage.k8s.io "{name}" not found'
                self._error(
                    vgs,
                    "GetGroupSnapshotClassFailed",
                    f"failed to get group snapshot class with error {message}",
                    ready_false=False,
                )
                raise Pending(message)
            return vgs
        try:
            driver = self._selected_volumes(vgs)[0]["spec"]["csi"]["driver"]
            default = default_class(
                self.kube.list(self.vgs_class)[0], driver, n.ANN_DEFAULT_GROUP_CLASS, "group snapshot"
            )
        except Pending as exc:
            message = f"Failed to set default group snapshot class with error {exc}"
            self._error(vgs, "SetDefaultGroupSnapshotClassFailed", message, ready_false=False)
            raise
        patch = {"spec": {"volumeGroupSnapshotClassName": default["metadata"]["name"]}}
        return self.kube.patch(self.vgs, md["name"], patch, md["namespace"])

    def _create_content(self, vgs: Obj, content_name: str) -> Obj:
        md = vgs["metadata"]
        pvs = self._selected_volumes(vgs)
        class_name = vgs["spec"].get("volumeGroupSnapshotClassName") or ""
        cls = self.kube.get(self.vgs_class, class_name)
        if cls is None:
            raise Pending(f'volumegroupsnapshotclass.groupsnapshot.storage.k8s.io "{class_name}" not found')
        for pv in pvs:
            if pv["spec"]["csi"]["driver"] != cls["driver"]:
                raise Pending(
                    f"Volume CSI driver ({pv['spec']['csi']['driver']}) mismatch with VolumeGroupSnapshotClass"
                    f" ({cls['driver']}) {md['namespace']}/{md['name']}: {pv['metadata']['name']}"
                )
        body = {
            "metadata": {"name": content_name},
            "spec": {
                "volumeGroupSnapshotRef": ref_of(self.vgs, vgs),
                "source": {"volumeHandles": [pv["spec"]["csi"]["volumeHandle"] for pv in pvs]},
                "volumeGroupSnapshotClassName": cls["metadata"]["name"],
                "deletionPolicy": cls["deletionPolicy"],
                "driver": cls["driver"],
            },
        }
        vgsc = self.kube.create(self.vgsc, body)
        self.kube.patch(
            self.vgs,
            md["name"],
            {"status": {"boundVolumeGroupSnapshotContentName": content_name, "readyToUse": False}},
            md["namespace"],
            status=True,
        )
        self.kube.event(
            self.vgs,
            vgs,
            "Normal",
            "CreatingGroupSnapshot",
            f"Waiting for a group snapshot {md['namespace']}/{md['name']} to be created by the CSI driver.",
        )
        return vgsc

    def _error(self, vgs: Obj, reason: str, message: str, *, ready_false: bool = True) -> None:
        """Set ``status.error`` (and readyToUse false when ``ready_false``) and record the Event, only when the
        message changes (upstream's updateGroupSnapshotErrorStatusWithEvent)."""
        md = vgs["metadata"]
        if ((vgs.get("status") or {}).get("error") or {}).get("message") == message:
            return
        status = {"error": {"message": message, "time": rfc3339(time.time())}}
        if ready_false:
            status["readyToUse"] = False
        self.kube.patch(self.vgs, md["name"], {"status": status}, md["namespace"], status=True)
        self.kube.event(self.vgs, vgs, "Warning", reason, message)

    def _sync_status(self, vgs: Obj, vgsc: Obj) -> None:
        md, cstatus = vgs["metadata"], vgsc.get("status") or {}
        status = dict(vgs.get("status") or {})
        new = dict(
            status,
            boundVolumeGroupSnapshotContentName=vgsc["metadata"]["name"],
            readyToUse=bool(cstatus.get("readyToUse")),
        )
        if cstatus.get("creationTime") and not status.get("creationTime"):
            new["creationTime"] = cstatus["creationTime"]
        if cstatus.get("error"):
            new["error"] = cstatus["error"]
        elif cstatus.get("volumeGroupSnapshotHandle"):
            new.pop("error", None)
        if new != status:
            body = {"status": {**new, **{k: None for k in status if k not in new}}}
            self.kube.patch(self.vgs, md["name"], body, md["namespace"], status=True)
            if new["readyToUse"] and not status.get("readyToUse"):
                self.kube.event(
                    self.vgs,
                    vgs,
                    "Normal",
                    "GroupSnapshotReady",
                    f"GroupSnapshot {md['namespace']}/{md['name']} is ready to use.",
                )

    # ---- members ------------------------------------------------------------------------------------------

    def _create_members(self, vgs: Obj, vgsc: Obj) -> None:
        cstatus = vgsc.get("status") or {}
        group_handle, infos = cstatus.get("volumeGroupSnapshotHandle"), cstatus.get(self.list_field) or []
        if not group_handle or not infos:
            return  # the sidecar has not taken the group snapshot yet
        md = vgs["metadata"]
        namespace, uid = md["namespace"], md["uid"]
        pvs = {
            ((pv["spec"].get("csi") or {}).get("driver"), (pv["spec"].get("csi") or {}).get("volumeHandle")): pv
            for pv in self.kube.list(PV)[0]
        }
        owner = {
            "apiVersion": self.vgs.api_version,
            "kind": "VolumeGroupSnapshot",
            "name": md["name"],
            "uid": uid,
            "controller": True,
        }
        for info in infos:
            volume, handle = info["volumeHandle"], info["snapshotHandle"]
            content_name, snap_name = n.member_content_name(uid, volume), n.member_snapshot_name(uid, volume)
            if self.kube.get(VS, snap_name, namespace) is not None and (self.kube.get(VSC, content_name) or {}).get(
                "status", {}
            ).get("snapshotHandle"):
                continue  # made on an earlier pass
            pv = pvs.get((vgsc["spec"]["driver"], volume))
            vsc_body = {
                "metadata": {"name": content_name, "annotations": {n.ANN_GROUP_HANDLE: group_handle}},
                "spec": {
                    "volumeSnapshotRef": {"kind": "VolumeSnapshot", "name": snap_name, "namespace": namespace},
                    "deletionPolicy": vgsc["spec"]["deletionPolicy"],
                    "driver": vgsc["spec"]["driver"],
                    "source": {"volumeHandle": volume},
                },
            }
            if pv is not None:
                vsc_body["spec"]["sourceVolumeMode"] = pv["spec"].get("volumeMode") or "Filesystem"
            claim = ((pv or {}).get("spec") or {}).get("claimRef") or {}
            vs_body = {
                "metadata": {"name": snap_name, "ownerReferences": [owner], "finalizers": [n.FIN_VS_IN_GROUP]},
                "spec": {"source": {"persistentVolumeClaimName": claim.get("name", "")}},
            }
            vsc = self._create_or_get(VSC, vsc_body, content_name)
            vs = self._create_or_get(VS, vs_body, snap_name, namespace)
            if not (vsc["spec"]["volumeSnapshotRef"].get("uid")):
                bind = {"spec": {"volumeSnapshotRef": {"uid": vs["metadata"]["uid"]}}}
                vsc = self.kube.patch(VSC, content_name, bind)
            if not (vs.get("status") or {}).get("boundVolumeSnapshotContentName"):
                self.kube.patch(
                    VS, snap_name, {"status": {"boundVolumeSnapshotContentName": content_name}}, namespace, status=True
                )
            status = {"snapshotHandle": handle, "volumeGroupSnapshotHandle": group_handle}
            if self.list_field == "volumeSnapshotInfoList":  # v1beta1 lists handles only: the sidecar asks the driver
                status["readyToUse"] = bool(info.get("readyToUse", cstatus.get("readyToUse")))
                for field in ("creationTime", "restoreSize"):
                    if info.get(field) is not None:
                        status[field] = info[field]
            self.kube.patch(VSC, content_name, {"status": status}, status=True)

    def _create_or_get(self, res, body: Obj, name: str, namespace: str | None = None) -> Obj:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.kube.create(res, body, namespace)
        except ApiException as exc:
            if exc.status != 409:
                raise
        obj = self.kube.get(res, name, namespace)
        if obj is None:
            raise Pending(f"{res.kind} {name} vanished while being created")
        return obj

    # ---- deletion -------------------------------------------------------------------------------------------

    def _delete_group(self, vgs: Obj) -> None:
        md = vgs["metadata"]
        namespace, uid = md["namespace"], md["uid"]
        content_name = (vgs.get("status") or {}).get("boundVolumeGroupSnapshotContentName") or n.group_content_name(uid)
        vgsc = self.kube.get(self.vgsc, content_name)
        if vgsc is not None and (vgsc["spec"].get("volumeGroupSnapshotRef") or {}).get("uid") != uid:
            vgsc = None
        members = [
            vs
            for vs in self.kube.list(VS, namespace)[0]
            if any(r.get("uid") == uid for r in vs["metadata"].get("ownerReferences") or [])
        ]
        for vs in members:
            if restoring_from(self.kube, vs):
                self.kube.event(
                    self.vgs,
                    vgs,
                    "Warning",
                    "SnapshotDeletePending",
                    f"Snapshot {namespace}/{vs['metadata']['name']} belonging to VolumeGroupSnapshot"
                    f" {namespace}/{md['name']} is being used to restore a PVC",
                )
                return None
        policy = (vgsc or {}).get("spec", {}).get("deletionPolicy")
        if vgsc is not None and self.stale_deletion_policy:
            policy = self.policy_seen.get(content_name, policy)
        delete_content = vgsc is not None and policy == "Delete"
        if vgsc is not None:
            if (vgsc["metadata"].get("annotations") or {}).get(n.ANN_VGS_BEING_DELETED) != "yes":
                vgsc = self.kube.patch(
                    self.vgsc, content_name, {"metadata": {"annotations": {n.ANN_VGS_BEING_DELETED: "yes"}}}
                )
            if delete_content and not vgsc["metadata"].get("deletionTimestamp"):
                self.kube.delete(self.vgsc, content_name)
        for vs in members:
            if not vs["metadata"].get("deletionTimestamp"):
                self.kube.delete(VS, vs["metadata"]["name"], namespace)
        finalizers = list(md.get("finalizers") or [])
        if n.FIN_VGS_BOUND in finalizers and not (delete_content and self.kube.get(self.vgsc, content_name)):
            self.kube.set_finalizers(self.vgs, vgs, [f for f in finalizers if f != n.FIN_VGS_BOUND])
        return None


class GroupSnapshotSidecar(Controller):
    """The csi-snapshotter's group part for one driver (see the module docstring)."""

    name = "csi-group-snapshotter"

    def __init__(self, kube: Kube, plugin: CsiPlugin, *, version: str = "v1", ready_delay: float = 0.2) -> None:
        super().__init__(kube)
        self.plugin = plugin
        self.driver = plugin.driver
        self.name = f"csi-group-snapshotter-{self.driver}"
        self.ready_delay = ready_delay
        self.vgsc = VGSC.at(version)
        self.list_field = _list_field(version)

    def watches(self) -> list[WatchSpec]:
        def vgsc_keys(_type, obj):
            if (obj.get("spec") or {}).get("driver") == self.driver:
                yield ("vgsc", "", obj["metadata"]["name"])

        return [WatchSpec(self.vgsc, vgsc_keys)]

    def reconcile(self, key: Key) -> float | None:
        return self._content(key[2])

    def _content(self, name: str) -> float | None:
        vgsc = self.kube.get(self.vgsc, name)
        if vgsc is None or vgsc["spec"].get("driver") != self.driver:
            return None
        md, spec, status = vgsc["metadata"], vgsc["spec"], vgsc.get("status") or {}
        finalizers = list(md.get("finalizers") or [])
        if md.get("deletionTimestamp"):
            if (md.get("annotations") or {}).get(n.ANN_VGS_BEING_DELETED) is None:
                return None  # upstream's shouldDeleteGroupSnapshotContent: its group is not being deleted
            if spec.get("deletionPolicy") == "Delete" and status.get("volumeGroupSnapshotHandle"):
                for info in status.get(self.list_field) or []:  # DeleteVolumeGroupSnapshot of every member
                    self.plugin.delete_snapshot(info["snapshotHandle"])
                cleared = {f: None for f in ("volumeGroupSnapshotHandle", "readyToUse", "creationTime", "error")}
                vgsc = self.kube.patch(self.vgsc, name, {"status": cleared}, status=True)
            if n.FIN_VGSC_BOUND in finalizers:
                self.kube.set_finalizers(self.vgsc, vgsc, [f for f in finalizers if f != n.FIN_VGSC_BOUND])
            return None
        volumes = (spec.get("source") or {}).get("volumeHandles") or []
        if not status.get("volumeGroupSnapshotHandle"):
            if not volumes:
                return None  # pre-provisioned: not supported
            try:
                group, infos = self.plugin.create_group_snapshot(volumes, name)
            except Exception as exc:
                failed = f"failed to take group snapshot of the volumes [{' '.join(volumes)}]: {go_quote(str(exc))}"
                self._content_error(vgsc, f"Failed to create group snapshot: {failed}")
                raise Pending(str(exc)) from None
            ready = self.ready_delay <= 0
            entries = [{"volumeHandle": i.volume_handle, "snapshotHandle": i.snapshot_handle} for i in infos]
            if self.list_field == "volumeSnapshotInfoList":
                for entry, i in zip(entries, infos, strict=True):
                    entry.update(creationTime=i.creation_ns, readyToUse=ready)
                    if i.size > 0:
                        entry["restoreSize"] = i.size
            status = {
                "volumeGroupSnapshotHandle": group,
                "creationTime": rfc3339_ns(infos[0].creation_ns),
                "readyToUse": ready,
                self.list_field: entries,
                "error": None,
            }
            vgsc = self.kube.patch(self.vgsc, name, {"status": status}, status=True)
            status = vgsc.get("status") or {}
        if not status.get("readyToUse"):
            entries = [dict(e) for e in status.get(self.list_field) or []]
            first = self.plugin.snapshot_info(entries[0]["snapshotHandle"]) if entries else None
            left = (first[1] / 1e9 if first else 0) + self.ready_delay - time.time()
            if left > 0:
                return left
            for entry in entries:
                if "readyToUse" in entry or self.list_field == "volumeSnapshotInfoList":
                    entry["readyToUse"] = True
            self.kube.patch(self.vgsc, name, {"status": {"readyToUse": True, self.list_field: entries}}, status=True)
        return None

    def _content_error(self, vgsc: Obj, message: str) -> None:
        """upstream's updateGroupSnapshotContentErrorStatusWithEvent: status and Event only when the message changes."""
        if ((vgsc.get("status") or {}).get("error") or {}).get("message") == message:
            return
        error = {"message": message, "time": rfc3339(time.time())}
        self.kube.patch(
            self.vgsc, vgsc["metadata"]["name"], {"status": {"readyToUse": False, "error": error}}, status=True
        )
        self.kube.event(self.vgsc, vgsc, "Warning", "GroupSnapshotCreationFailed", message)


def _list_field(version: str) -> str:
    return "volumeSnapshotHandlePairList" if version == "v1beta1" else "volumeSnapshotInfoList"


def label_selector(selector: Obj) -> str:
    """A LabelSelector as the ``labelSelector`` query string."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)
