"""Finding what a CBT call needs from Kubernetes objects (through the ``kubernetes`` client).

* ``snapshot_metadata_service(api, driver)``: the cluster-scoped SnapshotMetadataService named
  after the CSI driver: ``cbt.storage.k8s.io/v1beta1`` (sidecar >= v1.0), else ``v1alpha1``
  (sidecar v0.x). Before sidecar v0.2.0 ``GetMetadataDelta`` field 3 was the base snapshot
  *name*; a v1alpha1 service therefore gets ``legacy=True`` and callers must not trust deltas
  from it without knowing the sidecar version.
* ``wait_snapshot_ready(api, namespace, name, timeout)``: until the snapshot and its content are ready
  with a handle (the sidecar answers UNAVAILABLE before that), or raises with the controller's error; the
  snapshot as ``movers.kube.snapshots.resolve_snapshot`` reads it (``SnapshotRef``).
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass

from movers.errors import CbtUnavailableError, MoverError, UsageError
from movers.kube.apply import api_error
from movers.kube.snapshots import SnapshotRef, resolve_snapshot

log = logging.getLogger(__name__)

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
