"""Kubernetes for cbt-mover: pure manifest builders (``manifests``) and thin appliers (``apply``).

No Prefect imports here: the flows and tasks call these.
"""
