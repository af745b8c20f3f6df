"""The "restore an application" use case, written against ``movers.kube``'s primitives (no Prefect: the flows
and tasks call these), one module per phase: ``plan`` checks the targets before anything is created,
``writers`` writes each volume from a writer pod into a new Block claim, ``finish`` hands it to its final claim
(and cleans up after a run). ``request`` is the writer pod's contract: the ``RestoreRequest`` it reads and the
``WriteResult`` it writes, the same classes in the pod, the flow and the operator's CLI; ``volume`` is the writer's
one entry point (``restore_volume``), ``app_request`` the ``restore-app`` run's typed request.

The main names of the four are re-exported here (``from movers import restore as r``; ``r.plan_targets``), each
imported when first used: the writer's CLI (``restore_volume``) needs none of the cluster modules, and a restore's
start-up time is part of its recovery time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from movers.restore.finish import (
        describe_error,
        describe_selector,
        discard_run,
        finish_volume,
        kept_after_failure,
        placement_note,
    )
    from movers.restore.plan import (
        DEFAULT_FS_TYPE,
        FS_TYPE_PARAMETERS,
        PVC_LABEL,
        PermissionsMissing,
        RestoreOptions,
        RestoreRefused,
        Target,
        bounded_name,
        check_permissions,
        handover_fs_type,
        labels_of,
        plan_targets,
        required_permissions,
        write_claim_name,
    )
    from movers.restore.request import (
        RestoreRequest,
        WriteResult,
    )
    from movers.restore.writers import (
        PLACEMENT_WEIGHT,
        WriterError,
        WriterNotScheduled,
        WriterRun,
        pod_name,
        write_volume,
        writer_affinity,
        writer_pod,
        writer_request,
    )

# name -> the module of this package that defines it
_EXPORTS = {
    "describe_error": "finish",
    "describe_selector": "finish",
    "discard_run": "finish",
    "finish_volume": "finish",
    "kept_after_failure": "finish",
    "placement_note": "finish",
    "DEFAULT_FS_TYPE": "plan",
    "FS_TYPE_PARAMETERS": "plan",
    "PVC_LABEL": "plan",
    "PermissionsMissing": "plan",
    "RestoreOptions": "plan",
    "RestoreRefused": "plan",
    "Target": "plan",
    "bounded_name": "plan",
    "check_permissions": "plan",
    "handover_fs_type": "plan",
    "labels_of": "plan",
    "plan_targets": "plan",
    "required_permissions": "plan",
    "write_claim_name": "plan",
    "RestoreRequest": "request",
    "WriteResult": "request",
    "PLACEMENT_WEIGHT": "writers",
    "WriterError": "writers",
    "WriterNotScheduled": "writers",
    "WriterRun": "writers",
    "pod_name": "writers",
    "write_volume": "writers",
    "writer_affinity": "writers",
    "writer_pod": "writers",
    "writer_request": "writers",
}

__all__ = [
    "DEFAULT_FS_TYPE",
    "FS_TYPE_PARAMETERS",
    "PLACEMENT_WEIGHT",
    "PVC_LABEL",
    "PermissionsMissing",
    "RestoreOptions",
    "RestoreRefused",
    "RestoreRequest",
    "Target",
    "WriterError",
    "WriteResult",
    "WriterNotScheduled",
    "WriterRun",
    "bounded_name",
    "check_permissions",
    "describe_error",
    "describe_selector",
    "discard_run",
    "finish_volume",
    "handover_fs_type",
    "kept_after_failure",
    "labels_of",
    "placement_note",
    "plan_targets",
    "pod_name",
    "required_permissions",
    "write_claim_name",
    "write_volume",
    "writer_affinity",
    "writer_pod",
    "writer_request",
]


def __getattr__(name: str) -> Any:
    """A re-exported name, its module imported on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
