"""Copying files out of a backup as one typed contract, the same classes on both sides of the files pod.

* ``FilesRequest``: which backup (``volume``, ``backup``: an id or ``latest``), which filesystem of the volume
  (``filesystem``: ``None`` when the volume holds exactly one; else the id ``cbt-mover files ls`` shows, e.g.
  ``p1`` or ``vg0/data``), which ``paths`` inside it (absolute, ``/``-separated on every filesystem), into which
  local directory (``dest``), and the engine's ``workers``. The ``restore-files`` flow renders it into the pod as
  one env value (``podcontract.REQUEST_ENV``); ``cbt-mover files cp`` builds it from its flags.
* ``FilesResult``: what was copied (one ``CopiedEntry`` per file, directory and symlink written), the bytes of
  file data written and the stored bytes fetched from the repository. The pod writes ``model_dump_json()`` as its
  ``--json`` line and, ``fitted`` to the kubelet's limit (a big tree's entries beyond it only counted, in
  ``omitted``), as its termination message; the flow reads that back with ``model_validate_json``.

Validation is pure: it runs when the object is built, and a request the CLI's flags could not express is refused
with the CLI's ``UsageError`` (exit code 2).
"""

from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from movers.errors import UsageError
from movers.podcontract import REQUEST_ENV, request_from_env
from movers.repo.manifest import check_volume_id

LATEST = "latest"

EntryKind = Literal["file", "dir", "symlink", "other"]


class FilesRequest(BaseModel):
    """Copy ``paths`` of one filesystem of a backup into ``dest`` (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    volume: str
    backup: str = LATEST
    filesystem: str | None = None
    paths: tuple[str, ...] = Field(min_length=1)
    dest: str
    workers: int = Field(default=4, ge=1)

    @field_validator("volume")
    @classmethod
    def _volume(cls, value: str) -> str:
        return check_volume_id(value)

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/") or "\0" in path:
                raise UsageError(f"a path inside the backup is absolute (starts with /): {path!r}")
        return tuple(posixpath.normpath(p) for p in value)

    @classmethod
    def from_env(cls, name: str = REQUEST_ENV) -> FilesRequest:
        """The request in env variable ``name`` (the files pod's): ``podcontract.request_from_env``."""
        return request_from_env(cls, name, "a files request this pod reads")


class CopiedEntry(BaseModel):
    """One thing written under ``dest``: its ``path`` inside the backup's filesystem, its kind, its size (a file's
    bytes; 0 for the rest)."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: EntryKind
    size: int = 0


class FilesResult(BaseModel):
    """What a copy did (see the module doc). ``fetched_bytes``: stored (compressed, encrypted) bytes read from the
    repository (a full restore of the backup fetches all of its stored bytes: the measure to compare with)."""

    volume: str
    backup_id: str
    filesystem: str
    copied: list[CopiedEntry]
    copied_bytes: int
    fetched_bytes: int
    duration_s: float
    omitted: int = 0  # entries copied and left out of ``copied`` (``fitted``)

    @property
    def entries(self) -> int:
        """How many entries were copied (listed or not)."""
        return len(self.copied) + self.omitted

    def fitted(self, limit: int) -> FilesResult:
        """This result with as many of ``copied`` as fit in ``limit`` bytes of its ``model_dump_json()`` (UTF-8), the
        rest counted in ``omitted``:
        what the files pod writes to its termination message, which the kubelet cuts at
        ``podcontract.TERMINATION_MESSAGE_MAX`` (a big tree's list would not fit)."""
        if _size(self) <= limit:
            return self
        lo, hi = 0, len(self.copied)  # the most entries that fit lie in [lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _size(self._keeping(mid)) <= limit:
                lo = mid
            else:
                hi = mid
        return self._keeping(lo)

    def _keeping(self, n: int) -> FilesResult:
        return self.model_copy(update={"copied": self.copied[:n], "omitted": self.entries - n})


def _size(result: FilesResult) -> int:
    return len(result.model_dump_json().encode())
