"""How a container sees its devices and volumes at the paths its pod spec names.

``namespace`` isolation (root, ``unshare`` and ``nsenter`` work: checked once at start): each
container process is ``unshare --mount --propagation private python shim.py run PLAN`` (see
``shim.py``); the shim mounts and binds inside the new mount namespace and execs the container's
argv, so the pid Popen returns is the container's. An NTFS filesystem is an ntfs-3g (FUSE) daemon
the shim starts in that namespace; its pid is listed in ``Launch.fuse_pids`` for the kubelet,
which waits for it to unmount and flush once the container ended (it gets SIGTERM when the
container's process dies) before it detaches the volume. Nothing is mounted in the host's namespace:
the mounts vanish with the last process of the namespace. Exec enters it with
``nsenter --target PID --mount --wd``. Missing top-level mount points (``/data``) are created on
the host by ``HostPaths`` (reference-counted, removed when the last container using them ends,
and only if still empty); deeper ones are made inside the namespace only.

``rewrite`` isolation (the documented fallback: not root, or no ``unshare``): no mounts at all.
The container gets ``LOCALCLUSTER_DEVICE_MAP``, a JSON object {path in the pod spec: real path on
this machine} for every device, volume and the termination-message file, and every occurrence of
those paths (as a whole path or a path prefix) in its command, args, env values and working
directory is replaced by the real path. A program that builds such a path itself (rather than
taking it from its arguments) must consult the map. Filesystem PVCs are directories in this mode;
a working directory that does not exist is a directory of the container (mapped too).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

SHIM = str(Path(__file__).with_name("shim.py"))
DEVICE_MAP_ENV = "LOCALCLUSTER_DEVICE_MAP"
PYTHON = [sys.executable, "-I"]


def namespaces_available() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@dataclass
class Bind:
    source: str
    target: str
    readonly: bool = False
    make_source: bool = False  # a subPath inside a filesystem mounted by the shim


@dataclass
class FsMount:
    device: str
    stage: str  # where the shim mounts it (a directory of the container); binds take paths from there
    fstype: str
    readonly: bool = False
    fs_group: int | None = None  # the pod's fsGroup, when it applies to this volume (``security.fs_group_applies``)
    fs_group_policy: str = "Always"  # the pod's fsGroupChangePolicy


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    host_paths: list[str] = field(default_factory=list)  # to release when the process ends
    mapping: dict[str, str] = field(default_factory=dict)  # paths of the pod spec -> real paths (rewrite)
    fuse_pids: Path | None = None  # where the shim lists the FUSE daemons it started (ntfs-3g)


class HostPaths:
    """Top-level mount points created on the host, reference-counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}

    def acquire(self, target: str, is_file: bool) -> str | None:
        top = "/" + Path(target).parts[1] if len(Path(target).parts) > 1 else None
        if top is None:
            return None
        with self._lock:
            if top in self._count:
                self._count[top] += 1
                return top
            if os.path.lexists(top):
                return None
            if is_file and top == target:
                Path(top).touch()
            else:
                os.mkdir(top, 0o755)
            self._count[top] = 1
            return top

    def release(self, top: str) -> None:
        with self._lock:
            left = self._count.get(top, 0) - 1
            if left > 0:
                self._count[top] = left
                return
            self._count.pop(top, None)
            _remove_if_empty(top)

    def release_all(self) -> None:
        with self._lock:
            tops = list(self._count)
            self._count.clear()
        for top in tops:
            _remove_if_empty(top)


def _remove_if_empty(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError:
        pass


class Sandbox:
    def __init__(self, isolation: str = "auto") -> None:
        if isolation not in ("auto", "namespace", "rewrite"):
            raise ValueError(f"isolation must be auto, namespace or rewrite, not {isolation!r}")
        if isolation == "auto":
            isolation = "namespace" if namespaces_available() else "rewrite"
        elif isolation == "namespace" and not namespaces_available():
            raise RuntimeError("mount namespaces are not available here (root, unshare and nsenter are needed)")
        self.isolation = isolation
        self.host_paths = HostPaths()

    @property
    def namespaces(self) -> bool:
        return self.isolation == "namespace"

    def container(
        self,
        plan_path: Path,
        error_file: Path,
        argv: list[str],
        env: dict[str, str],
        working_dir: str,
        filesystems: list[FsMount],
        binds: list[Bind],
        user: str | None = None,
    ) -> Launch:
        """How to start a container (the caller releases ``host_paths`` when it ends); ``user``: who it runs as
        (``UID:GID:GROUPS``, ``security.ContainerUser.spec``; None: the kubelet's own, root)."""
        binds = sorted(binds, key=lambda b: (len(Path(b.target).parts), b.target))
        if self.namespaces:
            tops: list[str] = []
            try:
                for b in binds:
                    top = self.host_paths.acquire(b.target, not os.path.isdir(b.source) and not b.make_source)
                    if top:
                        tops.append(top)
                if working_dir != "/":
                    top = self.host_paths.acquire(working_dir, False)
                    if top:
                        tops.append(top)
            except OSError:
                for top in tops:
                    self.host_paths.release(top)
                raise
            fuse_pids = plan_path.with_name(f"{plan_path.stem}.fuse-pids")
            fuse_pids.unlink(missing_ok=True)
            plan = {
                "errorFile": str(error_file),
                "argv": argv,
                "workingDir": working_dir,
                "fusePids": str(fuse_pids),
                "fuseLog": str(plan_path.with_name(f"{plan_path.stem}.fuse.log")),
                "filesystems": [
                    {
                        "source": f.device,
                        "target": f.stage,
                        "fstype": f.fstype,
                        "readOnly": f.readonly,
                        "fsGroup": f.fs_group,
                        "fsGroupPolicy": f.fs_group_policy,
                    }
                    for f in filesystems
                ],
                "binds": [
                    {"source": b.source, "target": b.target, "readOnly": b.readonly, "makeSource": b.make_source}
                    for b in binds
                ],
                "user": user,
            }
            plan_path.write_text(json.dumps(plan))
            return Launch(
                ["unshare", "--mount", "--propagation", "private", *PYTHON, SHIM, "run", str(plan_path)],
                env,
                None,
                tops,
                fuse_pids=fuse_pids,
            )
        mapping = {b.target: b.source for b in binds}
        cwd = rewrite(working_dir, mapping)
        if not os.path.isdir(cwd):  # a runtime creates the working directory: here, one of the container's
            cwd = str(plan_path.parent / "workdir")
            os.makedirs(cwd, exist_ok=True)
            mapping[working_dir] = cwd
        env = {k: rewrite(v, mapping) for k, v in env.items()}
        env[DEVICE_MAP_ENV] = json.dumps(mapping, sort_keys=True)
        plan = {
            "errorFile": str(error_file),
            "argv": [rewrite(a, mapping) for a in argv],
            "workingDir": cwd,
            "user": user,
        }
        plan_path.write_text(json.dumps(plan))
        return Launch([*PYTHON, SHIM, "run", str(plan_path)], env, None, mapping=mapping)

    def exec(
        self,
        pid: int,
        error_file: Path,
        argv: list[str],
        env: dict[str, str],
        working_dir: str,
        mapping: dict[str, str],
        user: str | None = None,
    ) -> Launch:
        """How to start ``kubectl exec`` of ``argv`` in the container of process ``pid``, as ``user`` (its
        container's, ``container``'s argument)."""
        as_user = ["--as", user] if user else []
        if self.namespaces:
            return Launch(
                [
                    "nsenter",
                    "--target",
                    str(pid),
                    "--mount",
                    "--wd",
                    "--",
                    *PYTHON,
                    SHIM,
                    "exec",
                    str(error_file),
                    *as_user,
                    *argv,
                ],
                env,
                None,
            )
        env = {k: rewrite(v, mapping) for k, v in env.items()}
        env[DEVICE_MAP_ENV] = json.dumps(mapping, sort_keys=True)
        cwd = rewrite(working_dir, mapping)
        return Launch(
            [*PYTHON, SHIM, "exec", str(error_file), *as_user, *(rewrite(a, mapping) for a in argv)],
            env,
            cwd if os.path.isdir(cwd) else None,
        )


def rewrite(text: str, mapping: dict[str, str]) -> str:
    """Replace each mapped path (whole, or as the prefix of a longer path) in ``text``."""
    if not mapping or not text:
        return text
    targets = sorted((t for t in mapping if t and t != "/"), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(t.rstrip("/")) for t in targets) + r")(?![\w.-])")
    by_target = {t.rstrip("/"): s for t, s in mapping.items()}
    return pattern.sub(lambda m: by_target[m.group(1)], text)
