"""A backup's per-volume plan: what one member's mover does (the change source and why), decided once
(``VolumePlan.of``) before its pod is made, and rendered whole into the mover's argv (``movers.backup.movers``).
Pure: no cluster call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ChangeSource = Literal["cbt-delta", "cbt-allocated", "scan"]


@dataclass(frozen=True)
class VolumePlan:
    """What one member's mover does, decided once (``of``) and rendered whole into its argv: ``scan`` reads the
    whole device (``--scan``: no CBT service is asked), a CBT source asks the driver's SnapshotMetadataService
    (token ``audience``, pages of ``max_results``) for the changes since ``base_handle`` (cbt-delta) or for the
    allocated blocks (cbt-allocated). ``why`` is the reason, for the logs and the run's table. ``base_snapshot``: the
    base's VolumeSnapshot name, which a v1alpha1 service (sidecar v0.1.0) is asked for instead of the handle
    (``base_handle`` still names the backup the delta builds on). ``parent``: the backup (id) of ``base_handle``
    the delta builds on, as planned (``--parent``: never whichever is newest)."""

    change_source: ChangeSource
    why: str
    base_handle: str | None = None
    audience: str | None = None
    max_results: int | None = None
    base_snapshot: str | None = None
    parent: str | None = None

    @classmethod
    def of(
        cls,
        base: Mapping[str, Any],
        audience: str | None,
        no_cbt: str | None = None,
        max_results: int = 4096,
        by_name: bool = False,
    ) -> VolumePlan:
        """cbt-delta (CBT and a base of the same volume: ``base``, ``lineage.choose_base``'s handle, reason and
        VolumeSnapshot name), cbt-allocated (CBT, no such base) or scan (no CBT ``audience``; ``no_cbt`` says why).
        ``by_name``: the driver's service is v1alpha1 (``preflight.DriverCbt.base_by_name``): the delta names its
        base by VolumeSnapshot name, so a base without one is no base."""
        if audience is None:
            return cls("scan", no_cbt or "no SnapshotMetadataService")
        handle, name = base.get("handle"), base.get("snapshot")
        if handle and by_name and not name:
            why = f"{base['reason']}, but a v1alpha1 SnapshotMetadataService (sidecar v0.x) names the base by"
            return cls(
                "cbt-allocated", f"{why} VolumeSnapshot name and that backup recorded none", None, audience, max_results
            )
        if handle and by_name:
            why = f"{base['reason']}; asked by its VolumeSnapshot name {name} (a v1alpha1 SnapshotMetadataService)"
            return cls("cbt-delta", why, handle, audience, max_results, base_snapshot=name, parent=base.get("parent"))
        source = "cbt-delta" if handle else "cbt-allocated"
        return cls(source, base["reason"], handle, audience, max_results, parent=base.get("parent") if handle else None)
