"""Backup policies: what to back up, where to, when, how to quiesce it and how long to keep it.

A policy is one YAML file (examples in ``configs/policies/``)::

    name: shop-db                      # required; a DNS-1123 label (names the deployment and runs)
    namespace: shop                    # required; the application's namespace
    pvc_selector:                      # required; a Kubernetes LabelSelector over the namespace's PVCs
      matchLabels: {app.kubernetes.io/name: postgresql}
      matchExpressions: [{key: tier, operator: In, values: [db]}]
    repository:                        # required
      url: s3://backups/shop           # s3://bucket[/prefix] or file:///path
      credentials_secret: repo-creds   # Secret in `namespace` with the repository's credentials (optional)
    schedule: {cron: "0 2 * * *", timezone: Europe/Berlin}   # optional; absent: on demand only
    hooks:                             # optional; movers.policy.hooks' Hooks model (name required; pod_selector:
                                       # labels, or a LabelSelector with matchExpressions)
      pre:  [{name: freeze, pod_selector: {matchLabels: {...}}, container: db,
              command: [fsfreeze, --freeze, /data], timeout: 30, on_error: fail}]
      post: [{name: thaw, ..., command: [fsfreeze, --unfreeze, /data], on_error: continue}]
    use_pod_annotations: false         # also take Velero-style pre/post hooks from pod annotations
    retention: {keep_last: 7, keep_daily: 7, keep_weekly: 4, keep_monthly: 6}
    parallelism: 2                     # members moved in parallel
    mover:
      image: cbt-mover:0.1.0
      service_account: cbt-mover       # in `namespace`; `cbt-mover install movers` creates it
      resources: {requests: {cpu: 500m, memory: 512Mi}, limits: {memory: 1Gi}}
      node_selector: {kubernetes.io/os: linux}
      tolerations:                     # Kubernetes Tolerations, validated as the API server does
        - {key: dedicated, operator: Equal, value: backup, effect: NoSchedule}
      affinity:                        # a Kubernetes Affinity with nodeAffinity only
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [backup]}]}]
      progress_interval: 1s            # between progress lines: the progress artifacts in the UI
    cbt: {enabled: auto, max_results: 4096}    # auto: use CBT when the driver serves it; off: always scan
    group_snapshot:
      class: null                      # null: the cluster's default VolumeGroupSnapshotClass
      timeout: 300                     # the group snapshot to be ready
      freeze_timeout: 20s              # how long the app may stay frozen waiting for the group to be cut
      on_timeout: per-pvc              # not cut in time: thaw, delete the group, then one VolumeSnapshot
                                       # per PVC under one new freeze (per-pvc), or fail the run (fail)
    snapshot_class: null               # per-PVC fallback when the driver has no group snapshots
    retained_snapshots: remove         # snapshots of a Retain class, when the product deletes them: remove their
                                       # contents and storage snapshots too (remove), or leave and report them (keep)
    timeouts: {snapshot: 300, pvc_bound: 300, start: 300, mover: 3600, hook: 60}

Durations are ``movers.values``'s: seconds (a number) or a Go duration (``90s``, ``5m``, ``1h30m``,
``500ms``), days allowed (``7d``).
Each section is a pydantic model (``BackupPolicy`` and one per section, frozen), so the flows take the
same types as parameters and the Prefect UI shows them as forms. Every field is checked by one function of
``movers.policy.checks``; durations and quantities by ``movers.values``.
Unknown keys are errors (a typo must not silently drop a setting). The ``hooks`` section is
``movers.policy.hooks.Hooks``, the model the flow runs hooks from: a policy that loads runs. Every error is a
``PolicyError`` whose message names the file and the field.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import BeforeValidator, Field, ValidationError, WithJsonSchema, model_validator

from movers.errors import UsageError
from movers.kube.manifests import DEFAULT_RESOURCES
from movers.policy import checks as c
from movers.policy.checks import Section
from movers.policy.hooks import Hooks, HookSpec

__all__ = [
    "BackupPolicy",
    "CBTSettings",
    "GroupSnapshotSettings",
    "HookSpec",
    "Hooks",
    "MoverSettings",
    "PolicyError",
    "Repository",
    "Retention",
    "Schedule",
    "Timeouts",
    "load_policies",
    "load_policy",
    "parse_mover",
    "parse_policy",
]

DEFAULT_IMAGE = "cbt-mover:0.1.0"
DEFAULT_SERVICE_ACCOUNT = "cbt-mover"
LINUX_NODE_SELECTOR = {"kubernetes.io/os": "linux"}


class PolicyError(UsageError):
    """A policy file that cannot be used. ``str(err)`` is ``"<file>: <field>: <problem>"``."""

    def __init__(self, file: str | Path | None, fieldpath: str, problem: str) -> None:
        self.file = str(file) if file is not None else "<policy>"
        self.field = fieldpath
        self.problem = problem
        where = f"{self.file}: {fieldpath}" if fieldpath else self.file
        super().__init__(f"{where}: {problem}")


# --------------------------------------------------------------------------------------------------
# field types: one check each (movers.policy.checks), and the JSON schema a UI form is built from


def _cbt_mode(value: Any) -> str:
    if value is False:  # YAML `off` is the boolean false
        return "off"
    if value not in ("auto", "off"):
        raise c.problem("", f"must be auto or off, not {value!r}")
    return value


def _on_timeout(value: Any) -> str:
    if value not in ("per-pvc", "fail"):
        raise c.problem("", f"must be per-pvc or fail, not {value!r}")
    return value


def _retained_snapshots(value: Any) -> str:
    if value not in ("remove", "keep"):
        raise c.problem("", f"must be remove or keep, not {value!r}")
    return value


def _node_selector(value: Any) -> dict[str, str]:
    """The user's labels merged over ``kubernetes.io/os: linux``, which must stay linux."""
    merged = {**LINUX_NODE_SELECTOR, **c.labels(value)}
    if merged["kubernetes.io/os"] != "linux":
        raise c.problem("", "kubernetes.io/os must be linux: block volumes cannot attach to Windows nodes")
    return merged


Text = Annotated[str, BeforeValidator(c.string), WithJsonSchema({"type": "string", "minLength": 1})]
DnsLabel = Annotated[str, BeforeValidator(c.dns_label)]
ObjectName = Annotated[str, BeforeValidator(c.object_name)]
OptionalObjectName = Annotated[str | None, BeforeValidator(c.optional_object_name)]
Seconds = Annotated[float, BeforeValidator(c.duration), WithJsonSchema(c.DURATION_SCHEMA)]
Flag = Annotated[bool, BeforeValidator(c.boolean)]
KeepCount = Annotated[int, BeforeValidator(c.count(0)), Field(ge=0)]
Workers = Annotated[int, BeforeValidator(c.count(1)), Field(ge=1)]
PageSize = Annotated[int, BeforeValidator(c.count(0)), Field(ge=0)]
RepoUrl = Annotated[str, BeforeValidator(c.repo_url), Field(pattern=r"^(s3://[^/]+|file:///)")]
Cron = Annotated[str, BeforeValidator(c.cron)]
TimeZone = Annotated[str, BeforeValidator(c.timezone)]
Labels = Annotated[dict[str, str], BeforeValidator(c.labels)]
Selector = Annotated[dict[str, Any], BeforeValidator(c.selector)]
Resources = Annotated[dict[str, dict[str, str]], BeforeValidator(c.resources)]
NodeSelector = Annotated[dict[str, str], BeforeValidator(_node_selector)]
Tolerations = Annotated[list[dict[str, Any]], BeforeValidator(c.tolerations)]
Affinity = Annotated[dict[str, Any] | None, BeforeValidator(c.affinity)]
CbtMode = Annotated[Literal["auto", "off"], BeforeValidator(_cbt_mode)]
OnTimeout = Annotated[Literal["per-pvc", "fail"], BeforeValidator(_on_timeout)]
RetainedSnapshots = Annotated[Literal["remove", "keep"], BeforeValidator(_retained_snapshots)]


# --------------------------------------------------------------------------------------------------
# the policy


class Repository(Section):
    url: RepoUrl
    credentials_secret: OptionalObjectName = None  # a Secret in the app's namespace


class Schedule(Section):
    cron: Cron
    timezone: TimeZone = "UTC"


class Retention(Section):
    keep_last: KeepCount = 7
    keep_daily: KeepCount = 7
    keep_weekly: KeepCount = 4
    keep_monthly: KeepCount = 6

    @model_validator(mode="after")
    def _keeps_something(self) -> Retention:
        if not any(self.rules().values()):
            raise c.problem("", "keeps no backup at all; set at least one keep_* above 0")
        return self

    def rules(self) -> dict[str, int]:
        """``keep_*`` name -> count, the ones above 0 (``movers.repo.retention``'s rules)."""
        return {name: n for name, n in self.model_dump().items() if n}


class MoverSettings(Section):
    image: Text = DEFAULT_IMAGE
    service_account: ObjectName = DEFAULT_SERVICE_ACCOUNT
    resources: Resources = Field(default_factory=lambda: copy.deepcopy(DEFAULT_RESOURCES))
    # block volumes attach to Linux nodes only; a user's selector is merged over this
    node_selector: NodeSelector = Field(default_factory=lambda: dict(LINUX_NODE_SELECTOR))
    tolerations: Tolerations = []  # Kubernetes Tolerations of the mover pods
    affinity: Affinity = None  # a Kubernetes Affinity of the mover pods (nodeAffinity only)
    progress_interval: Seconds = 1.0  # seconds between the mover's progress lines (the UI's progress artifacts)


class CBTSettings(Section):
    enabled: CbtMode = "auto"  # auto | off
    max_results: PageSize = 4096  # GetMetadata* max_results (docs/cbt-benchmarks.md: 256 halves client throughput)


class GroupSnapshotSettings(Section):
    class_name: OptionalObjectName = Field(default=None, alias="class")  # None: the default class
    timeout: Seconds = 300.0  # the group snapshot to be ready
    freeze_timeout: Seconds = 20.0  # the app frozen at most this long waiting for the group to be cut
    on_timeout: OnTimeout = "per-pvc"  # not cut in time: per-pvc (thaw, delete it, per-PVC snapshots) | fail


class Timeouts(Section):
    snapshot: Seconds = 300.0  # a VolumeSnapshot (per-PVC fallback) to be readyToUse
    pvc_bound: Seconds = 300.0  # the mover pod to be scheduled, its PVC from the snapshot bound with it
    start: Seconds = 300.0  # the scheduled mover pod to be running: its volume attached and mounted, its image pulled
    mover: Seconds = 3600.0  # one mover pod, start to finish
    hook: Seconds = 60.0  # default for a hook without its own timeout


class BackupPolicy(Section):
    not_a_mapping: ClassVar[str] = "the policy must be a mapping of fields"
    none_is_default: ClassVar[bool] = False

    name: DnsLabel
    namespace: DnsLabel
    pvc_selector: Selector
    repository: Repository
    schedule: Schedule | None = None
    hooks: Hooks = Field(default_factory=Hooks)
    use_pod_annotations: Flag = False
    retention: Retention = Field(default_factory=Retention)
    parallelism: Workers = 2
    mover: MoverSettings = Field(default_factory=MoverSettings)
    cbt: CBTSettings = Field(default_factory=CBTSettings)
    group_snapshot: GroupSnapshotSettings = Field(default_factory=GroupSnapshotSettings)
    snapshot_class: OptionalObjectName = None
    retained_snapshots: RetainedSnapshots = "remove"  # movers.kube.retained: remove | keep (and report)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    source: str | None = Field(default=None, exclude=True)  # the file it was loaded from


# --------------------------------------------------------------------------------------------------
# loading


def _validated(model: type[Section], data: Any, source: str | Path | None, prefix: str = "") -> Any:
    """``model`` from ``data``; the first problem as a ``PolicyError`` naming ``source`` and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise PolicyError(source, *c.first_problem(err, prefix)) from None


def parse_policy(data: Any, source: str | Path | None = None) -> BackupPolicy:
    """Validate already-parsed YAML data (a mapping) into a ``BackupPolicy``."""
    policy = _validated(BackupPolicy, data, source)
    return policy.model_copy(update={"source": str(source)}) if source is not None else policy


def parse_mover(data: Any, source: str | Path | None = None) -> MoverSettings:
    """Validate a policy's ``mover`` section (a mapping, or None for the defaults) into ``MoverSettings``
    (the restore flow's writer settings use it too)."""
    return _validated(MoverSettings, data, source, "mover")


def load_policy(path: str | Path) -> BackupPolicy:
    """Read and validate one policy file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PolicyError(path, "", f"cannot read: {err.strerror or err}") from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise PolicyError(path, "", f"not valid YAML{at}: {getattr(err, 'problem', None) or err}") from err
    return parse_policy(data, path)


def load_policies(directory: str | Path) -> list[BackupPolicy]:
    """Every ``*.yaml``/``*.yml`` policy in ``directory``, sorted by file name; names must be unique."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PolicyError(directory, "", "not a directory")
    policies: list[BackupPolicy] = []
    seen: dict[str, Path] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        policy = load_policy(path)
        if policy.name in seen:
            raise PolicyError(path, "name", f"{policy.name!r} is also the name of the policy in {seen[policy.name]}")
        seen[policy.name] = path
        policies.append(policy)
    return policies
