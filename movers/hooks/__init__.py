"""Quiesce hooks: their runner over the Kubernetes exec API (``run``), and re-exported, the hooks as data
(``movers.policy.hooks``: the policy's hooks section and Velero-style pod annotations).

No Prefect here: flows and tasks call ``quiesced(api, namespace, hookset)`` around the snapshot.
"""

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
from movers.policy.hooks import (
    Hook,
    Hooks,
    HookSet,
    HookSpec,
    HookSpecError,
    hookset_from_annotations,
    hookset_from_policy,
    parse_duration,
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
