"""Pod volumes: what each ``spec.volumes`` entry is on this machine.

- ``emptyDir``: a directory of the pod; ``hostPath``: the host path itself.
- ``secret`` / ``configMap`` / ``downwardAPI`` / ``projected``: files written into a directory of
  the pod (``items`` with ``path`` and ``mode``, ``defaultMode``, ``optional``), kept in sync with
  the objects while the pod runs. As upstream's volume plugins: a missing object, or a key of ``items``
  the object lacks, fails the volume (the pod waits in ContainerCreating; a FailedMount event
  ``MountVolume.SetUp failed for volume "<name>" : secret "<secret>" not found`` /
  ``... : references non-existent secret key: <key>``, for config maps ``configmap references
  non-existent config key: <key>``) unless the source is ``optional``: then what is missing is left
  out (no file). Projected ``serviceAccountToken`` sources (``audience``,
  ``expirationSeconds``, ``path``) get a token minted by the emulator bound to the pod
  (``api.issue_token(..., pod=NAME)``), re-minted once 80% of its lifetime has passed (upstream's
  rule, on the emulator's clock). A missing ``kube-root-ca.crt`` config map gives the CA of the
  kubelet's in-cluster API endpoint (``apiproxy.py``) as ``ca.crt``.
- ``persistentVolumeClaim``: the claim must be Bound; its PV's ``spec.csi.volumeHandle`` is attached
  through ``VolumeStore.attach`` (reference-counted across the kubelets' pods, ``Attachments``).
  Block mode: the attachment (a loop device, or the image file) is the device; with ``readOnly``
  (the pod's volume source or the PV's ``csi.readOnly``) a second, read-only loop device. A Windows
  node refuses Block volumes (FailedMapVolume; the pod stays ContainerCreating). Filesystem mode:
  the PV's ``csi.fsType`` decides (``mounts.py``: a blank device is formatted, another filesystem
  fails with FailedMount "MountVolume.MountDevice failed ..."), then the shim mounts it in the
  container's namespace (read-only when asked); without loop devices or mount namespaces it is a
  directory ``<store root>/fs/<handle>`` (the documented fallback: the data is not in the image,
  the fsType and read-only are not enforced).
- The service-account token admission does not run in the emulator, so the kubelet adds the
  ``kube-api-access`` volume itself (token, ca.crt, namespace at
  /var/run/secrets/kubernetes.io/serviceaccount) unless ``automountServiceAccountToken`` is false
  on the pod or its service account, or a container already mounts that path.

``VolumeNotReady``: not yet (claim unbound, object missing): the pod waits and retries (a
FailedMount event); ``VolumeError`` carries its own event reason and message.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.kubelet import security
from localcluster.kubelet.cluster import Cluster
from localcluster.kubelet.mounts import MountDeviceError, prepare_filesystem
from localcluster.kubelet.podenv import ConfigError, field_value, resource_value
from localcluster.kubelet.shim import set_volume_ownership
from localcluster.storage import Attachment, StorageError, VolumeStore

Obj = dict[str, Any]
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME = "kube-api-access-local"
ROOT_CA = "kube-root-ca.crt"


class VolumeNotReady(Exception):
    """A volume cannot be set up yet (the pod waits, with a FailedMount event)."""


class VolumeError(VolumeNotReady):
    """A volume cannot be set up (the pod waits): the event ``reason``, its whole ``message`` and the
    ``component`` that reports it (the kubelet, or the attach-detach controller for FailedAttachVolume)."""

    def __init__(self, reason: str, message: str, component: str = "kubelet") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.component = component


def attach_failed(pv_name: str, err: StorageError) -> VolumeError:
    """The attach-detach controller's Warning when ControllerPublishVolume fails (upstream's
    ``AttachVolume.Attach failed for volume "<pv>" : <error>``, the error being the external-attacher's
    VolumeAttachment attachError: the driver's gRPC status)."""
    return VolumeError(
        "FailedAttachVolume",
        f'AttachVolume.Attach failed for volume "{pv_name}" : rpc error: code = Internal desc = {err}',
        "attachdetach-controller",
    )


@dataclass
class Volume:
    name: str
    kind: str  # "dir" | "block" | "fs"
    path: str  # a directory (dir), the device or image (block), the device to mount (fs)
    fstype: str = ""
    readonly: bool = False
    fs_group: int | None = None  # "fs": the pod's fsGroup, for the shim to apply once mounted (``security``)


class Attachments:
    """``VolumeStore`` attachments shared by kubelets (one per node, one store): reference-counted per
    owner (a kubelet), detached when the last use of any owner goes; ``release_all(owner)`` drops one
    owner's uses only. ``acquire(..., readonly=True)`` attaches a second, read-only loop device
    (``losetup --read-only``) on the volume's image, so writes through it fail (EPERM), as through a
    device a runtime gives with read-only permissions; without loop devices it is the image file."""

    def __init__(self, store: VolumeStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._count: dict[tuple[str, bool], dict[object, int]] = {}
        self._readonly: dict[str, Attachment] = {}

    def acquire(self, handle: str, owner: object = None, readonly: bool = False) -> Attachment:
        with self._lock:
            att = self._attach_readonly(handle) if readonly else self.store.attach(handle)
            owners = self._count.setdefault((handle, readonly), {})
            owners[owner] = owners.get(owner, 0) + 1
            return att

    def _attach_readonly(self, handle: str) -> Attachment:
        if handle in self._readonly:
            return self._readonly[handle]
        self.store.check_attach(handle)
        image = self.store.volume_path(handle)
        if not image.exists():
            raise StorageError(f"volume {handle} does not exist")
        if not self.store.use_loop:
            return Attachment(handle, str(image), False)
        proc = subprocess.run(
            ["losetup", "--read-only", "--find", "--show", str(image)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise StorageError(f"losetup --read-only for volume {handle} failed: {proc.stderr.strip()}")
        att = self._readonly[handle] = Attachment(handle, proc.stdout.strip(), True)
        return att

    def release(self, handle: str, owner: object = None, readonly: bool = False) -> None:
        with self._lock:
            owners = self._count.get((handle, readonly), {})
            left = owners.get(owner, 0) - 1
            if left > 0:
                owners[owner] = left
                return
            owners.pop(owner, None)
            if owners:
                return
            self._count.pop((handle, readonly), None)
            self._detach(handle, readonly)

    def release_all(self, owner: object = None) -> None:
        with self._lock:
            for key in list(self._count):
                owners = self._count[key]
                owners.pop(owner, None)
                if not owners:
                    del self._count[key]
                    self._detach(*key)

    def _detach(self, handle: str, readonly: bool) -> None:
        if not readonly:
            self.store.detach(handle)
            return
        att = self._readonly.pop(handle, None)
        if att is not None and att.loop:
            subprocess.run(["losetup", "-d", att.path], check=False, capture_output=True)


@dataclass
class _Token:
    path: str  # relative to the volume directory
    audience: str
    expiration: int
    refresh_at: float = 0.0


@dataclass
class _FileVolume:
    directory: Path
    spec: Obj
    tokens: list[_Token] = field(default_factory=list)
    written: set[str] = field(default_factory=set)


class PodVolumes:
    def __init__(
        self,
        cluster: Cluster,
        attachments: Attachments,
        pod: Obj,
        root: Path,
        *,
        mount_fs: bool,
        automount: bool = True,
        ca_pem: bytes = b"",
        owner: object = None,
        node_os: str = "linux",
        plugins_dir: Path | None = None,
        mkfs_path: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.attachments = attachments
        self.owner = owner
        self.node_os = node_os
        self.plugins_dir = plugins_dir or root / "plugins"
        self.mkfs_path = mkfs_path
        self.pod = pod
        self.root = root
        self.mount_fs = mount_fs
        self.volumes: dict[str, Volume] = {}
        self._files: dict[str, _FileVolume] = {}
        self._handles: list[tuple[str, bool]] = []
        self.ca_pem = ca_pem
        self.automount = automount and self._wants_sa_volume()
        # the pod's fsGroup and its change policy (``security``); a Windows node applies none
        self.fs_group = security.fs_group(pod) if node_os != "windows" else None
        self.fs_group_policy = security.fs_group_change_policy(pod)

    @property
    def ns(self) -> str:
        return self.pod["metadata"]["namespace"]

    def specs(self) -> list[Obj]:
        out = list(self.pod["spec"].get("volumes") or [])
        if self.automount:
            out.append(
                {
                    "name": SA_VOLUME,
                    "projected": {
                        "defaultMode": 0o644,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {
                                "downwardAPI": {
                                    "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                                }
                            },
                        ],
                    },
                }
            )
        return out

    def extra_mounts(self) -> list[Obj]:
        """Mounts every container gets besides its own (the automounted service-account volume)."""
        return [{"name": SA_VOLUME, "mountPath": SA_DIR, "readOnly": True}] if self.automount else []

    def _wants_sa_volume(self) -> bool:
        spec = self.pod["spec"]
        if spec.get("automountServiceAccountToken") is False:
            return False
        if spec.get("automountServiceAccountToken") is None:
            sa = self.cluster.get("serviceaccounts", self.ns, spec.get("serviceAccountName") or "default")
            if sa is not None and sa.get("automountServiceAccountToken") is False:
                return False
        names = {v.get("name") for v in spec.get("volumes") or []}
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            for m in c.get("volumeMounts") or []:
                if m.get("mountPath", "").rstrip("/") == SA_DIR and m.get("name") in names:
                    return False
        return True

    # ---- setup -----------------------------------------------------------------------------------

    def setup(self) -> dict[str, Volume]:
        """Set up every volume not yet set up (raises VolumeNotReady / ConfigError / StorageError)."""
        for spec in self.specs():
            name = spec.get("name", "")
            if name not in self.volumes:
                self.volumes[name] = self._setup(name, spec)
        return self.volumes

    def _setup(self, name: str, spec: Obj) -> Volume:
        directory = self.root / name
        if "emptyDir" in spec:
            directory.mkdir(parents=True, exist_ok=True)
            self._own(directory, readonly=False)
            return Volume(name, "dir", str(directory))
        if "hostPath" in spec:
            path = spec["hostPath"].get("path", "")
            kind = spec["hostPath"].get("type") or ""
            if kind in ("DirectoryOrCreate",) and not os.path.exists(path):
                os.makedirs(path, 0o755, exist_ok=True)
            if kind in ("FileOrCreate",) and not os.path.exists(path):
                Path(path).touch()
            if not os.path.exists(path) and kind:
                raise VolumeNotReady(f"hostPath type check failed: {path} does not exist")
            return Volume(name, "dir", path)
        if "persistentVolumeClaim" in spec:
            return self._pvc(name, spec["persistentVolumeClaim"])
        for kind in ("secret", "configMap", "downwardAPI", "projected"):
            if kind in spec:
                fv = _FileVolume(directory, {kind: spec[kind]})
                directory.mkdir(parents=True, exist_ok=True)
                try:
                    self._sync_files(fv, force_tokens=True)
                except VolumeError:
                    raise
                except VolumeNotReady as err:  # the kubelet's event names the volume
                    raise VolumeError("FailedMount", f'MountVolume.SetUp failed for volume "{name}" : {err}') from None
                self._files[name] = fv
                self._own(directory, readonly=True)
                return Volume(name, "dir", str(directory), readonly=True)
        raise VolumeNotReady(f'volume "{name}": this kind of volume is not supported by the local kubelet')

    def _pvc(self, name: str, source: Obj) -> Volume:
        claim = source.get("claimName", "")
        pvc = self.cluster.get("persistentvolumeclaims", self.ns, claim)
        if pvc is None:
            raise VolumeNotReady(f'persistentvolumeclaim "{claim}" not found')
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if (pvc.get("status") or {}).get("phase") != "Bound" or not pv_name:
            raise VolumeNotReady(f'persistentvolumeclaim "{claim}" is not bound')
        pv = self.cluster.get("persistentvolumes", "", pv_name)
        if pv is None:
            raise VolumeNotReady(f'persistentvolume "{pv_name}" not found')
        csi = (pv.get("spec") or {}).get("csi") or {}
        handle = csi.get("volumeHandle")
        if not handle:
            raise VolumeNotReady(f'persistentvolume "{pv_name}" has no spec.csi.volumeHandle')
        readonly = bool(source.get("readOnly")) or bool(csi.get("readOnly"))
        mode = (pv.get("spec") or {}).get("volumeMode") or "Filesystem"
        if mode == "Block":
            if self.node_os == "windows":
                raise VolumeError(
                    "FailedMapVolume",
                    f'MapVolume.SetUpDevice failed for volume "{pv_name}" :'
                    " kubernetes.io/csi: blockMapper.stageVolumeForBlock failed: rpc error: code ="
                    " InvalidArgument desc = raw block volumes are not supported on Windows",
                )
            att = self._acquire(pv_name, handle, readonly)
            self._handles.append((handle, readonly))
            return Volume(name, "block", att.path, readonly=readonly)
        att = self._acquire(pv_name, handle, False)  # read-only is the mount's (as NodePublish's ro bind)
        if att.loop and self.mount_fs:
            digest = hashlib.sha256(handle.encode()).hexdigest()
            staging = (
                self.plugins_dir / "kubernetes.io" / "csi" / (csi.get("driver") or "unknown") / digest / "globalmount"
            )
            try:
                fstype = prepare_filesystem(att.path, csi.get("fsType") or "", staging, self.node_os, self.mkfs_path)
            except BaseException as err:
                self.attachments.release(handle, self.owner)
                if isinstance(err, MountDeviceError):
                    raise VolumeError(
                        "FailedMount",
                        f'MountVolume.MountDevice failed for volume "{pv_name}" : rpc'
                        f' error: code = Internal desc = could not format "{att.path}" and mount it at'
                        f' "{staging}": {err}',
                    ) from None
                raise
            self._handles.append((handle, False))
            return Volume(name, "fs", att.path, fstype, readonly, self._pvc_fs_group(csi, pv, readonly))
        self._handles.append((handle, False))
        fallback = self.attachments.store.root / "fs" / handle
        fallback.mkdir(parents=True, exist_ok=True)
        if self._pvc_fs_group(csi, pv, readonly) is not None:
            self._own(fallback, readonly=False)
        return Volume(name, "dir", str(fallback), readonly=readonly)

    def _pvc_fs_group(self, csi: Obj, pv: Obj, readonly: bool) -> int | None:
        """The fsGroup a Filesystem claim's volume gets (``security.fs_group_applies``), or None."""
        driver = self.cluster.get("csidrivers", "", csi.get("driver") or "", group="storage.k8s.io")
        return self.fs_group if security.fs_group_applies(driver, pv, readonly, self.fs_group) else None

    def _own(self, directory: Path, readonly: bool) -> None:
        """The pod's fsGroup on a volume directory of this node (``shim.set_volume_ownership``), if it has one."""
        if self.fs_group is not None:
            set_volume_ownership(str(directory), self.fs_group, readonly, self.fs_group_policy)

    def _acquire(self, pv_name: str, handle: str, readonly: bool) -> Attachment:
        try:
            return self.attachments.acquire(handle, self.owner, readonly)
        except StorageError as err:
            raise attach_failed(pv_name, err) from None

    # ---- files -----------------------------------------------------------------------------------

    def sync(self) -> None:
        """Refresh the file volumes (changed secrets/config maps, tokens due for renewal)."""
        for fv in self._files.values():
            if self._sync_files(fv):
                self._own(fv.directory, readonly=True)

    def _sync_files(self, fv: _FileVolume, force_tokens: bool = False) -> bool:
        """Write what changed of the volume's files; whether anything did."""
        files = self._files_of(fv, force_tokens)
        changed = False
        for rel, (data, mode) in files.items():
            path = fv.directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                st = path.stat()
                want = mode if self.fs_group is None else mode | 0o440  # with fsGroup: group-readable (``_own``)
                owned = self.fs_group is None or st.st_gid == self.fs_group
                if path.read_bytes() == data and (st.st_mode & 0o7777) == want and owned:
                    continue
            except OSError:
                pass
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.chmod(mode)
            os.replace(tmp, path)
            changed = True
        for rel in fv.written - set(files):
            (fv.directory / rel).unlink(missing_ok=True)
            changed = True
        fv.written = set(files)
        return changed

    def _files_of(self, fv: _FileVolume, force_tokens: bool) -> dict[str, tuple[bytes, int]]:
        spec = fv.spec
        out: dict[str, tuple[bytes, int]] = {}
        if "secret" in spec:
            s = spec["secret"]
            self._object_files(
                out,
                "secret",
                {"name": s.get("secretName"), "items": s.get("items"), "optional": s.get("optional")},
                s.get("defaultMode"),
            )
        elif "configMap" in spec:
            c = spec["configMap"]
            self._object_files(out, "configMap", c, c.get("defaultMode"))
        elif "downwardAPI" in spec:
            d = spec["downwardAPI"]
            self._downward_files(out, d.get("items") or [], d.get("defaultMode"))
        else:
            p = spec["projected"]
            mode = p.get("defaultMode")
            tokens = iter(fv.tokens)
            new_tokens = []
            for source in p.get("sources") or []:
                if "secret" in source:
                    self._object_files(out, "secret", source["secret"], mode)
                elif "configMap" in source:
                    self._object_files(out, "configMap", source["configMap"], mode)
                elif "downwardAPI" in source:
                    self._downward_files(out, source["downwardAPI"].get("items") or [], mode)
                elif "serviceAccountToken" in source:
                    token = next(tokens, None) or _Token(
                        _relpath(source["serviceAccountToken"].get("path", "token")),
                        source["serviceAccountToken"].get("audience") or "",
                        int(source["serviceAccountToken"].get("expirationSeconds") or 3600),
                    )
                    new_tokens.append(token)
                    self._token_file(out, fv, token, mode, force_tokens)
            fv.tokens = new_tokens
        return out

    def _token_file(self, out: dict, fv: _FileVolume, token: _Token, mode: int | None, force: bool) -> None:
        path = fv.directory / token.path
        now = self.cluster.now()
        if force or now >= token.refresh_at or not path.exists():
            md = self.pod["metadata"]
            try:
                text = self.cluster.api.issue_token(
                    md["namespace"],
                    self.pod["spec"].get("serviceAccountName") or "default",
                    [token.audience] if token.audience else [],
                    token.expiration,
                    pod=md["name"],
                )
            except Exception as err:  # ApiError: no such service account (yet), invalid expiration
                raise VolumeNotReady(f"failed to fetch token: {getattr(err, 'message', err)}") from None
            token.refresh_at = now + 0.8 * token.expiration
            out[token.path] = (text.encode(), _mode(mode, None))
        else:
            out[token.path] = (path.read_bytes(), _mode(mode, None))

    def _object_files(self, out: dict, kind: str, ref: Obj, default_mode: int | None) -> None:
        name = ref.get("name") or ""
        getter: Callable[[str, str], Obj | None] = self.cluster.secret if kind == "secret" else self.cluster.configmap
        obj = getter(self.ns, name)
        if obj is None and kind == "configMap" and name == ROOT_CA:  # no root-ca publisher: the kubelet's endpoint CA
            obj = {"data": {"ca.crt": self.ca_pem.decode()}}
        if obj is None:
            if ref.get("optional"):
                return
            raise VolumeNotReady(f'{kind.lower() if kind == "secret" else "configmap"} "{name}" not found')
        data: dict[str, bytes] = {}
        if kind == "secret":
            data = {k: base64.b64decode(v or "") for k, v in (obj.get("data") or {}).items()}
        else:
            data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v or "") for k, v in (obj.get("binaryData") or {}).items()})
        items = ref.get("items")
        if not items:
            for key, value in data.items():
                out[_relpath(key)] = (value, _mode(default_mode, None))
            return
        for item in items:
            key = item.get("key", "")
            if key not in data:
                if ref.get("optional"):
                    continue
                if kind == "secret":
                    raise VolumeNotReady(f"references non-existent secret key: {key}")
                raise VolumeNotReady(f"configmap references non-existent config key: {key}")
            out[_relpath(item.get("path") or key)] = (data[key], _mode(default_mode, item.get("mode")))

    def _downward_files(self, out: dict, items: list[Obj], default_mode: int | None) -> None:
        for item in items:
            try:
                if item.get("fieldRef"):
                    value = field_value(self.pod, item["fieldRef"].get("fieldPath", ""))
                else:
                    container = next(
                        (
                            c
                            for c in self.pod["spec"].get("containers") or []
                            if c.get("name") == (item.get("resourceFieldRef") or {}).get("containerName")
                        ),
                        {},
                    )
                    value = resource_value(container, item.get("resourceFieldRef") or {})
            except ConfigError as err:
                raise VolumeNotReady(str(err)) from None
            out[_relpath(item.get("path", ""))] = (value.encode(), _mode(default_mode, item.get("mode")))

    # ---- teardown --------------------------------------------------------------------------------

    def teardown(self) -> None:
        handles, self._handles = self._handles, []
        for handle, readonly in handles:
            self.attachments.release(handle, self.owner, readonly)


def _mode(default_mode: int | None, mode: int | None) -> int:
    return int(mode if mode is not None else default_mode if default_mode is not None else 0o644) & 0o7777


def _relpath(path: str) -> str:
    norm = os.path.normpath(path or "")
    if not path or norm.startswith("..") or os.path.isabs(norm) or norm == ".":
        raise VolumeNotReady(f"invalid path {path!r} in a volume")
    return norm
