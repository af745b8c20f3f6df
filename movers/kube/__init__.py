"""Kubernetes primitives for cbt-mover: pure manifest builders (``manifests``) and the modules that apply them.

``apply`` is the generic layer (get/list/create/patch/delete by kind); ``pods``, ``snapshots``,
``volumes``, ``access``, ``retained`` and ``cleanup`` build on it (never the reverse); ``names`` derives valid
object names; ``kevents`` reads the Events about an object; ``repokey`` reads an encrypted repository's key from
the repository Secret (and which key files the pods mount); ``client`` makes the API client.

The use cases are written against these: ``movers.backup`` and ``movers.restore``. Nothing here imports them,
``movers.cbt`` or ``movers.policy``: a function here takes the few values it needs, never a whole policy.
No Prefect imports here: the flows and tasks call these.
"""
