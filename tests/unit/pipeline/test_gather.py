"""Scattered small CBT extents are gathered into few chunks: the cost per extent is a read and a map entry."""

from __future__ import annotations

import pytest

from movers.pipeline.backup import run_backup
from movers.pipeline.planner import gather
from movers.pipeline.restore import run_restore
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import sha256_file, write_blocks

KiB, MiB = 1 << 10, 1 << 20


def test_gather_groups_runs_of_small_reads_within_a_page_and_a_size_limit():
    reads = [(0, 4 * KiB), (32 * KiB, 4 * KiB), (64 * KiB, 128 * KiB), (512 * KiB, 4 * KiB), (1 * MiB, 4 * KiB)]
    items = list(gather(reads, small=64 * KiB, limit=8 * KiB, page_size=1 * MiB))
    assert items == [
        [(0, 4 * KiB), (32 * KiB, 4 * KiB)],
        (64 * KiB, 128 * KiB),
        [(512 * KiB, 4 * KiB)],
        [(MiB, 4 * KiB)],
    ]
    assert list(gather(reads[:2], small=0, limit=8 * KiB, page_size=MiB)) == reads[:2]  # nothing is small


@pytest.mark.parametrize("version", [1, 2])
def test_scattered_extents_become_few_chunks_and_restore_bit_exact(tmp_path, version):
    image = tmp_path / "vol.img"
    image.write_bytes(bytes(16 * MiB))
    repo = Repository.init(MemoryStore(), RepoConfig(page_size=4 * MiB, chunk_max=1 * MiB, format_version=version))
    run_backup(repo, str(image), VolumeIdentity("v"), extents=[])
    offsets = [n * 32 * KiB for n in range(512)]  # one 4 KiB block per 32 KiB slot: 2 MiB of changes
    changed = write_blocks(image, offsets)
    zero_extent = (offsets[-1] + 16 * KiB, 4 * KiB)  # reported changed, reads as zeros: a hole (too far to merge)
    m = run_backup(repo, str(image), VolumeIdentity("v"), extents=sorted([*changed, zero_extent]))
    entries = [e for _page, page in repo.iter_map(m) for e in page]
    assert len(entries) == 512 and m.stats["zero_bytes"] == 4 * KiB
    assert m.stats["new_chunks"] <= 4 and m.stats["new_chunk_bytes"] == 2 * MiB and m.stats["dedup_bytes"] == 0
    assert len({cid for _v, _n, cid, _c in entries}) == m.stats["new_chunks"]
    target = tmp_path / "restored.img"
    run_restore(repo, m, str(target))
    assert sha256_file(target) == sha256_file(image)
