"""Quiesce hooks as data (``model``) and their runner over the Kubernetes exec API (``run``).

No Prefect here: flows and tasks call ``quiesced(api, namespace, hookset)`` around the snapshot.
"""

from movers.hooks.model import (
    Hook,
    Hooks,
    HookSet,
    HookSpec,
    HookSpecError,
    hookset_from_annotations,
    hookset_from_policy,
    parse_duration,
)
from movers.hooks.run import (
    HookError,
    HookResult,
    Quiesce,
    annotation_hooks,
    app_hooks,
    exec_in_pod,
    quiesced,
    run_hook,
    run_hooks,
    target_pods,
)

__all__ = [
    "app_hooks",
    "Hook",
    "HookError",
    "HookResult",
    "Hooks",
    "HookSet",
    "HookSpec",
    "HookSpecError",
    "Quiesce",
    "annotation_hooks",
    "exec_in_pod",
    "hookset_from_annotations",
    "hookset_from_policy",
    "parse_duration",
    "quiesced",
    "run_hook",
    "run_hooks",
    "target_pods",
]
