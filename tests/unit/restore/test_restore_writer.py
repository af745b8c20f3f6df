"""Restore's writing side: runs of small entries assembled in slabs, whatever order chunks arrive in; the reader's
memory budget counts what a page holds; restores of dense scattered chains stay bit-exact."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from movers import device
from movers.pipeline.backup import run_backup
from movers.pipeline.reader import Inflight
from movers.pipeline.restore import run_restore
from movers.pipeline.stats import RestoreStats
from movers.pipeline.target import SMALL_ENTRY, TargetWriter, small_runs
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import make_image, sha256_file, write_blocks

KiB, MiB = 1 << 10, 1 << 20


def test_small_runs_are_adjacent_small_entries_up_to_the_run_limit():
    a, b = b"a" * 32, b"b" * 32
    entries = [
        (0, 4 * KiB, a, 0),
        (4 * KiB, 4 * KiB, b, 0),
        (8 * KiB, 8 * KiB, a, 8 * KiB),  # a run of three
        (20 * KiB, 4 * KiB, b, 4 * KiB),  # alone: a hole before it, a large entry after it
        (24 * KiB, SMALL_ENTRY, a, 0),
        (24 * KiB + SMALL_ENTRY, 4 * KiB, b, 8 * KiB),
        (28 * KiB + SMALL_ENTRY, 4 * KiB, a, 0),
        (32 * KiB + SMALL_ENTRY, 4 * KiB, b, 0),  # would make the run 12 KiB: over the limit, starts the next
        (36 * KiB + SMALL_ENTRY, 4 * KiB, a, 4 * KiB),
    ]
    assert list(small_runs(entries, run_max=8 * KiB)) == [
        (0, 8 * KiB, [0, 4 * KiB]),
        (24 * KiB + SMALL_ENTRY, 32 * KiB + SMALL_ENTRY, [24 * KiB + SMALL_ENTRY, 28 * KiB + SMALL_ENTRY]),
        (32 * KiB + SMALL_ENTRY, 40 * KiB + SMALL_ENTRY, [32 * KiB + SMALL_ENTRY, 36 * KiB + SMALL_ENTRY]),
    ]
    assert list(small_runs(entries[:4])) == [(0, 16 * KiB, [0, 4 * KiB, 8 * KiB])]


def _page(rng: random.Random, size: int, chunks: dict[bytes, bytes]):
    """A page of ``size`` bytes mapped like a long chain: small pieces from many chunks, some large ones, holes."""
    ids = list(chunks)
    entries, pos = [], 0
    while pos < size:
        length = min(size - pos, rng.choice([4 * KiB, 4 * KiB, 8 * KiB, 12 * KiB, 96 * KiB]))
        if rng.random() < 0.05:
            pos += length  # a hole
            continue
        cid = rng.choice(ids)
        coff = rng.randrange(0, len(chunks[cid]) - length + 1, 4 * KiB)
        entries.append((pos, length, cid, coff))
        pos += length
    return entries


@pytest.mark.parametrize("slab, page_slabs", [(256 * KiB, 64), (64 * KiB, 2)])
def test_writer_restores_exactly_whatever_order_chunks_arrive(tmp_path, slab, page_slabs):
    """With room for every run, and with room for few (the rest of the page is written entry by entry)."""
    rng = random.Random(7)
    chunks = {}
    for _ in range(12):
        data = rng.randbytes(256 * KiB)
        chunks[hashlib.sha256(data).digest()] = data
    pages = [_page(rng, 2 * MiB, chunks) for _ in range(3)]
    expected = bytearray(3 * 2 * MiB)
    for p, entries in enumerate(pages):
        for voff, length, cid, coff in entries:
            start = p * 2 * MiB + voff
            expected[start : start + length] = chunks[cid][coff : coff + length]
    pages = [[(p * 2 * MiB + v, n, c, o) for v, n, c, o in entries] for p, entries in enumerate(pages)]
    for order in range(3):
        target = tmp_path / f"target-{order}.img"
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            device.resize(fd, len(expected))
            stats = RestoreStats()
            writer = TargetWriter(fd, stats, slab=slab, page_slabs=page_slabs)
            for entries in pages:
                held = writer.add_page(entries)
                assert 0 < held <= page_slabs * slab
                users: dict[bytes, list] = {}
                for e in entries:
                    users.setdefault(e[2], []).append(e)
                deliveries = list(users.items())
                rng.shuffle(deliveries)
                for cid, uses in deliveries:
                    writer.write(memoryview(chunks[cid]), uses)
            assert stats.written_bytes == sum(e[1] for entries in pages for e in entries)
        finally:
            os.close(fd)
        assert target.read_bytes() == expected, f"order {order}"


def test_start_writeback_is_a_hint_that_never_fails(tmp_path):
    path = tmp_path / "f.img"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    read_end, write_end = os.pipe()
    try:
        device.pwrite_all(fd, b"x" * 8192, 4096)
        device.start_writeback(fd)
        device.start_writeback(write_end)  # a pipe: the kernel refuses, nothing is raised
        device.sync(fd)
    finally:
        os.close(fd)
        os.close(read_end)
        os.close(write_end)
    assert path.read_bytes() == bytes(4096) + b"x" * 8192


def test_inflight_counts_what_a_page_holds_until_its_last_range_is_collected():
    inflight = Inflight(100)
    inflight.hold(0, 60, ranges=2)
    inflight.submitted(30)
    inflight.submitted(10)
    assert not inflight.room_for(1)
    inflight.collected(30, 0)
    assert inflight.bytes == 70 and not inflight.room_for(31)  # the page still holds its 60 bytes
    inflight.hold(1, 50, ranges=1)  # a later page: held from now on too
    inflight.collected(10, 0)
    assert inflight.bytes == 50  # page 0's last range: its hold is freed
    inflight.hold(2, 40, ranges=0)  # no ranges to wait for: nothing is held
    inflight.submitted(20)
    inflight.collected(20, 1)
    assert inflight.bytes == 0 and inflight.room_for(100)


@pytest.mark.parametrize("version", [1, 2])
def test_restore_of_a_dense_scattered_chain_is_bit_exact(tmp_path, version):
    """Ten incrementals changing 1 in 8 of the 4 KiB blocks each: the latest map is small entries from many
    gathered chunks and the base's pieces between them (what the writer assembles into runs)."""
    image = tmp_path / "vol.img"
    make_image(image, 8 * MiB, seed=11, data_fraction=1.0)
    repo = Repository.init(MemoryStore(), RepoConfig(page_size=2 * MiB, chunk_max=1 * MiB, format_version=version))
    manifest = run_backup(repo, str(image), VolumeIdentity("v"), extents=[(0, 8 * MiB)])
    rng = random.Random(3)
    for round_no in range(10):
        blocks = sorted(rng.sample(range(8 * MiB // (4 * KiB)), 256))
        changed = write_blocks(image, [b * 4 * KiB for b in blocks], seed=round_no)
        manifest = run_backup(repo, str(image), VolumeIdentity("v"), extents=changed)
    entries = [e for _page, page in repo.iter_map(manifest) for e in page]
    assert len(entries) > 1000 and sum(1 for e in entries if e[1] < SMALL_ENTRY) > 0.9 * len(entries)
    assert sum(len(offsets) for _s, _e, offsets in small_runs(entries)) > 0.9 * len(entries)
    target = tmp_path / "restored.img"
    stats = run_restore(repo, manifest, str(target))
    assert sha256_file(target) == sha256_file(image)
    assert stats.written_bytes == 8 * MiB and stats.chunks_verified == len({e[2] for e in entries})
