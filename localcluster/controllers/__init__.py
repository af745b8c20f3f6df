"""Controllers of the local cluster that behave like the upstream ones (a test double, never the product).

They drive the Kubernetes API emulator (``localcluster.kubeapi``) the way the real components drive a cluster:
over HTTP, through the official ``kubernetes`` client, by list+watch and level-triggered reconciles, so what the
product sees (object names, fields per API version, finalizers, events, readiness transitions) is what it would
see on a cluster. Using the emulator's in-process store instead would skip serialization, watch semantics and
validation, which are part of what the product relies on.

- ``LocalControllers`` (``cluster``): everything below for the drivers of ``localcluster.drivers``, with their
  classes and the settings of poorer clusters; ``start()``/``stop()``.
- ``VolumeController`` (``driver``, one per driver): external-provisioner (WaitForFirstConsumer, topology) + PV
  binding + pv/pvc protection.
- ``SnapshotController`` / ``SnapshotSidecar`` (``snapshots``): snapshot-controller (once) and csi-snapshotter
  (per driver) for VolumeSnapshots.
- ``GroupSnapshotController`` / ``GroupSnapshotSidecar`` (``groups``): the same for VolumeGroupSnapshots, in the
  served API version.
- ``MetadataService`` / ``KubeSnapshotCatalog`` (``metadata``): the SnapshotMetadata (CBT) gRPC service and CR.
- ``CsiPlugin`` (``plugin``): a driver's storage operations over ``localcluster.storage.VolumeStore``.
- ``AppsController`` (``apps``): kube-controller-manager's Deployment, ReplicaSet and StatefulSet controllers.
- ``runtime``: watch threads, work queue, worker; ``kube``: the client wrapper; ``names``: upstream names.
"""

from localcluster.controllers.apps import AppsController
from localcluster.controllers.cluster import LocalControllers, api_client_for, served_version
from localcluster.controllers.driver import VolumeController
from localcluster.controllers.groups import GroupSnapshotController, GroupSnapshotSidecar
from localcluster.controllers.kube import Kube, Res, format_quantity, parse_quantity
from localcluster.controllers.metadata import KubeSnapshotCatalog, MetadataService
from localcluster.controllers.names import member_content_name, member_snapshot_name
from localcluster.controllers.plugin import CsiError, CsiPlugin
from localcluster.controllers.runtime import Controller
from localcluster.controllers.snapshots import SnapshotController, SnapshotSidecar

__all__ = [
    "AppsController",
    "Controller",
    "CsiError",
    "CsiPlugin",
    "GroupSnapshotController",
    "GroupSnapshotSidecar",
    "Kube",
    "KubeSnapshotCatalog",
    "LocalControllers",
    "MetadataService",
    "Res",
    "SnapshotController",
    "SnapshotSidecar",
    "VolumeController",
    "api_client_for",
    "format_quantity",
    "member_content_name",
    "member_snapshot_name",
    "parse_quantity",
    "served_version",
]
