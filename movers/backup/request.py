"""The backup of one volume as one typed contract, the same class on both sides of the mover pod.

* ``BackupRequest``: what to back up and how: the source volume's identity (``SourceVolume``), the snapshot read
  (``SourceSnapshot``), where the changed ranges come from (``Changes``), the manifest's tags and run, the
  engine's workers and zstd level, and the device. The flow renders it into the mover pod as one env value
  (``REQUEST_ENV``, ``model_dump_json``; ``movers.backup.movers``), the pod reads it back (``from_env``); the
  operator's CLI builds the same object from its flags (``movers.cli``: ``cmd_backup``).
* ``BackupResult``: what ``movers.backup.volume.back_up_volume`` did: the backup committed, the change source it
  used and, when that is not the one asked for, why (``cbt_fallback``), its counters (``BackupStats``'s fields,
  declared once there) and the store requests. The mover writes ``as_output()`` as its ``--json`` line and to
  the termination log; the flow parses that line with ``BackupResult.model_validate``.

Validation is pure (no cluster, no device, no repository): it runs when the object is built, before any call, and
a request the CLI's flags could not express is refused with the CLI's own ``UsageError`` line (exit code 2).
How the pod reaches the SnapshotMetadata service (address, CA, token, ``--kube``) is not part of the request:
it is the pod's wiring, not the backup's decision (``movers.cbt.source.CbtConnection``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from movers.errors import UsageError
from movers.pipeline.stats import BackupStats
from movers.podcontract import REQUEST_ENV, counters_model, request_from_env
from movers.repo.manifest import (
    SnapshotIdentity,
    VolumeIdentity,
    check_volume_id,
    parse_node_affinity,
    parse_run_pvcs,
    parse_tags,
)

log = logging.getLogger(__name__)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceVolume(_Model):
    """The source volume's identity recorded in the manifest (``VolumeIdentity``'s fields): ``id``, the cluster,
    the claim, and its PV's (``movers.kube.volumes.PvIdentity``, the same names). ``fs_type`` of a Block volume is
    dropped with a warning (a Block volume has no filesystem)."""

    id: str
    cluster: str | None = None
    namespace: str | None = None
    pvc: str | None = None
    pv_volume_handle: str | None = None
    csi_driver: str | None = None
    storage_class: str | None = None
    volume_mode: Literal["Block", "Filesystem"] | None = None
    pv_name: str | None = None
    pv_uid: str | None = None
    fs_type: str | None = None
    node_affinity: dict[str, Any] | None = None
    labels: dict[str, str] | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_volume_id(value)

    @field_validator("node_affinity")
    @classmethod
    def _affinity(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return parse_node_affinity(json.dumps(value)) if value else None  # the CLI's rule, on the same value

    @field_validator("labels", "fs_type")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return value or None

    @model_validator(mode="before")
    @classmethod
    def _block_has_no_fs(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("fs_type") and data.get("volume_mode") == "Block":
            log.warning("--fs-type %s ignored: a Block volume has no filesystem", data["fs_type"])
            data = {**data, "fs_type": None}
        return data

    def identity(self) -> VolumeIdentity:
        return VolumeIdentity(**self.model_dump())


class SourceSnapshot(_Model):
    """The snapshot the backup reads (``SnapshotIdentity``'s fields): its VolumeSnapshot (the CBT target), CSI
    handle (the base of the next delta) and group. ``--kube`` fills in what is missing (``back_up_volume``)."""

    volume_snapshot: str | None = None
    namespace: str | None = None
    snapshot_handle: str | None = None
    group_snapshot: str | None = None
    group_snapshot_handle: str | None = None

    def identity(self) -> SnapshotIdentity:
        return SnapshotIdentity(**self.model_dump())


class Changes(_Model):
    """Where the changed ranges come from and what the backup builds on.

    ``source``: ``cbt`` (the SnapshotMetadata service: a delta since ``base_handle``, by VolumeSnapshot name
    ``base_snapshot`` for a v1alpha1 service, else the allocated blocks; pages of ``cbt_max_results``; when CBT is
    unavailable a scan, or with ``cbt_fallback`` ``fail`` exit code 9), ``scan`` (read the whole device, store what
    the repository lacks) or ``extents`` (JSON lines of the file ``extents``, ``-`` for stdin: the operator's CLI).
    ``parent``: the backup the changes are since; ``full``: build on no backup."""

    source: Literal["cbt", "scan", "extents"]
    extents: str | None = None
    base_handle: str | None = None
    base_snapshot: str | None = None
    parent: str | None = None
    full: bool = False
    cbt_fallback: Literal["scan", "fail"] = "scan"
    cbt_max_results: int = Field(default=4096, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Changes:
        if self.parent is not None and self.full:
            raise UsageError("--parent names the backup to build on, --full builds on none: give one of them")
        if self.source == "cbt" and self.parent is not None and not self.base_handle:
            raise UsageError("--parent with CBT needs --base-handle: the allocated blocks build on no backup")
        if (self.source == "extents") != (self.extents is not None):
            raise UsageError("--extents FILE is the extents change source, and only it")
        return self


class BackupRequest(_Model):
    """One volume's backup, as the flow renders it into the mover pod and as the CLI builds it from its flags
    (see the module doc). ``workers``: the engine's threads (None: the mover's CPUs); ``tags`` are recorded in
    the manifest, ``run_pvcs`` (every PVC of the application run, sorted) too."""

    volume: SourceVolume
    snapshot: SourceSnapshot = SourceSnapshot()
    changes: Changes
    device: str
    tags: dict[str, str] = {}
    run_pvcs: list[str] | None = None
    workers: int | None = Field(default=None, ge=1)
    zstd_level: int = 3

    @field_validator("zstd_level")
    @classmethod
    def _level(cls, value: int) -> int:
        if not 1 <= value <= 22:
            raise UsageError("--zstd-level must be between 1 and 22")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        return parse_tags(f"{k}={v}" for k, v in sorted(value.items()))

    @field_validator("run_pvcs")
    @classmethod
    def _run(cls, value: list[str] | None) -> list[str] | None:
        return parse_run_pvcs(",".join(value)) if value else None

    @model_validator(mode="after")
    def _cbt_target(self) -> BackupRequest:
        if self.changes.source == "cbt" and not (self.snapshot.namespace and self.snapshot.volume_snapshot):
            raise UsageError("CBT needs --namespace and --snapshot (the VolumeSnapshot to read)")
        return self

    def threads(self) -> int:
        return self.workers or os.cpu_count() or 2

    @classmethod
    def from_env(cls, name: str = REQUEST_ENV) -> BackupRequest:
        """The request in env variable ``name`` (the mover pod's): ``podcontract.request_from_env``."""
        return request_from_env(cls, name, "a backup request this mover reads")


class CbtCounters(BaseModel):
    """What the CBT stream of a backup carried (``movers.cbt.client.ExtentStream``'s counters)."""

    model_config = ConfigDict(frozen=True)

    block_type: str | None = None
    messages: int = 0
    tuples: int = 0
    extents: int = 0
    resumes: int = 0


BackupCounters = counters_model(
    "BackupCounters", BackupStats, "``movers.pipeline.stats.BackupStats``' counters as a model: declared there, once."
)


class BackupResult(BackupCounters):
    """A backup's result (see the module doc): the backup it committed, the backup it built on (``parent``), the
    change source it used (``cbt-delta``, ``cbt-allocated``, ``scan``, ``extents``) and, when that is not the one
    asked for, why (``cbt_fallback``), the CBT stream's counters, ``BackupStats``' counters (they reconcile) and the
    store's requests by kind. Keys of a newer mover's line are kept (``model_extra``)."""

    backup_id: str
    volume: str
    mode: str
    change_source: str
    parent: str | None = None
    capacity_bytes: int = 0
    snapshot_handle: str | None = None
    pv_volume_handle: str | None = None
    tags: dict[str, str] = {}
    cbt_fallback: str | None = None
    cbt: CbtCounters | None = None
    requests: dict[str, int] = {}

    def as_output(self) -> dict[str, Any]:
        """The ``--json`` line's object: every field, but ``cbt_fallback`` and ``cbt`` only when there is one."""
        doc = self.model_dump(mode="json")
        for key in ("cbt_fallback", "cbt"):
            if doc.get(key) is None:
                doc.pop(key, None)
        return doc
