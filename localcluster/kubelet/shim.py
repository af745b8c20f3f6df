"""The container shim: run as a script (standard library only) by the local kubelet.

    unshare --mount --propagation private PYTHON shim.py run PLAN.json [READYFD]
        in the container's fresh private mount namespace: mount the filesystem volumes, bind the
        devices, volumes and termination-message file at the paths the pod spec names, change to
        the working directory and exec the container's argv (the pid stays the container's).
        READYFD (inherited, made close-on-exec here) closes when the exec happened or failed.
    [nsenter --target PID --mount --wd --] PYTHON shim.py exec ERRORFILE [--as UID:GID:GROUPS] ARGV...
        exec ARGV (kubectl exec), writing why it could not start to ERRORFILE.

The plan's ``user`` (``UID:GID:G1,G2``; absent: stay root) is switched to right before the exec, after every mount
(``drop_privileges``), as a runtime starts the container's process as its user; the directories on the way to the
interpreter and the program (the image's files, which are the host's here) are made searchable for it in the
namespace (``Mounter.open_to_all``); ``kubectl exec`` takes the same
with ``--as``. A filesystem of the plan with ``fsGroup`` gets that group once mounted (``set_volume_ownership``,
the kubelet's ``SetVolumeOwnership``).

A mount point that does not exist is made without touching the host: its nearest existing
ancestor is "shadowed" in this namespace only (a tmpfs mounted over it, every original entry
bound back from a descriptor opened before the tmpfs hid it), and the missing path is created in
the tmpfs. Under a volume this shim mounted, the path is created in the volume, as the kubelet
does. Missing top-level paths (``/data``) cannot be shadowed; the kubelet creates them on the host
beforehand and removes them afterwards.

Failures before the exec write a message to the plan's ``errorFile`` and exit 128 (the kubelet
reports the container terminated with reason StartError, as containerd does).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import stat
import sys
import time

PR_SET_PDEATHSIG = 1
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
START_ERROR = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


class Mounter:
    def __init__(self) -> None:
        self.owned: list[str] = []  # real paths of what this shim mounted (volumes and tmpfs shadows)

    def _owned(self, path: str) -> bool:
        return any(path == o or path.startswith(o.rstrip("/") + "/") for o in self.owned)

    def _shadow(self, directory: str, extra_mode: int = 0) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            mode = (os.fstat(fd).st_mode & 0o7777) | extra_mode
            names = os.listdir(fd)
            _mount("tmpfs", directory, "tmpfs", 0, f"mode={mode:o}")
            for name in names:
                src, dst = f"/proc/self/fd/{fd}/{name}", os.path.join(directory, name)
                st = os.lstat(src)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(src), dst)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    os.mkdir(dst, st.st_mode & 0o7777)
                else:
                    open(dst, "w").close()
                _mount(src, dst, None, MS_BIND | MS_REC)
        finally:
            os.close(fd)
        self.owned.append(directory)

    def open_to_all(self, path: str) -> None:
        """Make every directory on the way to ``path`` searchable by any user, in this namespace only: one that is
        not (e.g. ``/root`` holding the interpreter) is shadowed with ``o+x`` added. An image's own files are the
        host's here; a real image's are reachable by the user it runs as."""
        current = "/"
        for part in os.path.realpath(path).strip("/").split("/")[:-1]:
            current = os.path.join(current, part)
            if not os.path.isdir(current) or os.stat(current).st_mode & 0o001:
                continue
            if not self._owned(current):
                self._shadow(current, 0o111)

    def ensure(self, path: str, is_file: bool) -> str:
        """Make ``path`` exist (a file or a directory) in this namespace; its real path."""
        if os.path.lexists(path):
            return os.path.realpath(path)
        missing = []
        ancestor = path
        while not os.path.lexists(ancestor):
            ancestor, tail = os.path.split(ancestor)
            missing.insert(0, tail)
        ancestor = os.path.realpath(ancestor)
        if not self._owned(ancestor):
            if ancestor == "/":
                raise OSError(f"mount point {path} does not exist (top-level paths are the kubelet's to create)")
            self._shadow(ancestor)
        current = ancestor
        for i, part in enumerate(missing):
            current = os.path.join(current, part)
            if i == len(missing) - 1 and is_file:
                open(current, "a").close()
            else:
                os.mkdir(current, 0o755)
        return current

    def mount_fs(self, source: str, target: str, fstype: str, readonly: bool) -> None:
        real = self.ensure(target, False)
        _mount(source, real, fstype, MS_RDONLY if readonly else 0)
        self.owned.append(real)

    def mount_fuse(self, argv: list[str], target: str, log_path: str, pid_file: str, timeout: float = 20.0) -> None:
        """Start a FUSE daemon (``argv`` + [target]) in the foreground, in its own process group, with
        SIGTERM as parent-death signal (it unmounts and flushes when the container's process ends);
        return once ``target`` is mounted."""
        real = self.ensure(target, False)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)  # out of the container's group: its SIGKILL at the end must not cut the flush
                _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
                if os.getppid() != parent:  # the shim died before the signal was armed
                    os._exit(1)
                out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.execvp(argv[0], [*argv, real])
            except BaseException:  # noqa: BLE001  (the child reports by exiting)
                os._exit(127)
        with open(pid_file, "a") as f:
            f.write(f"{pid}\n")
        deadline = time.monotonic() + timeout
        while not _mounted(real):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                if not done:
                    os.kill(pid, signal.SIGKILL)
                try:
                    with open(log_path) as f:
                        why = f.read().strip().replace("\n", "; ")
                except OSError:
                    why = ""
                raise OSError(f"mount {argv[-1]} on {target}: {argv[0]} failed: {why or 'no output'}")
            time.sleep(0.01)
        self.owned.append(real)

    def bind(self, source: str, target: str, readonly: bool) -> None:
        is_file = not os.path.isdir(source)
        real = self.ensure(target, is_file)
        _mount(source, real, None, MS_BIND | MS_REC)
        if readonly:
            _mount(None, real, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        self.owned.append(real)


RW_MASK, RO_MASK, EXEC_MASK = 0o660, 0o440, 0o110


def set_volume_ownership(path: str, gid: int, readonly: bool, policy: str = "Always") -> None:
    """The kubelet's ``SetVolumeOwnership`` (``pkg/volume/volume_linux.go``) of the volume at ``path`` for fsGroup
    ``gid``: every entry under it, the root included, gets group ``gid`` (``lchown``: a symlink's own, its target
    untouched) and, but for symlinks, group read and write (read only when ``readonly``) added to its mode;
    directories also the setgid bit and group execute. ``policy`` ``OnRootMismatch``: nothing when the root already
    has the group and those bits."""
    mask = RO_MASK if readonly else RW_MASK
    if policy == "OnRootMismatch":
        st = os.stat(path)
        want = mask | EXEC_MASK | stat.S_ISGID
        if st.st_gid == gid and st.st_mode & want == want:
            return

    def change(entry: str) -> None:
        st = os.lstat(entry)
        os.lchown(entry, -1, gid)
        if stat.S_ISLNK(st.st_mode):
            return
        extra = mask | (stat.S_ISGID | EXEC_MASK if stat.S_ISDIR(st.st_mode) else 0)
        os.chmod(entry, (st.st_mode & 0o7777) | extra)

    change(path)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            change(os.path.join(root, name))


def parse_user(text: str) -> tuple[int, int, list[int]]:
    """``UID:GID:G1,G2`` as (uid, gid, groups)."""
    uid, gid, groups = text.split(":")
    return int(uid), int(gid), [int(g) for g in groups.split(",") if g]


def drop_privileges(text: str) -> None:
    """Become the container's user ``UID:GID:G1,G2`` (groups first, then the gid, then the uid); the parent-death
    signal, which a change of credentials clears, is set again."""
    uid, gid, groups = parse_user(text)
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)
    _die_with_the_kubelet()


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def _die_with_the_kubelet() -> None:
    """SIGKILL when the kubelet thread that started us goes, even if the kubelet could not clean up
    (kept across the exec; what the container itself forks is the process-group kill's)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run(plan_path: str, ready_fd: int | None = None) -> None:
    _die_with_the_kubelet()
    if ready_fd is not None:  # closed by the exec (or the exit): the kubelet knows the container started
        os.set_inheritable(ready_fd, False)
    with open(plan_path) as f:
        plan = json.load(f)
    error_file = plan["errorFile"]
    try:
        workdir = plan.get("workingDir") or "/"
        if "binds" in plan:  # namespace isolation (never in the host's namespace: the rewrite plan has none)
            mounter = Mounter()
            if plan.get("user"):  # the image's programs (the host's interpreter), reachable by its user
                for program in (sys.executable, shutil.which(plan["argv"][0]) or plan["argv"][0]):
                    mounter.open_to_all(program)
            for m in plan.get("filesystems", []):
                if m["fstype"] == "ntfs":  # ntfs-3g, as on a Windows node NTFS is native
                    opts = "no_detach" + (",ro" if m.get("readOnly") else "")
                    mounter.mount_fuse(
                        ["ntfs-3g", "-o", opts, m["source"]], m["target"], plan["fuseLog"], plan["fusePids"]
                    )
                else:
                    mounter.mount_fs(m["source"], m["target"], m["fstype"], m.get("readOnly", False))
                    if m.get("fsGroup") is not None:
                        set_volume_ownership(m["target"], m["fsGroup"], False, m.get("fsGroupPolicy") or "Always")
            for m in plan["binds"]:
                if m.get("makeSource"):
                    os.makedirs(m["source"], 0o755, exist_ok=True)
                mounter.bind(m["source"], m["target"], m.get("readOnly", False))
            workdir = mounter.ensure(workdir, False)
        os.chdir(workdir)
        error_fd = os.open(error_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        if plan.get("user"):
            drop_privileges(plan["user"])
    except OSError as err:
        _fail(
            error_file,
            f"failed to create containerd task: failed to create shim task: OCI runtime create failed: {err}",
        )
    _exec(error_fd, plan["argv"], _CREATE)


_CREATE = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create"
    " failed: unable to start container process: {}: unknown"
)
_EXEC = "OCI runtime exec failed: exec failed: unable to start container process: {}: unknown"


def _exec(error_file: str | int, argv: list[str], template: str) -> None:
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        why = f'exec: "{argv[0]}": executable file not found in $PATH'
    except OSError as err:
        why = f'exec: "{argv[0]}": {err.strerror}'
    _fail(error_file, template.format(why))


def _fail(error_file: str | int, message: str) -> None:
    """Write ``message`` to ``error_file`` (a path, or a descriptor opened before the privileges were dropped)."""
    try:
        with open(error_file, "w", closefd=not isinstance(error_file, int)) as f:
            f.write(message)
    finally:
        sys.stderr.write(message + "\n")
        os._exit(START_ERROR)


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "run":
        run(argv[1], int(argv[2]) if len(argv) > 2 else None)
    elif len(argv) >= 3 and argv[0] == "exec":
        _die_with_the_kubelet()
        error_file, rest = argv[1], argv[2:]
        if len(rest) >= 3 and rest[0] == "--as":
            error_fd = os.open(error_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                drop_privileges(rest[1])
            except OSError as err:
                _fail(error_fd, _EXEC.format(f"cannot switch to user {rest[1]}: {err.strerror}"))
            _exec(error_fd, rest[2:], _EXEC)
        _exec(error_file, rest, _EXEC)
    else:
        sys.stderr.write(
            "usage: shim.py run PLAN.json [READYFD] | shim.py exec ERRORFILE [--as UID:GID:GROUPS] ARGV...\n"
        )
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
