"""``LocalControllers``: the driver, the snapshot and group snapshot controllers and the CBT service, together.

    with KubeAPI() as api, LocalControllers(api, VolumeStore(tmp / "storage")) as ctl:
        ...  # PVCs bind, snapshots become ready, ctl.metadata.address serves CBT

``api`` is a running ``KubeAPI`` (or anything with ``url`` and ``token``); the controllers reach it over HTTP
with the official client, like out-of-process controllers would. ``start()`` creates, when absent, the
cluster-wide defaults (the CSIDriver object; StorageClass ``local-block`` marked default, binding Immediate,
reclaim Delete; VolumeSnapshotClass ``local-snapclass`` and, when group snapshots run, VolumeGroupSnapshotClass
``local-groupclass``, both default for the driver with deletionPolicy Delete), then starts each controller (each
has listed everything it watches when ``start()`` returns) and the metadata service. Settings:

- ``driver``: the CSI driver name (default ``hostpath.csi.k8s.io``); ``ready_delay``: seconds from taking a
  snapshot to ``readyToUse: true`` (default 0.2); ``mkfs``: format new Filesystem volumes (default: when
  ``mkfs.ext4`` exists);
- ``cbt=False``: no SnapshotMetadata server and no SnapshotMetadataService CR (the product falls back to scans);
  ``audience`` / ``block_type`` configure the service otherwise;
- ``group_snapshots=False``: no group snapshot controller and no group class (VolumeGroupSnapshots stay
  unprocessed, as with the feature gate off). To emulate a cluster without the group snapshot CRDs, start the
  API with ``KubeAPI(group_snapshot_versions=())``: the controller is then skipped whatever this says. With the
  CRDs served, it speaks the group's preferred version (v1 > v1beta2 > v1beta1, from discovery).

``stop()`` stops everything started, in reverse order, whatever happened; it does not touch the storage (loop
devices belong to whoever attached them, e.g. the kubelet).
"""

from __future__ import annotations

import logging
from typing import Any

from localcluster.controllers import names as n
from localcluster.controllers.driver import VolumeController
from localcluster.controllers.groups import GroupSnapshotController
from localcluster.controllers.kube import CSI_DRIVER, STORAGE_CLASS, VGS, VGS_CLASS, VS_CLASS, Kube
from localcluster.controllers.metadata import MetadataService
from localcluster.controllers.plugin import CsiPlugin
from localcluster.controllers.snapshots import SnapshotController
from localcluster.storage import VolumeStore

log = logging.getLogger(__name__)


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
    def __init__(self, api: Any, store: VolumeStore, *, driver: str = n.DEFAULT_DRIVER, cbt: bool = True,
                 group_snapshots: bool = True, ready_delay: float = 0.2, mkfs: bool | None = None,
                 audience: str = n.DEFAULT_AUDIENCE, block_type: str = "FIXED_LENGTH") -> None:  # fmt: skip
        self.api = api
        self.store = store
        self.plugin = CsiPlugin(store, driver, mkfs=mkfs)
        self.driver = driver
        self.cbt = cbt
        self.group_snapshots = group_snapshots
        self.ready_delay = ready_delay
        self.audience = audience
        self.block_type = block_type
        self.group_version: str | None = None
        self.volumes: VolumeController | None = None
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
            self._defaults(kube, groups)
            vgs = VGS.at(self.group_version) if self.group_version else None
            self.volumes = VolumeController(self._kube("csi-provisioner"), self.plugin)
            self.snapshots = SnapshotController(self._kube("snapshot-controller"), self.plugin,
                                                ready_delay=self.ready_delay, vgs=vgs)  # fmt: skip
            parts: list = [self.volumes, self.snapshots]
            if groups:
                self.groups = GroupSnapshotController(
                    self._kube("group-snapshot-controller"),
                    self.plugin,
                    version=self.group_version,
                    ready_delay=self.ready_delay,
                )
                parts.append(self.groups)
            if self.cbt:
                self.metadata = MetadataService(self._kube("csi-snapshot-metadata"), self.plugin,
                                                audience=self.audience, block_type=self.block_type)  # fmt: skip
                parts.append(self.metadata)
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
        return [e for c in (self.volumes, self.snapshots, self.groups) if c is not None for e in c.errors]

    def _defaults(self, kube: Kube, groups: bool) -> None:
        wanted = [
            (CSI_DRIVER, {"metadata": {"name": self.driver}, "spec": {
                "attachRequired": False, "podInfoOnMount": True, "fsGroupPolicy": "File",
                "volumeLifecycleModes": ["Persistent"]}}),
            (STORAGE_CLASS, {"metadata": {"name": n.DEFAULT_STORAGE_CLASS,
                                          "annotations": {n.ANN_DEFAULT_STORAGE_CLASS: "true"}},
                             "provisioner": self.driver, "reclaimPolicy": "Delete",
                             "volumeBindingMode": "Immediate", "allowVolumeExpansion": False}),
            (VS_CLASS, {"metadata": {"name": n.DEFAULT_SNAPSHOT_CLASS,
                                     "annotations": {n.ANN_DEFAULT_SNAPSHOT_CLASS: "true"}},
                        "driver": self.driver, "deletionPolicy": "Delete"}),
        ]  # fmt: skip
        if groups:
            wanted.append((VGS_CLASS.at(self.group_version), {
                "metadata": {"name": n.DEFAULT_GROUP_CLASS, "annotations": {n.ANN_DEFAULT_GROUP_CLASS: "true"}},
                "driver": self.driver, "deletionPolicy": "Delete"}))  # fmt: skip
        for res, body in wanted:
            if kube.get(res, body["metadata"]["name"]) is None:
                kube.create(res, body)
