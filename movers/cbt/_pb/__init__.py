"""Generated gRPC stubs of the Kubernetes SnapshotMetadata API. Do not edit: run ``make proto``."""
