"""The local stand-in for a cluster and its services (S3 now; Kubernetes later).

A test double, never part of the product: ``movers``, ``tasks`` and ``flows`` never import it.
"""
