"""The kubelet's side of the API: in-process reads and writes on the emulator (``api.rest``/``api.store``).

Reads return copies (None when absent); pod status writes go through the ``status`` subresource
and only land on the pod with the uid the kubelet runs (a pod deleted and re-created under the
same name is another pod); events are core/v1 Events like the kubelet's (aggregated by count).
"""

from __future__ import annotations

import copy
import logging
import platform
import threading
import uuid
from typing import Any

from localcluster.kubeapi import ApiError, KubeAPI
from localcluster.kubeapi.meta import rfc3339

Obj = dict[str, Any]
log = logging.getLogger("localcluster.kubelet")

KUBELET_VERSION = "v1.33.0-localcluster"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class Cluster:
    def __init__(self, api: KubeAPI, node: str) -> None:
        self.api = api
        self.node = node
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

    def bind(self, pod: Obj) -> None:
        md = pod["metadata"]
        try:
            self.rest.bind(md["namespace"], md["name"], {"target": {"kind": "Node", "name": self.node}})
        except ApiError as err:  # deleted or bound meanwhile: the next event says which
            log.debug("binding %s/%s: %s", md["namespace"], md["name"], err)

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

    def event(self, pod: Obj, reason: str, message: str, type_: str = "Normal", field_path: str = "") -> None:
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
                self.rest.create(events, "v1", ns, {
                    "metadata": {"name": name, "namespace": ns}, "involvedObject": involved, "reason": reason,
                    "message": message, "type": type_, "count": 1, "firstTimestamp": now, "lastTimestamp": now,
                    "source": {"component": "kubelet", "host": self.node}, "reportingComponent": "kubelet",
                    "reportingInstance": self.node,
                })  # fmt: skip
                self._events[key] = name
        except ApiError as err:  # e.g. the namespace is terminating
            log.debug("event %s for %s/%s: %s", reason, ns, md["name"], err)

    def forget_events(self, uid: str) -> None:
        with self._lock:
            for key in [k for k in self._events if k[1] == uid]:
                del self._events[key]

    # ---- the node --------------------------------------------------------------------------------

    def register_node(self) -> None:
        nodes = self.rt("nodes")
        arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
        now = self.stamp()
        node = {
            "metadata": {"name": self.node, "labels": {
                "kubernetes.io/os": "linux", "kubernetes.io/arch": arch, "kubernetes.io/hostname": self.node,
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}},
            "spec": {},
            "status": self._node_status(True, now, arch),
        }  # fmt: skip
        with self.store.lock:
            current = self.store.find(nodes, "", self.node)
            if current is None:
                self.rest.create(nodes, "v1", "", node)
                return
            merged = copy.deepcopy(current)
            merged["metadata"].setdefault("labels", {}).update(node["metadata"]["labels"])
            self.rest.update(nodes, "v1", "", self.node, merged)
            self.rest.update(nodes, "v1", "", self.node, {"metadata": {"name": self.node}, "status": node["status"]},
                             "status")  # fmt: skip

    def node_not_ready(self) -> None:
        nodes = self.rt("nodes")
        arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
        try:
            with self.store.lock:
                if self.store.find(nodes, "", self.node) is not None:
                    self.rest.update(nodes, "v1", "", self.node, {"metadata": {"name": self.node},
                                     "status": self._node_status(False, self.stamp(), arch)}, "status")  # fmt: skip
        except ApiError as err:
            log.debug("node status: %s", err)

    def _node_status(self, ready: bool, now: str, arch: str) -> Obj:
        import os

        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        capacity = {"cpu": str(os.cpu_count() or 1), "memory": f"{memory // 1024}Ki", "pods": "110",
                    "ephemeral-storage": "100Gi"}  # fmt: skip
        return {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [{
                "type": "Ready", "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletStopped",
                "message": "the local kubelet is posting ready status" if ready else "the local kubelet stopped",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux",
                "architecture": arch, "containerRuntimeVersion": "localcluster://1", "osImage": platform.platform(),
                "kernelVersion": platform.release(), "machineID": "", "systemUUID": "", "bootID": "",
            },
        }  # fmt: skip
