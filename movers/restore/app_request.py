"""What one ``restore-app`` run is asked to do, as one typed request: the form of the ``restore-app`` deployment.

``RestoreAppRequest`` names the backups (``repo``, the source ``namespace``, ``pvcs``, ``backup``), where they go
(``target_namespace``, ``storage_class``, ``overwrite``, ``hand_over``), the repository Secret the writers mount
(``repo_secret``), the writer pods' placement (the fields of a policy's ``mover`` section, over the section of
``policy_path`` when one is given) and the run's pace (``parallelism``, ``timeout``). The flow takes it as its one
parameter, so the Prefect UI renders it as one form and a deployment's ``enforce_parameter_schema`` (and Prefect's
own validation of a direct call) refuses a request that cannot work before the run starts, naming the field.

Validation is pure: names are checked as Kubernetes checks them (``movers.policy.checks``), placements as a
policy's ``mover`` section is; nothing here reads the cluster or the repository.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from movers.policy.model import Affinity, DnsLabel, Labels, ObjectName, RepoUrl, Text, Tolerations
from movers.restore.plan import RestoreOptions
from movers.restore.source import Source

# the Secret the shipped controller role lets the flows read (``cbt-mover install controller``), the policies' default
DEFAULT_REPO_SECRET = "cbt-mover-repo"
# the writer pods' settings a request may give, each as in a policy's ``mover`` section
WRITER_FIELDS = ("image", "service_account", "node_selector", "tolerations", "affinity")


class RestoreAppRequest(BaseModel):
    """One ``restore-app`` run (see the module doc).

    ``pvcs``: PVC names (None: every volume of the chosen backup run). ``backup``: ``latest``, a run id
    (``cbt-mover.io/run`` tag) or a backup id of one volume. ``target_namespace``: None restores into ``namespace``.
    ``storage_class`` overrides the recorded class (default: recorded, else the cluster default). ``overwrite``:
    replace existing claims of those names once the restored data is complete (refused while a pod uses them).
    ``hand_over``: give the volume to a Filesystem-mode claim (None: when it was recorded as Filesystem).
    ``allow_partial``: a whole-app restore may take a partial run (one whose mover failed for some PVCs; restored
    without them). ``repo_secret`` (and ``service_account``) must exist in the target namespace: the flow opens the
    repository with its key, the writers mount it. ``source``: ``auto`` (the kept snapshot where it still holds
    the backup, else the repository), ``snapshot`` or ``repository`` (``movers.restore.source``). ``in_place``:
    onto the existing Block claims themselves, writing only what differs: the ranges CBT reports between the
    backup's snapshot and a snapshot of the live claim when it can (``movers.restore.live``), else what comparing
    each with the backup finds (refused while a running pod uses one; ``movers.restore.plan.in_place_target``).
    ``scale_down`` (with ``in_place`` or ``overwrite``): scale the Deployments and StatefulSets whose pods use the
    claims written in place or replaced to 0 first (each workload's replicas recorded on it, annotation
    ``cbt-mover.io/scaled-down-from``), wait until no pod uses them, restore, then ALWAYS scale them back to the
    recorded replicas, also when the restore fails (``movers.restore.quiesce``); pods no such workload runs are
    still refused. ``timeout``: seconds per writer pod,
    and the longest wait for the scaled-down pods to stop.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: RepoUrl
    namespace: DnsLabel
    pvcs: list[ObjectName] | None = None
    backup: Text = "latest"
    target_namespace: DnsLabel | None = None
    repo_secret: ObjectName = DEFAULT_REPO_SECRET
    storage_class: ObjectName | None = None
    overwrite: bool = False
    hand_over: bool | None = None
    allow_partial: bool = False
    image: Text | None = None
    service_account: ObjectName | None = None
    node_selector: Labels | None = None
    tolerations: Tolerations | None = None
    affinity: Affinity = None
    policy_path: str | None = None
    source: Source = "auto"
    in_place: bool = False
    scale_down: bool = False
    parallelism: int = Field(default=2, ge=1)
    timeout: float = Field(default=3600.0, gt=0)

    @property
    def target(self) -> str:
        """The namespace restored into: ``target_namespace``, else the source ``namespace``."""
        return self.target_namespace or self.namespace

    def writer_given(self) -> dict[str, Any]:
        """The writer pods' settings this request gives (``WRITER_FIELDS`` that are not None), for merging over a
        policy's ``mover`` section."""
        return {name: getattr(self, name) for name in WRITER_FIELDS if getattr(self, name) is not None}

    def options(self, service_account: str) -> RestoreOptions:
        """The plan's options of this request, the writers running as ``service_account`` (the one the writer
        settings resolved to)."""
        return RestoreOptions(
            storage_class=self.storage_class,
            overwrite=self.overwrite,
            hand_over=self.hand_over,
            repo_secret=self.repo_secret,
            service_account=service_account,
            source=self.source,
            in_place=self.in_place,
            scale_down=self.scale_down,
        )

    @model_validator(mode="after")
    def _in_place(self) -> RestoreAppRequest:
        if self.in_place and (self.overwrite or self.hand_over or self.source == "snapshot"):
            raise ValueError(
                "in_place restores onto the existing claims themselves: overwrite, hand_over and source snapshot"
                " (a new claim) contradict it"
            )
        if self.scale_down and not (self.in_place or self.overwrite):
            raise ValueError(
                "scale_down stops the workloads that use the claims a restore writes in place or replaces: it needs"
                " in_place or overwrite (a restore into new claims does not touch the application)"
            )
        return self
