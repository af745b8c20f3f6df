"""The kubelet's side of the API: in-process reads and writes on the emulator (``api.rest``/``api.store``).

Reads return copies (None when absent); pod status writes go through the ``status`` subresource
and only land on the pod with the uid the kubelet runs (a pod deleted and re-created under the
same name is another pod); events are core/v1 Events like the kubelet's (aggregated by count).

The node (``register_node``): the Node of the kubelet's ``NodeSpec`` (labels, taints, capacity,
Ready, ``nodeInfo.operatingSystem``; the annotation ``csi.volume.kubernetes.io/nodeid`` naming the
CSI drivers whose node plugins run here) and, when the API serves it, its CSINode (each driver
with its topology key), as the kubelet's registration and plugin watcher do. A stopped kubelet
leaves the node Ready False with the ``node.kubernetes.io/not-ready:NoSchedule`` taint (the node
lifecycle controller's part, done here); the next registration removes that taint and keeps
taints others added.
"""

from __future__ import annotations

import copy
import json
import logging
import platform
import threading
import uuid
from typing import Any

from localcluster.kubeapi import ApiError, KubeAPI
from localcluster.kubeapi.meta import rfc3339
from localcluster.nodes import WINDOWS_BUILD_LABEL, NodeSpec

Obj = dict[str, Any]
log = logging.getLogger("localcluster.kubelet")

KUBELET_VERSION = "v1.33.0-localcluster"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
ARCH = _ARCH.get(platform.machine().lower(), platform.machine().lower())
NOT_READY = "node.kubernetes.io/not-ready"
NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"


class Cluster:
    def __init__(self, api: KubeAPI, spec: NodeSpec) -> None:
        self.api = api
        self.spec = spec
        self.node = spec.name
        self.store = api.store
        self.rest = api.rest
        self._events: dict[tuple[str, str, str, str], str] = {}  # (ns, pod uid, reason, message) -> event name
        self._lock = threading.Lock()

    def rt(self, plural: str, group: str = ""):
        return self.rest.registry.get(group, plural)

    def now(self) -> float:
        return self.api.clock()

    def stamp(self) -> str:
        return rfc3339(self.api.clock())

    def get(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None:
        rt = self.rt(plural, group)
        with self.store.lock:
            obj = self.store.find(rt, namespace, name)
            return copy.deepcopy(obj) if obj is not None else None

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.get("secrets", namespace, name)

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self.get("configmaps", namespace, name)

    # ---- pods ------------------------------------------------------------------------------------

    def pod_status(self, namespace: str, name: str, uid: str, status: Obj) -> bool:
        """Write the status of pod ``uid``; False when that pod is gone."""
        pods = self.rt("pods")
        with self.store.lock:
            current = self.store.find(pods, namespace, name)
            if current is None or current["metadata"]["uid"] != uid:
                return False
            if current.get("status") == status:
                return True
            body = {"metadata": {"name": name, "namespace": namespace}, "status": status}
            try:
                self.rest.update(pods, "v1", namespace, name, body, "status")
            except ApiError as err:
                log.warning("status of pod %s/%s: %s", namespace, name, err)
            return True

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Remove pod ``uid`` from the API (grace 0, a uid precondition), as the kubelet's status manager does
        once the pod's containers are gone and its volumes are cleaned up; a pod gone or replaced is left alone."""
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.rest.delete(self.rt("pods"), "v1", namespace, name, options)
        except ApiError as err:
            if err.code not in (404, 409):
                log.warning("deleting pod %s/%s: %s", namespace, name, err)

    def event(
        self,
        pod: Obj,
        reason: str,
        message: str,
        type_: str = "Normal",
        field_path: str = "",
        component: str = "kubelet",
    ) -> None:
        """A core/v1 Event about ``pod`` from ``component`` (the kubelet; ``attachdetach-controller`` for the
        attach errors the kubelet double reports in its place), aggregated by count as the recorder does."""
        md = pod["metadata"]
        ns = md["namespace"]
        events = self.rt("events")
        key = (ns, md["uid"], reason, message)
        now = self.stamp()
        try:
            with self._lock, self.store.lock:
                name = self._events.get(key)
                current = self.store.find(events, ns, name) if name else None
                if current is not None:
                    ev = copy.deepcopy(current)
                    ev["count"] = int(ev.get("count") or 1) + 1
                    ev["lastTimestamp"] = now
                    self.rest.update(events, "v1", ns, name, ev)
                    return
                name = f"{md['name']}.{uuid.uuid4().hex[:16]}"
                involved = {"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": md["name"], "uid": md["uid"]}
                if field_path:
                    involved["fieldPath"] = field_path
                self.rest.create(
                    events,
                    "v1",
                    ns,
                    {
                        "metadata": {"name": name, "namespace": ns},
                        "involvedObject": involved,
                        "reason": reason,
                        "message": message,
                        "type": type_,
                        "count": 1,
                        "firstTimestamp": now,
                        "lastTimestamp": now,
                        "source": {"component": component, "host": self.node},
                        "reportingComponent": component,
                        "reportingInstance": self.node,
                    },
                )
                self._events[key] = name
        except ApiError as err:  # e.g. the namespace is terminating
            log.debug("event %s for %s/%s: %s", reason, ns, md["name"], err)

    def forget_events(self, uid: str) -> None:
        with self._lock:
            for key in [k for k in self._events if k[1] == uid]:
                del self._events[key]

    # ---- the node --------------------------------------------------------------------------------

    def register_node(self) -> None:
        """Create or update the Node (labels, taints, Ready status) and its CSINode, as a kubelet registers."""
        nodes = self.rt("nodes")
        spec = self.spec
        labels = spec.node_labels(ARCH)
        drivers = spec.csi_drivers()
        annotations = {NODE_ID_ANNOTATION: json.dumps({d: self.node for d in sorted(drivers)}, separators=(",", ":"))}
        if not drivers:
            annotations = {}
        with self.store.lock:
            current = self.store.find(nodes, "", self.node)
            if current is None:
                node = {
                    "metadata": {"name": self.node, "labels": labels, "annotations": annotations},
                    "spec": {"taints": spec.taint_dicts()} if spec.taints else {},
                }
                self.rest.create(nodes, "v1", "", node)
            else:
                merged = copy.deepcopy(current)
                merged["metadata"].setdefault("labels", {}).update(labels)
                merged["metadata"].setdefault("annotations", {}).update(annotations)
                taints = [t for t in merged.setdefault("spec", {}).get("taints") or [] if t.get("key") != NOT_READY]
                taints += [t for t in spec.taint_dicts() if not any(_same_taint(t, o) for o in taints)]
                merged["spec"]["taints"] = taints
                if not taints:
                    del merged["spec"]["taints"]
                self.rest.update(nodes, "v1", "", self.node, merged)
            self._write_status(True)
        self._register_csi_node(drivers)

    def _register_csi_node(self, drivers: dict[str, str]) -> None:
        rt = self.rest.registry.get("storage.k8s.io", "csinodes")
        if rt is None:  # not served: the scheduler then knows nothing of the node plugins
            return
        body = {
            "metadata": {"name": self.node},
            "spec": {
                "drivers": [
                    {"name": d, "nodeID": self.node, "topologyKeys": [key]} for d, key in sorted(drivers.items())
                ]
            },
        }
        with self.store.lock:
            node = self.store.find(self.rt("nodes"), "", self.node)
            body["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": node["metadata"]["uid"]}
            ]
            current = self.store.find(rt, "", self.node)
            if current is None:
                self.rest.create(rt, "v1", "", body)
            else:
                merged = copy.deepcopy(current)
                merged["spec"] = body["spec"]
                self.rest.update(rt, "v1", "", self.node, merged)

    def node_not_ready(self) -> None:
        """Ready False and the not-ready NoSchedule taint (what the node lifecycle controller adds)."""
        nodes = self.rt("nodes")
        try:
            with self.store.lock:
                current = self.store.find(nodes, "", self.node)
                if current is None:
                    return
                merged = copy.deepcopy(current)
                taints = merged.setdefault("spec", {}).setdefault("taints", [])
                if not any(t.get("key") == NOT_READY for t in taints):
                    taints.append({"key": NOT_READY, "effect": "NoSchedule", "timeAdded": self.stamp()})
                    self.rest.update(nodes, "v1", "", self.node, merged)
                self._write_status(False)
        except ApiError as err:
            log.debug("node status: %s", err)

    def _write_status(self, ready: bool) -> None:
        body = {"metadata": {"name": self.node}, "status": self._node_status(ready, self.stamp())}
        self.rest.update(self.rt("nodes"), "v1", "", self.node, body, "status")

    def _node_status(self, ready: bool, now: str) -> Obj:
        import os

        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        capacity = {
            "cpu": str(os.cpu_count() or 1),
            "memory": f"{memory // 1024}Ki",
            "pods": "110",
            "ephemeral-storage": "100Gi",
        }
        windows = self.spec.os == "windows"
        return {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletStopped",
                    "message": "the local kubelet is posting ready status" if ready else "the local kubelet stopped",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": self.spec.os,
                "architecture": ARCH,
                "containerRuntimeVersion": "containerd://1.7.27" if windows else "localcluster://1",
                "osImage": "Windows Server 2022 Datacenter" if windows else platform.platform(),
                "kernelVersion": f"{self.spec.labels.get(WINDOWS_BUILD_LABEL, '10.0.20348')}.3207"
                if windows
                else platform.release(),
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }


def _same_taint(a: Obj, b: Obj) -> bool:
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")
