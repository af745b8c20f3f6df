"""Backup manifests: the root object of one backup and its commit point.

A manifest is JSON at ``backups/<quoted volume id>/<backup id>``; it is written last, after
every pack, index, page and directory it references, so a backup without a manifest does not
exist. ``latest`` of a volume is the greatest backup id under its prefix (ids sort by time).

The manifest carries ``format_version`` and ``mandatory_features``; a reader refuses
versions newer than it knows and features it does not implement (``IncompatibleError``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from movers.errors import IncompatibleError, IntegrityError, UsageError

FORMAT_VERSION = 1
KNOWN_FEATURES = frozenset({"paged-map-v1", "sha256-chunks", "zstd"})
MANDATORY_FEATURES = ("paged-map-v1", "sha256-chunks", "zstd")
BACKUP_PREFIX = "backups/"
MODES = ("full", "incremental-cbt", "incremental-scan")


def check_compatible(version: Any, mandatory: Any, what: str) -> None:
    """Raise ``IncompatibleError`` unless this reader can read ``version`` and ``mandatory``."""
    if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
        raise IncompatibleError(
            f"{what} has format version {version!r}; this cbt-mover reads versions up to {FORMAT_VERSION}"
            " (upgrade cbt-mover)"
        )
    unknown = sorted(set(mandatory or ()) - KNOWN_FEATURES)
    if unknown:
        raise IncompatibleError(f"{what} needs features this cbt-mover lacks: {', '.join(unknown)}")


def volume_prefix(volume_id: str) -> str:
    if not volume_id:
        raise UsageError("volume id must not be empty")
    return f"{BACKUP_PREFIX}{quote(volume_id, safe='').replace('~', '%7E')}/"


def new_backup_id(now: datetime | None = None) -> str:
    """A backup id that sorts by creation time: ``20261121T105300123456Z-1a2b3c``."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%dT%H%M%S%fZ") + "-" + os.urandom(3).hex()


def volume_from_key(key: str) -> str:
    return unquote(key[len(BACKUP_PREFIX) :].split("/", 1)[0])


@dataclass
class VolumeIdentity:
    id: str
    cluster: str | None = None
    namespace: str | None = None
    pvc: str | None = None
    pv_volume_handle: str | None = None
    csi_driver: str | None = None


@dataclass
class SnapshotIdentity:
    volume_snapshot: str | None = None
    namespace: str | None = None
    snapshot_handle: str | None = None
    group_snapshot: str | None = None
    group_snapshot_handle: str | None = None


@dataclass
class MapRef:
    page_size: int
    dir_fanout: int
    dirs: list[str | None]
    entries: int


@dataclass
class Manifest:
    backup_id: str
    volume: VolumeIdentity
    capacity_bytes: int
    snapshot: SnapshotIdentity
    parent: str | None
    mode: str
    created: str
    map: MapRef
    stats: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    mandatory_features: list[str] = field(default_factory=lambda: list(MANDATORY_FEATURES))

    @property
    def key(self) -> str:
        return volume_prefix(self.volume.id) + self.backup_id

    def encode(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, key: str = "manifest") -> Manifest:
        try:
            doc = json.loads(data)
        except ValueError:
            raise IntegrityError(f"{key} is not valid JSON") from None
        if not isinstance(doc, dict):
            raise IntegrityError(f"{key} is not a manifest")
        check_compatible(doc.get("format_version"), doc.get("mandatory_features"), f"backup {key}")
        try:
            manifest = cls(
                backup_id=doc["backup_id"],
                volume=VolumeIdentity(**doc["volume"]),
                capacity_bytes=int(doc["capacity_bytes"]),
                snapshot=SnapshotIdentity(**doc["snapshot"]),
                parent=doc.get("parent"),
                mode=doc["mode"],
                created=doc["created"],
                map=MapRef(**doc["map"]),
                stats=doc.get("stats", {}),
                format_version=doc["format_version"],
                mandatory_features=list(doc["mandatory_features"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise IntegrityError(f"{key} is missing or has a malformed field: {err}") from None
        if manifest.mode not in MODES:
            raise IntegrityError(f"{key} has unknown mode {manifest.mode!r}")
        return manifest
