"""A local SnapshotMetadata (KEP-3314 CBT) gRPC server: a test double of the sidecar + hostpath driver.

Used by tests, benchmarks and the local cluster; the product (``movers``) never imports it. Typical use::

    catalog = InMemoryCatalog([ImageSnapshot(path, namespace="ns", name="snap-1", volume_id="vol")])
    tokens = StaticTokens("snapshot-metadata")
    with SnapshotMetadataServer(catalog, tokens, block_type="VARIABLE_LENGTH") as server:
        channel = grpc.secure_channel(server.address, grpc.ssl_channel_credentials(server.ca_pem))
        ...  # requests carry security_token=tokens.issue(["ns"])

Modules: ``tls`` (throw-away CA + server cert), ``auth`` (token validators), ``snapshots`` (image and synthetic
snapshots, the catalog protocol), ``faults`` (fault injection knobs), ``server``; ``python -m
localcluster.snapshot_metadata --help`` serves image files for manual testing.
"""

from localcluster.snapshot_metadata.auth import (
    AllowAll,
    PermissionDenied,
    StaticTokens,
    TokenValidator,
    Unauthenticated,
)
from localcluster.snapshot_metadata.faults import CallPlan, Faults
from localcluster.snapshot_metadata.server import SERVICE, RequestRecord, SnapshotMetadataServer
from localcluster.snapshot_metadata.snapshots import (
    ImageSnapshot,
    InMemoryCatalog,
    Snapshot,
    SnapshotCatalog,
    SnapshotNotFound,
    SnapshotRefused,
    SyntheticSnapshot,
)
from localcluster.snapshot_metadata.tls import TlsMaterial, make_ca_and_cert

__all__ = [
    "SERVICE",
    "AllowAll",
    "CallPlan",
    "Faults",
    "ImageSnapshot",
    "InMemoryCatalog",
    "PermissionDenied",
    "RequestRecord",
    "Snapshot",
    "SnapshotCatalog",
    "SnapshotMetadataServer",
    "SnapshotNotFound",
    "SnapshotRefused",
    "StaticTokens",
    "SyntheticSnapshot",
    "TlsMaterial",
    "TokenValidator",
    "Unauthenticated",
    "make_ca_and_cert",
]
