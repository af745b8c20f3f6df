"""Prefect deployment tooling: work pools and the local Prefect server (make ui, make pools)."""
