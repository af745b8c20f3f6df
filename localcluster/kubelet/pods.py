"""One pod on the local node: volumes, init containers in order, containers, restarts, status.

``PodWorker.run`` (a task on the kubelet's loop): set up the volumes (waiting, with FailedMount
events, until claims are bound and objects exist), run the init containers one after the other
(each must exit 0), then the containers side by side, restarting them per ``restartPolicy``
(Always; OnFailure: a non-zero exit; Never) after an exponential back-off (CrashLoopBackOff).
``kill`` stops every process (SIGTERM, SIGKILL after the grace period, capped by the kubelet's
``grace_cap``). When every container is done the volumes are released (loop devices detached);
the pod's files (logs) stay until the pod is deleted.

Status as the kubelet reports it: phase (Pending until a container has started; Running;
Succeeded when every container exited 0 for good; Failed when one failed for good or an init
container failed under Never), the conditions PodReadyToStartContainers, Initialized,
ContainersReady, Ready and PodScheduled, and init/containerStatuses with waiting
(ContainerCreating, PodInitializing, CreateContainerConfigError, ErrImagePull, CrashLoopBackOff),
running and terminated (exitCode, reason Completed/Error/StartError, message from the
termination-message file or, under FallbackToLogsOnError, the log's tail) states, lastState and
restartCount. Readiness/liveness probes and lifecycle hooks are not run (a running container is
ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from localcluster.kubelet import security
from localcluster.kubelet.images import ImageError, argv_of, lookup, platform_error
from localcluster.kubelet.podenv import HOST_IP, POD_IP, ConfigError, base_env, container_env, expand
from localcluster.kubelet.runtime import LogFile, Process, end_daemons, termination_message
from localcluster.kubelet.sandbox import Bind, FsMount
from localcluster.kubelet.volumes import PodVolumes, Volume, VolumeError, VolumeNotReady
from localcluster.storage import StorageError

if TYPE_CHECKING:
    from localcluster.kubelet.apiproxy import ApiTlsFront
    from localcluster.kubelet.cluster import Cluster
    from localcluster.kubelet.images import ImageTable
    from localcluster.kubelet.sandbox import Sandbox
    from localcluster.kubelet.volumes import Attachments
    from localcluster.nodes import NodeSpec

Obj = dict[str, Any]
log = logging.getLogger("localcluster.kubelet")


class PodHost(Protocol):
    """What a ``PodWorker`` needs from the kubelet that runs it (``LocalKubelet`` is one; this module does not
    import it): the node and its work directory, the API view, the attachments, the sandbox, the image table, the
    limits (``grace_cap``, ``backoff``), the in-cluster endpoint, and the bookkeeping of process groups."""

    workdir: Path
    spec: NodeSpec
    cluster: Cluster
    attachments: Attachments
    sandbox: Sandbox
    images: ImageTable
    automount: bool
    api_front: ApiTlsFront | None
    mkfs_path: str | None
    grace_cap: float
    backoff: tuple[float, float]

    @property
    def endpoint(self) -> tuple[str, int] | None: ...

    def track(self, pgid: int) -> None: ...

    def untrack(self, pgid: int) -> None: ...

    def kill_execs(self, container: ContainerRun) -> None: ...


class ContainerRun:
    """A container across its restarts."""

    def __init__(self, spec: Obj, init: bool, pod_dir: Path, waiting: str) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.init = init
        self.dir = pod_dir / "containers" / self.name
        self.restart_count = 0
        self.state: Obj = {"waiting": {"reason": waiting}}
        self.last_state: Obj = {}
        self.final = False  # terminated and will not be restarted
        self.process: Process | None = None
        self.instance = -1
        self.pull_failures = 0
        self.logs: list[Path] = []
        # what an exec runs with: the container's environment, working directory and path map
        self.env: dict[str, str] = {}
        self.working_dir = "/"
        self.mapping: dict[str, str] = {}
        self.exec_groups: set[int] = set()
        self.user: str | None = None  # who it runs as (``security.ContainerUser.spec``; None: root)

    @property
    def running(self) -> bool:
        return "running" in self.state and self.process is not None and self.process.proc.returncode is None

    def status(self, uid: str) -> Obj:
        out: Obj = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"local://{self.spec.get('image', '')}",
            "ready": self.running if not self.init else self.final and self._exit_code() == 0,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.instance >= 0:
            out["containerID"] = f"local://{uid}/{self.name}/{self.instance}"
        return out

    def _exit_code(self) -> int | None:
        return (self.state.get("terminated") or {}).get("exitCode")


class PodWorker:
    def __init__(self, kubelet: PodHost, pod: Obj) -> None:
        self.k = kubelet
        self.pod = pod
        md = pod["metadata"]
        self.ns, self.name, self.uid = md["namespace"], md["name"], md["uid"]
        self.dir = kubelet.workdir / "pods" / f"{self.ns}_{self.name}_{self.uid}"
        self.volumes = PodVolumes(
            kubelet.cluster,
            kubelet.attachments,
            pod,
            self.dir / "volumes",
            mount_fs=kubelet.sandbox.namespaces,
            automount=kubelet.automount,
            ca_pem=kubelet.api_front.ca_pem if kubelet.api_front else b"",
            owner=kubelet,
            node_os=kubelet.spec.os,
            plugins_dir=kubelet.workdir / "plugins",
            mkfs_path=kubelet.mkfs_path,
        )
        spec = pod["spec"]
        inits = spec.get("initContainers") or []
        self.inits = [ContainerRun(c, True, self.dir, "PodInitializing") for c in inits]
        self.containers = [
            ContainerRun(c, False, self.dir, "PodInitializing" if inits else "ContainerCreating")
            for c in spec.get("containers") or []
        ]
        self.lock = threading.Lock()  # guards container state read by the log and exec handlers
        self.killing = False
        self.removing = False  # the kubelet completes the pod's deletion (it has deletionTimestamp)
        self.init_failed = False
        self.volumes_ready = False
        self.released = False
        self.start_time = kubelet.cluster.stamp()
        self._conditions: dict[str, tuple[str, str]] = {}
        self._waiters: list[asyncio.Future] = []
        self._stopping: asyncio.Task | None = None
        self.task: asyncio.Task | None = None

    # ---- entry points (the kubelet's loop) -------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"pod {self.ns}/{self.name}")

    def all_containers(self) -> list[ContainerRun]:
        return self.inits + self.containers

    def container(self, name: str) -> ContainerRun | None:
        return next((c for c in self.all_containers() if c.name == name), None)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def kill(self) -> None:
        if self.killing:
            return
        self.killing = True
        self.wake()
        self._stopping = asyncio.create_task(self._stop_processes())

    async def terminate(self) -> None:
        """Kill (if running) and wait until everything of the pod but its files is gone."""
        self.kill()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self._stopping is not None:
            await self._stopping

    def remove_files(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        sync: asyncio.Task | None = None
        try:
            self.publish()
            if not await self._setup_volumes():
                return
            sync = asyncio.create_task(self._sync_volumes())
            if not await self._run_inits():
                return
            await asyncio.gather(*(self._container_loop(c) for c in self.containers))
        except Exception as err:
            log.exception("pod %s/%s", self.ns, self.name)
            # a fault of the double itself: the pod still says why it stopped (as the kubelet's FailedSync)
            self.k.cluster.event(self.pod, "FailedSync", f"error syncing pod: {err!r}", "Warning")
            self.killing = True  # no restarts of what is stopped below
            self.wake()
        finally:
            if sync is not None:
                sync.cancel()
            for c in self.all_containers():
                if c.process is not None and c.process.proc.returncode is None:
                    await c.process.stop(0)
            await asyncio.to_thread(self._release)
            self.publish()

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self.volumes.teardown()

    async def _wait(self, timeout: float | None = None) -> None:
        """Until something the pod may be waiting for changed (or the kubelet's periodic sync)."""
        if self.killing:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fut, timeout)

    async def _sleep(self, delay: float) -> None:
        deadline = asyncio.get_running_loop().time() + delay
        while not self.killing:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            await self._wait(left)

    async def _setup_volumes(self) -> bool:
        while not self.killing:
            try:
                await asyncio.to_thread(self.volumes.setup)
                self.volumes_ready = True
                self.publish()
                return True
            except Exception as err:  # noqa: BLE001  (VolumeNotReady, StorageError, OSError, ...: retried)
                if not isinstance(err, (VolumeNotReady, StorageError, OSError)):
                    log.warning("volumes of pod %s/%s: %r", self.ns, self.name, err)
                if isinstance(err, VolumeError):
                    self.k.cluster.event(self.pod, err.reason, err.message, "Warning", component=err.component)
                else:
                    self.k.cluster.event(self.pod, "FailedMount", f"MountVolume.SetUp failed: {err}", "Warning")
                self.publish()
            await self._wait()
        return False

    async def _sync_volumes(self) -> None:
        while not self.killing:
            await self._wait()
            if self.killing:
                return
            try:
                await asyncio.to_thread(self.volumes.sync)
            except Exception as err:  # noqa: BLE001  (a vanished secret: keep the last files, as upstream)
                log.debug("volume sync of %s/%s: %s", self.ns, self.name, err)

    async def _run_inits(self) -> bool:
        for c in self.inits:
            while True:
                if self.killing:
                    return False
                code = await self._run_once(c)
                if code is None:
                    await self._wait()
                    continue
                if self.killing:
                    return False
                if code == 0:
                    c.final = True
                    self.publish()
                    break
                if self.pod["spec"].get("restartPolicy") == "Never":
                    c.final = True
                    self.init_failed = True
                    self.publish()
                    return False
                await self._back_off(c)
        for c in self.containers:
            with self.lock:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        self.publish()
        return True

    async def _container_loop(self, c: ContainerRun) -> None:
        policy = self.pod["spec"].get("restartPolicy") or "Always"
        while not self.killing:
            code = await self._run_once(c)
            if code is None:
                await self._wait()
                continue
            if self.killing:
                break
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                break
            await self._back_off(c)
        c.final = True
        self.publish()

    async def _back_off(self, c: ContainerRun) -> None:
        initial, cap = self.k.backoff
        delay = min(initial * (2**c.restart_count), cap)
        with self.lock:
            c.last_state = c.state
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed"
                    f" container={c.name} pod={self.name}_{self.ns}({self.uid})",
                }
            }
        self.publish()
        await self._sleep(delay)
        if not self.killing:
            c.restart_count += 1

    # ---- one container instance ------------------------------------------------------------------

    async def _run_once(self, c: ContainerRun) -> int | None:
        """Start ``c`` and wait for it to end: its exit code, or None when it could not be created."""
        field_path = f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"
        image = lookup(self.k.images, c.spec.get("image", ""))
        refused = platform_error(c.spec.get("image", ""), image, self.k.spec.os)
        if refused is not None:
            return self._pull_failed(c, refused, field_path)
        try:
            raw_argv = argv_of(c.spec, image)
            env = container_env(
                self.pod,
                c.spec,
                image,
                base_env(self.pod, self.k.endpoint),
                self.k.cluster.secret,
                self.k.cluster.configmap,
            )
            argv = [expand(a, env) for a in raw_argv]
            working_dir = self._path(c.spec.get("workingDir") or (image.working_dir if image else None) or "/")
            filesystems, binds = self._mounts(c, env)
            security.verify_non_root(self.pod, c.spec)
            user = security.container_user(self.pod, c.spec)
        except security.NonRootError as err:
            return self._not_created(c, "CreateContainerConfigError", str(err), field_path)
        except ImageError as err:
            return self._not_created(c, "ErrImagePull", str(err), field_path)
        except ConfigError as err:
            return self._not_created(c, "CreateContainerConfigError", str(err), field_path)
        except OSError as err:
            return self._not_created(c, "CreateContainerError", str(err), field_path)
        instance = c.restart_count
        c.dir.mkdir(parents=True, exist_ok=True)
        term, error_file = c.dir / "termination-log", c.dir / "start-error"
        term.write_bytes(b"")
        term.chmod(0o666)  # as the kubelet makes it: writable by a container of any user
        error_file.unlink(missing_ok=True)
        log_path = c.dir / f"{instance}.log"
        log_path.unlink(missing_ok=True)
        try:
            c.user = None if user.is_root else user.spec()
            launch = self.k.sandbox.container(
                c.dir / f"plan-{instance}.json", error_file, argv, env, working_dir, filesystems, binds, c.user
            )
        except OSError as err:
            return self._not_created(c, "CreateContainerError", str(err), field_path)
        logfile = LogFile(log_path)
        started = self.k.cluster.stamp()
        try:
            try:
                process = await Process.start(launch, logfile, self.k.track)
            except OSError as err:
                error_file.write_text(f"failed to start the container process: {err}")
                process = None
            if process is not None:
                with self.lock:
                    c.process, c.instance = process, instance
                    c.logs.append(log_path)
                    c.env, c.working_dir = env, working_dir
                    c.mapping = launch.mapping or {b.target: b.source for b in binds}
                    c.state = {"running": {"startedAt": started}}
                if self.killing:  # killed while it started: _stop_processes did not see it
                    await process.stop(self.grace())
                else:
                    self.k.cluster.event(self.pod, "Started", f"Started container {c.name}", field_path=field_path)
                    self.publish()
                code = await process.wait()
                self.k.untrack(process.pid)
            else:
                code = 128
                with self.lock:
                    c.instance = instance
                    c.logs.append(log_path)
        finally:
            logfile.close()
            for top in launch.host_paths:
                self.k.sandbox.host_paths.release(top)
            self.k.kill_execs(c)
            await self._end_fuse(launch)
        start_error = error_file.read_text() if error_file.exists() else ""
        reason = "StartError" if start_error else "Completed" if code == 0 else "Error"
        message = start_error or termination_message(
            term, c.spec.get("terminationMessagePolicy") or "File", code, log_path
        )
        terminated: Obj = {
            "exitCode": code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": self.k.cluster.stamp(),
            "containerID": f"local://{self.uid}/{c.name}/{instance}",
        }
        if message:
            terminated["message"] = message
        with self.lock:
            c.state = {"terminated": terminated}
            c.process = None
        if code != 0 and not self.killing:
            self.k.cluster.event(
                self.pod, "BackOff", f"container {c.name} exited with {code} ({reason})", "Warning", field_path
            )
        self.publish()
        return code

    async def _end_fuse(self, launch) -> None:
        """Wait for the container's FUSE daemons (NTFS volumes) to unmount and flush before its volumes go."""
        try:
            pids = [int(p) for p in launch.fuse_pids.read_text().split()] if launch.fuse_pids else []
        except (OSError, ValueError):
            return
        if pids:
            for pid in pids:
                self.k.track(pid)  # its own process group: the kubelet's last resort kills it too
            await asyncio.to_thread(end_daemons, pids)
            for pid in pids:
                self.k.untrack(pid)

    def _pull_failed(self, c: ContainerRun, message: str, field_path: str) -> None:
        """The image cannot be pulled: ErrImagePull the first time, then ImagePullBackOff (kubelet's events)."""
        image = c.spec.get("image", "")
        if not c.pull_failures:
            state = {"reason": "ErrImagePull", "message": message}
            self.k.cluster.event(
                self.pod, "Failed", f'Failed to pull image "{image}": {message}', "Warning", field_path
            )
            self.k.cluster.event(self.pod, "Failed", "Error: ErrImagePull", "Warning", field_path)
        else:
            state = {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}": ErrImagePull: {message}',
            }
            self.k.cluster.event(self.pod, "BackOff", f'Back-off pulling image "{image}"', "Normal", field_path)
            self.k.cluster.event(self.pod, "Failed", "Error: ImagePullBackOff", "Warning", field_path)
        c.pull_failures += 1
        with self.lock:
            c.state = {"waiting": state}
        self.publish()
        return None

    def _path(self, path: str) -> str:
        """A path of the pod spec on this node: a Windows node's ``C:\\data`` is ``/data`` here."""
        if self.k.spec.os != "windows" or not path:
            return path
        m = re.match(r"^([A-Za-z]):[\\/]?(.*)$", path)
        if m:
            rest = m.group(2).replace("\\", "/")
            return "/" + rest if m.group(1).upper() == "C" else f"/{m.group(1).upper()}/{rest}"
        return path.replace("\\", "/")

    def _not_created(self, c: ContainerRun, reason: str, message: str, field_path: str) -> None:
        with self.lock:
            c.state = {"waiting": {"reason": reason, "message": message}}
        self.k.cluster.event(self.pod, "Failed", f"Error: {message}", "Warning", field_path)
        self.publish()
        return None

    def _mounts(self, c: ContainerRun, env: dict[str, str]) -> tuple[list[FsMount], list[Bind]]:
        volumes: dict[str, Volume] = self.volumes.volumes
        filesystems: dict[str, FsMount] = {}
        binds: list[Bind] = []
        for m in list(c.spec.get("volumeMounts") or []) + self.volumes.extra_mounts():
            vol = volumes.get(m.get("name", ""))
            if vol is None:
                raise ConfigError(f'volume "{m.get("name")}" of volumeMount {m.get("mountPath")} is not in the pod')
            if vol.kind == "block":
                raise ConfigError(f'volume "{vol.name}" is a Block volume: it goes in volumeDevices, not volumeMounts')
            sub = expand(m["subPathExpr"], env) if m.get("subPathExpr") else m.get("subPath")
            sub = (sub or "").strip("/")
            if ".." in Path(sub).parts:
                raise ConfigError(f"subPath {sub!r} must not contain '..'")
            readonly = bool(m.get("readOnly")) or vol.readonly
            if vol.kind == "fs":
                stage = str(c.dir / "fs" / vol.name)
                fs = filesystems.setdefault(
                    vol.name,
                    FsMount(vol.path, stage, vol.fstype, vol.readonly, vol.fs_group, self.volumes.fs_group_policy),
                )
                Path(fs.stage).mkdir(parents=True, exist_ok=True)
                source = os.path.join(fs.stage, sub) if sub else fs.stage
                binds.append(Bind(source, self._path(m.get("mountPath", "")), readonly, make_source=bool(sub)))
            else:
                source = os.path.join(vol.path, sub) if sub else vol.path
                if sub and not os.path.exists(source):
                    os.makedirs(source, 0o755, exist_ok=True)
                binds.append(Bind(source, self._path(m.get("mountPath", "")), readonly))
        for d in c.spec.get("volumeDevices") or []:
            vol = volumes.get(d.get("name", ""))
            if vol is None or vol.kind != "block":
                raise ConfigError(
                    f'volumeDevice {d.get("devicePath")}: volume "{d.get("name")}" is not a Block'
                    " persistentVolumeClaim of the pod"
                )
            binds.append(Bind(vol.path, d.get("devicePath", ""), vol.readonly))
        path = c.spec.get("terminationMessagePath")
        if path:
            binds.append(Bind(str(c.dir / "termination-log"), self._path(path)))
        for b in binds:
            if not os.path.isabs(b.target):
                raise ConfigError(f"mount path {b.target!r} must be absolute")
        return list(filesystems.values()), binds

    def grace(self) -> float:
        """The termination grace period: the pod's (30 s by default), capped by the kubelet's ``grace_cap``."""
        grace = self.pod["spec"].get("terminationGracePeriodSeconds")
        grace = float(self.pod["metadata"].get("deletionGracePeriodSeconds") or (30 if grace is None else grace))
        return min(grace, self.k.grace_cap)

    async def _stop_processes(self) -> None:
        grace = self.grace()
        procs = [c.process for c in self.all_containers() if c.process is not None]
        for c in self.all_containers():
            if c.process is not None:
                self.k.cluster.event(
                    self.pod,
                    "Killing",
                    f"Stopping container {c.name}",
                    field_path=f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}",
                )
        await asyncio.gather(*(p.stop(grace) for p in procs), return_exceptions=True)

    # ---- status ----------------------------------------------------------------------------------

    def phase(self) -> str:
        if self.init_failed:
            return "Failed"
        if not self.containers:
            return "Pending"
        if all(c.final and "terminated" in c.state for c in self.containers):
            return "Succeeded" if all(c._exit_code() == 0 for c in self.containers) else "Failed"
        if any(c.instance >= 0 for c in self.containers):
            return "Running"
        return "Pending"

    def _condition(self, kind: str, ok: bool) -> Obj:
        status = "True" if ok else "False"
        previous = self._conditions.get(kind)
        if previous is None or previous[0] != status:
            previous = (status, self.k.cluster.stamp())
            self._conditions[kind] = previous
        return {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": previous[1]}

    def status(self) -> Obj:
        with self.lock:
            phase = self.phase()
            initialized = all(c.final and c._exit_code() == 0 for c in self.inits)
            ready = phase == "Running" and all(c.running for c in self.containers)
            out: Obj = {
                "phase": phase,
                "conditions": [
                    self._condition("PodReadyToStartContainers", self.volumes_ready and not self.released),
                    self._condition("Initialized", initialized),
                    self._condition("Ready", ready),
                    self._condition("ContainersReady", ready),
                    self._condition("PodScheduled", True),
                ],
                "hostIP": HOST_IP,
                "hostIPs": [{"ip": HOST_IP}],
                "podIP": POD_IP,
                "podIPs": [{"ip": POD_IP}],
                "startTime": self.start_time,
                "qosClass": (self.pod.get("status") or {}).get("qosClass", "BestEffort"),
                "containerStatuses": [c.status(self.uid) for c in self.containers],
            }
            if self.inits:
                out["initContainerStatuses"] = [c.status(self.uid) for c in self.inits]
            return out

    def publish(self) -> None:
        if not self.k.cluster.pod_status(self.ns, self.name, self.uid, self.status()):
            self.kill()  # the pod is gone (the DELETED event is on its way)
