"""Who a container runs as, and the volume ownership its pod's ``fsGroup`` asks for, as the kubelet does them.

- ``container_user``: the process's uid (``runAsUser`` of the container, else of the pod; else the image's user,
  which this double does not model: root), gid (``runAsGroup`` likewise; else 0) and supplementary groups (the
  pod's ``fsGroup``, then its ``supplementalGroups``; upstream also adds the image's ``/etc/group`` memberships,
  which this double does not model). The shim switches to it right before the exec (``shim.drop_privileges``), in
  ``kubectl exec`` too. Root is root: capabilities are not modelled (a container of uid 0 that drops ALL still
  passes permission checks here).
- ``verify_non_root``: ``runAsNonRoot: true`` (container's, else pod's) with uid 0 stops the container before it
  starts, as the kubelet's ``verifyRunAsNonRoot`` does: CreateContainerConfigError with upstream's message (an
  explicit ``runAsUser: 0``; no ``runAsUser`` at all: the image's user, root here).
- ``fs_group_applies``: whether a CSI volume gets the fsGroup (csi_mounter's ``supportsFSGroup``): not for a
  read-only mount nor under the driver's ``fsGroupPolicy: None``; always under ``File``; under
  ``ReadWriteOnceWithFSType`` (the default when the driver has no CSIDriver object) only with an fsType and a PV
  whose access modes include ReadWriteOnce. Then the volume's files get the group (``shim.set_volume_ownership``,
  the kubelet's ``SetVolumeOwnership``), recursively on every mount (``fsGroupChangePolicy: Always``, the default),
  or only when the volume's root does not match (``OnRootMismatch``). Secret, configMap, downwardAPI, projected and
  emptyDir volumes always get it (the first four read-only: group read, never write). Windows nodes apply none
  (upstream's Windows kubelet does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
FILE, NONE, RWO_WITH_FSTYPE = "File", "None", "ReadWriteOnceWithFSType"


class NonRootError(Exception):
    """``runAsNonRoot`` refused the container (CreateContainerConfigError)."""


@dataclass(frozen=True)
class ContainerUser:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @property
    def is_root(self) -> bool:
        """Root with no extra groups: the process runs as the kubelet's own (no switch needed)."""
        return self.uid == 0 and self.gid == 0 and not self.groups

    def spec(self) -> str:
        """``UID:GID:G1,G2`` for the shim's command line."""
        return f"{self.uid}:{self.gid}:{','.join(map(str, self.groups))}"


def _setting(pod: Obj, container: Obj, key: str) -> Any:
    value = (container.get("securityContext") or {}).get(key)
    return value if value is not None else ((pod.get("spec") or {}).get("securityContext") or {}).get(key)


def fs_group(pod: Obj) -> int | None:
    """The pod's ``securityContext.fsGroup``."""
    return ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")


def fs_group_change_policy(pod: Obj) -> str:
    """The pod's ``securityContext.fsGroupChangePolicy`` (``Always`` by default)."""
    return ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroupChangePolicy") or "Always"


def container_user(pod: Obj, container: Obj) -> ContainerUser:
    """Who ``container`` of ``pod`` runs as (see the module doc)."""
    sc = (pod.get("spec") or {}).get("securityContext") or {}
    groups = [g for g in (sc.get("fsGroup"), *(sc.get("supplementalGroups") or [])) if g is not None]
    uid = _setting(pod, container, "runAsUser")
    gid = _setting(pod, container, "runAsGroup")
    return ContainerUser(int(uid or 0), int(gid or 0), tuple(dict.fromkeys(int(g) for g in groups)))


def verify_non_root(pod: Obj, container: Obj) -> None:
    """``NonRootError`` with the kubelet's message when ``runAsNonRoot`` forbids how ``container`` would run."""
    if _setting(pod, container, "runAsNonRoot") is not True:
        return
    md = pod.get("metadata") or {}
    who = f'(pod: "{md.get("name")}_{md.get("namespace")}({md.get("uid")})", container: {container.get("name")})'
    uid = _setting(pod, container, "runAsUser")
    if uid is None:
        raise NonRootError(f"container has runAsNonRoot and image will run as root {who}")
    if int(uid) == 0:
        raise NonRootError(f"container's runAsUser breaks non-root policy {who}")


def fs_group_applies(
    driver: Mapping[str, Any] | None, pv: Mapping[str, Any], readonly: bool, fs_group_: int | None
) -> bool:
    """Whether a CSI volume of ``pv`` mounted ``readonly`` gets the pod's ``fs_group_`` (see the module doc);
    ``driver``: its CSIDriver object (None: none)."""
    if fs_group_ is None or readonly:
        return False
    policy = ((driver or {}).get("spec") or {}).get("fsGroupPolicy") or RWO_WITH_FSTYPE
    if policy == NONE:
        return False
    if policy == FILE:
        return True
    spec = pv.get("spec") or {}
    return bool((spec.get("csi") or {}).get("fsType")) and "ReadWriteOnce" in (spec.get("accessModes") or [])
