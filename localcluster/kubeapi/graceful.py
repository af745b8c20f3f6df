"""Graceful deletion of pods, as the API server does it (``rest.BeforeDelete`` and the pod strategy's
``CheckGracefulDelete``).

Pods are the only kind with graceful deletion here. The grace period of a DELETE is the request's
``gracePeriodSeconds``, else the pod's ``spec.terminationGracePeriodSeconds`` (defaulted to 30); it is
0 for a pod not bound to a node (no ``spec.nodeName``) or already terminal (phase Succeeded or
Failed); a negative value counts as 1. The first DELETE sets ``deletionTimestamp`` (now + grace) and
``deletionGracePeriodSeconds`` (and bumps ``generation``); the object stays while the grace is above
0 (the kubelet of its node removes it with grace 0 once its containers are gone), and goes at once
(after that update) with grace 0 unless finalizers hold it. A later DELETE may only shorten the
grace period (``deletionTimestamp`` moves by the difference); one that does not shorten it changes
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster.kubeapi import meta
from localcluster.kubeapi.errors import bad_request
from localcluster.kubeapi.resources import Obj, ResourceType

DEFAULT_GRACE = 30
_TERMINAL = ("Succeeded", "Failed")


def requested_grace(options: Mapping[str, Any]) -> int | None:
    """``gracePeriodSeconds`` of the DeleteOptions (or query), negative as 1; None when not given."""
    value = options.get("gracePeriodSeconds")
    if value is None:
        return None
    try:
        grace = int(value)
    except (TypeError, ValueError):
        raise bad_request(f"gracePeriodSeconds: Invalid value: {value!r}") from None
    return 1 if grace < 0 else grace


def graceful(rt: ResourceType) -> bool:
    """Whether the kind has graceful deletion (pods only)."""
    return rt.key == ("", "pods")


def first_grace(pod: Obj, requested: int | None) -> int:
    """The grace period of the first DELETE of ``pod`` (CheckGracefulDelete)."""
    spec = pod.get("spec") or {}
    grace = requested
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds")
        grace = DEFAULT_GRACE if grace is None else int(grace)
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in _TERMINAL:
        grace = 0
    return 1 if grace < 0 else grace


def shifted(timestamp: str, by_seconds: int) -> str:
    """The RFC 3339 ``timestamp`` moved by ``by_seconds``."""
    return meta.rfc3339(meta.parse_rfc3339(timestamp) + by_seconds)
