"""Quiesce hooks as data: what to exec in which pods before and after the snapshot.

A ``Hook`` is an argv (never a shell string: a Linux container may use ``["sh", "-c", "..."]``,
a Windows container ``["cmd.exe", "/c", "..."]`` or ``["powershell", "-Command", "..."]``), the
pods it runs in (a label selector in the backup's namespace, or one named pod for hooks read from
that pod's annotations), the container (``None``: the pod's first container), a timeout and what
a failure means (``on_error``: ``"fail"`` stops the backup, ``"continue"`` is reported only).

Two sources, both pure (no API calls):

* policy data (a dict from YAML/JSON)::

      {"pre":  [{"name": "freeze-db", "pod_selector": {"app": "db"}, "container": "db",
                 "command": ["python", "-m", "app", "freeze"], "timeout": "30s", "on_error": "fail"}],
       "post": [{"name": "thaw-db", "pod_selector": {"app": "db"}, "command": [...]}]}

  camelCase spellings (``podSelector``, ``onError``, ``timeoutSeconds``) are accepted too;
  ``timeout`` is a number of seconds or a Go duration (``"1m30s"``). Unknown keys are errors.
* Velero-style pod annotations (``pre.hook.backup.velero.io/{container,command,on-error,timeout}``
  and ``post.hook.backup.velero.io/...``; the legacy ``hook.backup.velero.io/...`` means pre),
  which apply to the annotated pod only. ``command`` is a JSON array or a single command string,
  split into an argv with ``shlex`` (no shell is involved).

Every validation error is a ``HookSpecError`` naming the hook and the field.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BeforeValidator,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from movers.errors import UsageError
from movers.policy import checks as c
from movers.values import expression_problem, parse_duration, selector_string

OnError = Literal["fail", "continue"]
DEFAULT_TIMEOUT_S = 30.0
VELERO_PRE = "pre.hook.backup.velero.io/"
VELERO_LEGACY_PRE = "hook.backup.velero.io/"
VELERO_POST = "post.hook.backup.velero.io/"


class HookSpecError(UsageError):
    """A hook definition (policy entry or pod annotation) is invalid."""


@dataclass(frozen=True, kw_only=True)
class Hook:
    name: str
    pod_selector: dict[str, str] = field(default_factory=dict)  # matchLabels
    match_expressions: list[dict[str, Any]] = field(default_factory=list)  # LabelSelectorRequirements
    container: str | None = None  # None: the pod's first container
    command: list[str]
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_error: OnError = "fail"
    pod_name: str | None = None  # set for annotation hooks: this pod only (pod_selector is then ignored)

    def __post_init__(self) -> None:
        where = f"hook {self.name!r}"
        if not self.name:
            raise HookSpecError("hook without a name")
        if not isinstance(self.command, list) or not self.command or not all(isinstance(a, str) for a in self.command):
            raise HookSpecError(f"{where}: command must be a non-empty list of strings (an argv), got {self.command!r}")
        if not self.command[0]:
            raise HookSpecError(f"{where}: command: the program (first element) is empty")
        if self.on_error not in ("fail", "continue"):
            raise HookSpecError(f"{where}: on_error must be 'fail' or 'continue', got {self.on_error!r}")
        if not isinstance(self.timeout_s, int | float) or isinstance(self.timeout_s, bool) or not self.timeout_s > 0:
            raise HookSpecError(f"{where}: timeout must be a positive duration, got {self.timeout_s!r}")
        if self.container is not None and (not isinstance(self.container, str) or not self.container):
            raise HookSpecError(f"{where}: container must be a non-empty string, got {self.container!r}")
        if self.pod_name is None:
            if not isinstance(self.pod_selector, dict) or not (self.pod_selector or self.match_expressions):
                raise HookSpecError(f"{where}: pod_selector must be a non-empty mapping of labels")
            for key, value in self.pod_selector.items():
                if not isinstance(key, str) or not key or not isinstance(value, str):
                    raise HookSpecError(f"{where}: pod_selector: label {key!r}: {value!r} is not a string pair")
            for expr in self.match_expressions:
                if problem := expression_problem(expr):
                    raise HookSpecError(f"{where}: pod_selector.matchExpressions: {problem}")

    @property
    def label_selector(self) -> str:
        """The selector in the API's ``labelSelector`` syntax (``k=v,k2=v2,k3 in (a,b)``)."""
        return selector_string({"matchLabels": self.pod_selector, "matchExpressions": self.match_expressions})

    @property
    def target(self) -> str:
        return f"pod {self.pod_name}" if self.pod_name else f"pods {self.label_selector}"


@dataclass(frozen=True)
class HookSet:
    """Pre hooks run in order; post hooks run in REVERSE order (list them as undo of the pre hooks)."""

    pre: list[Hook] = field(default_factory=list)
    post: list[Hook] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.pre or self.post)

    def __add__(self, other: HookSet) -> HookSet:
        return HookSet([*self.pre, *other.pre], [*self.post, *other.post])


def _timeout(value: Any, where: str, label: str = "timeout", bare_numbers: bool = True) -> float:
    try:
        seconds = parse_duration(value, bare_numbers=bare_numbers)
    except ValueError as err:
        raise HookSpecError(f"{where}: {label}: {err}") from None
    if seconds <= 0:
        raise HookSpecError(f"{where}: {label} must be positive, got {value!r}")
    return seconds


# --- policy data: HookSpec (one entry) and Hooks (pre and post), pydantic models the policy reuses ---------------


def _argv(value: Any) -> list[str]:
    if isinstance(value, str):
        raise c.problem("", f"must be a list (an argv), not a string; for a shell use e.g. ['sh', '-c', {value!r}]")
    if not isinstance(value, list) or not value or not all(isinstance(a, str) and a for a in value):
        raise c.problem("", f"must be a non-empty list of non-empty strings (an argv, no shell), not {c.kind(value)}")
    return value


def _pod_selector(value: Any) -> dict[str, Any]:
    """Labels to match (``{app: db}``), or a LabelSelector (``matchLabels``, ``matchExpressions``)."""
    if isinstance(value, dict) and {"matchLabels", "matchExpressions"} & set(value):
        return c.selector(value)
    labels = c.labels(value)
    if not labels:
        raise c.problem("", "must select pods: labels, or a LabelSelector (matchLabels, matchExpressions)")
    return labels


def _on_error(value: Any) -> str:
    value = value.lower() if isinstance(value, str) else value
    if value not in ("fail", "continue"):
        raise c.problem("", f"must be fail or continue, not {value!r}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else c.string(value)


def _optional_seconds(value: Any) -> float | None:
    return None if value is None else c.duration(value)


class HookSpec(c.Section):
    """One hook as a policy or a flow parameter writes it; camelCase spellings (``podSelector``, ``onError``,
    ``timeoutSeconds``) are accepted too. ``hook`` is its runtime form."""

    name: Annotated[str, BeforeValidator(c.string)]
    pod_selector: Annotated[dict[str, Any], BeforeValidator(_pod_selector)] = Field(
        validation_alias=AliasChoices("pod_selector", "podSelector")
    )
    container: Annotated[str | None, BeforeValidator(_optional_text)] = None  # None: the pod's first container
    command: Annotated[list[str], BeforeValidator(_argv)]
    timeout: Annotated[
        float | None,
        BeforeValidator(_optional_seconds),
        WithJsonSchema({"anyOf": [*c.DURATION_SCHEMA["anyOf"], {"type": "null"}]}),
    ] = Field(
        default=None,
        validation_alias=AliasChoices("timeout", "timeoutSeconds", "timeout_s"),
        description=f"{c.DURATION_SCHEMA['description']} (none: the policy's timeouts.hook)",
    )
    on_error: Annotated[OnError, BeforeValidator(_on_error)] = Field(
        default="fail", validation_alias=AliasChoices("on_error", "onError")
    )

    def hook(self, default_timeout: float = DEFAULT_TIMEOUT_S) -> Hook:
        selector = self.pod_selector
        if "matchLabels" in selector or "matchExpressions" in selector:
            labels, expressions = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
        else:
            labels, expressions = selector, []
        return Hook(
            name=self.name,
            pod_selector=dict(labels),
            match_expressions=[dict(e) for e in expressions],
            container=self.container,
            command=list(self.command),
            timeout_s=self.timeout if self.timeout is not None else default_timeout,
            on_error=self.on_error,
        )


class Hooks(c.Section):
    """An application's hooks: ``pre`` run in order before the snapshot, ``post`` after it in reverse order;
    names unique per phase."""

    pre: list[HookSpec] = []
    post: list[HookSpec] = []

    @field_validator("pre", "post", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise c.problem("", f"must be a list of hooks, not {c.kind(value)}")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> Hooks:
        for phase in ("pre", "post"):
            names = [h.name for h in getattr(self, phase)]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise c.problem(phase, f"duplicate hook name(s): {', '.join(dupes)}")
        return self

    def hookset(self, default_timeout: float = DEFAULT_TIMEOUT_S) -> HookSet:
        """The runtime hooks; ``default_timeout`` for hooks without their own."""
        return HookSet([h.hook(default_timeout) for h in self.pre], [h.hook(default_timeout) for h in self.post])


def hookset_from_policy(data: Any, default_timeout: float = DEFAULT_TIMEOUT_S) -> HookSet:
    """``{"pre": [...], "post": [...]}`` (either may be missing or null; a ``Hooks``) -> HookSet;
    ``default_timeout`` for hooks without their own. A ``HookSpecError`` names the hook and the field."""
    try:
        hooks = Hooks.model_validate(data)
    except ValidationError as err:
        path, problem = c.first_problem(err)
        raise HookSpecError(_where(data, path, problem)) from None
    return hooks.hookset(default_timeout)


def _where(data: Any, path: str, problem: str) -> str:
    """``pre hook 'freeze': command: must be ...`` (``pre hook #2: ...`` for a hook without a usable name)."""
    phase, _, rest = path.partition("[")
    index, _, field = rest.partition("]")
    if not index.isdigit():
        return f"hooks: {path}: {problem}" if path else f"hooks: {problem}"
    entry = data[phase][int(index)] if isinstance(data, Mapping) else getattr(data, phase)[int(index)]
    name = entry.get("name") if isinstance(entry, Mapping) else None
    who = f"{phase} hook {name!r}" if isinstance(name, str) and name else f"{phase} hook #{int(index) + 1}"
    return f"{who}: {field.lstrip('.')}: {problem}" if field else f"{who}: {problem}"


# --- Velero-style pod annotations ----------------------------------------------------------------


def _velero_hook(
    pod_name: str, annotations: Mapping[str, str], prefix: str, phase: str, default_timeout: float
) -> Hook | None:
    keys = {k[len(prefix) :]: v for k, v in annotations.items() if k.startswith(prefix)}
    if not keys:
        return None
    name = f"{phase}:{pod_name}"
    where = f"{phase} hook of pod {pod_name!r} ({prefix}*)"
    unknown = set(keys) - {"container", "command", "on-error", "timeout"}
    if unknown:
        raise HookSpecError(f"{where}: unknown annotation(s) {', '.join(prefix + k for k in sorted(unknown))}")
    if "command" not in keys:
        raise HookSpecError(f"{where}: missing {prefix}command")
    raw = keys["command"].strip()
    if raw.startswith("["):
        try:
            command = json.loads(raw)
        except json.JSONDecodeError as err:
            raise HookSpecError(f"{where}: {prefix}command: invalid JSON array: {err}") from None
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise HookSpecError(f"{where}: {prefix}command: the JSON array must hold strings only")
    else:
        try:
            command = shlex.split(raw)
        except ValueError as err:
            raise HookSpecError(f"{where}: {prefix}command: cannot split {raw!r}: {err}") from None
    if not command:
        raise HookSpecError(f"{where}: {prefix}command is empty")
    on_error = keys.get("on-error", "Fail").strip()
    if on_error.lower() not in ("fail", "continue"):
        raise HookSpecError(f"{where}: {prefix}on-error must be Fail or Continue, got {on_error!r}")
    return Hook(
        name=name,
        pod_name=pod_name,
        container=keys.get("container", "").strip() or None,
        command=command,
        timeout_s=_timeout(keys["timeout"], where, f"{prefix}timeout", bare_numbers=False)
        if "timeout" in keys
        else default_timeout,
        on_error=on_error.lower(),  # type: ignore[arg-type]
    )


def hookset_from_annotations(
    pod_name: str, annotations: Mapping[str, str] | None, default_timeout: float = DEFAULT_TIMEOUT_S
) -> HookSet:
    """The hooks one pod asks for in its Velero-style annotations (they run in that pod only);
    ``default_timeout`` for a hook without a ``timeout`` annotation."""
    annotations = annotations or {}
    pre_prefix = VELERO_PRE
    if not any(k.startswith(VELERO_PRE) for k in annotations):
        pre_prefix = VELERO_LEGACY_PRE  # Velero's legacy spelling of the pre hook
    pre = _velero_hook(pod_name, annotations, pre_prefix, "pre", default_timeout)
    post = _velero_hook(pod_name, annotations, VELERO_POST, "post", default_timeout)
    return HookSet([pre] if pre else [], [post] if post else [])
