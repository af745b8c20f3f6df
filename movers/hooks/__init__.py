"""Quiesce hooks as data (``model``) and their runner over the Kubernetes exec API (``run``).

No Prefect here: flows and tasks call ``quiesced(api, namespace, hookset)`` around the snapshot.
"""

from movers.hooks.model import (
    Hook,
    HookSet,
    HookSpecError,
    hookset_from_annotations,
    hookset_from_policy,
    parse_duration,
)

__all__ = ["Hook", "HookSet", "HookSpecError", "hookset_from_annotations", "hookset_from_policy", "parse_duration"]
