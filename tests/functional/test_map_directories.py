"""A map of more pages than one directory holds: every directory is in the manifest, in order."""

from __future__ import annotations

import random

import pytest

from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.repo import volmap
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import sha256_file

KiB = 1 << 10


@pytest.mark.parametrize("version", [1, 2])
def test_a_map_of_three_directories_restores_bit_exact(tmp_path, version):
    page = 64 * KiB
    pages = 2 * volmap.DIR_FANOUT + 10  # three directories
    image = tmp_path / "vol.img"
    image.write_bytes(random.Random(5).randbytes(pages * page))
    repo = Repository.init(MemoryStore(), RepoConfig(chunk_max=page, page_size=page, format_version=version))
    m = run_backup(repo, str(image), VolumeIdentity("v"), extents=[(0, pages * page)])
    assert len(m.map.dirs) == 3 and len(set(m.map.dirs)) == 3
    assert len(repo.page_slots(m)) == pages
    target = tmp_path / "restored.img"
    run_restore(repo, m, str(target))
    assert sha256_file(target) == sha256_file(image)
