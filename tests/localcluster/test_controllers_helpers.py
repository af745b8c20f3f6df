"""Helpers for the local-cluster controller tests (no tests here): a running cluster, object builders, and waits
that follow the API with a watch instead of sleeping."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from localcluster import drivers
from localcluster.controllers import LocalControllers
from localcluster.controllers import names as n
from localcluster.controllers.kube import CSI_NODE, EVENT, NODE, PVC, Kube, Res
from localcluster.kubeapi.testing import Kube as Served
from localcluster.kubeapi.testing import serve
from localcluster.nodes import DEFAULT_NODES, NodeSpec
from localcluster.storage import VolumeStore

NS = "apps"
DRIVER = drivers.HOSTPATH.name
DISK = drivers.DISK.name
SC = "csi-hostpath-sc"  # the app's class (WaitForFirstConsumer)
MiB = 1 << 20
THREAD_PREFIXES = (
    "csi-volumes",
    "snapshot-controller",
    "group-snapshot-controller",
    "csi-snapshotter",
    "csi-group-snapshotter",
)


@dataclass
class Cluster:
    served: Served
    store: VolumeStore
    ctl: LocalControllers
    kube: Kube  # the tests' own client wrapper (plain dicts)

    @property
    def core(self):
        return self.served.core


@contextlib.contextmanager
def local_cluster(tmp_path, api: dict | None = None, nodes: bool = True, **settings) -> Iterator[Cluster]:
    """An emulator with the strict cluster's Node and CSINode objects (``localcluster.nodes.DEFAULT_NODES``, as
    their kubelets register them; no kubelet runs; ``nodes=False``: none), a volume store and the controllers;
    everything stopped (and loop devices detached) after."""
    before = set(threading.enumerate())  # another cluster's (a module fixture's) threads may be running
    with serve(tmp_path, namespaces=("default", NS), **(api or {})) as served:
        store = VolumeStore(tmp_path / "storage")
        ctl = LocalControllers(served.api, store, **settings)
        kube = Kube(served.client, "tests")
        try:
            for spec in DEFAULT_NODES if nodes else ():
                add_node(kube, spec)
            ctl.start()
            yield Cluster(served, store, ctl, kube)
        finally:
            try:
                ctl.stop()
            finally:
                store.detach_all()
    left = [t.name for t in threading.enumerate() if t not in before and t.name.startswith(THREAD_PREFIXES)]
    assert not left, f"controller threads still running: {left}"


def wait_for(
    kube: Kube,
    res: Res,
    name: str,
    predicate: Callable[[dict | None], bool],
    namespace: str | None = NS,
    timeout: float = 10.0,
) -> dict | None:
    """The object (None once deleted) as soon as ``predicate`` holds, following a watch; AssertionError on timeout."""
    from kubernetes import watch

    deadline = time.monotonic() + timeout
    items, rv = kube.list(res, namespace if res.namespaced else None)
    obj = next((o for o in items if o["metadata"]["name"] == name), None)
    while not predicate(obj):
        left = deadline - time.monotonic()
        if left <= 0:
            events = _events_of(kube, res, name, namespace)
            raise AssertionError(
                f"{res.kind} {namespace}/{name} never matched; its last events: {events}; last state: {obj}"
            )
        fn, args = kube.watch_call(res)
        w = watch.Watch(return_type="object")
        for event in w.stream(
            fn,
            *args,
            resource_version=rv,
            field_selector=f"metadata.name={name}",
            timeout_seconds=max(1, int(left + 0.999)),
        ):
            raw = event["raw_object"]
            rv = raw["metadata"]["resourceVersion"]
            if res.namespaced and raw["metadata"].get("namespace") != namespace:
                continue
            obj = None if event["type"] == "DELETED" else raw
            if predicate(obj):
                w.stop()
                break
    return obj


def _events_of(kube: Kube, res: Res, name: str, namespace: str | None) -> list[tuple[str, str, str]]:
    """The last five Events about object ``name`` of kind ``res`` (type, reason, message), oldest first."""
    items, _ = kube.list(EVENT, namespace if res.namespaced else None)
    mine = [e for e in items if (e.get("involvedObject") or {}).get("name") == name]
    mine = [e for e in mine if (e.get("involvedObject") or {}).get("kind") in (None, res.kind)]
    mine.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [(e.get("type"), e.get("reason"), e.get("message")) for e in mine[-5:]]


def wait_event(kube: Kube, name: str, reason: str, namespace: str = NS, timeout: float = 10.0) -> dict:
    """The Event with ``reason`` about object ``name`` in ``namespace`` (waits for it)."""
    deadline = time.monotonic() + timeout
    while True:
        items, rv = kube.list(EVENT, namespace)
        found = [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]
        if found:
            return found[-1]
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"no {reason} event for {name}; events: {[(e['reason'], e['message']) for e in items]}"
            )
        from kubernetes import watch

        fn, args = kube.watch_call(EVENT)
        w = watch.Watch(return_type="object")
        for event in w.stream(
            fn,
            *args,
            resource_version=rv,
            field_selector=f"involvedObject.name={name}",
            timeout_seconds=max(1, int(left + 0.999)),
        ):
            if event["raw_object"].get("reason") == reason:
                w.stop()
                break


def bound(obj: dict | None) -> bool:
    return obj is not None and (obj.get("status") or {}).get("phase") == "Bound"


def ready(obj: dict | None) -> bool:
    return obj is not None and (obj.get("status") or {}).get("readyToUse") is True


def gone(obj: dict | None) -> bool:
    return obj is None


def add_node(kube: Kube, spec: NodeSpec, csinode: bool = True) -> dict:
    """The Node (labels, taints) and, unless ``csinode=False``, the CSINode listing the CSI node plugins that run
    there, as the node's kubelet registers them."""
    node = kube.create(
        NODE,
        {"metadata": {"name": spec.name, "labels": spec.node_labels("amd64")}, "spec": {"taints": spec.taint_dicts()}},
    )
    if csinode:
        drivers = [
            {"name": d, "nodeID": spec.name, "topologyKeys": [key]} for d, key in sorted(spec.csi_drivers().items())
        ]
        kube.create(CSI_NODE, {"metadata": {"name": spec.name}, "spec": {"drivers": drivers}})
    return node


def pvc(
    name: str,
    size: str = "16Mi",
    mode: str = "Block",
    *,
    storage_class: str | None = SC,
    labels: dict | None = None,
    snapshot: str | None = None,
    node: str | None = None,
) -> dict:
    """A claim (``storage_class=None``: no class, i.e. the default one); ``node``: the scheduler's selected node."""
    spec = {"accessModes": ["ReadWriteOnce"], "volumeMode": mode, "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if snapshot is not None:
        spec["dataSource"] = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": snapshot}
    md = {"name": name, "labels": labels or {}}
    if node is not None:
        md["annotations"] = {n.ANN_SELECTED_NODE: node}
    return {"metadata": md, "spec": spec}


def snapshot(name: str, claim: str, snapshot_class: str | None = None) -> dict:
    spec = {"source": {"persistentVolumeClaimName": claim}}
    if snapshot_class:
        spec["volumeSnapshotClassName"] = snapshot_class
    return {"metadata": {"name": name}, "spec": spec}


def make_bound_claim(c: Cluster, name: str, node: str | None = "node-a", **kw) -> tuple[dict, dict]:
    """Create a claim with ``node`` selected (as the scheduler does for a pod using it) and wait until bound:
    (claim, its PV)."""
    from localcluster.controllers.kube import PV

    c.kube.create(PVC, pvc(name, node=node, **kw), NS)
    claim = wait_for(c.kube, PVC, name, bound)
    return claim, c.kube.get(PV, claim["spec"]["volumeName"])


def node_affinity(pv: dict) -> tuple[str, list[str]]:
    """(key, values) of a PV's one required node selector requirement."""
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert len(terms) == 1 and len(terms[0]["matchExpressions"]) == 1, terms
    expr = terms[0]["matchExpressions"][0]
    assert expr["operator"] == "In", expr
    return expr["key"], expr["values"]


def write_volume(c: Cluster, handle: str, writes: list[tuple[int, bytes]]) -> None:
    """pwrite through the block device the store attaches (a loop device where the machine allows), then detach."""
    import os

    att = c.store.attach(handle)
    try:
        fd = os.open(att.path, os.O_WRONLY)
        try:
            for offset, data in writes:
                os.pwrite(fd, data, offset)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        c.store.detach(handle)
