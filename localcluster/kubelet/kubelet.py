"""``LocalKubelet``: runs the emulator's pods as local processes, from a thread of this process.

    with KubeAPI() as api, LocalKubelet(api, VolumeStore(tmp / "vols")) as kubelet:
        ...   # pods created through the API run here; pods/log and pods/exec are served

Settings (keyword-only):
- ``node``: the Node it registers and runs pods for: a ``localcluster.nodes.NodeSpec`` (name, os,
  zone, labels, taints) or a name (a Linux node). It runs only pods bound to it (``spec.nodeName``,
  set by the scheduler through pods/binding, or by the pod's author); a Windows node refuses Linux
  images (ErrImagePull) and Block volumes (FailedMapVolume) and mounts NTFS.
- ``images``: the image table (``images.py``; default ``default_images()``).
- ``workdir``: where pods' files go (logs, volumes, plans); a temporary directory by default,
  removed on stop (a given one is kept, only the pods' directories in it are removed).
- ``isolation``: "auto" (default), "namespace" or "rewrite" (``sandbox.py``).
- ``grace_cap``: the longest termination grace period honoured, seconds (default 5).
- ``backoff``: (initial, maximum) restart back-off in seconds (default 0.5, 10; upstream 10, 300).
- ``sync_interval``: seconds between periodic syncs (token refresh, retries; default 1).
- ``exec_timeout``: longest an exec may run, seconds (default 600).
- ``automount_service_account_token``: add the kube-api-access volume (default True).
- ``in_cluster_endpoint``: serve the emulator to pods over TLS (``apiproxy.py``) and give them
  KUBERNETES_SERVICE_HOST/PORT, so ``load_incluster_config()`` works in them (default True).
- ``attachments``: the ``volumes.Attachments`` to share with the other kubelets on the same
  ``VolumeStore`` (a volume used on two nodes stays attached until both are done); its own otherwise.
- ``mkfs_path``: the PATH in which it finds ``mkfs.*`` / ``mkntfs`` to format blank Filesystem volumes
  (default: its process's PATH); a test points it at an empty directory to see what a node without them does.

It watches pods (and wakes waiting pods on changes of claims, volumes, secrets, config maps and
service accounts) through in-process subscriptions on ``api.store`` and writes status through
``api.rest``; ``pods/log`` and ``pods/exec`` are plugged in with ``api.add_subresource``.
``pods/log`` and ``pods/exec`` of several kubelets on one API go to the kubelet of the pod's node
(``routing.py``). ``stop()`` kills every process (SIGTERM, then SIGKILL), detaches every volume it
attached, removes the mount points it created and its files, whatever happened before, and leaves
its Node NotReady with the not-ready taint.

Deletion: a pod bound to this node that gets ``deletionTimestamp`` (the API deletes pods gracefully) is
killed; once its processes are gone and its volumes released the kubelet deletes it with grace 0 and its
uid as precondition, as upstream's status manager does. A Terminating pod with nothing running here (one
deleted before it started, or while no kubelet ran) is deleted so at once. A pod of a node whose kubelet
is stopped stays Terminating, as on a real cluster whose node is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster.kubeapi import KubeAPI
from localcluster.kubeapi.store import Event, Subscription
from localcluster.kubelet import execs, logs, routing
from localcluster.kubelet.apiproxy import ApiTlsFront
from localcluster.kubelet.cluster import Cluster
from localcluster.kubelet.images import ImageTable, normalize
from localcluster.kubelet.pods import ContainerRun, PodWorker
from localcluster.kubelet.runtime import kill_group
from localcluster.kubelet.sandbox import Sandbox
from localcluster.kubelet.volumes import Attachments
from localcluster.nodes import NodeSpec, node_spec
from localcluster.storage import VolumeStore

log = logging.getLogger("localcluster.kubelet")
_WAKING_KINDS = ("persistentvolumeclaims", "persistentvolumes", "secrets", "configmaps", "serviceaccounts")


class LocalKubelet:
    def __init__(
        self,
        api: KubeAPI,
        store: VolumeStore,
        *,
        node: str | NodeSpec = "local-node",
        images: ImageTable | None = None,
        workdir: str | os.PathLike | None = None,
        isolation: str = "auto",
        grace_cap: float = 5.0,
        backoff: tuple[float, float] = (0.5, 10.0),
        sync_interval: float = 1.0,
        exec_timeout: float = 600.0,
        automount_service_account_token: bool = True,
        in_cluster_endpoint: bool = True,
        attachments: Attachments | None = None,
        mkfs_path: str | None = None,
    ) -> None:
        self.api = api
        self.store = store
        self.spec = node_spec(node)
        self.node = self.spec.name
        self.images = normalize(images)
        self._given_workdir = Path(workdir) if workdir is not None else None
        self.workdir = self._given_workdir or Path()
        self.isolation_setting = isolation
        self.grace_cap = grace_cap
        self.backoff = backoff
        self.sync_interval = sync_interval
        self.exec_timeout = exec_timeout
        self.automount = automount_service_account_token
        self.in_cluster_endpoint = in_cluster_endpoint
        self.api_front: ApiTlsFront | None = None
        self.cluster = Cluster(api, self.spec)
        self.attachments = attachments if attachments is not None else Attachments(store)
        self.mkfs_path = mkfs_path
        self.sandbox: Sandbox = None  # type: ignore[assignment]  (set by start)
        self.lock = threading.Lock()  # guards _workers/_names (read by the log and exec handlers)
        self._workers: dict[str, PodWorker] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._groups: set[int] = set()  # every live process group (containers and execs), for the last resort
        self._subs: list[Subscription] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tick: asyncio.Task | None = None
        self._handlers: dict[str, Callable] = {}
        self._finishing: set[asyncio.Task] = set()
        self.stopping = False

    @property
    def isolation(self) -> str:
        """The isolation in use: namespace or rewrite (after start)."""
        return self.sandbox.isolation if self.sandbox is not None else self.isolation_setting

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LocalKubelet:
        if self._thread is not None:
            raise RuntimeError("LocalKubelet already started")
        self.sandbox = Sandbox(self.isolation_setting)
        if self._given_workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="localkubelet-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "pods").mkdir(exist_ok=True)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kubelet", daemon=True)
        self._thread.start()
        try:
            self.cluster.register_node()
            asyncio.run_coroutine_threadsafe(self._astart(), self._loop).result(30)
            self._handlers = {"log": logs.handler(self), "exec": execs.handler(self)}
            for sub, handler in self._handlers.items():
                routing.attach(self.api, sub, self.node, handler)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def endpoint(self) -> tuple[str, int] | None:
        """(host, port) of the in-cluster API endpoint pods get (https), if any."""
        return (self.api_front.host, self.api_front.port) if self.api_front is not None else None

    async def _astart(self) -> None:
        if self.in_cluster_endpoint:
            front = ApiTlsFront(self.api.url, self.workdir / "apiserver")
            try:
                await front.start()
                self.api_front = front
            except ImportError as err:  # no cryptography: pods get no KUBERNETES_SERVICE_* variables
                log.warning("no in-cluster API endpoint: %s", err)
        store = self.api.store
        pods = self.cluster.rt("pods")
        with store.lock:
            existing = [Event(0, "ADDED", pods.key, obj, None) for obj in store.items(pods)]
            _, sub = store.subscribe(pods.key, None, self._post(self._on_pod))
            self._subs.append(sub)
            for plural in _WAKING_KINDS:
                _, sub = store.subscribe(self.cluster.rt(plural).key, None, self._post(self._on_change))
                self._subs.append(sub)
        for event in existing:
            self._on_pod(event)
        self._tick = asyncio.create_task(self._ticker())

    def _post(self, fn: Callable[[Event], None]) -> Callable[[Event], None]:
        loop = self._loop
        assert loop is not None

        def deliver(event: Event) -> None:  # the writer's thread, under the store lock: never block
            with contextlib.suppress(RuntimeError):  # the loop is closed: the kubelet stopped
                loop.call_soon_threadsafe(fn, event)

        return deliver

    def stop(self) -> None:
        """Kill everything, undo every attachment, mount point and file; safe to call more than once."""
        loop, thread = self._loop, self._thread
        self.stopping = True
        for sub in self._subs:
            sub.close()
        self._subs.clear()
        for sub, handler in self._handlers.items():
            routing.detach(self.api, sub, self.node, handler)
        self._handlers = {}
        try:
            if loop is not None and loop.is_running():
                future = asyncio.run_coroutine_threadsafe(self._astop(), loop)
                try:
                    future.result(self.grace_cap + 30)
                except Exception:  # noqa: BLE001  (a timeout included: the last resort below runs anyway)
                    log.exception("stopping the kubelet")
        finally:
            with self.lock:
                groups = list(self._groups)
                self._groups.clear()
            for pgid in groups:  # the last resort: nothing survives the kubelet
                kill_group(pgid, signal.SIGKILL)
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(30)
                if not loop.is_running():
                    loop.close()
            self._loop = self._thread = None
            self.attachments.release_all(self)
            if self.sandbox is not None:
                self.sandbox.host_paths.release_all()
            with self.lock:
                workers = list(self._workers.values())
                self._workers.clear()
                self._names.clear()
            for worker in workers:
                worker.remove_files()
            if self._given_workdir is None and self.workdir != Path():
                shutil.rmtree(self.workdir, ignore_errors=True)
            self.cluster.node_not_ready()

    async def _astop(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick
        workers = list(self._workers.values())
        await asyncio.gather(*(w.terminate() for w in workers), *self._finishing, return_exceptions=True)
        if self.api_front is not None:
            await self.api_front.stop()
            self.api_front = None

    def __enter__(self) -> LocalKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- events ----------------------------------------------------------------------------------

    def _on_pod(self, event: Event) -> None:
        obj = event.obj
        md, spec = obj["metadata"], obj.get("spec") or {}
        uid = md["uid"]
        worker = self._workers.get(uid)
        if event.type == "DELETED":
            if worker is not None:
                task = asyncio.create_task(self._finish(worker))
                self._finishing.add(task)
                task.add_done_callback(self._finishing.discard)
            return
        if spec.get("nodeName") != self.node:  # unscheduled (the scheduler binds it) or another node's
            return
        if worker is None:
            if md.get("deletionTimestamp"):  # nothing of it runs here: its deletion completes at once
                self.cluster.delete_pod(md["namespace"], md["name"], uid)
                return
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            worker = PodWorker(self, obj)
            with self.lock:
                self._workers[uid] = worker
                self._names[(md["namespace"], md["name"])] = uid
            worker.start()
            return
        worker.pod = worker.volumes.pod = obj  # fresh labels and annotations for the downward API
        if md.get("deletionTimestamp"):
            worker.kill()
            if not worker.removing:
                worker.removing = True
                task = asyncio.create_task(self._complete_deletion(worker))
                self._finishing.add(task)
                task.add_done_callback(self._finishing.discard)

    def _on_change(self, event: Event) -> None:
        for worker in list(self._workers.values()):
            worker.wake()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.sync_interval)
            for worker in list(self._workers.values()):
                worker.wake()

    async def _complete_deletion(self, worker: PodWorker) -> None:
        """A pod being deleted: once its processes are gone and its volumes released, remove it from the API
        (grace 0, its uid as precondition: the status manager's ``canBeDeleted``/``syncPod``)."""
        await worker.terminate()
        self.cluster.delete_pod(worker.ns, worker.name, worker.uid)

    async def _finish(self, worker: PodWorker) -> None:
        await worker.terminate()
        await asyncio.to_thread(worker.remove_files)
        with self.lock:
            self._workers.pop(worker.uid, None)
            if self._names.get((worker.ns, worker.name)) == worker.uid:
                del self._names[(worker.ns, worker.name)]
        self.cluster.forget_events(worker.uid)

    # ---- for the handlers and the workers --------------------------------------------------------

    def worker(self, namespace: str, name: str, uid: str | None = None) -> PodWorker | None:
        with self.lock:
            key = uid or self._names.get((namespace, name))
            return self._workers.get(key) if key else None

    def track(self, pgid: int) -> None:
        with self.lock:
            self._groups.add(pgid)

    def untrack(self, pgid: int) -> None:
        with self.lock:
            self._groups.discard(pgid)

    def kill_execs(self, container: ContainerRun) -> None:
        for pgid in list(container.exec_groups):
            kill_group(pgid, signal.SIGKILL)

    def container_pid(self, namespace: str, name: str, container: str) -> int | None:
        """The pid of a running container's process (for tests and debugging)."""
        worker = self.worker(namespace, name)
        c = worker.container(container) if worker is not None else None
        with worker.lock if worker is not None else contextlib.nullcontext():
            return c.process.pid if c is not None and c.process is not None and c.running else None

    def pod_dir(self, namespace: str, name: str) -> Path | None:
        worker = self.worker(namespace, name)
        return worker.dir if worker is not None else None

    def describe(self) -> dict[str, Any]:
        with self.lock:
            return {f"{w.ns}/{w.name}": {c.name: c.state for c in w.all_containers()} for w in self._workers.values()}
