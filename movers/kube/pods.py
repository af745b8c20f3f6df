"""Pods of a run: ``run_pod_to_completion`` creates a pod, follows its log and waits for Succeeded/Failed.

* ``run_pod_to_completion``: returns a ``PodResult`` (exit code, termination message, parsed
  JSON result, log tail); a pod not finished in time raises ``PodTimeoutError`` and is left for
  ``cleanup.delete_by_label``.
* ``wait_scheduled``: a pod bound to a node (its claims bound with it, also WaitForFirstConsumer ones) in
  time, else ``PodNotScheduled`` naming the scheduler's and the provisioner's last Warning.
* ``wait_started``: a scheduled pod running (or finished) in time, else ``PodNotStarted`` naming its waiting
  reason and the last Warning about it (FailedAttachVolume, FailedMount, image pull) and about its claim.
* ``run_scheduled``: the three in a row, for the movers and writers (one pod, one wait each), bounded by
  ``PodTimeouts``; ``PodWaitErrors`` names what is waited for and the errors its waits raise.
* ``uses_claims``: whether a pod is unfinished and mounts one of some claims.

Errors are ``apply.KubeError`` subclasses, as in ``movers.kube.apply``.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from movers import errors
from movers.kube.apply import KubeError, api_error, create, get


class PodTimeoutError(KubeError):
    """A pod did not finish in time (it is left for ``delete_by_label``). Not retriable: a new pod would be
    given as long again, and no run waits a mover's timeout twice."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.retriable = False


class PodFailed(KubeError):
    """A mover or writer pod did not succeed; ``pod_exit_code`` is its container's exit status (None: killed,
    evicted or deleted before one). One retry rule for both: retriable unless that status is one of the
    mover's exit codes that a new pod would meet again (the input, repository or credentials are wrong:
    ``PERMANENT_EXIT_CODES``); killed, evicted, deleted, crashed and "storage unavailable" (5) are retried."""

    PERMANENT_EXIT_CODES = frozenset(
        {
            errors.EXIT_USAGE,
            errors.EXIT_NOT_FOUND,
            errors.EXIT_INTEGRITY,
            errors.EXIT_ACCESS,
            errors.EXIT_INCOMPATIBLE,
            errors.EXIT_CBT_PROTOCOL,
            errors.EXIT_CBT_UNAVAILABLE,
        }
    )

    def __init__(self, message: str, pod_exit_code: int | None) -> None:
        super().__init__(message)
        self.pod_exit_code = pod_exit_code
        self.retriable = pod_exit_code not in self.PERMANENT_EXIT_CODES


class PodNotScheduled(KubeError):
    """A pod was not scheduled in time (no node fits it, or its claim cannot be provisioned); the message
    names the last Warning about the pod or its claim. Not retriable: the wait was the retry."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.retriable = False


class PodNotStarted(PodNotScheduled):
    """A pod was scheduled but not running in time (its volume not attached or mounted, its image not pulled);
    the message names its waiting reason and the last Warning about the pod and about its claim. Not
    retriable: a new pod would wait as long for the same cause."""


@dataclass(frozen=True)
class PodTimeouts:
    """The bounds of one pod's run (``run_scheduled``): scheduled within ``start`` s, then running within
    ``running`` s (None: ``start``), finished within ``total`` s in all, start to finish."""

    start: float
    total: float
    running: float | None = None


@dataclass(frozen=True)
class PodWaitErrors:
    """How the waits for a pod name and raise a timeout: ``"<what> <ns>/<pod> not ..."`` as ``not_scheduled``
    (``wait_scheduled``) or ``not_started`` (``wait_started``)."""

    what: str = "pod"
    not_scheduled: type[PodNotScheduled] = PodNotScheduled
    not_started: type[PodNotScheduled] = PodNotStarted


@dataclass
class PodResult:
    name: str
    phase: str  # Succeeded or Failed
    exit_code: int | None
    message: str  # the termination message (or log tail under FallbackToLogsOnError)
    result: Any  # the message parsed as JSON, None when it is not JSON
    log_tail: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded" and self.exit_code == 0


def run_pod_to_completion(
    api_client, pod: Mapping[str, Any], timeout: float, on_log_line: Callable[[str], None] | None = None, tail: int = 20
) -> PodResult:
    """Create ``pod`` (tolerating the same run's pod), follow its log, wait until Succeeded/Failed.

    ``on_log_line`` is called with each log line (e.g. ``progress done=N total=N``) from a helper
    thread, while the pod runs. Returns the first container's exit code, its termination message
    (parsed as JSON into ``result`` when it is JSON) and the last ``tail`` log lines. A pod not
    finished after ``timeout`` s raises ``PodTimeoutError`` with its waiting reason; the pod is
    not deleted (``delete_by_label`` cleans up).
    """
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    create(api_client, pod)
    lines: collections.deque[str] = collections.deque(maxlen=tail)
    done = threading.Event()
    follower = threading.Thread(
        target=_follow_log, args=(core, namespace, name, lines, on_log_line, done), name=f"log-{name}", daemon=True
    )
    follower.start()
    deadline = time.monotonic() + timeout
    try:
        current = core.read_namespaced_pod(name, namespace)
        while not _terminal(current):
            left = deadline - time.monotonic()
            if left <= 0:
                why = _waiting_reason(current)
                raise PodTimeoutError(
                    f"pod {namespace}/{name} not finished after {timeout:g} s"
                    f" (phase {current.status.phase if current.status else '?'}"
                    f"{', ' + why if why else ''})"
                )
            w = watch.Watch()
            try:
                for event in w.stream(
                    core.list_namespaced_pod,
                    namespace,
                    field_selector=f"metadata.name={name}",
                    timeout_seconds=max(1, int(min(left, 10))),
                ):
                    if _terminal(event["object"]):
                        break
            finally:
                w.stop()
            current = core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        raise api_error(err, f"pod {namespace}/{name}") from None
    finally:
        done.set()
    follower.join(timeout=5)
    exit_code, message = None, ""
    for cs in current.status.container_statuses or []:
        if cs.state and cs.state.terminated:
            exit_code, message = cs.state.terminated.exit_code, cs.state.terminated.message or ""
            break
    try:
        result = json.loads(message) if message.strip() else None
    except ValueError:
        result = None
    return PodResult(name, current.status.phase, exit_code, message, result, list(lines))


def _terminal(pod) -> bool:
    return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")


def _waiting_reason(pod) -> str:
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        if cs.state and cs.state.waiting:
            return f"{cs.state.waiting.reason}: {cs.state.waiting.message or ''}".strip(": ")
    return ""


def _follow_log(core, namespace, name, lines, on_log_line, done: threading.Event) -> None:
    """Stream the pod's log (retrying until the container has started); one call per line.

    Once ``done`` is set (the pod has finished, its log is complete) one more read is made, so that a
    pod that ends before its first successful read still has its lines seen."""
    from kubernetes.client.exceptions import ApiException

    seen, last_try = 0, False
    while True:
        try:
            resp = core.read_namespaced_pod_log(name, namespace, follow=True, _preload_content=False)
        except ApiException:  # 400 while the container is being created
            if last_try:
                return
            last_try = done.wait(0.2)
            continue
        try:
            index = 0
            for raw in _iter_lines(resp):
                index += 1
                if index <= seen:  # a re-follow starts from the beginning
                    continue
                seen = index
                lines.append(raw)
                if on_log_line is not None:
                    on_log_line(raw)
            return
        except Exception:  # noqa: BLE001  (connection dropped: re-follow, once more after the pod is done)
            if last_try:
                return
            last_try = done.is_set()
        finally:
            resp.release_conn()


def _iter_lines(resp):
    pending = b""
    for chunk in resp.stream(4096):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


def uses_claims(pod: Mapping[str, Any], claims: Iterable[str]) -> bool:
    """Whether ``pod`` is not finished and has a volume of one of ``claims``."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    wanted = set(claims)
    return any(
        (v.get("persistentVolumeClaim") or {}).get("claimName") in wanted
        for v in (pod.get("spec") or {}).get("volumes") or []
    )


def wait_scheduled(
    api,
    namespace: str,
    pod: str,
    claim: str,
    timeout: float,
    *,
    errors: PodWaitErrors = PodWaitErrors(),
    interval: float = 0.5,
) -> dict:
    """Wait until ``pod`` is scheduled (``spec.nodeName``: the scheduler binds its claims first, also
    WaitForFirstConsumer ones) or has finished; the pod. After ``timeout`` s ``errors.not_scheduled``
    (``"<what> <ns>/<pod> not scheduled after N s: ..."``) names the last Warning about the pod (the
    scheduler's FailedScheduling; else its PodScheduled condition) and the last one about its claim ``claim``
    (e.g. ProvisioningFailed)."""
    from movers.kube.volumes import last_warning

    def scheduled(current: dict) -> bool:
        phase = (current.get("status") or {}).get("phase")
        return bool((current.get("spec") or {}).get("nodeName")) or phase in ("Succeeded", "Failed")

    def not_scheduled(current: dict) -> Exception:
        why = last_warning(api, namespace, [("Pod", pod)])
        if not why:
            conditions = (current.get("status") or {}).get("conditions") or []
            cond = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
            why = f": {cond.get('reason')}: {cond.get('message')}" if cond.get("message") else ""
        claim_why = _claim_warning(api, namespace, claim)
        return errors.not_scheduled(
            f"{errors.what} {namespace}/{pod} not scheduled after {timeout:g} s{why}{claim_why}"
        )

    return _poll_pod(api, namespace, pod, timeout, interval, scheduled, not_scheduled)


def wait_started(
    api,
    namespace: str,
    pod: str,
    claim: str,
    timeout: float,
    *,
    errors: PodWaitErrors = PodWaitErrors(),
    interval: float = 0.5,
) -> dict:
    """Wait until the scheduled ``pod`` is running (phase Running: a container has started) or has finished; the
    pod. After ``timeout`` s ``errors.not_started`` (``"<what> <ns>/<pod> not running after N s (<waiting
    reason>): ..."``) names the last Warning about the pod (the kubelet's FailedMount, FailedMapVolume, image
    pull errors, the attach-detach controller's FailedAttachVolume) and the last one about its claim ``claim``."""
    from movers.kube.volumes import last_warning

    def started(current: dict) -> bool:
        return (current.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")

    def not_started(current: dict) -> Exception:
        waiting = _waiting_reason_of(current)
        return errors.not_started(
            f"{errors.what} {namespace}/{pod} not running after {timeout:.3g} s{f' ({waiting})' if waiting else ''}"
            f"{last_warning(api, namespace, [('Pod', pod)])}{_claim_warning(api, namespace, claim)}"
        )

    return _poll_pod(api, namespace, pod, timeout, interval, started, not_started)


def _poll_pod(
    api,
    namespace: str,
    pod: str,
    timeout: float,
    interval: float,
    done: Callable[[dict], bool],
    timed_out: Callable[[dict], Exception],
) -> dict:
    """The pod once ``done(pod)`` holds, read every ``interval`` s; after ``timeout`` s ``timed_out(pod)`` raised."""
    deadline = time.monotonic() + timeout
    while True:
        current = get(api, "Pod", namespace, pod)
        if done(current):
            return current
        if time.monotonic() >= deadline:
            raise timed_out(current)
        time.sleep(interval)


def _claim_warning(api, namespace: str, claim: str) -> str:
    """``"; its claim <claim>: <reason>: <message>"`` of the last Warning about ``claim``, or ``""``."""
    from movers.kube.volumes import last_warning

    why = last_warning(api, namespace, [("PersistentVolumeClaim", claim)])
    return f"; its claim {claim}{why}" if why else ""


def _waiting_reason_of(pod: Mapping[str, Any]) -> str:
    """The first waiting reason among the containers of ``pod`` (a dict; e.g. ContainerCreating), or ``""``."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return waiting.get("reason") or ""
    return ""


def run_scheduled(
    api,
    pod: Mapping[str, Any],
    claim: str,
    timeouts: PodTimeouts,
    *,
    errors: PodWaitErrors = PodWaitErrors(),
    on_log_line: Callable[[str], None] | None = None,
) -> PodResult:
    """Create ``pod`` (its claim ``claim``), wait until it is scheduled (``wait_scheduled``, at most
    ``timeouts.start`` s), then running (``wait_started``, at most ``timeouts.running`` s, default
    ``timeouts.start``: ``errors.not_started`` names the Warning that says why, e.g. FailedAttachVolume), and run
    it to completion (``run_pod_to_completion``): ``timeouts.total`` s in all, start to finish; a
    ``PodTimeoutError`` names the last Warning about the pod or its claim. Every wait is bounded once: nothing
    here waits again on the same pod. The pod is left for the caller to delete."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    started = time.monotonic()
    create(api, pod)
    timeout = timeouts.total
    wait_scheduled(api, namespace, name, claim, min(timeouts.start, timeout), errors=errors)
    left = max(1.0, timeout - (time.monotonic() - started))
    running = timeouts.start if timeouts.running is None else timeouts.running
    wait_started(api, namespace, name, claim, min(running, left), errors=errors)
    left = max(1.0, timeout - (time.monotonic() - started))
    try:
        return run_pod_to_completion(api, pod, timeout=left, on_log_line=on_log_line)
    except PodTimeoutError as err:
        from movers.kube.volumes import last_warning

        why = last_warning(api, namespace, [("Pod", name)])
        raise PodTimeoutError(f"{err}{why}{_claim_warning(api, namespace, claim)}") from None
