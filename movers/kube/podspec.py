"""The typed groups of settings that travel together into a mover or writer pod (``manifests.mover_pod``).

* ``PodPlacement``: where a pod may run (node selector, tolerations, affinity);
* ``RepoAccess``: the repository credentials Secret and the key files it holds;
* ``MoverProfile``: how every mover (or writer) pod of a run is run (image, ServiceAccount, resources,
  placement): a backup policy's mover section or a restore's writer settings;
* ``MoverTask``: what one pod does (its argv and env, the Block claim it reads or writes and where, its role,
  API token audience and deadline).

Plain frozen values: no Kubernetes client, no validation beyond the builders' own (``movers.policy.model``
validates what a user gives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

DEVICE_PATH = "/dev/xvda"  # where a mover or writer pod sees its Block claim (MoverTask's default device_path)


@dataclass(frozen=True)
class PodPlacement:
    """Where a pod may run. ``node_selector`` None: ``manifests.DEFAULT_NODE_SELECTOR`` (Linux nodes: block
    volumes cannot attach to Windows nodes); ``tolerations`` (Kubernetes Tolerations) and ``affinity`` (a
    Kubernetes Affinity) go into the pod spec as given, e.g. for a tainted backup node pool."""

    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Mapping[str, Any]] | None = None
    affinity: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RepoAccess:
    """The repository's credentials: Secret ``secret`` (``manifests.REPO_SECRET_KEYS``) and ``keys``, those of
    ``manifests.REPO_KEY_FILES`` it holds (an encrypted repository's key, ``movers.kube.repokey.key_names``)."""

    secret: str
    keys: Sequence[str] = ()


class _PodSettings(Protocol):
    """What ``MoverProfile.of`` reads (``movers.policy.model.MoverSettings`` has it)."""

    image: str
    service_account: str
    resources: Any
    node_selector: Any
    tolerations: Any
    affinity: Any


@dataclass(frozen=True)
class MoverProfile:
    """How a run's mover or writer pods are run: ``image`` (pulled by ``image_pull_policy``) under ServiceAccount
    ``service_account``, ``resources`` (None: ``manifests.DEFAULT_RESOURCES``), ``placement``."""

    image: str
    service_account: str
    resources: Mapping[str, Any] | None = None
    placement: PodPlacement = field(default_factory=PodPlacement)
    image_pull_policy: str = "IfNotPresent"

    @classmethod
    def of(cls, settings: _PodSettings, affinity: Mapping[str, Any] | None = None) -> MoverProfile:
        """The profile of a policy's mover section (``MoverSettings``); ``affinity`` replaces its affinity
        when given (a writer's, with the source volume's placement added)."""
        return cls(
            image=settings.image,
            service_account=settings.service_account,
            resources=settings.resources,
            placement=PodPlacement(
                node_selector=settings.node_selector,
                tolerations=settings.tolerations,
                affinity=affinity if affinity is not None else settings.affinity,
            ),
        )


@dataclass(frozen=True)
class MoverTask:
    """What one pod does: ``cbt-mover ARGS`` with ``env`` against Block claim ``pvc`` at ``device_path``.

    ``role``: ``manifests.MOVER`` or ``manifests.WRITER`` (None: from ``args``); ``cbt_audience``: the audience
    of a projected ServiceAccount token (a backup mover's CBT calls; None: none); ``active_deadline_seconds``:
    the pod's deadline (None: none)."""

    args: Sequence[str]
    pvc: str
    device_path: str = DEVICE_PATH
    env: Mapping[str, str] | None = None
    role: str | None = None
    cbt_audience: str | None = None
    active_deadline_seconds: int | None = None
