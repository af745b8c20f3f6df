"""Remaps: a committed backup's map, rewritten by consolidation, without rewriting its manifest.

Nothing in a repository is ever rewritten (object-locked buckets need it; docs/format.md), so when maintenance
consolidates a backup (``movers.pipeline.consolidate``: the same bytes, stored again in fewer, fuller chunks) the new
map is named by a new object beside the manifest: ``<the manifest's key>.remap-<stamp>``, JSON
``{"backup_id", "volume", "capacity_bytes", "map": <MapRef>, "created", "rewritten_bytes", "fetch_before",
"fetch_after"}`` (sealed like a manifest in an encrypted repository, so it opens only at its own key). Its stamp is
``<UTC time>-<random>``, so the greatest key is the newest remap. Beside the manifest, so the one listing that finds a
volume's backups (``Repository.list_backups``, which leaves remaps out) also finds their remaps.

``Repository.read_manifest`` applies the newest remap whose backup, volume and capacity are the manifest's: every
reader (restore, verify, in place, the next incremental's parent, prune's marking) then sees the rewritten map, and
``Manifest.remapped`` names the remap. A remap is written only after every pack, index and map object it names
(the commit point of a consolidation, as the manifest is a backup's), so a crash before it leaves the backup as it
was. The map it replaces is from then on referenced by nothing new and freed by prune after the grace, like a
forgotten backup's. Prune deletes a remap whose manifest is gone (forgotten) and one a newer remap superseded.

A reader written before remaps existed ignores them and reads the original map, which stays restorable until a
prune that knows remaps frees it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from movers.errors import IntegrityError
from movers.repo.manifest import Manifest, MapRef
from movers.repo.store.base import Store

REMAP_MARK = ".remap-"  # a remap's key: its manifest's key, this, then its stamp


@dataclass(frozen=True)
class Remap:
    """One consolidation of a backup (see the module doc). ``fetch_before`` / ``fetch_after``: the stored bytes a
    restore of the backup fetches with the old map and with this one."""

    backup_id: str
    volume: str
    capacity_bytes: int
    map: MapRef
    created: str
    rewritten_bytes: int
    fetch_before: int
    fetch_after: int

    def encode(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, key: str) -> Remap:
        try:
            doc = json.loads(data)
            return cls(
                backup_id=str(doc["backup_id"]),
                volume=str(doc["volume"]),
                capacity_bytes=int(doc["capacity_bytes"]),
                map=MapRef(**doc["map"]),
                created=str(doc["created"]),
                rewritten_bytes=int(doc["rewritten_bytes"]),
                fetch_before=int(doc["fetch_before"]),
                fetch_after=int(doc["fetch_after"]),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise IntegrityError(f"remap {key} is malformed: {err}") from None

    def applies_to(self, manifest: Manifest) -> bool:
        return (self.backup_id, self.volume, self.capacity_bytes) == (
            manifest.backup_id,
            manifest.volume.id,
            manifest.capacity_bytes,
        )


def is_remap_key(key: str) -> bool:
    """Whether a key listed under ``backups/`` is a remap's (else it is a manifest's)."""
    return REMAP_MARK in key.rsplit("/", 1)[-1]


def manifest_key_of(remap_key: str) -> str:
    """The manifest key a remap key belongs to."""
    return remap_key.rsplit(REMAP_MARK, 1)[0]


def new_remap_key(manifest_key: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{manifest_key}{REMAP_MARK}{stamp}-{secrets.token_hex(4)}"


def newest_of_each(keys: Iterable[str]) -> dict[str, str]:
    """``{manifest key: its newest remap key}`` among the remap keys of a listing (other keys are ignored)."""
    newest: dict[str, str] = {}
    for key in keys:
        if is_remap_key(key):
            manifest_key = manifest_key_of(key)
            newest[manifest_key] = max(newest.get(manifest_key, key), key)
    return newest


def write(store: Store, manifest_key: str, remap: Remap) -> str:
    """Store ``remap`` for the backup at ``manifest_key`` under a new key (never replacing one); its key."""
    key = new_remap_key(manifest_key)
    if not store.create(key, remap.encode()):
        raise IntegrityError(f"remap {key} exists already")
    return key


def stale(listed: Iterable[str]) -> list[str]:
    """The remap keys of a listing of ``backups/`` that nothing reads: those of a backup whose manifest the listing
    lacks (forgotten) and those a newer remap of the same backup superseded."""
    keys = list(listed)
    manifests = {key for key in keys if not is_remap_key(key)}
    newest = newest_of_each(keys)
    return sorted(
        key
        for key in keys
        if is_remap_key(key) and (manifest_key_of(key) not in manifests or newest[manifest_key_of(key)] != key)
    )
