"""Which backups a forget judges, and what retention reads of each (``movers.repo.retention``).

A backup's time is the one encoded in its id (else its manifest's ``created``); its run, namespace, PVC and
policy come from its manifest, so every manifest in scope is read (8 at a time). A manifest that cannot be
read is kept and reported, never judged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from movers.errors import IncompatibleError, IntegrityError, NotFoundError
from movers.repo.manifest import APP_TAG, POLICY_TAG, RUN_TAG, Manifest
from movers.repo.repository import BackupRef, Repository

log = logging.getLogger(__name__)

_ID_TIME = re.compile(r"^(\d{8}T\d{6}\d{6})Z")


def backup_time(backup_id: str) -> datetime | None:
    """The creation time encoded in a backup id (``YYYYMMDDTHHMMSSffffffZ-xxxxxx``)."""
    m = _ID_TIME.match(backup_id)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)


def policy_of(manifest: Manifest) -> str | None:
    """The policy whose retention a backup is under: its ``POLICY_TAG``, else (written by the backup flow before
    that tag existed) its ``APP_TAG``, which the flow sets to the policy's name; None when it has neither."""
    return manifest.tags.get(POLICY_TAG) or manifest.tags.get(APP_TAG)


@dataclass(frozen=True)
class Backup:
    """One backup as retention sees it."""

    ref: BackupRef
    created: datetime  # UTC
    manifest: Manifest

    @property
    def run(self) -> str | None:
        return self.manifest.tags.get(RUN_TAG)

    @property
    def namespace(self) -> str | None:
        return self.manifest.volume.namespace or self.ref.volume.rpartition("/")[0] or None

    @property
    def pvc(self) -> str:
        return self.manifest.volume.pvc or self.ref.volume.rpartition("/")[2]

    @property
    def policy(self) -> str | None:
        return policy_of(self.manifest)


def in_scope(repo: Repository, named: list[str] | None, unreadable: list[str]) -> list[Backup]:
    """The backups to judge: every backup (``named`` None), else those of the named volumes and, where they
    belong to runs, of every volume of the runs' namespaces (so that a run is judged whole). A volume id
    ``<namespace>/<pvc>`` is taken at its word; another's namespace is the one its newest manifest records."""
    if named is None:
        return _read(repo, repo.list_backups(), unreadable)
    backups = _read(repo, [r for v in named for r in repo.list_backups(v)], unreadable)
    namespaces = {b.namespace for b in backups if b.run is not None} - {None}
    if not namespaces:
        return backups
    others: dict[str, list[BackupRef]] = {}
    for ref in repo.list_backups():
        if ref.volume not in named:
            others.setdefault(ref.volume, []).append(ref)
    extra = []
    for volume, refs in others.items():
        ns, _, _pvc = volume.rpartition("/")
        if ns and "/" not in ns:
            if ns in namespaces:
                extra += refs
            continue
        try:
            newest = repo.read_manifest(volume, max(r.backup_id for r in refs))
        except (NotFoundError, IntegrityError, IncompatibleError):
            continue
        if newest.volume.namespace in namespaces:
            extra += refs
    return backups + _read(repo, extra, unreadable)


def _read(repo: Repository, refs: Iterable[BackupRef], unreadable: list[str]) -> list[Backup]:
    """The manifests of ``refs`` (8 reads at a time); gone ones are skipped, unreadable ones added to ``unreadable``
    (and so kept)."""

    def one(ref: BackupRef) -> Backup | None:
        try:
            manifest = repo.read_manifest(ref.volume, ref.backup_id)
            created = backup_time(ref.backup_id) or _utc(datetime.fromisoformat(manifest.created))
        except NotFoundError:
            return None  # forgotten since it was listed
        except (IntegrityError, IncompatibleError, ValueError) as err:
            log.warning("forget keeps %s: its manifest cannot be read (%s)", ref.key, err)
            unreadable.append(ref.key)
            return None
        return Backup(ref, created, manifest)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [b for b in pool.map(one, list(refs)) if b is not None]


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
