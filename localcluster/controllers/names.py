"""Names, annotations and finalizers exactly as the upstream components spell them, and the object names they derive.

Sources: external-snapshotter ``pkg/utils/util.go`` and ``pkg/common-controller/groupsnapshot_controller_helper.go``,
external-provisioner ``pkg/controller/controller.go``, kube-controller-manager (pv/pvc protection, PV binding).
The drivers and their classes are in ``localcluster.drivers``.
"""

from __future__ import annotations

import hashlib
import uuid

DEFAULT_AUDIENCE = "snapshot-metadata"

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
GROUP_SNAPSHOT_GROUP = "groupsnapshot.storage.k8s.io"
CBT_GROUP = "cbt.storage.k8s.io"

# storage classes and snapshot classes
ANN_DEFAULT_STORAGE_CLASS = "storageclass.kubernetes.io/is-default-class"
ANN_DEFAULT_SNAPSHOT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
ANN_DEFAULT_GROUP_CLASS = "groupsnapshot.storage.kubernetes.io/is-default-class"

# external-snapshotter
FIN_VSC_BOUND = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
FIN_VS_BOUND = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
FIN_VS_AS_SOURCE = "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
FIN_VS_IN_GROUP = "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection"
FIN_PVC_AS_SOURCE = "snapshot.storage.kubernetes.io/pvc-as-source-protection"
FIN_VGSC_BOUND = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshotcontent-bound-protection"
FIN_VGS_BOUND = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection"
ANN_VS_BEING_DELETED = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
ANN_VGS_BEING_DELETED = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted"
ANN_GROUP_HANDLE = "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle"
ANN_ALLOW_MODE_CHANGE = "snapshot.storage.kubernetes.io/allow-volume-mode-change"

# external-provisioner and kube-controller-manager
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
FIN_PV_PROTECTION = "kubernetes.io/pv-protection"
FIN_PVC_PROTECTION = "kubernetes.io/pvc-protection"
FIN_PROVISIONER = "external-provisioner.volume.kubernetes.io/finalizer"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"

_HANDLES = uuid.UUID("6b1d9f0e-4a39-4f51-9a3c-2c8e6f0a7d11")  # namespace of the driver's deterministic handles


def snapshot_content_name(vs_uid: str) -> str:
    """The content of a dynamically provisioned VolumeSnapshot (``utils.GetDynamicSnapshotContentNameForSnapshot``)."""
    return f"snapcontent-{vs_uid}"


def group_content_name(vgs_uid: str) -> str:
    """The content of a dynamic VolumeGroupSnapshot (``utils.GetDynamicSnapshotContentNameForGroupSnapshot``)."""
    return f"groupsnapcontent-{vgs_uid}"


def _member_hash(vgs_uid: str, volume_handle: str) -> str:
    return hashlib.sha256((vgs_uid + volume_handle).encode()).hexdigest()


def member_snapshot_name(vgs_uid: str, volume_handle: str) -> str:
    """``snapshot-<sha256hex(vgs.UID + volumeHandle)>`` (``getSnapshotNameForVolumeGroupSnapshotContent``)."""
    return f"snapshot-{_member_hash(vgs_uid, volume_handle)}"


def member_content_name(vgs_uid: str, volume_handle: str) -> str:
    """``snapcontent-<sha256hex(vgs.UID + volumeHandle)>``."""
    return f"snapcontent-{_member_hash(vgs_uid, volume_handle)}"


def pv_name(pvc_uid: str) -> str:
    """The external-provisioner's default PV name (``--volume-name-prefix=pvc``, uuid of the claim)."""
    return f"pvc-{pvc_uid}"


def handle_for(*parts: str) -> str:
    """A driver handle (volume, snapshot, group snapshot) that is the same on every retry of one request, as a CSI
    driver keeps its create calls idempotent by request name."""
    return str(uuid.uuid5(_HANDLES, "/".join(parts)))
