"""Stopping the workloads that use the claims a restore in place writes, and starting them again
(``RestoreAppRequest.scale_down``); the scaling itself is ``movers.kube.workloads``.

* ``refusals(users, pvc, namespace, scale_down)``: why a claim in use stops the plan: without ``scale_down`` the
  pods are named with their workloads, and ``scale_down`` is offered when a workload runs them; with it only the
  pods no scalable workload runs are refused.
* ``stop_users(api, namespace, claims, timeout)``: the workloads running the pods that use ``claims``, and those
  left at 0 by a crashed run (they carry ``SCALED_DOWN_FROM`` and their pod template mounts one of the claims),
  scaled to 0 with their replicas recorded, then watched until no pod uses the claims. The ``Scaled`` list; on any
  failure ``QuiesceFailed``, whose ``scaled`` the caller must scale back all the same.
* ``recover(api, namespace, claims)``: after a cancelled or crashed run, the workloads it left scaled down back to
  their recorded replicas (the flow's state hook).
* ``start_again(api, scaled)``: ``workloads.scale_back``; ``describe(scaled, back)`` says in one line what the
  run did to the application, for the report and the failure report (naming the workloads and the replicas to
  restore by hand when scaling back failed).
"""

from __future__ import annotations

from collections.abc import Sequence

from movers.kube import workloads as w
from movers.kube.apply import KubeError, list_objects
from movers.kube.workloads import SCALED_DOWN_FROM, ScaleBack, Scaled, Users, Workload


class QuiesceFailed(KubeError):
    """Stopping the workloads failed; ``scaled``: those already scaled down (to scale back)."""

    def __init__(self, message: str, scaled: list[Scaled], status: int | None = None) -> None:
        super().__init__(message, status)
        self.scaled = scaled
        self.retriable = False


def refusals(
    users: Users, pvc: str, namespace: str, scale_down: bool, action: str = "restoring it in place"
) -> list[str]:
    """The plan's problems with the claim ``pvc`` that ``users`` use (none when nothing uses it, or when every user
    can be scaled down and ``scale_down`` is asked); ``action``: what the restore does to the claim, as the message
    names it."""
    if not users.pods:
        return []
    claim = f"PersistentVolumeClaim {namespace}/{pvc}"
    if scale_down:
        if not users.unscalable:
            return []
        return [
            f"{claim} is used by pod(s) {', '.join(users.unscalable)}: scale_down stops only pods a Deployment or"
            f" StatefulSet runs; stop them before {action}"
        ]
    offer = ""
    if users.workloads:
        offer = f", or pass scale_down to scale {', '.join(map(str, users.workloads))} down and back"
    return [f"{claim} is used by pod(s) {', '.join(users.pods)}{users.of_workload()}: stop them before {action}{offer}"]


def _template_claims(obj: dict) -> set[str]:
    spec = obj.get("spec") or {}
    volumes = ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []
    claims = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in volumes} - {None}
    name = obj["metadata"]["name"]
    for template in spec.get("volumeClaimTemplates") or []:
        prefix = f"{template['metadata']['name']}-{name}-"
        claims.add(prefix)  # a StatefulSet's claims: <template>-<name>-<ordinal>
    return claims


def _mounts_any(obj: dict, claims: Sequence[str]) -> bool:
    held = _template_claims(obj)
    return any(
        c in held or any(h.endswith("-") and c.startswith(h) and c[len(h) :].isdigit() for h in held) for c in claims
    )


def stranded(api, namespace: str, claims: Sequence[str] | None) -> list[Scaled]:
    """Workloads a crashed run left scaled down (``SCALED_DOWN_FROM`` on them) whose pods would mount ``claims``
    (None: any), each with its recorded replicas."""
    out = []
    for kind in w.SCALABLE:
        for obj in list_objects(api, kind, namespace):
            recorded = w.recorded_replicas(obj)
            if recorded is not None and (claims is None or _mounts_any(obj, claims)):
                out.append(Scaled(Workload(kind, namespace, obj["metadata"]["name"]), recorded, True))
    return out


def recover(api, namespace: str, claims: Sequence[str] | None) -> ScaleBack:
    """After a cancelled or crashed run: the workloads it left scaled down (``stranded``) back to their recorded
    replicas (``workloads.scale_back``; never raises but for listing them)."""
    return w.scale_back(api, stranded(api, namespace, claims))


def stop_users(api, namespace: str, claims: Sequence[str], timeout: float) -> list[Scaled]:
    """Scale the workloads using ``claims`` to 0 and wait (at most ``timeout`` s) until no pod uses them (module
    doc); ``QuiesceFailed`` (with the workloads already scaled down) otherwise."""
    scaled: list[Scaled] = []
    try:
        users = w.claim_users(api, namespace, claims)
        if users.unscalable:
            raise QuiesceFailed(
                f"pod(s) {', '.join(users.unscalable)} use {', '.join(claims)}: scale_down stops only pods a"
                " Deployment or StatefulSet runs",
                scaled,
            )
        workloads = sorted(set(users.workloads) | {s.workload for s in stranded(api, namespace, claims)})
        try:
            scaled = w.scale_down(api, workloads)
        except w.ScaleDownFailed as err:
            scaled = err.done
            raise
        w.wait_unused(api, namespace, claims, timeout)
    except QuiesceFailed:
        raise
    except KubeError as err:
        raise QuiesceFailed(str(err), scaled, err.status) from None
    return scaled


def start_again(api, scaled: Sequence[Scaled]) -> ScaleBack:
    """Every workload of ``scaled`` back to its replicas (``workloads.scale_back``; never raises)."""
    return w.scale_back(api, scaled)


def describe(back: ScaleBack) -> str:
    """One line: which workloads were scaled down and back (and to how many replicas), and, plainly, which could
    not be scaled back, with the replicas to restore."""
    parts = []
    if back.restored:
        done = ", ".join(f"{s.workload} to {s.replicas}" for s in back.restored)
        parts.append(f"scaled down for the restore and back up: {done}")
    if back.failed:
        left = "; ".join(
            f"{s.workload} is still scaled down: scale it to {s.replicas} replicas (its annotation {SCALED_DOWN_FROM}"
            f" records it; {why})"
            for s, why in back.failed
        )
        parts.append(f"SCALING BACK FAILED: {left}")
    return "; ".join(parts) or "no workload was scaled down"
