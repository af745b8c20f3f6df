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
from typing import Any, Literal

from movers.durations import parse_duration
from movers.errors import UsageError
from movers.selectors import expression_problem, selector_string

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


# --- policy data ---------------------------------------------------------------------------------

_ALIASES = {"podSelector": "pod_selector", "onError": "on_error", "timeoutSeconds": "timeout", "timeout_s": "timeout"}
_KEYS = {"name", "pod_selector", "container", "command", "timeout", "on_error"}


def hook_from_policy(
    data: Any, *, phase: str = "pre", index: int = 0, default_timeout: float = DEFAULT_TIMEOUT_S
) -> Hook:
    """One hook from a policy entry; ``phase``/``index`` only name it in error messages; ``default_timeout``:
    its timeout when the entry gives none (the policy's ``timeouts.hook``)."""
    where = f"{phase} hook #{index + 1}"
    if not isinstance(data, Mapping):
        raise HookSpecError(f"{where}: expected a mapping, got {type(data).__name__}")
    if isinstance(data.get("name"), str) and data["name"]:
        where = f"{phase} hook {data['name']!r}"
    entry: dict[str, Any] = {}
    for key, value in data.items():
        canonical = _ALIASES.get(key, key)
        if canonical not in _KEYS:
            raise HookSpecError(f"{where}: unknown field {key!r} (known: {', '.join(sorted(_KEYS))})")
        if canonical in entry:
            raise HookSpecError(f"{where}: field {canonical!r} given twice ({key!r})")
        entry[canonical] = value
    for required in ("name", "pod_selector", "command"):
        if required not in entry:
            raise HookSpecError(f"{where}: missing field {required!r}")
    if not isinstance(entry["name"], str) or not entry["name"]:
        raise HookSpecError(f"{where}: name must be a non-empty string")
    command = entry["command"]
    if isinstance(command, str):
        raise HookSpecError(
            f"{where}: command must be a list (an argv), not a string; for a shell use e.g. ['sh', '-c', {command!r}]"
        )
    on_error = entry.get("on_error", "fail")
    if isinstance(on_error, str):
        on_error = on_error.lower()
    selector, expressions = entry["pod_selector"], []
    if isinstance(selector, Mapping) and {"matchLabels", "matchExpressions"} & set(selector):  # a LabelSelector
        if set(selector) - {"matchLabels", "matchExpressions"}:
            raise HookSpecError(f"{where}: pod_selector: a LabelSelector has matchLabels and matchExpressions only")
        expressions = selector.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise HookSpecError(f"{where}: pod_selector.matchExpressions must be a list")
        selector = selector.get("matchLabels") or {}
    if not isinstance(selector, Mapping):
        raise HookSpecError(f"{where}: pod_selector must be a mapping of labels, got {selector!r}")
    return Hook(
        name=entry["name"],
        pod_selector=dict(selector),
        match_expressions=[dict(e) if isinstance(e, Mapping) else e for e in expressions],
        container=entry.get("container"),
        command=list(command) if isinstance(command, list | tuple) else command,
        timeout_s=_timeout(entry["timeout"], where) if "timeout" in entry else default_timeout,
        on_error=on_error,
    )


def hookset_from_policy(data: Any, default_timeout: float = DEFAULT_TIMEOUT_S) -> HookSet:
    """``{"pre": [...], "post": [...]}`` (either may be missing or null) -> HookSet; ``default_timeout`` for
    hooks without their own."""
    if data is None:
        return HookSet()
    if not isinstance(data, Mapping):
        raise HookSpecError(f"hooks: expected a mapping with 'pre' and 'post', got {type(data).__name__}")
    unknown = set(data) - {"pre", "post"}
    if unknown:
        raise HookSpecError(f"hooks: unknown field(s) {', '.join(sorted(map(str, unknown)))} (known: pre, post)")
    phases: dict[str, list[Hook]] = {}
    for phase in ("pre", "post"):
        entries = data.get(phase) or []
        if not isinstance(entries, list):
            raise HookSpecError(f"hooks: {phase} must be a list")
        phases[phase] = [
            hook_from_policy(e, phase=phase, index=i, default_timeout=default_timeout) for i, e in enumerate(entries)
        ]
        names = [h.name for h in phases[phase]]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise HookSpecError(f"hooks: duplicate {phase} hook name(s): {', '.join(dupes)}")
    return HookSet(phases["pre"], phases["post"])


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
