"""``Scheduler``: kube-scheduler for the local cluster (a test double), over HTTP with the official client.

    with Scheduler(Kube(api_client_for(api), "default-scheduler")) as scheduler:
        ...   # pods without spec.nodeName are bound to a node through pods/binding

It takes every pod that has no ``spec.nodeName``, is not being deleted, has no scheduling gates and
names no other ``schedulerName``, and runs kube-scheduler's filters on every node, in upstream's
order, the first failing one giving the node's reason:

- NodeUnschedulable: ``spec.unschedulable`` (``node(s) were unschedulable``) unless tolerated;
- TaintToleration: NoSchedule/NoExecute taints (``node(s) had untolerated taint {key: value}``,
  v1.33's wording); a node whose kubelet stopped carries ``node.kubernetes.io/not-ready``;
- NodeAffinity: ``nodeSelector`` and required node affinity (``node(s) didn't match Pod's node
  affinity/selector``);
- VolumeBinding (``volumebinding.py``): bound claims' PV node affinity, WaitForFirstConsumer claims
  (selected node, static PVs, the provisioner's topology), unbound Immediate claims.

No node fits: the pod keeps ``PodScheduled`` False, reason ``Unschedulable``, with upstream's
FitError message (``0/3 nodes are available: 1 node(s) had untolerated taint {...}, 2 node(s)
didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is
not helpful for scheduling.``; every reason here is unresolvable by preemption) and a Warning
``FailedScheduling`` event from ``default-scheduler``; it is tried again whenever nodes, CSINodes,
CSIDrivers, PVs, StorageClasses, its namespace's claims or pods change, and every
``retry_interval`` seconds.

Among the nodes that fit, the score is deterministic (documented, not upstream's): the highest sum
of matching preferred node-affinity weights, then the fewest untolerated PreferNoSchedule taints,
then the fewest pods bound there (not finished) or being bound, then the node name.

Binding, as the volume binder does: with no volume to bind, POST pods/binding at once (event
``Scheduled``, ``Successfully assigned NS/NAME to NODE``). Otherwise the pod is assumed on the node:
free PVs get ``claimRef`` (and ``pv.kubernetes.io/bound-by-controller``), claims to provision get
the ``volume.kubernetes.io/selected-node`` annotation, and the pod is bound once every claim is
fully bound (to a PV whose node affinity matches the node). If the provisioner drops or changes the
annotation, a PV does not fit, the node goes or ``bind_timeout`` passes, the attempt fails
(``FailedScheduling`` ``running PreBind plugin "VolumeBinding": binding volumes: ...``, condition
reason ``SchedulerError``) and the pod is scheduled again; when the node went or the time ran out,
the scheduler first removes the selected-node annotations it set on claims still unbound, so they
can be provisioned where the pod goes next (what external-provisioner does when the node is gone).

Not modelled: resources (NodeResourcesFit), ports, pod (anti-)affinity, topology spread, volume
limits and zones, preemption itself, generic ephemeral volumes, priority order in the queue.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from localcluster.controllers.kube import CSI_DRIVER, POD, PV, PVC, STORAGE_CLASS, Kube, Obj, Res, rfc3339
from localcluster.controllers.runtime import Controller, Key, WatchSpec
from localcluster.controllers.scheduling import node_affinity_ok, preferred_score, pv_affinity_ok, untolerated_taint
from localcluster.controllers.volumebinding import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    NodeVolumes,
    Snapshot,
    bound_to,
    filter_node,
    fully_bound,
    prefilter,
)

log = logging.getLogger(__name__)

NODE = Res("Node", "", "v1", "nodes", False, "node")
CSI_NODE = Res("CSINode", "storage.k8s.io", "v1", "csinodes", False, "csi_node")
STRATEGIC = "application/strategic-merge-patch+json"
DEFAULT_SCHEDULER = "default-scheduler"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"


class BindError(Exception):
    """The volumes of an assumed pod cannot be bound on its node (the pod is scheduled again)."""


@dataclass
class Assumed:
    node: str
    uid: str
    volumes: NodeVolumes
    deadline: float
    selected: list[str] = field(default_factory=list)  # claims this scheduler annotated


class Scheduler(Controller):
    name = "scheduler"

    def __init__(
        self,
        kube: Kube,
        *,
        scheduler_name: str = DEFAULT_SCHEDULER,
        bind_timeout: float = 600.0,
        retry_interval: float = 30.0,
        poll: float = 1.0,
    ) -> None:
        super().__init__(kube)
        self.scheduler_name = scheduler_name
        self.bind_timeout = bind_timeout
        self.retry_interval = retry_interval
        self.poll = poll
        self._state = threading.Lock()  # guards the three maps below (read by the watch threads)
        self._waiting: dict[tuple[str, str], str] = {}  # (ns, pod) -> "unschedulable" | "assumed"
        self._assumed: dict[tuple[str, str], Assumed] = {}
        self._written: dict[tuple[str, str], str] = {}  # resourceVersion of our own status writes
        self._csinodes_served = True

    # ---- watches ---------------------------------------------------------------------------------

    def watches(self) -> list[WatchSpec]:
        def pod_keys(type_, obj):
            md, spec = obj["metadata"], obj.get("spec") or {}
            key = (md["namespace"], md["name"])
            if not spec.get("nodeName") and type_ != "DELETED":
                if self._written.get(key) != md.get("resourceVersion"):
                    yield ("pod", *key)
            elif type_ == "DELETED" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                yield from self._waiting_keys()
            with self._state:
                assumed = key in self._assumed
            if type_ == "DELETED" and assumed:
                yield ("pod", *key)

        def pvc_keys(_type, obj):
            yield from self._waiting_keys(obj["metadata"]["namespace"])

        def any_change(_type, _obj):
            yield from self._waiting_keys()

        specs = [
            WatchSpec(POD, pod_keys),
            WatchSpec(NODE, any_change),
            WatchSpec(PVC, pvc_keys),
            WatchSpec(PV, any_change),
            WatchSpec(STORAGE_CLASS, any_change),
            WatchSpec(CSI_DRIVER, any_change),
        ]
        if self._csinodes_served:
            specs.append(WatchSpec(CSI_NODE, any_change))
        return specs

    def start(self, timeout: float = 30.0) -> Scheduler:
        self._csinodes_served = _served(self.kube, "storage.k8s.io", "csinodes")
        super().start(timeout)
        return self

    def _waiting_keys(self, namespace: str | None = None):
        with self._state:
            keys = list(self._waiting)
        for ns, name in keys:
            if namespace is None or ns == namespace:
                yield ("pod", ns, name)

    # ---- reconcile -------------------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        _, namespace, name = key
        pod = self.kube.get(POD, name, namespace)
        pkey = (namespace, name)
        assumed = self._assumed.get(pkey)
        if assumed is not None and (pod is None or pod["metadata"]["uid"] != assumed.uid):
            self._forget(pkey)
            assumed = None
        if pod is None or not self._mine(pod):
            self._forget(pkey)
            return None
        if (pod.get("spec") or {}).get("schedulingGates"):
            self._set_condition(pod, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
            self._forget(pkey)
            return None
        if assumed is not None:
            return self._bind_cycle(pod, assumed)
        return self._schedule(pod)

    def _mine(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == self.scheduler_name
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )

    def _snapshot(self, namespace: str) -> Snapshot:
        nodes = self.kube.list(NODE)[0]
        pods = self.kube.list(POD)[0]
        pvcs = {p["metadata"]["name"]: p for p in self.kube.list(PVC, namespace)[0]}
        pvs = {p["metadata"]["name"]: p for p in self.kube.list(PV)[0]}
        classes = {c["metadata"]["name"]: c for c in self.kube.list(STORAGE_CLASS)[0]}
        csinodes = {c["metadata"]["name"]: c for c in self.kube.list(CSI_NODE)[0]} if self._csinodes_served else {}
        drivers = {d["metadata"]["name"] for d in self.kube.list(CSI_DRIVER)[0]}
        return Snapshot(nodes, pods, pvcs, pvs, classes, csinodes, drivers)

    def _schedule(self, pod: Obj) -> float | None:
        md = pod["metadata"]
        pkey = (md["namespace"], md["name"])
        snap = self._snapshot(md["namespace"])
        n = len(snap.nodes)
        if n == 0:
            return self._unschedulable(pod, "no nodes available to schedule pods")
        claims, why = prefilter(pod, snap)
        if claims is None:
            return self._unschedulable(pod, f"0/{n} nodes are available: {why}. {_preemption(n)}")
        reasons: dict[str, int] = {}
        fits: list[tuple[Obj, NodeVolumes]] = []
        for node in snap.nodes:
            why_not, volumes = self._filter(pod, node, claims, snap)
            for reason in why_not:
                reasons[reason] = reasons.get(reason, 0) + 1
            if not why_not:
                fits.append((node, volumes))
        if not fits:
            histogram = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
            return self._unschedulable(pod, f"0/{n} nodes are available: {histogram}. {_preemption(n)}")
        node, volumes = min(fits, key=lambda f: self._rank(pod, f[0], snap))
        name = node["metadata"]["name"]
        if not volumes.static and not volumes.provision:
            return self._bind(pod, name)
        assumed = Assumed(name, md["uid"], volumes, time.monotonic() + self.bind_timeout)
        for pv, pvc in volumes.static:
            if not bound_to(pv, pvc) or not (pv["spec"].get("claimRef") or {}).get("uid"):
                ref = {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": pvc["metadata"]["namespace"],
                    "name": pvc["metadata"]["name"],
                    "uid": pvc["metadata"]["uid"],
                    "resourceVersion": pvc["metadata"].get("resourceVersion", ""),
                }
                self.kube.patch(
                    PV,
                    pv["metadata"]["name"],
                    {"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}, "spec": {"claimRef": ref}},
                )
        for pvc in volumes.provision:
            if (pvc["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE) != name:
                self.kube.patch(
                    PVC,
                    pvc["metadata"]["name"],
                    {"metadata": {"annotations": {ANN_SELECTED_NODE: name}}},
                    pvc["metadata"]["namespace"],
                )
                assumed.selected.append(pvc["metadata"]["name"])
        with self._state:
            self._assumed[pkey] = assumed
            self._waiting[pkey] = "assumed"
        return self._bind_cycle(pod, assumed)

    def _filter(self, pod: Obj, node: Obj, claims, snap: Snapshot) -> tuple[list[str], NodeVolumes]:
        spec = pod.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        if (node.get("spec") or {}).get("unschedulable") and untolerated_taint(
            [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}], tolerations
        ):
            return [REASON_UNSCHEDULABLE], NodeVolumes()
        taint = untolerated_taint((node.get("spec") or {}).get("taints") or [], tolerations)
        if taint is not None:
            return [
                f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"
            ], NodeVolumes()
        if not node_affinity_ok(pod, node):
            return [REASON_AFFINITY], NodeVolumes()
        return filter_node(claims, node, snap)

    def _rank(self, pod: Obj, node: Obj, snap: Snapshot) -> tuple:
        name = node["metadata"]["name"]
        prefer = untolerated_taint(
            (node.get("spec") or {}).get("taints") or [],
            [t for t in (pod["spec"].get("tolerations") or []) if t.get("effect") in (None, "", "PreferNoSchedule")],
            ("PreferNoSchedule",),
        )
        pods = sum(
            1
            for p in snap.pods
            if (p.get("spec") or {}).get("nodeName") == name
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        with self._state:
            pods += sum(1 for a in self._assumed.values() if a.node == name)
        return (-preferred_score(pod, node), prefer is not None, pods, name)

    # ---- binding ---------------------------------------------------------------------------------

    def _bind_cycle(self, pod: Obj, assumed: Assumed) -> float | None:
        md = pod["metadata"]
        pkey = (md["namespace"], md["name"])
        try:
            if self._volumes_bound(pod, assumed):
                self._forget(pkey)
                return self._bind(pod, assumed.node)
        except BindError as err:
            self._forget(pkey)
            message = f'running PreBind plugin "VolumeBinding": binding volumes: {err}'
            self.kube.event(POD, pod, "Warning", "FailedScheduling", message)
            self._set_condition(pod, "SchedulerError", message)
            with self._state:
                self._waiting[pkey] = "unschedulable"
            return self.poll
        return self.poll

    def _volumes_bound(self, pod: Obj, assumed: Assumed) -> bool:
        node = self.kube.get(NODE, assumed.node)
        if node is None:
            self._release_selection(pod, assumed)
            raise BindError(f'failed to get node "{assumed.node}": node "{assumed.node}" not found')
        labels = node["metadata"].get("labels") or {}
        done = True
        ns = pod["metadata"]["namespace"]
        for pv0, pvc0 in assumed.volumes.static:
            pv = self.kube.get(PV, pv0["metadata"]["name"])
            pvc = self.kube.get(PVC, pvc0["metadata"]["name"], ns)
            if pv is None or pvc is None:
                raise BindError(f'failed to check binding: "{pv0["metadata"]["name"]}" not found')
            if not pv_affinity_ok(pv, labels):
                raise BindError(
                    f'pv "{pv["metadata"]["name"]}" node affinity doesn\'t match node "{assumed.node}":'
                    " no matching NodeSelectorTerms"
                )
            if not (pv["spec"].get("claimRef") or {}).get("uid"):
                raise BindError(f'ClaimRef got reset for pv "{pv["metadata"]["name"]}"')
            done = done and fully_bound(pvc)
        for pvc0 in assumed.volumes.provision:
            name = pvc0["metadata"]["name"]
            pvc = self.kube.get(PVC, name, ns)
            if pvc is None:
                raise BindError(f'failed to check provisioning pvc: "{ns}/{name}" not found')
            if (pvc["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE) != assumed.node:
                raise BindError(f'provisioning failed for PVC "{name}"')
            volume = pvc["spec"].get("volumeName")
            if volume:
                pv = self.kube.get(PV, volume)
                if pv is None:
                    done = False
                    continue
                if not pv_affinity_ok(pv, labels):
                    raise BindError(
                        f'pv "{volume}" node affinity doesn\'t match node "{assumed.node}": no matching'
                        " NodeSelectorTerms"
                    )
            done = done and fully_bound(pvc)
        if not done and time.monotonic() > assumed.deadline:
            self._release_selection(pod, assumed)
            raise BindError("context deadline exceeded")
        return done

    def _release_selection(self, pod: Obj, assumed: Assumed) -> None:
        """Remove the selected-node annotations this scheduler set on claims still unbound."""
        for name in assumed.selected:
            pvc = self.kube.get(PVC, name, pod["metadata"]["namespace"])
            if pvc is None or (pvc.get("spec") or {}).get("volumeName"):
                continue
            if (pvc["metadata"].get("annotations") or {}).get(ANN_SELECTED_NODE) == assumed.node:
                self.kube.patch(
                    PVC, name, {"metadata": {"annotations": {ANN_SELECTED_NODE: None}}}, pod["metadata"]["namespace"]
                )

    def _bind(self, pod: Obj, node: str) -> None:
        from kubernetes.client.exceptions import ApiException

        md = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": md["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.kube.core.create_namespaced_pod_binding(md["name"], md["namespace"], body, _preload_content=False)
        except ApiException as err:
            if err.status in (404, 409):  # deleted, or bound by someone else meanwhile
                self._forget((md["namespace"], md["name"]))
                return None
            raise
        self._forget((md["namespace"], md["name"]))
        self.kube.event(
            POD, pod, "Normal", "Scheduled", f"Successfully assigned {md['namespace']}/{md['name']} to {node}"
        )
        return None

    # ---- status ----------------------------------------------------------------------------------

    def _unschedulable(self, pod: Obj, message: str) -> float:
        md = pod["metadata"]
        with self._state:
            self._waiting[(md["namespace"], md["name"])] = "unschedulable"
        self.kube.event(POD, pod, "Warning", "FailedScheduling", message)  # before the condition, as upstream
        self._set_condition(pod, "Unschedulable", message)
        return self.retry_interval

    def _set_condition(self, pod: Obj, reason: str, message: str) -> None:
        md = pod["metadata"]
        current = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        if (current.get("status"), current.get("reason"), current.get("message")) == ("False", reason, message):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": current.get("lastTransitionTime")
            if current.get("status") == "False"
            else rfc3339(time.time()),
        }
        written = self.kube.patch(
            POD,
            md["name"],
            {"status": {"conditions": [condition]}},
            md["namespace"],
            status=True,
            content_type=STRATEGIC,
        )
        with self._state:
            self._written[(md["namespace"], md["name"])] = written["metadata"].get("resourceVersion", "")

    def _forget(self, pkey: tuple[str, str]) -> None:
        with self._state:
            self._waiting.pop(pkey, None)
            self._assumed.pop(pkey, None)
            self._written.pop(pkey, None)

    def waiting(self) -> dict[tuple[str, str], str]:
        """Pods not bound yet: (namespace, name) -> "unschedulable" | "assumed" (diagnostics for tests)."""
        with self._state:
            return dict(self._waiting)


def _preemption(n: int) -> str:
    return f"preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."


def _served(kube: Kube, group: str, plural: str) -> bool:
    from kubernetes import client

    try:
        resources = client.StorageV1Api(kube.api_client).get_api_resources().resources or []
    except Exception:  # noqa: BLE001  (the group is not served at all)
        return False
    return group == "storage.k8s.io" and any(r.name == plural for r in resources)
