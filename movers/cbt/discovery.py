"""Finding what a CBT call needs from Kubernetes objects (through the ``kubernetes`` client).

* ``snapshot_metadata_service(api, driver)``: the cluster-scoped SnapshotMetadataService named
  after the CSI driver: ``cbt.storage.k8s.io/v1beta1`` (sidecar >= v1.0), else ``v1alpha1``
  (sidecar v0.x). Before sidecar v0.2.0 ``GetMetadataDelta`` field 3 was the base snapshot
  *name*; a v1alpha1 service therefore gets ``legacy=True`` and callers must not trust deltas
  from it without knowing the sidecar version.
* ``resolve_snapshot(api, namespace, name)``: VolumeSnapshot -> VolumeSnapshotContent ->
  driver, ``status.snapshotHandle`` (the base of the next delta), restore size, group, and the
  source volume's CSI handle (``spec.source.volumeHandle``; None for a pre-provisioned content).
* ``wait_snapshot_ready(api, namespace, name, timeout)``: until the snapshot and its content are ready
  with a handle (the sidecar answers UNAVAILABLE before that), or raises with the controller's error.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass

from movers.errors import CbtUnavailableError, MoverError, UsageError
from movers.kube.apply import api_error
from movers.values import quantity_bytes

log = logging.getLogger(__name__)

SNAPSHOT_GROUP, SNAPSHOT_VERSION = "snapshot.storage.k8s.io", "v1"
CBT_GROUP, CBT_VERSIONS = "cbt.storage.k8s.io", ("v1beta1", "v1alpha1")


@dataclass(frozen=True)
class MetadataService:
    driver: str
    address: str
    audience: str
    ca_pem: bytes
    version: str

    @property
    def legacy(self) -> bool:
        """A v1alpha1 service: possibly a sidecar that reads base_snapshot_id as a name."""
        return self.version == "v1alpha1"


@dataclass(frozen=True)
class SnapshotRef:
    namespace: str
    name: str
    content: str
    driver: str
    handle: str | None
    ready: bool
    restore_size: int | None
    source_pvc: str | None
    group_snapshot: str | None
    group_snapshot_handle: str | None
    error: str | None
    source_volume_handle: str | None = None  # the content's spec.source.volumeHandle: the snapshot's volume


def _custom(api_client):
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


def snapshot_metadata_service(api_client, driver: str) -> MetadataService:
    """The SnapshotMetadataService of ``driver``, or ``CbtUnavailableError`` if it has none."""
    from kubernetes.client.exceptions import ApiException

    custom = _custom(api_client)
    for version in CBT_VERSIONS:
        try:
            obj = custom.get_cluster_custom_object(CBT_GROUP, version, "snapshotmetadataservices", driver)
        except ApiException as err:
            if err.status == 404:
                continue
            raise api_error(err, f"reading SnapshotMetadataService {driver}") from None
        spec = obj.get("spec") or {}
        try:
            ca_pem = base64.b64decode(spec["caCert"], validate=True)
            address, audience = spec["address"], spec["audience"]
        except (KeyError, binascii.Error, TypeError):
            raise UsageError(
                f"SnapshotMetadataService {driver} has a malformed spec (address, audience, caCert)"
            ) from None
        if version == "v1alpha1":
            log.warning(
                "SnapshotMetadataService %s is v1alpha1 (external-snapshot-metadata v0.x): sidecars before v0.2.0"
                " read the delta base as a snapshot name, not a handle",
                driver,
            )
        return MetadataService(driver, address, audience, ca_pem, version)
    raise CbtUnavailableError(f"CBT unavailable: CSI driver {driver} has no SnapshotMetadataService")


def resolve_snapshot(api_client, namespace: str, name: str) -> SnapshotRef:
    from kubernetes.client.exceptions import ApiException

    custom = _custom(api_client)
    try:
        vs = custom.get_namespaced_custom_object(SNAPSHOT_GROUP, SNAPSHOT_VERSION, namespace, "volumesnapshots", name)
    except ApiException as err:
        raise api_error(err, f"reading VolumeSnapshot {namespace}/{name}") from None
    status = vs.get("status") or {}
    content_name = status.get("boundVolumeSnapshotContentName")
    vs_error = (status.get("error") or {}).get("message")
    if not content_name:
        return SnapshotRef(namespace, name, "", "", None, False, None, _source_pvc(vs), None, None, vs_error)
    try:
        vsc = custom.get_cluster_custom_object(SNAPSHOT_GROUP, SNAPSHOT_VERSION, "volumesnapshotcontents", content_name)
    except ApiException as err:
        raise api_error(err, f"reading VolumeSnapshotContent {content_name}") from None
    cstatus = vsc.get("status") or {}
    ready = bool(status.get("readyToUse")) and bool(cstatus.get("readyToUse")) and bool(cstatus.get("snapshotHandle"))
    size = cstatus.get("restoreSize") or status.get("restoreSize")
    return SnapshotRef(
        namespace=namespace,
        name=name,
        content=content_name,
        driver=(vsc.get("spec") or {}).get("driver", ""),
        handle=cstatus.get("snapshotHandle"),
        ready=ready,
        restore_size=quantity_bytes(size),
        source_pvc=_source_pvc(vs),
        group_snapshot=status.get("volumeGroupSnapshotName"),
        group_snapshot_handle=cstatus.get("volumeGroupSnapshotHandle"),
        error=vs_error or (cstatus.get("error") or {}).get("message"),
        source_volume_handle=((vsc.get("spec") or {}).get("source") or {}).get("volumeHandle"),
    )


def wait_snapshot_ready(api_client, namespace: str, name: str, timeout: float = 300.0) -> SnapshotRef:
    """Wait until the VolumeSnapshot is readyToUse (``movers.kube.snapshots.wait_snapshot_ready``, the one
    waiter: ``SnapshotNotReadyError`` with the controller's error after ``timeout``) and resolve it; a ready
    snapshot whose content has no handle yet is a ``MoverError``."""
    from movers.kube.snapshots import wait_snapshot_ready as wait

    wait(api_client, "VolumeSnapshot", namespace, name, timeout)
    ref = resolve_snapshot(api_client, namespace, name)
    if not ref.ready:
        why = f": {ref.error}" if ref.error else ""
        raise MoverError(f"VolumeSnapshot {namespace}/{name} is ready but its content has no snapshot handle{why}")
    return ref


def _source_pvc(vs: dict) -> str | None:
    return ((vs.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName") or None
