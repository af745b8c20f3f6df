"""Verify: read every chunk that backups reference and check it against its hash.

Also checks that manifests, directories and map pages decode, match their ids and hold
ordered, in-range entries. A chunk shared by several backups is read once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from movers.errors import MoverError
from movers.pipeline.reader import MapReader
from movers.repo import volmap
from movers.repo.repository import BackupRef, Repository


@dataclass
class VerifyReport:
    backups_checked: int = 0
    chunks_verified: int = 0
    fetched_bytes: int = 0
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def run_verify(repo: Repository, refs: list[BackupRef], workers: int = 4, progress=None) -> VerifyReport:
    """Verify the given backups; every problem found is reported, none is raised."""
    started = time.monotonic()
    report = VerifyReport()
    verified: set[bytes] = set()
    for n, ref in enumerate(refs, 1):
        try:
            manifest = repo.read_manifest(ref.volume, ref.backup_id)
            page_size = manifest.map.page_size

            def check_page(page_index: int, entries: list, _ps=page_size, _cap=manifest.capacity_bytes) -> None:
                start = page_index * _ps
                volmap.check_entries(entries, start, min(start + _ps, _cap))

            reader = MapReader(repo, workers=workers)
            reader.run(manifest, lambda raw, uses: verified.add(uses[0][2]), check_page, skip=verified)
            report.chunks_verified += reader.chunks_verified
            report.fetched_bytes += reader.fetched_bytes
        except MoverError as err:
            report.errors.append(f"{ref.volume}/{ref.backup_id}: {err}")
        report.backups_checked += 1
        if progress:
            progress(n, len(refs))
    report.duration_s = round(time.monotonic() - started, 3)
    return report
