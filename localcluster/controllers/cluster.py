"""``LocalControllers``: the drivers' control planes, the snapshot and group snapshot controllers and the CBT
service, together.

    with KubeAPI() as api, LocalControllers(api, VolumeStore(tmp / "storage")) as ctl:
        ...  # PVCs bind, snapshots become ready, ctl.metadata.address serves CBT

``api`` is a running ``KubeAPI`` (or anything with ``url`` and ``token``); the controllers reach it over HTTP
with the official client, like out-of-process controllers would. ``start()`` creates, when absent, what the
drivers' installations create (``localcluster.drivers``: for each driver its CSIDriver object, its StorageClasses
with reclaim policy Delete, its VolumeSnapshotClass and, for a driver with group snapshots, its
VolumeGroupSnapshotClass, deletionPolicy Delete, default for the driver; ``standard`` is the default
StorageClass), then starts, each having listed everything it watches when ``start()`` returns:

- per driver: a ``VolumeController`` (external-provisioner + the PV controller's part), a ``SnapshotSidecar``
  (csi-snapshotter), a ``GroupSnapshotSidecar`` while group snapshots are processed, and for a driver with CBT a
  ``MetadataService`` with its SnapshotMetadataService CR (``self.metadata``: the first one, the hostpath driver's);
- once: the ``AppsController`` (kube-controller-manager's Deployment, ReplicaSet and StatefulSet controllers),
  the ``SnapshotController`` (snapshot-controller) and, while group snapshots are processed, the
  ``GroupSnapshotController``. Exactly one controller acts on each object: the common ones on VolumeSnapshots and
  VolumeGroupSnapshots, each driver's on its claims, PVs and contents.

Settings (each off by default; each makes the cluster poorer or older in one point):

- ``drivers``: the ``DriverSpec`` tuple (default ``DEFAULT_DRIVERS``); ``ready_delay``: seconds from taking a
  snapshot to ``readyToUse: true`` (default 0.2);
- ``cbt=False``: no SnapshotMetadata server and no SnapshotMetadataService CR (the product falls back to scans);
  ``audience`` / ``block_type`` configure the service otherwise; ``metadata_sidecar="v0.1.0"``: the Kubernetes
  1.33 alpha sidecar (a ``v1alpha1`` CR, the delta's base named by VolumeSnapshot name; the API must serve
  ``cbt.storage.k8s.io/v1alpha1``, as ``LocalCluster`` arranges);
- ``group_snapshots="unprocessed"`` (``False`` is an alias): the group snapshot CRDs are served and the classes
  exist, but nothing processes VolumeGroupSnapshots (no status at all), as with the snapshot-controller's
  CSIVolumeGroupSnapshot feature gate off. A cluster without the CRDs is ``KubeAPI(group_snapshot_versions=())``:
  no group class and no group controller then. With the CRDs served the controllers speak the group's preferred
  version (v1 > v1beta2 > v1beta1, from discovery);
- ``restore_size=False``: the drivers report no snapshot sizes, so contents (single and group members), the
  VolumeSnapshots and the group contents' info lists carry no ``restoreSize``;
- ``default_snapshot_class="none"``: the VolumeSnapshotClasses exist but none is default; ``"two"``: each driver
  has a second default class ``<class>-retain`` (deletionPolicy Retain). Either way the snapshot-controller
  refuses VolumeSnapshots that name no class (``SetDefaultSnapshotClassFailed``) and the metadata sidecar answers
  UNAVAILABLE for group members (they name no class);
- ``stale_deletion_policy=True``: the snapshot-controller decides a deletion by the deletionPolicy a content had
  when it first saw it, as upstream's informer cache may (a patch of the policy right before the deletion missed);
- ``hostpath_group_capability=False``: the hostpath driver lacks the GroupController capability (its group class
  still exists): its group contents fail with Unimplemented.

``stop()`` stops everything started, in reverse order, whatever happened; it does not touch the storage (loop
devices belong to whoever attached them, e.g. the kubelet).
"""

from __future__ import annotations

import logging
from typing import Any

from localcluster.controllers import names as n
from localcluster.controllers.apps import AppsController
from localcluster.controllers.driver import VolumeController
from localcluster.controllers.groups import GroupSnapshotController, GroupSnapshotSidecar
from localcluster.controllers.kube import CSI_DRIVER, STORAGE_CLASS, VGS, VGS_CLASS, VS_CLASS, Kube
from localcluster.controllers.metadata import MetadataService
from localcluster.controllers.plugin import CsiPlugin
from localcluster.controllers.snapshots import SnapshotController, SnapshotSidecar
from localcluster.drivers import ANN_FSTYPE, DEFAULT_DRIVERS, HOSTPATH, DriverSpec
from localcluster.storage import VolumeStore

log = logging.getLogger(__name__)
SNAPSHOT_CLASS_SETTINGS = ("one", "none", "two")


def api_client_for(api: Any):
    """A ``kubernetes`` ApiClient for the emulator at ``api.url`` with its admin token."""
    from kubernetes import client

    config = client.Configuration(host=api.url)
    config.api_key = {"BearerToken": api.token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    config.connection_pool_maxsize = 32
    return client.ApiClient(config)


def served_version(api_client, group: str) -> str | None:
    """The preferred served version of ``group`` (discovery), or None when the group is not served."""
    from kubernetes import client

    for g in client.ApisApi(api_client).get_api_versions().groups or []:
        if g.name == group:
            return g.preferred_version.version if g.preferred_version else g.versions[0].version
    return None


class LocalControllers:
    def __init__(
        self,
        api: Any,
        store: VolumeStore,
        *,
        drivers: tuple[DriverSpec, ...] = DEFAULT_DRIVERS,
        cbt: bool = True,
        group_snapshots: bool | str = True,
        ready_delay: float = 0.2,
        restore_size: bool = True,
        default_snapshot_class: str = "one",
        hostpath_group_capability: bool = True,
        stale_deletion_policy: bool = False,
        audience: str = n.DEFAULT_AUDIENCE,
        block_type: str = "FIXED_LENGTH",
        metadata_sidecar: str = "v1",
    ) -> None:
        if group_snapshots not in (True, False, "unprocessed"):
            raise ValueError(f"group_snapshots must be True, False or 'unprocessed', not {group_snapshots!r}")
        if default_snapshot_class not in SNAPSHOT_CLASS_SETTINGS:
            raise ValueError(f"default_snapshot_class must be one of {SNAPSHOT_CLASS_SETTINGS}")
        self.api = api
        self.store = store
        self.drivers = drivers
        self.plugins = {
            d.name: CsiPlugin(
                store,
                d,
                restore_size=restore_size,
                group_capability=(d.groups and hostpath_group_capability) if d.name == HOSTPATH.name else None,
            )
            for d in drivers
        }
        self.cbt = cbt
        self.group_snapshots = group_snapshots is True
        self.default_snapshot_class = default_snapshot_class
        self.stale_deletion_policy = stale_deletion_policy
        self.ready_delay = ready_delay
        self.audience = audience
        self.block_type = block_type
        self.metadata_sidecar = metadata_sidecar
        self.group_version: str | None = None
        self.volumes: dict[str, VolumeController] = {}
        self.snapshots: SnapshotController | None = None
        self.groups: GroupSnapshotController | None = None
        self.metadata: MetadataService | None = None
        self._clients: list = []
        self._running: list = []

    def _kube(self, component: str) -> Kube:
        api_client = api_client_for(self.api)
        self._clients.append(api_client)
        return Kube(api_client, component)

    def start(self) -> LocalControllers:
        if self._clients:
            raise RuntimeError("LocalControllers already started")
        try:
            kube = self._kube("localcluster-controllers")
            self.group_version = served_version(kube.api_client, n.GROUP_SNAPSHOT_GROUP)
            groups = self.group_snapshots and self.group_version is not None
            self._defaults(kube)
            parts: list = [AppsController(self._kube("kube-controller-manager"))]
            self.snapshots = SnapshotController(
                self._kube("snapshot-controller"),
                vgs=VGS.at(self.group_version) if groups else None,
                stale_deletion_policy=self.stale_deletion_policy,
            )
            parts.append(self.snapshots)
            if groups:
                self.groups = GroupSnapshotController(
                    self._kube("snapshot-controller"),
                    version=self.group_version,
                    stale_deletion_policy=self.stale_deletion_policy,
                )
                parts.append(self.groups)
            for spec in self.drivers:
                plugin = self.plugins[spec.name]
                volumes = VolumeController(self._kube(f"{spec.name}_csi-provisioner"), plugin)
                self.volumes[spec.name] = volumes
                parts.append(volumes)
                if spec.snapshots:
                    kube = self._kube(f"csi-snapshotter-{spec.name}")
                    parts.append(SnapshotSidecar(kube, plugin, ready_delay=self.ready_delay))
                    if groups:
                        sidecar = GroupSnapshotSidecar(
                            kube, plugin, version=self.group_version, ready_delay=self.ready_delay
                        )
                        parts.append(sidecar)
                if spec.cbt and self.cbt:
                    service = MetadataService(
                        self._kube(f"csi-snapshot-metadata-{spec.name}"),
                        plugin,
                        audience=self.audience,
                        block_type=self.block_type,
                        sidecar=self.metadata_sidecar,
                    )
                    self.metadata = self.metadata or service
                    parts.append(service)
            for part in parts:
                part.start()
                self._running.append(part)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        running, self._running = self._running, []
        errors = []
        for part in reversed(running):
            try:
                part.stop()
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
                log.warning("stopping %s failed: %s", type(part).__name__, exc)
        clients, self._clients = self._clients, []
        for api_client in clients:
            api_client.close()
        if errors:
            raise errors[0]

    def __enter__(self) -> LocalControllers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def errors(self) -> list:
        """Recent reconcile failures of every controller (diagnostics for tests)."""
        return [e for c in self._running if hasattr(c, "errors") for e in c.errors]

    def _defaults(self, kube: Kube) -> None:
        """The CSIDriver objects and classes of the drivers (created when absent; existing ones are kept)."""
        wanted = []
        default_vs = self.default_snapshot_class != "none"
        for spec in self.drivers:
            wanted.append(
                (
                    CSI_DRIVER,
                    {
                        "metadata": {"name": spec.name},
                        "spec": {
                            "attachRequired": False,
                            "podInfoOnMount": True,
                            "fsGroupPolicy": "File",
                            "volumeLifecycleModes": ["Persistent"],
                            "storageCapacity": False,
                        },
                    },
                )
            )
            for cls in spec.storage_classes:
                body = {
                    "metadata": {"name": cls.name},
                    "provisioner": spec.name,
                    "reclaimPolicy": "Delete",
                    "volumeBindingMode": cls.binding,
                    "allowVolumeExpansion": False,
                }
                if cls.default:
                    body["metadata"]["annotations"] = {n.ANN_DEFAULT_STORAGE_CLASS: "true"}
                if cls.fstype:
                    body["parameters"] = {ANN_FSTYPE: cls.fstype}
                wanted.append((STORAGE_CLASS, body))
            if spec.snapshots and spec.snapshot_class:
                wanted.append((VS_CLASS, _snapshot_class(spec.snapshot_class, spec.name, "Delete", default_vs)))
                if self.default_snapshot_class == "two":
                    name = f"{spec.snapshot_class}-retain"
                    wanted.append((VS_CLASS, _snapshot_class(name, spec.name, "Retain", True)))
            if spec.group_class and self.group_version is not None:
                body = {
                    "metadata": {"name": spec.group_class, "annotations": {n.ANN_DEFAULT_GROUP_CLASS: "true"}},
                    "driver": spec.name,
                    "deletionPolicy": "Delete",
                }
                wanted.append((VGS_CLASS.at(self.group_version), body))
        for res, body in wanted:
            if kube.get(res, body["metadata"]["name"]) is None:
                kube.create(res, body)


def _snapshot_class(name: str, driver: str, policy: str, default: bool) -> dict:
    md = {"name": name, "annotations": {n.ANN_DEFAULT_SNAPSHOT_CLASS: "true"}} if default else {"name": name}
    return {"metadata": md, "driver": driver, "deletionPolicy": policy}
