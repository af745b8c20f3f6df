"""Kubernetes for cbt-mover: pure manifest builders (``manifests``) and the modules that apply them.

``apply`` is the generic layer (get/list/create/patch/delete by kind); ``pods``, ``snapshots``,
``volumes`` and ``cleanup`` build on it (never the reverse); ``restore`` drives a restore run.
No Prefect imports here: the flows and tasks call these.
"""
