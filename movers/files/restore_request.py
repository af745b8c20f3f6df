"""What one ``restore-files`` run is asked to do, as one typed request: the form of the ``restore-files``
deployment.

``RestoreFilesRequest`` names the backup (``repo``, the application's ``namespace``, ``backup``: ``latest``, a run
id or one volume's backup id, selected as ``restore-app`` selects: ``movers.repo.selection``), which ``volumes`` (by
PVC name) and which ``paths`` of each, the ``target`` claim they are copied into (an existing Filesystem claim of
the namespace, or a ``new`` one the run creates), the ``directory`` of the target they go under, the repository
Secret the files pods mount (``repo_secret``), the pods' placement (the fields of a policy's ``mover`` section, over
the section of ``policy_path`` when one is given) and each pod's ``timeout``.

Validation is pure: names are checked as Kubernetes checks them (``movers.policy.checks``), paths as
``movers.files.request.FilesRequest`` checks them; nothing here reads the cluster or the repository.
"""

from __future__ import annotations

import posixpath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from movers.files.request import FilesRequest
from movers.policy.model import Affinity, DnsLabel, Labels, ObjectName, RepoUrl, Text, Tolerations
from movers.restore.app_request import DEFAULT_REPO_SECRET, WRITER_FIELDS

DIRECTORY_PREFIX = "restored-"  # the default directory of the target: restored-<run id>


class VolumePaths(BaseModel):
    """The ``paths`` (absolute, ``/``-separated) to copy out of the backup of claim ``pvc``; ``filesystem``: which
    filesystem of the volume (None: the only one; ``FilesRequest.filesystem``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pvc: ObjectName
    paths: tuple[str, ...] = Field(min_length=1)
    filesystem: str | None = None

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/") or "\0" in path:
                raise ValueError(f"a path inside the backup is absolute (starts with /): {path!r}")
        return tuple(posixpath.normpath(p) for p in value)


class NewClaim(BaseModel):
    """A Filesystem claim the run creates as the target: ``size`` (a Kubernetes quantity) of ``storage_class``
    (None: the cluster's default class)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: Text
    storage_class: ObjectName | None = None

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        from movers.values import parse_quantity

        try:
            if parse_quantity(value) <= 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"size {value!r} is not a positive Kubernetes quantity (e.g. 1Gi)") from None
        return value


class TargetClaim(BaseModel):
    """Where the files go: claim ``claim`` of the namespace; ``new`` None: it exists, Filesystem mode, and no
    running pod uses it unless it is ReadWriteMany (``movers.files.cluster.check_target``); else the run creates it
    (``NewClaim``) and refuses a claim of that name that exists."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    claim: ObjectName
    new: NewClaim | None = None


class RestoreFilesRequest(BaseModel):
    """One ``restore-files`` run (see the module doc).

    ``volumes``: one entry per PVC, each named once. ``directory``: a relative path inside the target claim (None:
    ``restored-<run id>``); the files of a volume go under ``<directory>/<pvc>/``, each path at its name there, as
    ``cp`` puts it (``/etc/app.conf`` of ``data`` lands at ``<directory>/data/app.conf``, the tree ``/db/table`` at
    ``<directory>/data/table/``; two paths of one name are refused by the pod, nothing is ever overwritten).
    ``timeout``: seconds per files pod.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: RepoUrl
    namespace: DnsLabel
    volumes: tuple[VolumePaths, ...] = Field(min_length=1)
    target: TargetClaim
    backup: Text = "latest"
    directory: str | None = None
    repo_secret: ObjectName = DEFAULT_REPO_SECRET
    image: Text | None = None
    service_account: ObjectName | None = None
    node_selector: Labels | None = None
    tolerations: Tolerations | None = None
    affinity: Affinity = None
    policy_path: str | None = None
    workers: int = Field(default=4, ge=1)
    timeout: float = Field(default=3600.0, gt=0)

    @field_validator("directory")
    @classmethod
    def _directory(cls, value: str | None) -> str | None:
        if value is None:
            return None
        norm = posixpath.normpath(value)
        if not value or value.startswith("/") or "\0" in value or norm == "." or norm.split("/")[0] == "..":
            raise ValueError(f"directory is a relative path inside the target claim (no .., not /): {value!r}")
        return norm

    @model_validator(mode="after")
    def _distinct(self) -> RestoreFilesRequest:
        pvcs = [v.pvc for v in self.volumes]
        twice = sorted({p for p in pvcs if pvcs.count(p) > 1})
        if twice:
            raise ValueError(f"a PVC is named twice in volumes: {', '.join(twice)}")
        return self

    @property
    def pvcs(self) -> list[str]:
        """The PVCs asked for, in the request's order."""
        return [v.pvc for v in self.volumes]

    def writer_given(self) -> dict[str, Any]:
        """The files pods' settings this request gives (``WRITER_FIELDS`` that are not None), for merging over a
        policy's ``mover`` section."""
        return {name: getattr(self, name) for name in WRITER_FIELDS if getattr(self, name) is not None}

    def directory_of(self, run_id: str) -> str:
        """The directory of the target the run copies into: ``directory``, else ``restored-<run id>``."""
        return self.directory or f"{DIRECTORY_PREFIX}{run_id}"

    def files_request(self, volume: VolumePaths, volume_id: str, backup_id: str, dest: str) -> FilesRequest:
        """The files pod's request of ``volume``: its backup ``backup_id`` of repository volume ``volume_id``, its
        paths into ``dest`` (the pod's path of ``<directory>/<pvc>``)."""
        return FilesRequest(
            volume=volume_id,
            backup=backup_id,
            filesystem=volume.filesystem,
            paths=volume.paths,
            dest=dest,
            workers=self.workers,
        )
