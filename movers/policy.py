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
    hooks:                             # optional; plain dicts that movers.hooks parses (name required;
                                       # pod_selector: labels, or a LabelSelector with matchExpressions)
      pre:  [{name: freeze, pod_selector: {matchLabels: {...}}, container: db,
              command: [fsfreeze, --freeze, /data], timeout: 30, on_error: fail}]
      post: [{name: thaw, ..., command: [fsfreeze, --unfreeze, /data], on_error: continue}]
    use_pod_annotations: false         # also take Velero-style pre/post hooks from pod annotations
    retention: {keep_last: 7, keep_daily: 7, keep_weekly: 4, keep_monthly: 6}
    parallelism: 2                     # members moved in parallel
    mover:
      image: cbt-mover:0.1.0
      service_account: cbt-mover       # in `namespace`; see configs/rbac/mover.yaml
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
    timeouts: {snapshot: 300, pvc_bound: 300, mover: 3600, hook: 60}

Durations are ``movers.durations``'s: seconds (a number) or a Go duration (``90s``, ``5m``, ``1h30m``,
``500ms``), days allowed (``7d``).
Unknown keys are errors (a typo must not silently drop a setting). Hooks are checked here field by
field and then parsed by ``movers.hooks`` (their owner), so a policy that loads runs. Every error is a
``PolicyError`` whose message names the file and the field.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from movers.durations import EXAMPLES, parse_duration
from movers.errors import UsageError
from movers.hooks.model import HookSpecError, hookset_from_policy
from movers.kube.manifests import DEFAULT_RESOURCES
from movers.quantities import parse_quantity

__all__ = [
    "BackupPolicy",
    "CBTSettings",
    "GroupSnapshotSettings",
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

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# label key: optional DNS subdomain prefix + "/" + name (<= 63, alphanumeric ends, - _ . inside)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")
_CRON_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_ON_ERROR = ("fail", "continue")
_ON_TIMEOUT = ("per-pvc", "fail")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


class PolicyError(UsageError):
    """A policy file that cannot be used. ``str(err)`` is ``"<file>: <field>: <problem>"``."""

    def __init__(self, file: str | Path | None, fieldpath: str, problem: str) -> None:
        self.file = str(file) if file is not None else "<policy>"
        self.field = fieldpath
        self.problem = problem
        where = f"{self.file}: {fieldpath}" if fieldpath else self.file
        super().__init__(f"{where}: {problem}")


# --------------------------------------------------------------------------------------------------
# the policy


@dataclass(frozen=True)
class Repository:
    url: str
    credentials_secret: str | None = None


@dataclass(frozen=True)
class Schedule:
    cron: str
    timezone: str = "UTC"


@dataclass(frozen=True)
class Hooks:
    pre: list[dict[str, Any]] = field(default_factory=list)
    post: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Retention:
    keep_last: int = 7
    keep_daily: int = 7
    keep_weekly: int = 4
    keep_monthly: int = 6


@dataclass(frozen=True)
class MoverSettings:
    image: str = DEFAULT_IMAGE
    service_account: str = DEFAULT_SERVICE_ACCOUNT
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: copy.deepcopy(DEFAULT_RESOURCES))
    # block volumes attach to Linux nodes only; a user's selector is merged over this
    node_selector: dict[str, str] = field(default_factory=lambda: dict(LINUX_NODE_SELECTOR))
    tolerations: list[dict[str, Any]] = field(default_factory=list)  # Kubernetes Tolerations of the mover pods
    affinity: dict[str, Any] | None = None  # a Kubernetes Affinity of the mover pods (nodeAffinity only)
    progress_interval: float = 1.0  # seconds between the mover's progress lines (the UI's progress artifacts)


@dataclass(frozen=True)
class CBTSettings:
    enabled: str = "auto"  # auto | off
    max_results: int = 4096  # GetMetadata* max_results (docs/cbt-benchmarks.md: 256 halves client throughput)


@dataclass(frozen=True)
class GroupSnapshotSettings:
    class_name: str | None = None  # YAML key ``class``; None: the default VolumeGroupSnapshotClass
    timeout: float = 300.0  # the group snapshot to be ready
    freeze_timeout: float = 20.0  # the app frozen at most this long waiting for the group to be cut
    on_timeout: str = "per-pvc"  # not cut in time: per-pvc (thaw, delete it, per-PVC snapshots) | fail


@dataclass(frozen=True)
class Timeouts:
    snapshot: float = 300.0  # a VolumeSnapshot (per-PVC fallback) to be readyToUse
    pvc_bound: float = 300.0  # the mover pod to be scheduled, its PVC from the snapshot bound with it
    mover: float = 3600.0  # one mover pod, start to finish
    hook: float = 60.0  # default for a hook without its own timeout


@dataclass(frozen=True)
class BackupPolicy:
    name: str
    namespace: str
    pvc_selector: dict[str, Any]
    repository: Repository
    schedule: Schedule | None = None
    hooks: Hooks = field(default_factory=Hooks)
    use_pod_annotations: bool = False
    retention: Retention = field(default_factory=Retention)
    parallelism: int = 2
    mover: MoverSettings = field(default_factory=MoverSettings)
    cbt: CBTSettings = field(default_factory=CBTSettings)
    group_snapshot: GroupSnapshotSettings = field(default_factory=GroupSnapshotSettings)
    snapshot_class: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    source: str | None = None  # the file it was loaded from

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-able), e.g. for flow parameters; ``group_snapshot.class`` as in YAML."""
        out = dataclasses.asdict(self)
        out["group_snapshot"]["class"] = out["group_snapshot"].pop("class_name")
        out.pop("source")
        return out


# --------------------------------------------------------------------------------------------------
# loading


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


def parse_mover(data: Any, source: str | Path | None = None) -> MoverSettings:
    """Validate a policy's ``mover`` section (a mapping, or None for the defaults) into ``MoverSettings``
    (the restore flow's writer settings use it too)."""
    v = _Validator(source)
    mv = v.mapping(data, "mover")
    mdef = MoverSettings()
    v.known(
        mv,
        "mover",
        {"image", "service_account", "resources", "node_selector", "tolerations", "affinity", "progress_interval"},
    )
    node_selector = {**LINUX_NODE_SELECTOR, **v.string_map(mv.get("node_selector"), "mover.node_selector")}
    if node_selector["kubernetes.io/os"] != "linux":
        raise PolicyError(
            source,
            "mover.node_selector",
            "kubernetes.io/os must be linux: block volumes cannot attach to Windows nodes",
        )
    return MoverSettings(
        image=v.string(mv.get("image", mdef.image), "mover.image"),
        service_account=v.dns_subdomain(mv.get("service_account", mdef.service_account), "mover.service_account"),
        resources=v.resources(mv.get("resources", mdef.resources), "mover.resources"),
        node_selector=node_selector,
        tolerations=v.tolerations(mv.get("tolerations"), "mover.tolerations"),
        affinity=v.affinity(mv.get("affinity"), "mover.affinity"),
        progress_interval=v.duration(mv.get("progress_interval", mdef.progress_interval), "mover.progress_interval"),
    )


def parse_policy(data: Any, source: str | Path | None = None) -> BackupPolicy:
    """Validate already-parsed YAML data (a mapping) into a ``BackupPolicy``."""
    v = _Validator(source)
    top = v.mapping(data, "", required=True)
    v.known(
        top,
        "",
        {
            "name",
            "namespace",
            "pvc_selector",
            "repository",
            "schedule",
            "hooks",
            "use_pod_annotations",
            "retention",
            "parallelism",
            "mover",
            "cbt",
            "group_snapshot",
            "snapshot_class",
            "timeouts",
        },
    )
    name = v.dns_label(v.required(top, "name", ""), "name")
    namespace = v.dns_label(v.required(top, "namespace", ""), "namespace")
    selector = v.selector(v.required(top, "pvc_selector", ""), "pvc_selector")

    repo = v.mapping(v.required(top, "repository", ""), "repository", required=True)
    v.known(repo, "repository", {"url", "credentials_secret"})
    repository = Repository(
        url=v.repo_url(v.required(repo, "url", "repository"), "repository.url"),
        credentials_secret=v.opt_subdomain(repo.get("credentials_secret"), "repository.credentials_secret"),
    )

    schedule = None
    if top.get("schedule") is not None:
        sch = v.mapping(top["schedule"], "schedule", required=True)
        v.known(sch, "schedule", {"cron", "timezone"})
        schedule = Schedule(
            cron=v.cron(v.required(sch, "cron", "schedule"), "schedule.cron"),
            timezone=v.timezone(sch.get("timezone", "UTC"), "schedule.timezone"),
        )

    hk = v.mapping(top.get("hooks"), "hooks")
    v.known(hk, "hooks", {"pre", "post"})
    hooks = Hooks(pre=v.hook_list(hk.get("pre"), "hooks.pre"), post=v.hook_list(hk.get("post"), "hooks.post"))

    ret = v.mapping(top.get("retention"), "retention")
    rdef = Retention()
    v.known(ret, "retention", {f.name for f in dataclasses.fields(Retention)})
    retention = Retention(
        **{
            f.name: v.integer(ret.get(f.name, getattr(rdef, f.name)), f"retention.{f.name}", minimum=0)
            for f in dataclasses.fields(Retention)
        }
    )
    if not any(dataclasses.astuple(retention)):
        raise PolicyError(source, "retention", "keeps no backup at all; set at least one keep_* above 0")

    mover = parse_mover(top.get("mover"), source)

    cb = v.mapping(top.get("cbt"), "cbt")
    v.known(cb, "cbt", {"enabled", "max_results"})
    enabled = cb.get("enabled", "auto")
    if enabled is False:  # YAML `off` is the boolean false
        enabled = "off"
    if enabled not in ("auto", "off"):
        raise PolicyError(source, "cbt.enabled", f"must be auto or off, not {enabled!r}")
    cbt = CBTSettings(enabled=enabled, max_results=v.integer(cb.get("max_results", 4096), "cbt.max_results", minimum=0))

    gs = v.mapping(top.get("group_snapshot"), "group_snapshot")
    v.known(gs, "group_snapshot", {"class", "timeout", "freeze_timeout", "on_timeout"})
    gdef = GroupSnapshotSettings()
    on_timeout = gs.get("on_timeout", gdef.on_timeout)
    if on_timeout not in _ON_TIMEOUT:
        raise PolicyError(source, "group_snapshot.on_timeout", f"must be per-pvc or fail, not {on_timeout!r}")
    group_snapshot = GroupSnapshotSettings(
        class_name=v.opt_subdomain(gs.get("class"), "group_snapshot.class"),
        timeout=v.duration(gs.get("timeout", gdef.timeout), "group_snapshot.timeout"),
        freeze_timeout=v.duration(gs.get("freeze_timeout", gdef.freeze_timeout), "group_snapshot.freeze_timeout"),
        on_timeout=on_timeout,
    )

    to = v.mapping(top.get("timeouts"), "timeouts")
    tdef = Timeouts()
    v.known(to, "timeouts", {f.name for f in dataclasses.fields(Timeouts)})
    timeouts = Timeouts(
        **{
            f.name: v.duration(to.get(f.name, getattr(tdef, f.name)), f"timeouts.{f.name}")
            for f in dataclasses.fields(Timeouts)
        }
    )
    try:  # movers.hooks parses them in the flow: a policy that loads must parse there too
        hookset_from_policy({"pre": hooks.pre, "post": hooks.post}, timeouts.hook)
    except HookSpecError as err:
        raise PolicyError(source, "hooks", str(err)) from None

    return BackupPolicy(
        name=name,
        namespace=namespace,
        pvc_selector=selector,
        repository=repository,
        schedule=schedule,
        hooks=hooks,
        use_pod_annotations=v.boolean(top.get("use_pod_annotations", False), "use_pod_annotations"),
        retention=retention,
        parallelism=v.integer(top.get("parallelism", 2), "parallelism", minimum=1),
        mover=mover,
        cbt=cbt,
        group_snapshot=group_snapshot,
        snapshot_class=v.opt_subdomain(top.get("snapshot_class"), "snapshot_class"),
        timeouts=timeouts,
        source=str(source) if source is not None else None,
    )


# --------------------------------------------------------------------------------------------------
# field validation


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return "a number"
    return f"{type(value).__name__} {value!r}"


class _Validator:
    def __init__(self, source: str | Path | None) -> None:
        self.source = source

    def fail(self, fieldpath: str, problem: str) -> PolicyError:
        return PolicyError(self.source, fieldpath, problem)

    @staticmethod
    def _join(parent: str, key: str) -> str:
        return f"{parent}.{key}" if parent else key

    def required(self, mapping: dict[str, Any], key: str, parent: str) -> Any:
        if mapping.get(key) is None:
            raise self.fail(self._join(parent, key), "is required")
        return mapping[key]

    def mapping(self, value: Any, fieldpath: str, required: bool = False) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            if not fieldpath:
                raise self.fail("", f"the policy must be a mapping of fields, not {_kind(value)}")
            raise self.fail(fieldpath, f"must be a mapping, not {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(fieldpath, f"key {key!r} must be a string")
        return value

    def known(self, mapping: dict[str, Any], fieldpath: str, keys: set[str]) -> None:
        unknown = sorted(set(mapping) - keys)
        if unknown:
            raise self.fail(self._join(fieldpath, unknown[0]), f"unknown field (known: {', '.join(sorted(keys))})")

    def string(self, value: Any, fieldpath: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(fieldpath, f"must be a non-empty string, not {_kind(value)}")
        return value

    def dns_label(self, value: Any, fieldpath: str) -> str:
        value = self.string(value, fieldpath)
        if not _DNS_LABEL.match(value):
            raise self.fail(fieldpath, f"{value!r} is not a DNS-1123 label (lower case a-z, 0-9, '-', at most 63)")
        return value

    def dns_subdomain(self, value: Any, fieldpath: str) -> str:
        value = self.string(value, fieldpath)
        if not _DNS_SUBDOMAIN.match(value):
            raise self.fail(fieldpath, f"{value!r} is not a valid Kubernetes object name (DNS-1123 subdomain)")
        return value

    def opt_subdomain(self, value: Any, fieldpath: str) -> str | None:
        return None if value is None else self.dns_subdomain(value, fieldpath)

    def boolean(self, value: Any, fieldpath: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(fieldpath, f"must be true or false, not {_kind(value)}")
        return value

    def integer(self, value: Any, fieldpath: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(fieldpath, f"must be an integer, not {_kind(value)}")
        if value < minimum:
            raise self.fail(fieldpath, f"must be at least {minimum}, not {value}")
        return value

    def duration(self, value: Any, fieldpath: str) -> float:
        try:
            seconds = parse_duration(value)
        except ValueError:
            raise self.fail(fieldpath, f"must be a duration ({EXAMPLES}), not {_kind(value)}") from None
        if seconds <= 0:
            raise self.fail(fieldpath, "must be a positive duration")
        return seconds

    def label_key(self, key: Any, fieldpath: str) -> str:
        if not isinstance(key, str):
            raise self.fail(fieldpath, f"label key {key!r} must be a string")
        prefix, _, name = key.rpartition("/")
        if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or not _LABEL_NAME.match(name):
            raise self.fail(fieldpath, f"{key!r} is not a valid label key")
        return key

    def label_value(self, value: Any, fieldpath: str) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.fail(fieldpath, f"label value must be a string, not {_kind(value)}")
        value = str(value)
        if not _LABEL_VALUE.match(value):
            raise self.fail(fieldpath, f"{value!r} is not a valid label value")
        return value

    def string_map(self, value: Any, fieldpath: str) -> dict[str, str]:
        mapping = self.mapping(value, fieldpath)
        return {
            self.label_key(k, f"{fieldpath}.{k}"): self.label_value(val, f"{fieldpath}.{k}")
            for k, val in mapping.items()
        }

    def selector(self, value: Any, fieldpath: str) -> dict[str, Any]:
        sel = self.mapping(value, fieldpath, required=True)
        self.known(sel, fieldpath, {"matchLabels", "matchExpressions"})
        out: dict[str, Any] = {}
        if sel.get("matchLabels") is not None:
            out["matchLabels"] = self.string_map(sel["matchLabels"], f"{fieldpath}.matchLabels")
        exprs = sel.get("matchExpressions")
        if exprs is not None:
            if not isinstance(exprs, list):
                raise self.fail(f"{fieldpath}.matchExpressions", f"must be a list, not {_kind(exprs)}")
            out["matchExpressions"] = [
                self._expression(e, f"{fieldpath}.matchExpressions[{i}]") for i, e in enumerate(exprs)
            ]
        if not out.get("matchLabels") and not out.get("matchExpressions"):
            raise self.fail(fieldpath, "selects every PVC of the namespace; give matchLabels or matchExpressions")
        return out

    def _expression(self, value: Any, fieldpath: str) -> dict[str, Any]:
        expr = self.mapping(value, fieldpath, required=True)
        self.known(expr, fieldpath, {"key", "operator", "values"})
        key = self.label_key(self.required(expr, "key", fieldpath), f"{fieldpath}.key")
        op = self.required(expr, "operator", fieldpath)
        if op not in _SELECTOR_OPERATORS:
            raise self.fail(f"{fieldpath}.operator", f"must be one of {', '.join(_SELECTOR_OPERATORS)}, not {op!r}")
        values = expr.get("values")
        if op in ("In", "NotIn"):
            if not isinstance(values, list) or not values:
                raise self.fail(f"{fieldpath}.values", f"must be a non-empty list for {op}")
            values = [self.label_value(x, f"{fieldpath}.values[{i}]") for i, x in enumerate(values)]
            return {"key": key, "operator": op, "values": values}
        if values:
            raise self.fail(f"{fieldpath}.values", f"must be empty for {op}")
        return {"key": key, "operator": op}

    def repo_url(self, value: Any, fieldpath: str) -> str:
        url = self.string(value, fieldpath)
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise self.fail(fieldpath, f"{url!r} has no bucket (s3://bucket[/prefix])")
        elif parsed.scheme == "file":
            if not parsed.path.startswith("/"):
                raise self.fail(fieldpath, f"{url!r} must be an absolute path (file:///path)")
        else:
            raise self.fail(fieldpath, f"{url!r} is not s3://bucket[/prefix] or file:///path")
        return url

    def cron(self, value: Any, fieldpath: str) -> str:
        expr = self.string(value, fieldpath).strip()
        spec = _CRON_MACROS.get(expr.lower(), expr)
        if len(spec.split()) != 5:
            raise self.fail(fieldpath, f"{expr!r} is not a cron expression of 5 fields: minute hour day month weekday")
        if any(part.upper() in ("H", "R") or "H(" in part.upper() for part in spec.split()):
            raise self.fail(fieldpath, f"{expr!r}: hashed/random cron fields are not supported")
        try:
            from datetime import datetime

            from cronsim import CronSim, CronSimError  # a dependency of prefect, same field syntax
        except ImportError:  # pragma: no cover - cronsim comes with prefect
            return expr
        try:
            CronSim(spec, datetime(2000, 1, 1))
        except CronSimError as err:
            raise self.fail(fieldpath, f"{expr!r} is not a valid cron expression: {err}") from None
        return expr

    def timezone(self, value: Any, fieldpath: str) -> str:
        name = self.string(value, fieldpath)
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise self.fail(fieldpath, f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
        return name

    def resources(self, value: Any, fieldpath: str) -> dict[str, dict[str, str]]:
        res = self.mapping(value, fieldpath)
        self.known(res, fieldpath, {"requests", "limits"})
        out: dict[str, dict[str, str]] = {}
        for part in ("requests", "limits"):
            entries = self.mapping(res.get(part), f"{fieldpath}.{part}")
            out[part] = {}
            for resource, quantity in entries.items():
                where = f"{fieldpath}.{part}.{resource}"
                if isinstance(quantity, bool) or not isinstance(quantity, (str, int, float)):
                    raise self.fail(where, f"must be a quantity like 500m, 1Gi; not {_kind(quantity)}")
                try:
                    parse_quantity(quantity)
                except ValueError:
                    raise self.fail(
                        where, f"{quantity!r} is not a Kubernetes quantity (e.g. 500m, 2, 512Mi, 1Gi)"
                    ) from None
                out[part][resource] = str(quantity)
        for resource, limit in out["limits"].items():
            request = out["requests"].get(resource)
            if request is not None and parse_quantity(request) > parse_quantity(limit):
                raise self.fail(f"{fieldpath}.requests.{resource}", f"request {request} is above the limit {limit}")
        return out

    def hook_list(self, value: Any, fieldpath: str) -> list[dict[str, Any]]:
        """Hooks stay plain dicts (``movers.hooks`` owns them); only their shape is checked here."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(fieldpath, f"must be a list of hooks, not {_kind(value)}")
        out = []
        for i, hook in enumerate(value):
            where = f"{fieldpath}[{i}]"
            hook = self.mapping(hook, where, required=True)
            command = hook.get("command")
            if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
                raise self.fail(f"{where}.command", "must be a non-empty list of strings (an argv, no shell)")
            if "on_error" in hook and hook["on_error"] not in _ON_ERROR:
                raise self.fail(f"{where}.on_error", f"must be fail or continue, not {hook['on_error']!r}")
            if "timeout" in hook:
                self.duration(hook["timeout"], f"{where}.timeout")
            if hook.get("container") is not None:
                self.string(hook["container"], f"{where}.container")
            if hook.get("name") is not None:
                self.string(hook["name"], f"{where}.name")
            selector = hook.get("pod_selector")
            if isinstance(selector, dict) and not {"matchLabels", "matchExpressions"} & set(selector) and selector:
                self.string_map(selector, f"{where}.pod_selector")  # a flat selector: labels to match
            elif selector is not None:
                self.selector(selector, f"{where}.pod_selector")
            out.append(dict(hook))
        return out

    # -- scheduling: Kubernetes Tolerations and node affinity, checked as the API server's validation does

    def tolerations(self, value: Any, fieldpath: str) -> list[dict[str, Any]]:
        """A list of Tolerations (key, operator, value, effect, tolerationSeconds), as the API server
        validates them: key a label key (empty only with Exists: tolerate every taint), operator Exists or
        Equal (empty: Equal), value a label value and empty with Exists, effect NoSchedule, PreferNoSchedule,
        NoExecute or empty (every effect), tolerationSeconds an integer and only with NoExecute."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(fieldpath, f"must be a list of tolerations, not {_kind(value)}")
        out = []
        for i, item in enumerate(value):
            where = f"{fieldpath}[{i}]"
            tol = self.mapping(item, where, required=True)
            self.known(tol, where, {"key", "operator", "value", "effect", "tolerationSeconds"})
            key, op = tol.get("key") or "", tol.get("operator") or ""
            if key:
                self.label_key(key, f"{where}.key")
            if op and op not in _TOLERATION_OPERATORS:
                raise self.fail(f"{where}.operator", f"must be Exists or Equal, not {op!r}")
            if not key and op != "Exists":
                raise self.fail(
                    f"{where}.operator", "must be Exists when key is empty (which means: match all values and all keys)"
                )
            val = tol.get("value")
            if op == "Exists" and val not in (None, ""):
                raise self.fail(f"{where}.value", "must be empty when operator is Exists")
            effect = tol.get("effect") or ""
            if effect and effect not in _TAINT_EFFECTS:
                raise self.fail(
                    f"{where}.effect",
                    f"must be one of {', '.join(_TAINT_EFFECTS)} or empty (every effect), not {effect!r}",
                )
            seconds = tol.get("tolerationSeconds")
            if seconds is not None:
                if isinstance(seconds, bool) or not isinstance(seconds, int):
                    raise self.fail(f"{where}.tolerationSeconds", f"must be an integer, not {_kind(seconds)}")
                if effect != "NoExecute":
                    raise self.fail(f"{where}.effect", "must be NoExecute when tolerationSeconds is set")
            clean: dict[str, Any] = {"key": key} if key else {}
            if op:
                clean["operator"] = op
            if val not in (None, ""):
                clean["value"] = self.label_value(val, f"{where}.value")
            if effect:
                clean["effect"] = effect
            if seconds is not None:
                clean["tolerationSeconds"] = seconds
            out.append(clean)
        return out

    def affinity(self, value: Any, fieldpath: str) -> dict[str, Any] | None:
        """A Kubernetes Affinity with ``nodeAffinity`` only (pod (anti-)affinity is not for movers), its
        required NodeSelector and preferred terms validated as the API server does."""
        if value is None:
            return None
        aff = self.mapping(value, fieldpath, required=True)
        for other in ("podAffinity", "podAntiAffinity"):
            if other in aff:
                raise self.fail(f"{fieldpath}.{other}", "is not supported: mover pods take nodeAffinity only")
        self.known(aff, fieldpath, {"nodeAffinity"})
        where = f"{fieldpath}.nodeAffinity"
        node = self.mapping(self.required(aff, "nodeAffinity", fieldpath), where, required=True)
        self.known(node, where, {_REQUIRED, _PREFERRED})
        out: dict[str, Any] = {}
        if node.get(_REQUIRED) is not None:
            sel_path = f"{where}.{_REQUIRED}"
            selector = self.mapping(node[_REQUIRED], sel_path, required=True)
            self.known(selector, sel_path, {"nodeSelectorTerms"})
            terms = selector.get("nodeSelectorTerms")
            if not isinstance(terms, list) or not terms:
                raise self.fail(f"{sel_path}.nodeSelectorTerms", "must have at least one node selector term")
            out[_REQUIRED] = {
                "nodeSelectorTerms": [
                    self._node_term(t, f"{sel_path}.nodeSelectorTerms[{i}]", True) for i, t in enumerate(terms)
                ]
            }
        if node.get(_PREFERRED) is not None:
            pref_path = f"{where}.{_PREFERRED}"
            prefs = node[_PREFERRED]
            if not isinstance(prefs, list):
                raise self.fail(pref_path, f"must be a list of weighted terms, not {_kind(prefs)}")
            out[_PREFERRED] = []
            for i, item in enumerate(prefs):
                at = f"{pref_path}[{i}]"
                pref = self.mapping(item, at, required=True)
                self.known(pref, at, {"weight", "preference"})
                weight = self.required(pref, "weight", at)
                if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                    raise self.fail(f"{at}.weight", f"must be in the range 1-100, not {weight!r}")
                term = self._node_term(self.required(pref, "preference", at), f"{at}.preference", False)
                out[_PREFERRED].append({"weight": weight, "preference": term})
        if not out:
            raise self.fail(where, f"give {_REQUIRED} or {_PREFERRED}")
        return {"nodeAffinity": out}

    def _node_term(self, value: Any, fieldpath: str, required: bool) -> dict[str, Any]:
        term = self.mapping(value, fieldpath, required=True)
        self.known(term, fieldpath, {"matchExpressions", "matchFields"})
        out: dict[str, Any] = {}
        for part in ("matchExpressions", "matchFields"):
            reqs = term.get(part)
            if reqs is None:
                continue
            if not isinstance(reqs, list):
                raise self.fail(f"{fieldpath}.{part}", f"must be a list, not {_kind(reqs)}")
            out[part] = [
                self._node_requirement(r, f"{fieldpath}.{part}[{i}]", part == "matchFields", required)
                for i, r in enumerate(reqs)
            ]
        return out

    def _node_requirement(self, value: Any, fieldpath: str, field_selector: bool, required: bool) -> dict[str, Any]:
        req = self.mapping(value, fieldpath, required=True)
        self.known(req, fieldpath, {"key", "operator", "values"})
        key = self.required(req, "key", fieldpath)
        op = self.required(req, "operator", fieldpath)
        values = req.get("values") or []
        if not isinstance(values, list):
            raise self.fail(f"{fieldpath}.values", f"must be a list, not {_kind(values)}")
        if field_selector:  # matchFields: metadata.name only, In/NotIn one node name
            if key != "metadata.name":
                raise self.fail(f"{fieldpath}.key", f"{key!r} is not a valid field selector key (metadata.name)")
            if op not in ("In", "NotIn"):
                raise self.fail(f"{fieldpath}.operator", f"must be In or NotIn for a node field selector, not {op!r}")
            if len(values) != 1:
                raise self.fail(
                    f"{fieldpath}.values",
                    "must be only one value when operator is In or NotIn for a node field selector",
                )
            return {"key": key, "operator": op, "values": [self.dns_subdomain(values[0], f"{fieldpath}.values[0]")]}
        self.label_key(key, f"{fieldpath}.key")
        if op not in _NODE_SELECTOR_OPERATORS:
            raise self.fail(
                f"{fieldpath}.operator", f"must be one of {', '.join(_NODE_SELECTOR_OPERATORS)}, not {op!r}"
            )
        if op in ("In", "NotIn") and not values:
            raise self.fail(f"{fieldpath}.values", f"must be specified when operator is {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise self.fail(f"{fieldpath}.values", f"may not be specified when operator is {op}")
        if op in ("Gt", "Lt") and len(values) != 1:
            raise self.fail(f"{fieldpath}.values", f"must be a single value when operator is {op}")
        if required:  # the API server checks the values of required terms as label values
            values = [self.label_value(x, f"{fieldpath}.values[{i}]") for i, x in enumerate(values)]
        else:
            values = [str(x) for x in values]
        return {"key": key, "operator": op, **({"values": values} if values else {})}
