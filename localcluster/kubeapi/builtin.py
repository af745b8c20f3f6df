"""The resource types of the local cluster: core kinds, the apps/v1 workloads (``apps.py``), storage,
authn/authz reviews, RBAC, and the
snapshot, group snapshot and SnapshotMetadataService kinds (whose schemas and printer columns come
from the upstream CRDs when ``crds.load_crds`` finds them; the definitions here keep them served
without validation when it does not).

``convert_vgsc`` is the one field conversion between served versions: VolumeGroupSnapshotContent
``status.volumeSnapshotHandlePairList`` (v1beta1) <-> ``status.volumeSnapshotInfoList`` (v1beta2, v1).
"""

from __future__ import annotations

from localcluster.kubeapi import rbac_objects
from localcluster.kubeapi.resources import CREATE_ONLY, VGS_GROUP, VGS_VERSIONS, Obj, ResourceType, default_convert

_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)


def convert_vgsc(obj: Obj, group: str, version: str) -> Obj:
    """VolumeGroupSnapshotContent between v1beta1 and v1beta2/v1 (the only field difference)."""
    obj = default_convert(obj, group, version)
    status = obj.get("status")
    if not isinstance(status, dict):
        return obj
    if version == "v1beta1" and "volumeSnapshotInfoList" in status:
        infos = status.pop("volumeSnapshotInfoList") or []
        status["volumeSnapshotHandlePairList"] = [
            {"volumeHandle": i.get("volumeHandle", ""), "snapshotHandle": i.get("snapshotHandle", "")} for i in infos
        ]
    elif version != "v1beta1" and "volumeSnapshotHandlePairList" in status:
        pairs = status.pop("volumeSnapshotHandlePairList") or []
        status["volumeSnapshotInfoList"] = [
            {"volumeHandle": p.get("volumeHandle", ""), "snapshotHandle": p.get("snapshotHandle", "")} for p in pairs
        ]
    return obj


def _core(plural, kind, namespaced, short=(), sub=(), **kw) -> ResourceType:
    return ResourceType("", plural, kind, ("v1",), "v1", namespaced, tuple(short), tuple(sub), **kw)


def _apps(plural, kind, short) -> ResourceType:
    """An apps/v1 workload: status and scale subresources (``apps.py``)."""
    columns = (("Desired", "integer", ".spec.replicas"), ("Ready", "integer", ".status.readyReplicas"))
    return ResourceType(
        "apps", plural, kind, ("v1",), "v1", True, tuple(short), ("status", "scale"), printer_columns=columns
    )


def _review(group, plural, kind, version="v1") -> ResourceType:
    return ResourceType(group, plural, kind, (version,), version, False, verbs=CREATE_ONLY)


def builtin_types() -> list[ResourceType]:
    return [
        _core(
            "namespaces",
            "Namespace",
            False,
            ["ns"],
            ["status", "finalize"],
            return_deleted=True,
            field_labels=("status.phase",),
            printer_columns=(("Status", "string", ".status.phase"),),
        ),
        _core(
            "pods",
            "Pod",
            True,
            ["po"],
            ["status", "binding", "log", "exec", "attach", "portforward"],
            return_deleted=True,
            field_labels=_POD_FIELDS,
            printer_columns=(("Status", "string", ".status.phase"), ("Node", "string", ".spec.nodeName")),
        ),
        _core(
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            True,
            ["pvc"],
            ["status"],
            return_deleted=True,
            printer_columns=(
                ("Status", "string", ".status.phase"),
                ("Volume", "string", ".spec.volumeName"),
                ("Capacity", "string", ".status.capacity.storage"),
                ("StorageClass", "string", ".spec.storageClassName"),
                ("VolumeMode", "string", ".spec.volumeMode"),
            ),
        ),
        _core(
            "persistentvolumes",
            "PersistentVolume",
            False,
            ["pv"],
            ["status"],
            return_deleted=True,
            printer_columns=(
                ("Capacity", "string", ".spec.capacity.storage"),
                ("ReclaimPolicy", "string", ".spec.persistentVolumeReclaimPolicy"),
                ("Status", "string", ".status.phase"),
                ("Claim", "string", ".spec.claimRef.name"),
                ("StorageClass", "string", ".spec.storageClassName"),
            ),
        ),
        _core("secrets", "Secret", True, field_labels=("type",), printer_columns=(("Type", "string", ".type"),)),
        _core("configmaps", "ConfigMap", True, ["cm"]),
        _core("serviceaccounts", "ServiceAccount", True, ["sa"], ["token"], return_deleted=True),
        _core(
            "events",
            "Event",
            True,
            ["ev"],
            field_labels=_EVENT_FIELDS,
            printer_columns=(
                ("Type", "string", ".type"),
                ("Reason", "string", ".reason"),
                ("Object", "string", ".involvedObject.name"),
                ("Message", "string", ".message"),
            ),
        ),
        _core("nodes", "Node", False, ["no"], ["status"]),
        _core(
            "services",
            "Service",
            True,
            ["svc"],
            ["status"],
            return_deleted=True,
            printer_columns=(("Type", "string", ".spec.type"), ("ClusterIP", "string", ".spec.clusterIP")),
        ),
        ResourceType(
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            ("v1",),
            "v1",
            False,
            ("sc",),
            printer_columns=(
                ("Provisioner", "string", ".provisioner"),
                ("ReclaimPolicy", "string", ".reclaimPolicy"),
                ("VolumeBindingMode", "string", ".volumeBindingMode"),
            ),
            return_deleted=True,
        ),
        _apps("deployments", "Deployment", ["deploy"]),
        _apps("replicasets", "ReplicaSet", ["rs"]),
        _apps("statefulsets", "StatefulSet", ["sts"]),
        ResourceType("storage.k8s.io", "csidrivers", "CSIDriver", ("v1",), "v1", False, return_deleted=True),
        ResourceType("storage.k8s.io", "csinodes", "CSINode", ("v1",), "v1", False, return_deleted=True),
        _review("authentication.k8s.io", "tokenreviews", "TokenReview"),
        _review("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview"),
        _review("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview"),
        _review("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
        _review("authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        *rbac_objects.types(),
        # CRD kinds: replaced by the upstream CRDs' schemas and columns when they are found
        _crd("snapshot.storage.k8s.io", "volumesnapshots", "VolumeSnapshot", True, ["vs"], ("v1",)),
        _crd(
            "snapshot.storage.k8s.io",
            "volumesnapshotcontents",
            "VolumeSnapshotContent",
            False,
            ["vsc", "vscs"],
            ("v1",),
        ),
        _crd(
            "snapshot.storage.k8s.io",
            "volumesnapshotclasses",
            "VolumeSnapshotClass",
            False,
            ["vsclass", "vsclasses"],
            ("v1",),
            status=False,
        ),
        _crd(VGS_GROUP, "volumegroupsnapshots", "VolumeGroupSnapshot", True, ["vgs"], VGS_VERSIONS),
        _crd(
            VGS_GROUP,
            "volumegroupsnapshotcontents",
            "VolumeGroupSnapshotContent",
            False,
            ["vgsc", "vgscs"],
            VGS_VERSIONS,
            convert=convert_vgsc,
        ),
        _crd(
            VGS_GROUP,
            "volumegroupsnapshotclasses",
            "VolumeGroupSnapshotClass",
            False,
            ["vgsclass", "vgsclasses"],
            VGS_VERSIONS,
            status=False,
        ),
        # v1alpha1 is known (the v0.x sidecars) but served only when asked for
        _crd(
            "cbt.storage.k8s.io",
            "snapshotmetadataservices",
            "SnapshotMetadataService",
            False,
            ["sms"],
            ("v1beta1", "v1alpha1"),
            status=False,
            served=("v1beta1",),
        ),
    ]


def _crd(group, plural, kind, namespaced, short, versions, status=True, served=None, **kw) -> ResourceType:
    storage = "v1beta2" if group == VGS_GROUP else versions[0]
    return ResourceType(
        group,
        plural,
        kind,
        tuple(versions),
        storage,
        namespaced,
        tuple(short),
        ("status",) if status else (),
        default_served=served,
        crd=True,
        **kw,
    )
