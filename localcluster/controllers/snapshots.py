"""The snapshot controller (external-snapshotter's common controller, one per cluster) and the csi-snapshotter
sidecar (``SnapshotSidecar``, one per driver with snapshots, acting only on its driver's contents).

``SnapshotController(kube, vgs=None)`` watches VolumeSnapshots, VolumeSnapshotContents, PVCs and (``vgs``: the
VolumeGroupSnapshot resource when the group snapshot feature runs) VolumeGroupSnapshots. Like upstream:

- the class first (``checkAndUpdateSnapshotClass``): a dynamic VolumeSnapshot (``source.persistentVolumeClaimName``,
  not a group member) naming no class gets the default VolumeSnapshotClass of its PV's driver written into
  ``spec.volumeSnapshotClassName``. No default for the driver, several defaults, or a claim that cannot be resolved
  (missing, unbound, non-CSI) set ``status.error`` only (readyToUse untouched) with a Warning Event
  ``SetDefaultSnapshotClassFailed`` "Failed to set default snapshot class with error cannot find default snapshot
  class" / "... 2 default snapshot classes were found" / "... failed to retrieve PVC ..."; a named class that does
  not exist: ``GetSnapshotClassFailed``. Retried with backoff (a default class created later is picked up);
- finalizers ``volumesnapshot-as-source-protection`` and, once bound to a content whose deletionPolicy is Delete,
  ``volumesnapshot-bound-protection`` (none for Retain); every bound content (its ref has a uid) that is not being
  deleted gets ``volumesnapshotcontent-bound-protection``, whatever its policy (upstream's syncContent); the source
  PVC gets
  ``pvc-as-source-protection`` until the snapshot is ready; then a VolumeSnapshotContent ``snapcontent-<vs uid>``
  (``driver``, ``source.volumeHandle``, ``sourceVolumeMode``, ``volumeSnapshotRef`` with uid, ``deletionPolicy``
  and class from the class), Event ``CreatingSnapshot`` and the VS ``status.boundVolumeSnapshotContentName``;
  content creation failures set ``status.error`` with ``readyToUse: false`` and a Warning Event, retried;
- the VS status follows its content: ``readyToUse``, ``restoreSize`` (quantity, only when the content has one),
  ``creationTime`` (RFC 3339), ``error``, and ``volumeGroupSnapshotName`` for group members; a VS naming
  ``source.volumeSnapshotContentName`` is bound to that content (static binding, uid written into its ref);
- deletion: while a Pending PVC restores from the VS nothing happens (Event ``SnapshotDeletePending``); a group
  member is refused (same Event, upstream's message; every finalizer stays) while its VolumeGroupSnapshot exists,
  also while that is being deleted; otherwise the content gets ``volumesnapshot-being-deleted``, is deleted when
  its policy is Delete (the sidecar removes the snapshot, then its finalizer) and the VS finalizers go once the
  content is gone (at once for Retain, which keeps content, finalizer and snapshot). A content whose snapshot is
  gone is never deleted by the controller, also when its policy is patched to Delete afterwards: whoever deletes
  it then decides by its policy at that moment whether the storage snapshot goes.

``stale_deletion_policy=True`` (a test's switch): deletions decide by the policy a content had when the controller
first saw it, as upstream's does when its informer cache has not yet seen a patch of the policy (then a content
patched from Retain to Delete right before its snapshot's deletion is kept all the same).

Error statuses and their Events are written only when the message changes (upstream's
``updateSnapshotErrorStatusWithEvent``).

``SnapshotSidecar(kube, plugin, ready_delay=0.2)`` (contents whose ``spec.driver`` is the plugin's): takes the
snapshot (``CsiPlugin.create_snapshot``)
and writes ``status.snapshotHandle``, ``creationTime`` (unix ns), ``restoreSize`` (bytes, only when the driver
reports a size: ``CsiPlugin(restore_size=False)`` leaves it out) and ``readyToUse: false``, then ``readyToUse:
true`` once ``ready_delay`` seconds have passed since creation (also for group members). A content that has a
handle but no creation time (a pre-provisioned one, or a group member of the v1beta1 API, whose group status
lists handles only) gets it from the driver (GetSnapshot), with the reported size; a failed snapshot is a Warning
``SnapshotCreationFailed`` on the content. A deleted content (upstream's shouldDelete) waits while it has no
``volumesnapshot-being-deleted`` annotation (its snapshot is not being deleted; an unbound pre-provisioned one does
not wait); then with policy Delete the snapshot file is removed (not a group member's: its group content's deletion
removes those), and with either policy the finalizer goes.
"""

from __future__ import annotations

import json
import logging
import time

from localcluster.controllers import names as n
from localcluster.controllers.kube import (
    PV,
    PVC,
    VS,
    VS_CLASS,
    VSC,
    Kube,
    Obj,
    Res,
    format_quantity,
    ref_of,
    rfc3339,
    rfc3339_ns,
)
from localcluster.controllers.plugin import CsiPlugin
from localcluster.controllers.runtime import Controller, Key, Pending, WatchSpec

log = logging.getLogger(__name__)


class SnapshotController(Controller):
    name = "snapshot-controller"

    def __init__(self, kube: Kube, *, vgs: Res | None = None, stale_deletion_policy: bool = False) -> None:
        super().__init__(kube)
        self.vgs = vgs  # the VolumeGroupSnapshot resource at the served version, None when groups are not processed
        self.stale_deletion_policy = stale_deletion_policy
        self.policy_seen: dict[str, str] = {}  # content -> the deletionPolicy it had when first seen

    def watches(self) -> list[WatchSpec]:
        def vs_keys(_type, obj):
            md = obj["metadata"]
            yield ("vs", md["namespace"], md["name"])
            if (obj.get("spec") or {}).get("source", {}).get("persistentVolumeClaimName"):
                yield ("pvc", md["namespace"], obj["spec"]["source"]["persistentVolumeClaimName"])

        def vsc_keys(_type, obj):
            yield ("vsc", "", obj["metadata"]["name"])
            ref = (obj.get("spec") or {}).get("volumeSnapshotRef") or {}
            if ref.get("name") and ref.get("namespace"):
                yield ("vs", ref["namespace"], ref["name"])

        def pvc_keys(_type, obj):
            yield ("pvc", obj["metadata"]["namespace"], obj["metadata"]["name"])

        def vgs_keys(_type, obj):
            yield ("members-of", obj["metadata"]["namespace"], obj["metadata"]["uid"])

        specs = [WatchSpec(VS, vs_keys), WatchSpec(VSC, vsc_keys), WatchSpec(PVC, pvc_keys)]
        if self.vgs is not None:
            specs.append(WatchSpec(self.vgs, vgs_keys))
        return specs

    def reconcile(self, key: Key) -> float | None:
        kind, namespace, name = key
        if kind == "vs":
            return self._snapshot(namespace, name)
        if kind == "vsc":
            return self._content(name)
        if kind == "pvc":  # snapshots of (or restores from) this claim may proceed now
            for vs in self.kube.list(VS, namespace)[0]:
                if _source_pvc(vs) == name or vs["metadata"].get("deletionTimestamp"):
                    self.enqueue(("vs", namespace, vs["metadata"]["name"]))
            return None
        if kind == "members-of":  # a group changed: its members' deletion may proceed
            for vs in self.kube.list(VS, namespace)[0]:
                if any(r.get("uid") == name for r in vs["metadata"].get("ownerReferences") or []):
                    self.enqueue(("vs", namespace, vs["metadata"]["name"]))
        return None

    # ---- VolumeSnapshotContent ---------------------------------------------------------------------

    def _content(self, name: str) -> None:
        """Upstream's syncContent: a bound content (its ref has a uid) that is not being deleted gets
        ``volumesnapshotcontent-bound-protection``, whatever its deletionPolicy; the rest is done through its
        snapshot (a content whose snapshot is gone is never deleted by the controller)."""
        vsc = self.kube.get(VSC, name)
        if vsc is None or vsc["metadata"].get("deletionTimestamp"):
            return None
        self.policy_seen.setdefault(name, vsc["spec"].get("deletionPolicy"))
        if (vsc["spec"].get("volumeSnapshotRef") or {}).get("uid"):
            self._add_finalizers(vsc, [n.FIN_VSC_BOUND], VSC)
        return None

    def _deletion_policy(self, vsc: Obj) -> str | None:
        """The content's deletionPolicy as the deletion sees it: with ``stale_deletion_policy`` the one it had when
        the controller first saw it (an informer cache that missed a later patch), else the current one."""
        policy = vsc["spec"].get("deletionPolicy")
        return self.policy_seen.get(vsc["metadata"]["name"], policy) if self.stale_deletion_policy else policy

    # ---- VolumeSnapshot ---------------------------------------------------------------------------

    def _snapshot(self, namespace: str, name: str) -> float | None:
        vs = self.kube.get(VS, name, namespace)
        if vs is None:
            return None
        if vs["metadata"].get("deletionTimestamp"):
            return self._delete_snapshot(vs)
        source = (vs.get("spec") or {}).get("source") or {}
        vs = self._check_class(vs)
        vs = self._add_finalizers(vs, [n.FIN_VS_AS_SOURCE])
        status = vs.get("status") or {}
        content_name = status.get("boundVolumeSnapshotContentName")
        if "volumeSnapshotContentName" in source:
            content_name = content_name or source["volumeSnapshotContentName"]
        elif not content_name:
            if _group_owner(vs) is not None:
                return None  # a group member: the group controller creates and binds its content
            content_name = n.snapshot_content_name(vs["metadata"]["uid"])
            if self.kube.get(VSC, content_name) is None:
                try:
                    self._create_content(vs, content_name)
                except Pending as exc:
                    message = f"Failed to create snapshot content with error {exc}"
                    self._snapshot_error(vs, "SnapshotContentCreationFailed", message)
                    raise
                vs = self.kube.get(VS, name, namespace) or vs
        vsc = self.kube.get(VSC, content_name)
        if vsc is None:
            self._snapshot_error(vs, "SnapshotContentMissing", "VolumeSnapshotContent is missing")
            raise Pending(f"content {content_name} of {namespace}/{name} is missing")
        ref = vsc["spec"].get("volumeSnapshotRef") or {}
        if (
            ref.get("name") != name
            or ref.get("namespace") != namespace
            or ref.get("uid") not in ("", None, vs["metadata"]["uid"])
        ):
            self._snapshot_error(
                vs, "SnapshotContentMisbound", "VolumeSnapshotContent is not bound to the VolumeSnapshot correctly"
            )
            return None
        if not ref.get("uid"):
            vsc = self.kube.patch(VSC, content_name, {"spec": {"volumeSnapshotRef": {"uid": vs["metadata"]["uid"]}}})
        if vsc["spec"].get("deletionPolicy") == "Delete":  # upstream: the bound finalizer only for Delete
            vs = self._add_finalizers(vs, [n.FIN_VS_BOUND])
        self._sync_status(vs, vsc)
        return None

    def _check_class(self, vs: Obj) -> Obj:
        """The snapshot with its class resolved (upstream's checkAndUpdateSnapshotClass); ``Pending`` on errors."""
        md, spec = vs["metadata"], vs.get("spec") or {}
        source = spec.get("source") or {}
        if "volumeSnapshotContentName" in source or _group_owner(vs) is not None:
            return vs  # pre-provisioned snapshots and group members need no class
        name = spec.get("volumeSnapshotClassName")
        if name:
            if self.kube.get(VS_CLASS, name) is None:
                message = f'volumesnapshotclass.snapshot.storage.k8s.io "{name}" not found'
                self._snapshot_error(
                    vs,
                    "GetSnapshotClassFailed",
                    f"Failed to get snapshot class with error {message}",
                    ready_false=False,
                )
                raise Pending(message)
            return vs
        try:
            pv = self._volume_of(vs)
            csi = (pv.get("spec") or {}).get("csi")
            if csi is None:
                raise Pending(f"snapshotting non-CSI volumes is not supported, snapshot:{md['namespace']}/{md['name']}")
            default = default_class(
                self.kube.list(VS_CLASS)[0], csi["driver"], n.ANN_DEFAULT_SNAPSHOT_CLASS, "snapshot"
            )
        except Pending as exc:
            message = f"Failed to set default snapshot class with error {exc}"
            self._snapshot_error(vs, "SetDefaultSnapshotClassFailed", message, ready_false=False)
            raise
        patch = {"spec": {"volumeSnapshotClassName": default["metadata"]["name"]}}
        return self.kube.patch(VS, md["name"], patch, md["namespace"])

    def _volume_of(self, vs: Obj) -> Obj:
        """The PV of the snapshot's source claim (upstream's getVolumeFromVolumeSnapshot and its messages)."""
        pvc_name, namespace = _source_pvc(vs), vs["metadata"]["namespace"]
        if not pvc_name:
            raise Pending(f"the PVC name is not specified in snapshot {namespace}/{vs['metadata']['name']}")
        pvc = self.kube.get(PVC, pvc_name, namespace)
        if pvc is None:
            missing = go_quote(f'persistentvolumeclaim "{pvc_name}" not found')
            raise Pending(f"failed to retrieve PVC {pvc_name} from the lister: {missing}")
        if (pvc.get("status") or {}).get("phase") != "Bound":
            raise Pending(f"the PVC {pvc_name} is not yet bound to a PV, will not attempt to take a snapshot")
        pv_name = (pvc.get("spec") or {}).get("volumeName") or ""
        pv = self.kube.get(PV, pv_name) if pv_name else None
        if pv is None:
            missing = go_quote(f'persistentvolumes "{pv_name}" not found')
            raise Pending(f"failed to retrieve PV {pv_name} from the API server: {missing}")
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if (ref.get("name"), ref.get("namespace")) != (pvc_name, namespace) or ref.get("uid") not in (
            None,
            "",
            pvc["metadata"]["uid"],
        ):
            raise Pending("claim in dataSource not bound or invalid")
        return pv

    def _create_content(self, vs: Obj, content_name: str) -> None:
        md = vs["metadata"]
        class_name = (vs.get("spec") or {}).get("volumeSnapshotClassName") or ""
        try:
            cls = self.kube.get(VS_CLASS, class_name)
            if cls is None:
                raise Pending(f'volumesnapshotclass.snapshot.storage.k8s.io "{class_name}" not found')
            pv = self._volume_of(vs)
            csi = pv["spec"].get("csi")
            if csi is None:
                raise Pending(f"snapshotting non-CSI volumes is not supported, snapshot:{md['namespace']}/{md['name']}")
        except Pending as exc:
            raise Pending(
                f"failed to get input parameters to create snapshot {md['name']}: {go_quote(str(exc))}"
            ) from None
        pvc = self.kube.get(PVC, _source_pvc(vs), md["namespace"])
        if pvc is not None and pvc["metadata"].get("deletionTimestamp") is None:
            self._add_finalizers(pvc, [n.FIN_PVC_AS_SOURCE], PVC)
        body = {
            "metadata": {"name": content_name},
            "spec": {
                "volumeSnapshotRef": {**ref_of(VS, vs)},
                "source": {"volumeHandle": csi["volumeHandle"]},
                "volumeSnapshotClassName": cls["metadata"]["name"],
                "deletionPolicy": cls["deletionPolicy"],
                "driver": csi["driver"],
                "sourceVolumeMode": pv["spec"].get("volumeMode") or "Filesystem",
            },
        }
        self.kube.create(VSC, body)
        status = {"boundVolumeSnapshotContentName": content_name, "readyToUse": False}
        self.kube.patch(VS, md["name"], {"status": status}, md["namespace"], status=True)
        message = f"Waiting for a snapshot {md['namespace']}/{md['name']} to be created by the CSI driver."
        self.kube.event(VS, vs, "Normal", "CreatingSnapshot", message)

    def _snapshot_error(self, vs: Obj, reason: str, message: str, *, ready_false: bool = True) -> None:
        """Set ``status.error`` (and readyToUse false when ``ready_false``) and record the Event, only when the
        message changes (upstream's updateSnapshotErrorStatusWithEvent)."""
        md = vs["metadata"]
        if ((vs.get("status") or {}).get("error") or {}).get("message") == message:
            return
        status = {"error": {"message": message, "time": rfc3339(time.time())}}
        if ready_false:
            status["readyToUse"] = False
        self.kube.patch(VS, md["name"], {"status": status}, md["namespace"], status=True)
        self.kube.event(VS, vs, "Warning", reason, message)

    def _sync_status(self, vs: Obj, vsc: Obj) -> None:
        md, cstatus = vs["metadata"], vsc.get("status") or {}
        status = dict(vs.get("status") or {})
        new = dict(status, boundVolumeSnapshotContentName=vsc["metadata"]["name"])
        new["readyToUse"] = bool(cstatus.get("readyToUse"))
        if cstatus.get("creationTime") is not None:
            new["creationTime"] = rfc3339_ns(int(cstatus["creationTime"]))
        if cstatus.get("restoreSize") is not None:
            new["restoreSize"] = format_quantity(int(cstatus["restoreSize"]))
        if cstatus.get("error"):
            new["error"] = cstatus["error"]
        elif new["readyToUse"] or cstatus.get("snapshotHandle"):
            new.pop("error", None)
        owner = _group_owner(vs)
        if owner is not None and cstatus.get("volumeGroupSnapshotHandle"):
            new["volumeGroupSnapshotName"] = owner["name"]
        if new != status:
            body = {"status": {**new, **{k: None for k in status if k not in new}}}
            self.kube.patch(VS, md["name"], body, md["namespace"], status=True)
            if new["readyToUse"] and not status.get("readyToUse"):
                self.kube.event(
                    VS, vs, "Normal", "SnapshotReady", f"Snapshot {md['namespace']}/{md['name']} is ready to use."
                )
        if new["readyToUse"]:
            self._release_pvc(vs)

    def _release_pvc(self, vs: Obj) -> None:
        """Drop ``pvc-as-source-protection`` once no snapshot of the claim is still being taken."""
        pvc_name, namespace = _source_pvc(vs), vs["metadata"]["namespace"]
        pvc = self.kube.get(PVC, pvc_name, namespace) if pvc_name else None
        if pvc is None or n.FIN_PVC_AS_SOURCE not in (pvc["metadata"].get("finalizers") or []):
            return
        for other in self.kube.list(VS, namespace)[0]:
            if (
                _source_pvc(other) == pvc_name
                and not (other.get("status") or {}).get("readyToUse")
                and not other["metadata"].get("deletionTimestamp")
            ):
                return
        finalizers = [f for f in pvc["metadata"]["finalizers"] if f != n.FIN_PVC_AS_SOURCE]
        self.kube.set_finalizers(PVC, pvc, finalizers)

    def _add_finalizers(self, obj: Obj, wanted: list[str], res: Res = VS) -> Obj:
        have = list(obj["metadata"].get("finalizers") or [])
        missing = [f for f in wanted if f not in have]
        return self.kube.set_finalizers(res, obj, have + missing) if missing else obj

    # ---- deletion -----------------------------------------------------------------------------------

    def _delete_snapshot(self, vs: Obj) -> None:
        md = vs["metadata"]
        namespace, name = md["namespace"], md["name"]
        owner = _group_owner(vs)
        group_name = (vs.get("status") or {}).get("volumeGroupSnapshotName") or (owner or {}).get("name")
        if group_name and self.vgs is not None:
            group = self.kube.get(self.vgs, group_name, namespace)
            if group is not None:  # upstream refuses while the group exists at all (also while it is deleted)
                self.kube.event(
                    VS,
                    vs,
                    "Warning",
                    "SnapshotDeletePending",
                    f"deletion of the individual volume snapshot {namespace}/{name} is not allowed as it"
                    f" belongs to group snapshot {namespace}/{group_name}. Deleting the group snapshot"
                    " will trigger the deletion of all the individual volume snapshots that are part of"
                    " the group.",
                )
                return None  # the group's changes requeue this snapshot ("members-of")
        content_name = (vs.get("status") or {}).get("boundVolumeSnapshotContentName")
        if not content_name and _source_pvc(vs) is not None:
            content_name = n.snapshot_content_name(md["uid"])
        vsc = self.kube.get(VSC, content_name) if content_name else None
        if vsc is not None:
            ref = vsc["spec"].get("volumeSnapshotRef") or {}
            if ref.get("uid") not in ("", None, md["uid"]) or ref.get("name") != name:
                vsc = None  # bound to another snapshot: leave it alone
        if vsc is not None:
            if restoring_from(self.kube, vs):
                self.kube.event(VS, vs, "Warning", "SnapshotDeletePending", "Snapshot is being used to restore a PVC")
                return None  # the claim's changes requeue this snapshot
            anns = vsc["metadata"].get("annotations") or {}
            if anns.get(n.ANN_VS_BEING_DELETED) != "yes":
                vsc = self.kube.patch(
                    VSC, vsc["metadata"]["name"], {"metadata": {"annotations": {n.ANN_VS_BEING_DELETED: "yes"}}}
                )
            if self._deletion_policy(vsc) == "Delete":
                if not vsc["metadata"].get("deletionTimestamp"):
                    self.kube.delete(VSC, vsc["metadata"]["name"])
                return None  # the content's removal requeues this snapshot
        ours = (n.FIN_VS_AS_SOURCE, n.FIN_VS_BOUND, n.FIN_VS_IN_GROUP)
        finalizers = list(md.get("finalizers") or [])
        if any(f in ours for f in finalizers):
            self.kube.set_finalizers(VS, vs, [f for f in finalizers if f not in ours])
        self._release_pvc(vs)  # a snapshot deleted before it was ready no longer holds its claim
        return None


class SnapshotSidecar(Controller):
    """csi-snapshotter for one driver: takes and deletes its contents' snapshots (see the module docstring)."""

    name = "csi-snapshotter"

    def __init__(self, kube: Kube, plugin: CsiPlugin, *, ready_delay: float = 0.2) -> None:
        super().__init__(kube)
        self.plugin = plugin
        self.driver = plugin.driver
        self.name = f"csi-snapshotter-{self.driver}"
        self.ready_delay = ready_delay

    def watches(self) -> list[WatchSpec]:
        def vsc_keys(_type, obj):
            if (obj.get("spec") or {}).get("driver") == self.driver:
                yield ("vsc", "", obj["metadata"]["name"])

        return [WatchSpec(VSC, vsc_keys)]

    def reconcile(self, key: Key) -> float | None:
        return self._content(key[2])

    def _content(self, name: str) -> float | None:
        vsc = self.kube.get(VSC, name)
        if vsc is None or vsc["spec"].get("driver") != self.driver:
            return None
        md, spec = vsc["metadata"], vsc["spec"]
        status = vsc.get("status") or {}
        finalizers = list(md.get("finalizers") or [])
        if md.get("deletionTimestamp"):
            unbound = (spec.get("source") or {}).get("snapshotHandle") and not (
                spec.get("volumeSnapshotRef") or {}
            ).get("uid")
            if not unbound and (md.get("annotations") or {}).get(n.ANN_VS_BEING_DELETED) is None:
                return None  # upstream's shouldDelete: its snapshot is not being deleted, the content waits
            handle = status.get("snapshotHandle")
            if spec.get("deletionPolicy") == "Delete" and handle and not status.get("volumeGroupSnapshotHandle"):
                self.plugin.delete_snapshot(handle)  # a group member's snapshot goes with its group content
            if n.FIN_VSC_BOUND in finalizers:
                self.kube.set_finalizers(VSC, vsc, [f for f in finalizers if f != n.FIN_VSC_BOUND])
            return None
        source = spec.get("source") or {}
        handle = status.get("snapshotHandle") or source.get("snapshotHandle")
        if not status.get("snapshotHandle"):
            if (md.get("annotations") or {}).get(n.ANN_GROUP_HANDLE):
                return None  # a group member: the group controller writes its handle
            if not handle:
                try:
                    info = self.plugin.create_snapshot(source["volumeHandle"], name)
                except Exception as exc:
                    self._content_error(
                        vsc, f"failed to take snapshot of the volume {source.get('volumeHandle')}: {go_quote(str(exc))}"
                    )
                    raise Pending(str(exc)) from None
                status = {
                    "snapshotHandle": info.snapshot_handle,
                    "creationTime": info.creation_ns,
                    "readyToUse": self.ready_delay <= 0,
                    "error": None,
                }
                if info.size > 0:
                    status["restoreSize"] = info.size
                vsc = self.kube.patch(VSC, name, {"status": status}, status=True)
                status = vsc.get("status") or {}
        if status.get("creationTime") is None:  # pre-provisioned, or a v1beta1 group member: ask the driver
            info = self.plugin.snapshot_info(handle)
            if info is None:
                self._content_error(vsc, f"snapshot {handle} does not exist")
                return None
            size, created = info
            patch = {"snapshotHandle": handle, "creationTime": created, "readyToUse": self.ready_delay <= 0}
            if size > 0 and status.get("restoreSize") is None:
                patch["restoreSize"] = size
            vsc = self.kube.patch(VSC, name, {"status": patch}, status=True)
            status = vsc.get("status") or {}
        if not status.get("readyToUse"):
            left = int(status.get("creationTime") or 0) / 1e9 + self.ready_delay - time.time()
            if left > 0:
                return left
            self.kube.patch(VSC, name, {"status": {"readyToUse": True}}, status=True)
        return None

    def _content_error(self, vsc: Obj, message: str) -> None:
        if ((vsc.get("status") or {}).get("error") or {}).get("message") == message:
            return
        error = {"message": message, "time": rfc3339(time.time())}
        self.kube.patch(VSC, vsc["metadata"]["name"], {"status": {"readyToUse": False, "error": error}}, status=True)
        self.kube.event(VSC, vsc, "Warning", "SnapshotCreationFailed", message)


def default_class(classes: list[Obj], driver: str, annotation: str, what: str) -> Obj:
    """The one class of ``driver`` marked default by ``annotation``; ``Pending`` with the snapshot-controller's
    words when there is none (``cannot find default <what> class``) or more than one."""
    defaults = [
        c
        for c in classes
        if c.get("driver") == driver and (c["metadata"].get("annotations") or {}).get(annotation) == "true"
    ]
    if not defaults:
        raise Pending(f"cannot find default {what} class")
    if len(defaults) > 1:
        raise Pending(f"{len(defaults)} default snapshot classes were found")
    return defaults[0]


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (upstream messages quote wrapped errors with it)."""
    return json.dumps(text, ensure_ascii=False)


def restoring_from(kube: Kube, vs: Obj) -> bool:
    """Whether a Pending claim is being restored from VolumeSnapshot ``vs`` (upstream's
    ``isVolumeBeingCreatedFromSnapshot``)."""
    md = vs["metadata"]
    for pvc in kube.list(PVC, md["namespace"])[0]:
        spec = pvc.get("spec") or {}
        ds = spec.get("dataSourceRef") or spec.get("dataSource") or {}
        if (
            ds.get("kind") == "VolumeSnapshot"
            and ds.get("name") == md["name"]
            and (pvc.get("status") or {}).get("phase") == "Pending"
        ):
            return True
    return False


def _source_pvc(vs: Obj) -> str | None:
    source = (vs.get("spec") or {}).get("source") or {}
    return source.get("persistentVolumeClaimName") if "persistentVolumeClaimName" in source else None


def _group_owner(vs: Obj) -> Obj | None:
    return next(
        (r for r in vs["metadata"].get("ownerReferences") or [] if r.get("kind") == "VolumeGroupSnapshot"), None
    )
