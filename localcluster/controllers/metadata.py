"""The driver's SnapshotMetadata service (KEP-3314 CBT): the sidecar's lookups over the API, a TLS gRPC server on
loopback, and the SnapshotMetadataService CR that advertises it.

``KubeSnapshotCatalog(kube, plugin)`` is the ``SnapshotCatalog`` the server needs, resolved the way the
external-snapshot-metadata sidecar resolves it, through the API on every call:

- ``by_name(namespace, name)``: VolumeSnapshot -> ``status.boundVolumeSnapshotContentName`` -> content ->
  ``status.snapshotHandle`` -> an ``ImageSnapshot`` of the driver's snapshot file, ``volume_id`` = the content's
  ``source.volumeHandle``, ``ready`` = VS and content ``readyToUse``. A missing VS, content, handle or file raises
  ``SnapshotNotFound`` (the server answers UNAVAILABLE, as the sidecar does for a VS that is not ready). For a ready
  snapshot, as the sidecar: a content of another driver is INVALID_ARGUMENT "VolumeSnapshot '<name>' does not
  belong to the CSI driver '<driver>'"; then the snapshotter secret lookup needs the VS's VolumeSnapshotClass or,
  when it names none (group members never do), the driver's default one: UNAVAILABLE "failed to get
  VolumeSnapshotClass '<name>': ...", "no default VolumeSnapshotClass is set for the CSI driver '<driver>'" or
  "multiple default VolumeSnapshotClasses are set for the CSI driver '<driver>'" (``SnapshotRefused``).
- ``by_handle(handle)``: the content of this driver whose ``status.snapshotHandle`` is ``handle`` (the delta
  base; NOT_FOUND when no content has it any more, e.g. deleted with policy Delete).

``MetadataService(kube, plugin, audience=...)``: ``start()`` serves a ``SnapshotMetadataServer`` on loopback
(a fresh CA; certificate for localhost/127.0.0.1) that validates each request's token with a TokenReview for
``audience`` against the same API (``TokenReviewValidator``), then creates (or replaces) the cluster-scoped
``cbt.storage.k8s.io/v1beta1`` SnapshotMetadataService named after the driver with ``spec.address``,
``spec.audience`` and ``spec.caCert`` (base64 of the CA PEM). ``stop()`` deletes the CR (best effort) and
stops the server. ``sidecar="v0.1.0"``: the Kubernetes 1.33 alpha sidecar instead: its CR is ``v1alpha1`` (the
only version that release's CRD served) and its delta names the base by VolumeSnapshot name
(``SnapshotMetadataServer(base_by_name=True)``).

Simplified: the hostpath driver answers INVALID_ARGUMENT for snapshots of Filesystem-mode volumes; this one
serves their image files like any other.
"""

from __future__ import annotations

import base64
import logging

from localcluster.controllers import names as n
from localcluster.controllers.kube import SMS, VS, VS_CLASS, VSC, Kube
from localcluster.controllers.plugin import CsiPlugin
from localcluster.snapshot_metadata import ImageSnapshot, SnapshotMetadataServer, SnapshotNotFound, SnapshotRefused
from localcluster.snapshot_metadata.kube_auth import TokenReviewValidator

log = logging.getLogger(__name__)
SIDECARS = ("v1", "v0.1.0")  # the external-snapshot-metadata releases served: v1.x, or the 1.33 alpha one


class KubeSnapshotCatalog:
    def __init__(self, kube: Kube, plugin: CsiPlugin) -> None:
        self.kube = kube
        self.plugin = plugin

    def by_name(self, namespace: str, name: str) -> ImageSnapshot:
        vs = self.kube.get(VS, name, namespace)
        if vs is None:
            raise SnapshotNotFound(f"VolumeSnapshot {namespace}/{name} not found")
        status = vs.get("status") or {}
        content = status.get("boundVolumeSnapshotContentName")
        vsc = self.kube.get(VSC, content) if content else None
        if vsc is None:
            raise SnapshotNotFound(f"VolumeSnapshot {namespace}/{name} is not bound to a VolumeSnapshotContent")
        ready = bool(status.get("readyToUse")) and bool((vsc.get("status") or {}).get("readyToUse"))
        if ready:
            if vsc["spec"].get("driver") != self.plugin.driver:
                raise SnapshotRefused(
                    "INVALID_ARGUMENT",
                    f"VolumeSnapshot '{name}' does not belong to the CSI driver '{self.plugin.driver}'",
                )
            self._snapshot_class(vs)
        return self._image(vsc, namespace, name, ready=ready)

    def _snapshot_class(self, vs: dict) -> dict:
        """The VolumeSnapshotClass the sidecar reads the snapshotter secret from (``SnapshotRefused`` when none)."""
        name = (vs.get("spec") or {}).get("volumeSnapshotClassName")
        if name:
            cls = self.kube.get(VS_CLASS, name)
            if cls is None:
                raise SnapshotRefused(
                    "UNAVAILABLE",
                    f"failed to get VolumeSnapshotClass '{name}':"
                    f' volumesnapshotclasses.snapshot.storage.k8s.io "{name}" not found',
                )
            return cls
        driver = self.plugin.driver
        defaults = [
            c
            for c in self.kube.list(VS_CLASS)[0]
            if c.get("driver") == driver
            and (c["metadata"].get("annotations") or {}).get(n.ANN_DEFAULT_SNAPSHOT_CLASS) == "true"
        ]
        if len(defaults) > 1:
            raise SnapshotRefused(
                "UNAVAILABLE", f"multiple default VolumeSnapshotClasses are set for the CSI driver '{driver}'"
            )
        if not defaults:
            raise SnapshotRefused("UNAVAILABLE", f"no default VolumeSnapshotClass is set for the CSI driver '{driver}'")
        return defaults[0]

    def by_handle(self, handle: str) -> ImageSnapshot:
        for vsc in self.kube.list(VSC)[0]:
            if (vsc.get("status") or {}).get("snapshotHandle") == handle and vsc["spec"].get(
                "driver"
            ) == self.plugin.driver:
                ref = vsc["spec"].get("volumeSnapshotRef") or {}
                return self._image(vsc, ref.get("namespace", ""), ref.get("name", ""), ready=True)
        raise SnapshotNotFound(f"snapshot handle {handle!r} not found")

    def _image(self, vsc: dict, namespace: str, name: str, ready: bool) -> ImageSnapshot:
        spec, status = vsc["spec"], vsc.get("status") or {}
        handle = status.get("snapshotHandle")
        if spec.get("driver") != self.plugin.driver or not handle:
            raise SnapshotNotFound(
                f"VolumeSnapshotContent {vsc['metadata']['name']} has no {self.plugin.driver} snapshot handle"
            )
        volume = (spec.get("source") or {}).get("volumeHandle") or f"unknown-volume-of-{handle}"
        try:
            return ImageSnapshot(
                self.plugin.store.snapshot_path(handle),
                namespace=namespace,
                name=name,
                handle=handle,
                volume_id=volume,
                ready=ready and bool(status.get("readyToUse")),
            )
        except FileNotFoundError:
            raise SnapshotNotFound(f"snapshot {handle} does not exist in the storage") from None


class MetadataService:
    def __init__(
        self,
        kube: Kube,
        plugin: CsiPlugin,
        *,
        audience: str,
        host: str = "127.0.0.1",
        block_type: str = "FIXED_LENGTH",
        sidecar: str = "v1",
    ) -> None:
        if sidecar not in SIDECARS:
            raise ValueError(f"sidecar must be one of {SIDECARS}, not {sidecar!r}")
        self.kube = kube
        self.plugin = plugin
        self.audience = audience
        self.sms = SMS.at("v1alpha1") if sidecar == "v0.1.0" else SMS
        self.catalog = KubeSnapshotCatalog(kube, plugin)
        self.server = SnapshotMetadataServer(
            self.catalog,
            TokenReviewValidator(kube.api_client, audience),
            host=host,
            block_type=block_type,
            base_by_name=sidecar == "v0.1.0",
        )

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def ca_pem(self) -> bytes:
        return self.server.ca_pem

    def start(self) -> MetadataService:
        self.server.start()
        try:
            body = {
                "metadata": {"name": self.plugin.driver},
                "spec": {
                    "address": self.server.address,
                    "audience": self.audience,
                    "caCert": base64.b64encode(self.server.ca_pem).decode(),
                },
            }
            old = self.kube.get(self.sms, self.plugin.driver)
            if old is None:
                self.kube.create(self.sms, body)
            else:
                self.kube.patch(self.sms, self.plugin.driver, {"spec": body["spec"]})
        except BaseException:
            self.server.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.kube.delete(self.sms, self.plugin.driver)
        except Exception as exc:  # the API may be gone already
            log.debug("deleting SnapshotMetadataService %s failed: %s", self.plugin.driver, exc)
        finally:
            self.server.stop()
