"""The local cluster's CSI drivers and their classes, as data (what a cluster's storage vendor installs).

``DriverSpec`` says what one CSI-like driver can do and where its node plugin runs; ``LocalControllers`` starts
the controllers each driver needs (provisioner, csi-snapshotter, metadata sidecar) and creates its CSIDriver
object and classes. ``DEFAULT_DRIVERS`` are the two of the strict cluster:

| driver | topology key (scope) | node plugin on | snapshots | group snapshots | CBT |
|---|---|---|---|---|---|
| ``hostpath.csi.k8s.io`` (the app's) | ``topology.hostpath.csi/node`` (node) | Linux nodes | yes | capable | yes |
| ``disk.csi.local`` | ``topology.disk.csi.local/zone`` (zone) | every node | yes | no capability | no |

Classes: StorageClasses ``standard`` (disk, the cluster DEFAULT, WaitForFirstConsumer, ext4), ``disk-ntfs``
(disk, WFFC, ntfs), ``disk-immediate`` (disk, Immediate), ``csi-hostpath-sc`` (hostpath, WFFC, ext4),
``csi-hostpath-xfs`` (hostpath, WFFC, xfs), ``csi-hostpath-immediate`` (hostpath, Immediate), every one with
reclaim policy Delete; VolumeSnapshotClasses ``csi-hostpath-snapclass`` and ``disk-snapclass`` (each the default
of its driver, deletionPolicy Delete); VolumeGroupSnapshotClass ``csi-hostpath-groupsnapclass`` (default for
hostpath, Delete); none for disk.

Node labels: a node runs a driver's node plugin when it carries the driver's topology key (the value is the
node's name for a node-scoped driver, its zone for a zonal one; ``node_labels(node, os, zone)`` gives them for a
node); its kubelet then lists the driver, with that key, in the node's CSINode object, which is where the
provisioner reads the topology keys from (``localcluster.nodes`` registers the strict cluster's nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

ANN_FSTYPE = "csi.storage.k8s.io/fstype"
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class ClassSpec:
    """A StorageClass of a driver: binding mode, the ``csi.storage.k8s.io/fstype`` parameter, default or not."""

    name: str
    binding: str = "WaitForFirstConsumer"
    fstype: str | None = None
    default: bool = False


@dataclass(frozen=True)
class DriverSpec:
    name: str
    topology_key: str
    topology_scope: str  # "node": the volume lives on one node; "zone": on every node of one zone
    snapshots: bool = True
    groups: bool = False  # the GroupController capability CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
    cbt: bool = False  # a SnapshotMetadata service (external-snapshot-metadata sidecar)
    node_os: tuple[str, ...] = ("linux", "windows")  # where its node plugin runs
    storage_classes: tuple[ClassSpec, ...] = ()
    snapshot_class: str | None = None  # its default VolumeSnapshotClass
    group_class: str | None = None  # its default VolumeGroupSnapshotClass


HOSTPATH = DriverSpec(
    "hostpath.csi.k8s.io",
    "topology.hostpath.csi/node",
    "node",
    groups=True,
    cbt=True,
    node_os=("linux",),
    storage_classes=(
        ClassSpec("csi-hostpath-sc", fstype="ext4"),
        ClassSpec("csi-hostpath-xfs", fstype="xfs"),
        ClassSpec("csi-hostpath-immediate", binding="Immediate"),
    ),
    snapshot_class="csi-hostpath-snapclass",
    group_class="csi-hostpath-groupsnapclass",
)
DISK = DriverSpec(
    "disk.csi.local",
    "topology.disk.csi.local/zone",
    "zone",
    storage_classes=(
        ClassSpec("standard", fstype="ext4", default=True),
        ClassSpec("disk-ntfs", fstype="ntfs"),
        ClassSpec("disk-immediate", binding="Immediate"),
    ),
    snapshot_class="disk-snapclass",
)
DEFAULT_DRIVERS: tuple[DriverSpec, ...] = (HOSTPATH, DISK)
DEFAULT_STORAGE_CLASS = "standard"


def node_labels(node: str, os: str, zone: str, drivers: tuple[DriverSpec, ...] = DEFAULT_DRIVERS) -> dict[str, str]:
    """The driver topology labels of a node (those of the drivers whose node plugin runs on ``os``)."""
    return {d.topology_key: node if d.topology_scope == "node" else zone for d in drivers if os in d.node_os}
