"""Run quiesce hooks in pods through the Kubernetes exec API (``kubernetes.stream``).

    with quiesced(api, "shop", hookset) as q:      # pre hooks ran, in order
        take_snapshot()
    report(q.freeze_start, q.freeze_end)            # post hooks ran, in reverse order

``api`` is a ``kubernetes.client.ApiClient``; nothing is global. A hook runs in every Running pod
its selector matches (in name order), or in its one named pod (annotation hooks); matching no
Running pod is a failure of that hook. Each exec has the hook's timeout: the output is read until
the server closes the stream or the deadline passes, then the connection is closed (the local
kubelet and recent kubelets kill the command then; on older clusters wrap a long command in
``timeout``). The exit code comes from the error channel's Status; a missing one is a failure.

Failures: with ``on_error="fail"`` a failed pre hook stops the pre phase and raises ``HookError``
(carrying the results so far); with ``"continue"`` it is logged and reported in the results only.

The post-hook rule of ``quiesced``: post hooks ALWAYS run, in reverse order, all of them, once
any pre hook has been started -- after the body returned, after the body raised, and after a pre
hook failed midway (then also the post hooks whose pre hook never ran: a thaw must be harmless on
an application that is not frozen, and never leaving an application frozen matters more than a
spurious thaw error). Every post hook runs even when an earlier one failed. Post failures with
``on_error="fail"`` are logged and raised as one ``HookError`` after the last post hook -- unless
the body or a pre hook already raised: that exception propagates unchanged (never masked), with
the post failures logged and added to it as a note (and as ``post_results`` on a pre HookError).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDERR_CHANNEL, STDOUT_CHANNEL

from movers.errors import MoverError
from movers.policy.hooks import DEFAULT_TIMEOUT_S, Hook, HookSet, hookset_from_annotations, hookset_from_policy

log = logging.getLogger("movers.hooks")
TAIL = 4096  # characters of stdout/stderr kept per exec


@dataclass(frozen=True)
class HookResult:
    hook: Hook
    pod: str | None  # None: no pod matched
    exit_code: int | None  # None: no exit code (timeout, exec refused, no pod)
    stdout_tail: str
    stderr_tail: str
    duration_s: float
    ok: bool
    error: str = ""  # why it failed, one line ("" when ok)

    def describe(self) -> str:
        where = f"in pod {self.pod}" if self.pod else f"({self.hook.target})"
        if self.ok:
            return f"hook {self.hook.name!r} {where}: ok in {self.duration_s:.2f}s"
        return f"hook {self.hook.name!r} {where}: {self.error}"


class HookError(MoverError):
    """A hook with ``on_error="fail"`` failed. ``results``: every result up to and including it."""

    def __init__(self, message: str, results: Sequence[HookResult]) -> None:
        super().__init__(message)
        self.results = list(results)
        self.post_results: list[HookResult] = []  # set by ``quiesced`` when pre hooks failed

    @property
    def failed(self) -> list[HookResult]:
        return [r for r in self.results if not r.ok and r.hook.on_error == "fail"]


@dataclass
class Quiesce:
    """What ``quiesced`` did, filled in as it goes (times from ``time.time()``, seconds)."""

    pre_results: list[HookResult] = field(default_factory=list)
    post_results: list[HookResult] = field(default_factory=list)
    freeze_start: float | None = None  # the first pre hook starts
    frozen_at: float | None = None  # every pre hook returned (the body starts)
    thaw_start: float | None = None  # the first post hook starts
    freeze_end: float | None = None  # the last post hook returned

    @property
    def freeze_s(self) -> float | None:
        """The freeze window: from the first pre hook's start to the last post hook's end."""
        if self.freeze_start is None or self.freeze_end is None:
            return None
        return self.freeze_end - self.freeze_start


def _tail(buf: str, more: str) -> str:
    return (buf + more)[-TAIL:] if more else buf


def _exit_code(status_text: str) -> tuple[int | None, str]:
    """The exit code from the error channel's Status, and an error message when there is none."""
    if not status_text.strip():
        return None, "no exit status from the exec stream (connection closed early)"
    try:
        status = json.loads(status_text)
    except json.JSONDecodeError:
        return None, f"unreadable exec status: {status_text[:200]!r}"
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message")), ""
            except (TypeError, ValueError):
                break
    return None, f"exec failed: {status.get('reason') or ''} {status.get('message') or status_text[:200]}".strip()


def _refusal(exc: ApiException) -> tuple[int | str, str]:
    """HTTP status and message of a refused exec. A refused websocket upgrade arrives as status 0 with
    ``Handshake status 400 Bad Request -+-+- {headers} -+-+- {Status JSON}`` as the reason."""
    status: int | str = exc.status or "?"
    text = exc.body if isinstance(exc.body, str) and exc.body else str(exc.reason or "")
    match = re.match(r"Handshake status (\d+)", text)
    if match:
        status = int(match.group(1))
    message = text.rsplit("-+-+-", 1)[-1].strip()
    with contextlib.suppress(Exception):
        body = json.loads(message)
        status = body.get("code") or status
        message = body.get("message") or message
    return status, message[:300]


def exec_in_pod(api: client.ApiClient, namespace: str, pod: str, hook: Hook) -> HookResult:
    """Run ``hook.command`` in one pod's container, bounded by ``hook.timeout_s``."""
    core = client.CoreV1Api(api)
    started = time.monotonic()
    deadline = started + hook.timeout_s
    out = err = ""
    kwargs: dict[str, Any] = {"container": hook.container} if hook.container else {}

    def result(code: int | None, error: str = "") -> HookResult:
        ok = code == 0 and not error
        if code is not None and code != 0 and not error:
            error = f"exit code {code}" + (f": {err.strip().splitlines()[-1]}" if err.strip() else "")
        return HookResult(hook, pod, code, out, err, time.monotonic() - started, ok, error)

    try:
        resp = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=hook.command,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            **kwargs,
        )
    except ApiException as exc:
        code, reason = _refusal(exc)
        return result(None, f"exec refused ({code}): {reason}")
    except Exception as exc:  # connection errors, websocket handshake failures
        return result(None, f"exec failed: {type(exc).__name__}: {exc}")
    try:
        status_text = ""
        while resp.is_open():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            resp.update(timeout=min(remaining, 1.0))
            out = _tail(out, resp.read_channel(STDOUT_CHANNEL))
            err = _tail(err, resp.read_channel(STDERR_CHANNEL))
        out = _tail(out, resp.read_channel(STDOUT_CHANNEL))
        err = _tail(err, resp.read_channel(STDERR_CHANNEL))
        status_text = resp.read_channel(ERROR_CHANNEL)
        if resp.is_open() and not status_text:
            return result(None, f"timed out after {hook.timeout_s:g}s")
    except Exception as exc:
        return result(None, f"exec stream broke: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            resp.close()
    code, error = _exit_code(status_text)
    return result(code, error)


def target_pods(api: client.ApiClient, namespace: str, hook: Hook) -> list[str]:
    """Names of the Running (not terminating) pods the hook runs in, sorted."""
    core = client.CoreV1Api(api)
    if hook.pod_name:
        try:
            pods = [core.read_namespaced_pod(hook.pod_name, namespace)]
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
    else:
        pods = core.list_namespaced_pod(namespace, label_selector=hook.label_selector).items
    running = [p for p in pods if p.status and p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return sorted(p.metadata.name for p in running)


def annotation_hooks(
    api: client.ApiClient, namespace: str, label_selector: str | None = None, default_timeout: float = DEFAULT_TIMEOUT_S
) -> HookSet:
    """The Velero-style annotation hooks of the Running pods in the namespace (optionally only those
    matching ``label_selector``), merged in pod name order; each hook runs in its own pod only (a hook without
    a timeout annotation: ``default_timeout``)."""
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(namespace, label_selector=label_selector or "").items
    merged = HookSet()
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        if pod.status and pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
            merged = merged + hookset_from_annotations(pod.metadata.name, pod.metadata.annotations, default_timeout)
    return merged


def app_hooks(
    api: client.ApiClient,
    namespace: str,
    hooks: Any,
    *,
    use_pod_annotations: bool = False,
    default_timeout: float = DEFAULT_TIMEOUT_S,
) -> HookSet:
    """An application's hooks: the policy's ``hooks`` (``Hooks``, or its data ``{"pre": [...], "post": [...]}``)
    and, with ``use_pod_annotations``, its Running pods' annotation hooks; ``default_timeout`` for hooks without
    one."""
    hookset = hookset_from_policy(hooks or {}, default_timeout)
    if use_pod_annotations:
        hookset = hookset + annotation_hooks(api, namespace, default_timeout=default_timeout)
    return hookset


def run_hook(api: client.ApiClient, namespace: str, hook: Hook) -> list[HookResult]:
    """Run one hook in each of its target pods (stopping at the first failure when on_error is fail)."""
    started = time.monotonic()
    try:
        pods = target_pods(api, namespace, hook)
    except ApiException as exc:
        error = f"cannot list the pods ({exc.status}): {exc.reason}"
        return [HookResult(hook, None, None, "", "", time.monotonic() - started, False, error)]
    if not pods:
        error = f"no Running pod matches {hook.target} in namespace {namespace}"
        return [HookResult(hook, None, None, "", "", time.monotonic() - started, False, error)]
    results = []
    for pod in pods:
        res = exec_in_pod(api, namespace, pod, hook)
        results.append(res)
        if res.ok:
            log.info("%s", res.describe())
        else:
            (log.error if hook.on_error == "fail" else log.warning)("%s", res.describe())
            if hook.on_error == "fail":
                break
    return results


def run_hooks(
    api: client.ApiClient, namespace: str, hooks: Sequence[Hook], *, stop_on_failure: bool = True
) -> list[HookResult]:
    """Run the hooks in the order given. A failure of an ``on_error="fail"`` hook raises ``HookError``
    with the results so far: at once when ``stop_on_failure`` (pre hooks), otherwise after every
    hook ran (post hooks). Failures of ``on_error="continue"`` hooks are only in the results."""
    results: list[HookResult] = []
    for hook in hooks:
        results.extend(run_hook(api, namespace, hook))
        if stop_on_failure and _fatal(results):
            raise HookError(_message(results), results)
    if _fatal(results):
        raise HookError(_message(results), results)
    return results


def _fatal(results: Sequence[HookResult]) -> list[HookResult]:
    return [r for r in results if not r.ok and r.hook.on_error == "fail"]


def _message(results: Sequence[HookResult]) -> str:
    failed = _fatal(results)
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return failed[0].describe() + more


@contextlib.contextmanager
def quiesced(api: client.ApiClient, namespace: str, hookset: HookSet) -> Iterator[Quiesce]:
    """Pre hooks in order, the body, then post hooks in reverse order ALWAYS (see the module doc)."""
    q = Quiesce()
    q.freeze_start = time.time()
    primary: BaseException | None = None
    try:
        try:
            q.pre_results = run_hooks(api, namespace, hookset.pre)
        except HookError as exc:
            q.pre_results = exc.results
            raise
        q.frozen_at = time.time()
        yield q
    except BaseException as exc:  # also KeyboardInterrupt / cancellation: thaw first
        primary = exc
        raise
    finally:
        q.thaw_start = time.time()
        post_error: HookError | None = None
        try:
            q.post_results = run_hooks(api, namespace, list(reversed(hookset.post)), stop_on_failure=False)
        except HookError as exc:
            q.post_results = exc.results
            post_error = exc
        finally:
            q.freeze_end = time.time()
        log.info(
            "freeze window %.3fs (%d pre, %d post hook runs)",
            q.freeze_s or 0.0,
            len(q.pre_results),
            len(q.post_results),
        )
        if isinstance(primary, HookError):
            primary.post_results = q.post_results
        if post_error is not None:
            if primary is None:
                raise post_error
            log.error("post hooks failed after an earlier error (%s): %s", primary, post_error)
            with contextlib.suppress(Exception):
                primary.add_note(f"post hooks failed too: {post_error}")
