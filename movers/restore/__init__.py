"""The "restore an application" use case, written against ``movers.kube``'s primitives (no Prefect: the flows
and tasks call these), one module per phase: ``plan`` checks the targets before anything is created,
``writers`` writes each volume from a writer pod into a new Block claim, ``finish`` hands it to its final claim
(and cleans up after a run). ``request`` is the writer pod's contract: the ``RestoreRequest`` it reads and the
``WriteResult`` it writes, the same classes in the pod, the flow and the operator's CLI; ``volume`` is the writer's
one entry point (``restore_volume``), ``app_request`` the ``restore-app`` run's typed request.

The main names of the four are re-exported here (``from movers import restore as r``; ``r.plan_targets``).
"""

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
from movers.restore.request import RestoreRequest, WriteResult
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
