"""Kubernetes for cbt-mover: pure manifest builders (``manifests``) and the modules that apply them.

``apply`` is the generic layer (get/list/create/patch/delete by kind); ``pods``, ``snapshots``,
``volumes``, ``access`` and ``cleanup`` build on it (never the reverse); ``names`` derives valid object
names; ``preflight`` checks a backup run before it freezes anything and picks its snapshot path,
``snapshotset`` cuts the snapshots under a bounded freeze; ``restore`` drives a restore run; ``repokey``
reads an encrypted repository's key from the repository Secret (and which key files the pods mount).
No Prefect imports here: the flows and tasks call these.
"""
