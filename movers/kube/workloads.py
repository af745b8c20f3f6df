"""The workloads behind the pods that use claims, and scaling them down and back around a restore.

* ``claim_users(api, namespace, claims)``: the unfinished pods that mount any of ``claims``, each with the workload
  that runs it, found through the ``controller`` ownerReferences: Pod -> ReplicaSet -> Deployment, or
  Pod -> StatefulSet (``Users``). A pod with no such owner (a bare pod, a DaemonSet's, a Job's, a ReplicaSet no
  Deployment owns) cannot be scaled: it is named in ``Users.unscalable`` with why.
* ``scale_down(api, workloads)``: for each workload, first record the replicas to return to on the workload itself
  (annotation ``SCALED_DOWN_FROM``, so a crashed run's state is visible and recoverable: a workload that already
  carries it keeps that value, the replicas of before the crashed run), then set its ``scale`` subresource to 0.
  Returns the ``Scaled`` workloads (each with the replicas to return to), also those done before a failure
  (``ScaleDownFailed.done``), so that the caller can scale them back.
* ``wait_unused(api, namespace, claims, timeout)``: watch the namespace's pods until none uses the claims, else
  ``ClaimsStillUsed`` naming the pods left.
* ``scale_back(api, scaled)``: each workload back to its recorded replicas through ``scale``, then the annotation
  removed; never raises: the ones that failed are returned with why (``ScaleBack``), for the report.

The identity needs get on replicasets, get, list and patch (the annotation) on deployments and statefulsets, and
patch on their ``scale`` subresource (``permissions``). Errors are ``apply.KubeError``s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from movers.errors import NotFoundError
from movers.kube.access import Check
from movers.kube.apply import ForbiddenError, KubeError, api_error, get, list_objects, merge_patch, patch_scale
from movers.kube.pods import uses_claims

SCALED_DOWN_FROM = "cbt-mover.io/scaled-down-from"
SCALABLE = ("Deployment", "StatefulSet")


def permissions(namespace: str) -> list[Check]:
    """The calls ``claim_users``, ``scale_down`` and ``scale_back`` make in ``namespace`` beyond reading pods, and
    the listing of workloads a crashed run left scaled down (``movers.restore.quiesce.stranded``)."""
    checks = [Check("get", "apps", "replicasets", namespace=namespace)]
    for plural in ("deployments", "statefulsets"):
        checks += [Check(verb, "apps", plural, namespace=namespace) for verb in ("get", "list", "patch")]
        checks += [Check("patch", "apps", plural, "scale", namespace=namespace)]
    return checks


@dataclass(frozen=True, order=True)
class Workload:
    """A scalable workload: ``kind`` Deployment or StatefulSet."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Users:
    """Who uses a set of claims: ``pods`` (names), the ``workloads`` running them, and the pods no scalable
    workload runs (``unscalable``: ``"<pod> (<why>)"``)."""

    pods: tuple[str, ...] = ()
    workloads: tuple[Workload, ...] = ()
    unscalable: tuple[str, ...] = ()

    def of_workload(self) -> str:
        """``" (run by Deployment ns/a, StatefulSet ns/b)"``, or nothing when no workload runs them."""
        return f" (run by {', '.join(map(str, self.workloads))})" if self.workloads else ""


def _controller(obj: dict) -> dict | None:
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def _users_now(api, namespace: str, claims: Sequence[str]) -> list[dict]:
    return [p for p in list_objects(api, "Pod", namespace) if uses_claims(p, claims)]


def owner_of(api, namespace: str, pod: dict) -> Workload | str:
    """The scalable workload that runs ``pod``, or why there is none."""
    ref = _controller(pod)
    if ref is None:
        return "a bare pod, no workload runs it"
    kind, name = ref.get("kind"), ref.get("name")
    if kind == "StatefulSet":
        return Workload(kind, namespace, name)
    if kind == "ReplicaSet":
        try:
            rs = get(api, "ReplicaSet", namespace, name)
        except (ForbiddenError, NotFoundError) as err:  # a refusal still names the pod; scale_down's preflight asks
            return f"run by ReplicaSet {name}, which could not be read: {err}"
        owner = _controller(rs)
        if owner is not None and owner.get("kind") == "Deployment":
            return Workload("Deployment", namespace, owner["name"])
        return f"run by ReplicaSet {name}, which no Deployment owns"
    return f"run by {kind} {name}, which cannot be scaled down"


def claim_users(api, namespace: str, claims: Sequence[str]) -> Users:
    """The unfinished pods of ``namespace`` that mount any of ``claims`` and their workloads (module doc)."""
    pods, workloads, unscalable = [], set(), []
    for pod in _users_now(api, namespace, claims):
        name = pod["metadata"]["name"]
        pods.append(name)
        owner = owner_of(api, namespace, pod)
        if isinstance(owner, Workload):
            workloads.add(owner)
        else:
            unscalable.append(f"{name} ({owner})")
    return Users(tuple(sorted(pods)), tuple(sorted(workloads)), tuple(sorted(unscalable)))


@dataclass(frozen=True)
class Scaled:
    """A workload scaled down by this run, and the replicas to return it to."""

    workload: Workload
    replicas: int
    recovered: bool = False  # the replicas come from a crashed run's annotation


class ScaleDownFailed(KubeError):
    """Scaling a workload down failed; ``done`` are the workloads already scaled down (to scale back)."""

    def __init__(self, message: str, done: list[Scaled], status: int | None = None) -> None:
        super().__init__(message, status)
        self.done = done
        self.retriable = False


class ClaimsStillUsed(KubeError):
    """Pods still used the claims when the wait ended (the workloads stay scaled down until scaled back)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.retriable = False


def recorded_replicas(obj: dict) -> int | None:
    """The replicas a run recorded on the workload ``obj`` before scaling it down (``SCALED_DOWN_FROM``), or None."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(SCALED_DOWN_FROM)
    return int(value) if value is not None and value.isdigit() else None


def scale_down(api, workloads: Sequence[Workload]) -> list[Scaled]:
    """Record each workload's replicas on it (``SCALED_DOWN_FROM``; an existing record is kept and used), then scale
    it to 0; the ``Scaled`` list, in order. ``ScaleDownFailed`` (with those already done) on an API error."""
    done: list[Scaled] = []
    for w in workloads:
        try:
            obj = get(api, w.kind, w.namespace, w.name)
            recorded = recorded_replicas(obj)
            replicas = recorded if recorded is not None else int((obj.get("spec") or {}).get("replicas", 1))
            if recorded is None:  # guarded by the resourceVersion read: a concurrent scale is not recorded wrong
                md = {"annotations": {SCALED_DOWN_FROM: str(replicas)}}
                md["resourceVersion"] = obj["metadata"]["resourceVersion"]
                merge_patch(api, w.kind, w.namespace, w.name, {"metadata": md})
            patch_scale(api, w.kind, w.namespace, w.name, 0)
        except KubeError as err:
            raise ScaleDownFailed(f"scaling {w} down failed: {err}", done, err.status) from None
        done.append(Scaled(w, replicas, recorded is not None))
    return done


def wait_unused(api, namespace: str, claims: Sequence[str], timeout: float) -> None:
    """Return once no unfinished pod of ``namespace`` mounts any of ``claims`` (watched, at most ``timeout`` s),
    else ``ClaimsStillUsed`` naming the pods left."""
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    try:
        while True:
            listed = core.list_namespaced_pod(namespace, _preload_content=False)
            doc = json.loads(listed.data)
            left = sorted(p["metadata"]["name"] for p in doc.get("items") or [] if uses_claims(p, claims))
            remaining = deadline - time.monotonic()
            if not left:
                return
            if remaining <= 0:
                raise ClaimsStillUsed(
                    f"pod(s) {', '.join(left)} still use {', '.join(claims)} in {namespace} after {timeout:g} s of"
                    " waiting for them to stop"
                )
            w = watch.Watch()
            try:
                for event in w.stream(
                    core.list_namespaced_pod,
                    namespace,
                    resource_version=doc["metadata"]["resourceVersion"],
                    timeout_seconds=max(1, int(min(remaining, 30))),
                ):
                    if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                        break  # ERROR (e.g. 410 Gone): list again
                    pod = event["raw_object"]
                    name = pod["metadata"]["name"]
                    if name in left and (event["type"] == "DELETED" or not uses_claims(pod, claims)):
                        left.remove(name)
                    elif event["type"] != "DELETED" and uses_claims(pod, claims) and name not in left:
                        left.append(name)
                    if not left:
                        return
            finally:
                w.stop()
    except ApiException as err:
        raise api_error(err, f"watching the pods of {namespace}") from None


@dataclass(frozen=True)
class ScaleBack:
    """What scaling back did: ``restored`` workloads (at their recorded replicas again, annotation removed) and
    ``failed`` ones (``(scaled, why)``: still at 0 or still annotated; their replicas are in the record)."""

    restored: tuple[Scaled, ...] = ()
    failed: tuple[tuple[Scaled, str], ...] = field(default_factory=tuple)


def scale_back(api, scaled: Sequence[Scaled]) -> ScaleBack:
    """Each workload back to its recorded replicas (``scale``), then its ``SCALED_DOWN_FROM`` removed; never
    raises (a failure is returned with why, and the annotation stays as the record of what to restore)."""
    restored, failed = [], []
    for s in scaled:
        w = s.workload
        try:
            patch_scale(api, w.kind, w.namespace, w.name, s.replicas)
            merge_patch(api, w.kind, w.namespace, w.name, {"metadata": {"annotations": {SCALED_DOWN_FROM: None}}})
        except Exception as err:  # noqa: BLE001  (the others are scaled back all the same; the report says which)
            failed.append((s, str(err)))
            continue
        restored.append(s)
    return ScaleBack(tuple(restored), tuple(failed))
