"""Test helpers: an API emulator with a running kubelet and scheduler, and waits on conditions (no fixed sleeps).

    with local_node(tmp_path, backoff=(0.05, 0.5)) as node:    # keyword arguments go to LocalKubelet
        node.core.create_namespaced_pod("default", pod_manifest("p", ["python", "-c", "print(1)"]))
        pod = wait_pod(node.core, "p", phase_in("Succeeded", "Failed"))

``local_node`` starts the API, the scheduler (``localcluster.controllers.scheduler``; it binds
pods to the node, as nothing else does; ``scheduler=False`` leaves that to the test, e.g. pods
created with ``spec.nodeName``) and one kubelet (``node``: a ``NodeSpec`` or a name, default
``local-node``). ``local_nodes`` starts one kubelet per node (default: the strict cluster's
``DEFAULT_NODES``) on one VolumeStore; ``start_scheduler`` starts a scheduler on any API.
Everything is stopped (every process, attachment and mount point undone) in every outcome.
A ``wait_pod`` that times out names the pod's phase, its containers' waiting reasons and its last Events
(``recent_events``: FailedMount, FailedAttachVolume, ...), so that a pod left Pending says why.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.kubeapi.testing import Kube, serve
from localcluster.kubelet.kubelet import LocalKubelet
from localcluster.kubelet.volumes import Attachments
from localcluster.nodes import DEFAULT_NODES, NodeSpec
from localcluster.storage import VolumeStore


@dataclass
class Node:
    kube: Kube
    kubelet: LocalKubelet
    store: VolumeStore
    scheduler: Any = None

    @property
    def core(self):
        return self.kube.core


@contextlib.contextmanager
def local_node(
    tmp_path: str | Path, api: dict[str, Any] | None = None, *, scheduler: bool = True, **kubelet_settings: Any
) -> Iterator[Node]:
    tmp_path = Path(tmp_path)
    with serve(tmp_path, **(api or {})) as kube, contextlib.ExitStack() as stack:
        store = VolumeStore(tmp_path / "volumes")
        stack.callback(store.detach_all)
        started = start_scheduler(kube.api, stack) if scheduler else None
        kubelet = LocalKubelet(kube.api, store, workdir=tmp_path / "kubelet", **kubelet_settings)
        stack.callback(kubelet.stop)
        kubelet.start()
        yield Node(kube, kubelet, store, started)


@dataclass
class Nodes:
    kube: Kube
    kubelets: dict[str, LocalKubelet]
    store: VolumeStore
    scheduler: Any = None

    @property
    def core(self):
        return self.kube.core


@contextlib.contextmanager
def local_nodes(
    tmp_path: str | Path,
    nodes: Sequence[NodeSpec] = DEFAULT_NODES,
    api: dict[str, Any] | None = None,
    *,
    scheduler: bool = True,
    **kubelet_settings: Any,
) -> Iterator[Nodes]:
    """``local_node`` with one kubelet per node (default: the strict cluster's node-a, node-b and win-a),
    sharing one VolumeStore (and its attachments)."""
    tmp_path = Path(tmp_path)
    with serve(tmp_path, **(api or {})) as kube, contextlib.ExitStack() as stack:
        store = VolumeStore(tmp_path / "volumes")
        stack.callback(store.detach_all)
        started = start_scheduler(kube.api, stack) if scheduler else None
        attachments = Attachments(store)
        kubelets = {}
        for spec in nodes:
            kubelet = LocalKubelet(
                kube.api,
                store,
                node=spec,
                workdir=tmp_path / "kubelet" / spec.name,
                attachments=attachments,
                **kubelet_settings,
            )
            stack.callback(kubelet.stop)
            kubelet.start()
            kubelets[spec.name] = kubelet
        yield Nodes(kube, kubelets, store, started)


def start_scheduler(api: Any, stack: contextlib.ExitStack, **settings: Any):
    """A running ``Scheduler`` on ``api`` (admin token, over HTTP), stopped by ``stack``."""
    from localcluster.controllers.cluster import api_client_for
    from localcluster.controllers.kube import Kube as ControllerKube
    from localcluster.controllers.scheduler import Scheduler

    client = api_client_for(api)
    stack.callback(client.close)
    scheduler = Scheduler(ControllerKube(client, "default-scheduler"), **settings)
    scheduler.start()
    stack.callback(scheduler.stop)
    return scheduler


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy (which is returned)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def wait_pod(core, name: str, condition: Callable[[Any], bool], namespace: str = "default", timeout: float = 20.0):
    """Watch pod ``name`` until ``condition(pod)`` (a V1Pod) holds; the pod. On timeout a ``TimeoutError`` names
    the pod's phase, its containers' waiting reasons and its last Events (``recent_events``), then its status."""
    from kubernetes import watch

    pod = core.read_namespaced_pod(name, namespace)
    if condition(pod):
        return pod
    deadline = time.monotonic() + timeout
    rv = pod.metadata.resource_version
    while time.monotonic() < deadline:
        w = watch.Watch()
        left = max(1, int(deadline - time.monotonic() + 0.999))
        for event in w.stream(
            core.list_namespaced_pod,
            namespace,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            timeout_seconds=left,
        ):
            obj = event["object"]
            rv = obj.metadata.resource_version
            if event["type"] != "DELETED" and condition(obj):
                w.stop()
                return obj
            pod = obj
    waiting = [
        f"{s.name}: {s.state.waiting.reason}"
        for s in (pod.status and pod.status.container_statuses) or []
        if s.state and s.state.waiting
    ]
    raise TimeoutError(
        f"pod {namespace}/{name}: condition not met in {timeout}s (phase {pod.status and pod.status.phase}"
        f"{'; ' + ', '.join(waiting) if waiting else ''}); its last events:\n"
        f"{recent_events(core, namespace, name)}\nlast status: {pod.status}"
    )


def recent_events(core, namespace: str, name: str, kind: str = "Pod", limit: int = 5) -> str:
    """The last ``limit`` Events about object ``kind`` ``name`` in ``namespace``, one per line
    (``Warning FailedMount (x3): message``), oldest first; ``"  (none)"`` when there is none."""
    try:
        items = core.list_namespaced_event(namespace).items
    except Exception as err:  # noqa: BLE001  (the API is gone: say so rather than hide the timeout)
        return f"  (events not readable: {err})"
    mine = [e for e in items if e.involved_object.name == name and e.involved_object.kind == kind]
    mine.sort(key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp or ""))
    lines = [f"  {e.type} {e.reason} (x{e.count or 1}): {e.message}" for e in mine[-limit:]]
    return "\n".join(lines) or "  (none)"


def phase_in(*phases: str) -> Callable[[Any], bool]:
    return lambda pod: pod.status is not None and pod.status.phase in phases


def container_running(container: str) -> Callable[[Any], bool]:
    def check(pod) -> bool:
        for s in (pod.status and pod.status.container_statuses) or []:
            if s.name == container and s.state and s.state.running:
                return True
        return False

    return check


def pod_manifest(
    name: str,
    command: list[str] | None = None,
    *,
    image: str = "python:3-slim",
    restart_policy: str = "Never",
    **container: Any,
) -> dict[str, Any]:
    """A one-container pod (container ``main``); ``container`` adds fields to the container."""
    c: dict[str, Any] = {"name": "main", "image": image, **container}
    if command is not None:
        c["command"] = command
    return {"metadata": {"name": name}, "spec": {"restartPolicy": restart_policy, "containers": [c]}}
