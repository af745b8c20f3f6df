"""Test helpers: an API emulator with a running kubelet, and waits on conditions (no fixed sleeps).

    with local_node(tmp_path, backoff=(0.05, 0.5)) as node:    # keyword arguments go to LocalKubelet
        node.core.create_namespaced_pod("default", pod_manifest("p", ["python", "-c", "print(1)"]))
        pod = wait_pod(node.core, "p", phase_in("Succeeded", "Failed"))

The kubelet is stopped (every process, attachment and mount point undone) and the server
stopped in every outcome.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.kubeapi.testing import Kube, serve
from localcluster.kubelet.kubelet import LocalKubelet
from localcluster.storage import VolumeStore


@dataclass
class Node:
    kube: Kube
    kubelet: LocalKubelet
    store: VolumeStore

    @property
    def core(self):
        return self.kube.core


@contextlib.contextmanager
def local_node(tmp_path: str | Path, api: dict[str, Any] | None = None, **kubelet_settings: Any) -> Iterator[Node]:
    tmp_path = Path(tmp_path)
    with serve(tmp_path, **(api or {})) as kube:
        store = VolumeStore(tmp_path / "volumes")
        kubelet = LocalKubelet(kube.api, store, workdir=tmp_path / "kubelet", **kubelet_settings)
        try:
            kubelet.start()
            yield Node(kube, kubelet, store)
        finally:
            kubelet.stop()
            store.detach_all()


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
    """Watch pod ``name`` until ``condition(pod)`` (a V1Pod) holds; the pod."""
    from kubernetes import watch

    pod = core.read_namespaced_pod(name, namespace)
    if condition(pod):
        return pod
    deadline = time.monotonic() + timeout
    rv = pod.metadata.resource_version
    while time.monotonic() < deadline:
        w = watch.Watch()
        left = max(1, int(deadline - time.monotonic() + 0.999))
        for event in w.stream(core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                              resource_version=rv, timeout_seconds=left):  # fmt: skip
            obj = event["object"]
            rv = obj.metadata.resource_version
            if event["type"] != "DELETED" and condition(obj):
                w.stop()
                return obj
            pod = obj
    raise TimeoutError(f"pod {namespace}/{name}: condition not met in {timeout}s; last status: {pod.status}")


def phase_in(*phases: str) -> Callable[[Any], bool]:
    return lambda pod: pod.status is not None and pod.status.phase in phases


def container_running(container: str) -> Callable[[Any], bool]:
    def check(pod) -> bool:
        for s in (pod.status and pod.status.container_statuses) or []:
            if s.name == container and s.state and s.state.running:
                return True
        return False

    return check


def pod_manifest(name: str, command: list[str] | None = None, *, image: str = "python:3-slim",
                 restart_policy: str = "Never", **container: Any) -> dict[str, Any]:  # fmt: skip
    """A one-container pod (container ``main``); ``container`` adds fields to the container."""
    c: dict[str, Any] = {"name": "main", "image": image, **container}
    if command is not None:
        c["command"] = command
    return {"metadata": {"name": name}, "spec": {"restartPolicy": restart_policy, "containers": [c]}}
