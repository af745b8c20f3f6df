"""The restore of one volume onto a device as one typed contract, the same class on both sides of the writer pod.

* ``RestoreRequest``: what to write and how: the volume id, the backup (an id or ``latest``), the target device,
  whether it reads as zeros (``assume_zeroed``), whether it is read back and compared (``verify_device``), whether
  the whole backup is written or only what differs from what the device holds (``overwrite``: ``always`` or
  ``if-changed``, ``movers.pipeline.inplace``; ``extents``: a file of the ranges known to differ; ``cbt``: ask
  the SnapshotMetadata service for them, ``CbtDelta``) and the engine's workers. The flow renders it into the
  writer pod as one env value (``REQUEST_ENV``, ``model_dump_json``; ``movers.restore.writers.writer_pod``), the
  pod reads it back (``from_env``); the operator's CLI builds the same object from its flags (``movers.cli.restore``:
  ``restore_request``).
* ``WriteResult``: what the writer did: the backup written, its mode, how it found what differs (``path``) and,
  when CBT was asked for and not used, why (``cbt_fallback``), ``RestoreStats``' counters (declared once
  there), the read-back's (``ReadbackStats``', with ``verify_device``) and the store requests. The writer writes
  ``as_output()`` as its ``--json`` line and to the termination log; the flow parses that line with
  ``WriteResult.model_validate`` (``movers.restore.writers.write_volume``).

Validation is pure (no cluster, no device, no repository): it runs when the object is built, before any call, and
a request the CLI's flags could not express is refused with the CLI's own ``UsageError`` line (exit code 2). The
target's checks that need the device (``movers.device.check_target``) stay the writer's, before any work.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from movers.errors import UsageError
from movers.pipeline.readback import ReadbackStats
from movers.pipeline.stats import RestoreStats
from movers.podcontract import REQUEST_ENV, counters_model, request_from_env
from movers.repo.manifest import check_volume_id

LATEST = "latest"  # ``backup``: the volume's newest backup


class CbtDelta(BaseModel):
    """The ranges to rewrite in place, as CBT names them: GetMetadataDelta between the backup's snapshot (CSI handle
    ``base_handle``; ``base_snapshot``, its VolumeSnapshot's name, is what a v1alpha1 service is asked for
    instead) and ``snapshot``, a ready VolumeSnapshot of the live claim in ``namespace``, in pages of
    ``max_results``. The device differs from the backup's snapshot exactly there, so rewriting them from the
    backup makes it bit-exact (``movers.restore.volume``). How the writer reaches the service is its wiring
    (``movers.cbt.source.CbtConnection``), not part of the request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    snapshot: str
    base_handle: str
    base_snapshot: str | None = None
    max_results: int = Field(default=4096, ge=0)


Path = Literal["full", "compare", "extents", "cbt"]


class RestoreRequest(BaseModel):
    """One volume's restore, as the flow renders it into the writer pod and as the CLI builds it from its flags
    (see the module doc). ``backup``: a backup id or ``latest``; ``workers``: the engine's threads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    volume: str
    backup: str = LATEST
    device: str
    assume_zeroed: bool = False
    verify_device: bool = False
    overwrite: Literal["always", "if-changed"] = "always"
    extents: str | None = None
    cbt: CbtDelta | None = None
    workers: int = Field(default=4, ge=1)

    @field_validator("volume")
    @classmethod
    def _volume(cls, value: str) -> str:
        return check_volume_id(value)

    @model_validator(mode="after")
    def _in_place(self) -> RestoreRequest:
        if self.extents is not None and self.overwrite != "if-changed":
            raise UsageError("--extents names what differs on the device: it needs --overwrite if-changed")
        if self.cbt is not None and (self.overwrite != "if-changed" or self.extents is not None):
            raise UsageError(
                "a CBT delta names what differs on the device: it needs --overwrite if-changed and no --extents"
            )
        if self.assume_zeroed and self.overwrite == "if-changed":
            raise UsageError("--assume-zeroed and --overwrite if-changed contradict: the device holds a volume")
        return self

    @classmethod
    def from_env(cls, name: str = REQUEST_ENV) -> RestoreRequest:
        """The request in env variable ``name`` (the writer pod's): ``podcontract.request_from_env``."""
        return request_from_env(cls, name, "a restore request this writer reads")


RestoreCounters = counters_model(
    "RestoreCounters", RestoreStats, "``movers.pipeline.stats.RestoreStats``' counters as a model: declared there."
)
ReadbackCounters = counters_model(
    "ReadbackCounters", ReadbackStats, "``movers.pipeline.readback.ReadbackStats``' counters as a model."
)


class WriteResult(RestoreCounters):
    """A restore's result (see the module doc): the backup it wrote (``backup_id`` of ``volume``, its ``mode``),
    ``path``: how it found what to write (``full``: everything; ``compare``: the device compared with the map's
    digests; ``extents``: the ranges of a file; ``cbt``: the ranges of a CBT delta), ``cbt_fallback``: why a CBT
    delta asked for was not used (the device was compared instead), ``RestoreStats``' counters, the read-back's
    (``readback``: only with ``verify_device``) and the store's requests by kind. Keys of a newer writer's line are
    kept (``model_extra``)."""

    backup_id: str
    volume: str
    mode: str
    path: Path | None = None
    cbt_fallback: str | None = None
    readback: ReadbackCounters | None = None
    requests: dict[str, int] = {}

    def as_output(self) -> dict[str, Any]:
        """The ``--json`` line's object: every field, but ``readback`` and ``cbt_fallback`` only when there is one."""
        doc = self.model_dump(mode="json")
        for key in ("readback", "cbt_fallback"):
            if doc.get(key) is None:
                doc.pop(key, None)
        return doc
