"""The lazy backup reader (``movers.pipeline.lazy``): random-access reads of a backup's volume, each chunk fetched
once while cached, verified, within a memory bound, with read-ahead for sequential readers; over a ``file://``
repository and over S3 (moto on loopback)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from localcluster.kubelet.testing import wait_until
from movers.errors import DamagedData
from movers.pipeline.backup import run_backup
from movers.pipeline.lazy import SEQUENTIAL_AFTER, BackupReader
from movers.repo import pack
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import open_store
from tests.volumes import make_image

MiB = 1 << 20
FAKE = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}
SIZE = 24 * MiB


def _stored_chunks(repo: Repository, manifest) -> dict[bytes, int]:
    """Every chunk the backup's map uses, with its stored length."""
    chunks = {}
    for _index, entries, locator in repo.iter_located_map(manifest):
        for entry in entries:
            chunks[entry[2]] = locator.get(entry[2]).stored_len
    return chunks


@pytest.fixture(params=[2, 1], ids=["v2", "v1"])
def backed_up(tmp_path, request):
    """A backup of a 24 MiB image; in format version 2 (pages say where their chunks are) and 1 (the chunk index)."""
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=3, data_fraction=0.7)
    config = RepoConfig(chunk_max=1 * MiB, page_size=8 * MiB, format_version=request.param)
    repo = Repository.init(open_store(f"file://{tmp_path}/repo"), config)
    return repo, run_backup(repo, str(image), VolumeIdentity("ns/v")), image.read_bytes()


def test_random_reads_equal_the_volume_and_holes_cost_no_request(backed_up):
    repo, manifest, volume = backed_up
    rng = random.Random(5)
    with BackupReader(repo, manifest, read_ahead=0) as reader:
        for _ in range(200):
            offset = rng.randrange(SIZE)
            length = rng.choice([1, 512, 4096, 70_000, 3 * MiB])
            assert reader.read(offset, length) == volume[offset : offset + length]
        assert reader.read(SIZE - 10, 100) == volume[-10:], "short only past the volume's end"
        assert reader.read(SIZE, 10) == b""
        hole = next(off for off in range(0, SIZE, 64 * 1024) if volume[off : off + 65536] == bytes(65536))
    with BackupReader(repo, manifest, read_ahead=0) as cold:
        assert cold.read(hole, 65536) == bytes(65536)
        hole_page = [
            e for _i, entries, _l in repo.iter_located_map(manifest) for e in entries if e[0] <= hole < e[0] + e[1]
        ]
        assert hole_page == [] and cold.fetched_bytes == 0, "a hole is zeros from the map alone"


def test_each_chunk_is_fetched_once_while_cached_even_by_concurrent_readers(backed_up):
    repo, manifest, volume = backed_up
    stored = _stored_chunks(repo, manifest)
    with BackupReader(repo, manifest, cache_bytes=2 * SIZE, read_ahead=0) as reader:
        barrier = threading.Barrier(8)
        results = []

        def read_all():
            barrier.wait()
            results.append(b"".join(reader.read(off, MiB) for off in range(0, SIZE, MiB)))

        threads = [threading.Thread(target=read_all) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [volume] * 8
        assert reader.chunks_fetched == len(stored), "every chunk once, for eight readers"
        first = reader.fetched_bytes
        assert reader.read(0, SIZE) == volume
        assert reader.fetched_bytes == first, "a second pass is served from the cache"


def test_the_cache_stays_within_its_bound_and_refetches_what_it_dropped(backed_up):
    repo, manifest, volume = backed_up
    stored = _stored_chunks(repo, manifest)
    biggest = max(stored.values())
    with BackupReader(repo, manifest, cache_bytes=MiB, read_ahead=0) as reader:
        for off in range(0, SIZE, 256 * 1024):
            assert reader.read(off, 256 * 1024) == volume[off : off + 256 * 1024]
            assert reader._cached <= MiB + 4 * biggest  # noqa: SLF001 - the bound is the contract under test
        passes = reader.chunks_fetched
        assert reader.read(0, 4096) == volume[:4096]
        assert reader.chunks_fetched > passes or volume[:4096] == bytes(4096), "the first chunk was evicted"


def test_a_sequential_reader_gets_read_ahead_and_small_reads_do_not(tmp_path):
    image = tmp_path / "full.img"
    make_image(image, 8 * MiB, seed=6, data_fraction=1.0)  # no holes: every byte is in a chunk
    repo = Repository.init(open_store(f"file://{tmp_path}/repo"), RepoConfig(chunk_max=1 * MiB, page_size=8 * MiB))
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    volume = image.read_bytes()
    boundaries = sorted({e[0] for _i, page, _l in repo.iter_located_map(manifest) for e in page})
    edge = next(b for b in boundaries if b >= 2 * MiB)  # a chunk starts here
    with BackupReader(repo, manifest, read_ahead=4 * MiB) as reader:
        for off in range(edge - 32 * 1024, edge, 64):  # a metadata walk: many tiny back-to-back reads
            assert reader.read(off, 64) == volume[off : off + 64]
        reader._ahead.submit(lambda: None).result()  # noqa: SLF001 - what the reads queued has been planned
        wait_until(lambda: not reader._pending, timeout=10, what="fetches in flight")  # noqa: SLF001 - and fetched
        assert reader.chunks_fetched == 1, "only the chunk read from: no read-ahead for tiny reads"
    with BackupReader(repo, manifest, read_ahead=4 * MiB) as reader:
        step = 128 * 1024
        for off in range(edge - SEQUENTIAL_AFTER, edge, step):  # a file streamed up to the chunk's start
            assert reader.read(off, step) == volume[off : off + step]
        read_so_far = reader.chunks_fetched
        wait_until(lambda: reader.chunks_fetched > read_so_far, timeout=10, what="the read-ahead's fetch")
        assert reader.read(edge, step) == volume[edge : edge + step]
        assert reader.chunks_fetched > read_so_far


def test_a_damaged_chunk_is_never_served(backed_up, tmp_path):
    repo, manifest, volume = backed_up
    entries = [e for _i, page, _l in repo.iter_located_map(manifest) for e in page]
    voff, length, cid, _coff = entries[len(entries) // 2]
    loc = repo.index().get(cid)
    path = Path(tmp_path / "repo") / pack.pack_key(loc.pack_id)
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.stored_len // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with BackupReader(repo, manifest, read_ahead=0) as reader:
        for _attempt in range(2):
            with pytest.raises(DamagedData) as err:
                reader.read(voff, length)
            assert err.value.exit_code == 4 and f"volume offset {voff}" in str(err.value)
        assert reader.fetched_bytes >= 2 * loc.stored_len, "a damaged chunk's fetches count: they were made"
        other = next(e for e in entries if e[2] != cid and e[0] > voff + length)
        assert reader.read(other[0], other[1]) == volume[other[0] : other[0] + other[1]], "the rest still reads"


def test_reads_over_s3_and_a_file_object_over_a_slice(s3_bucket, tmp_path):
    endpoint, bucket = s3_bucket
    image = tmp_path / "v.img"
    make_image(image, 8 * MiB, seed=4, data_fraction=0.9)
    repo = Repository.init(open_store(f"s3://{bucket}/r", endpoint_url=endpoint, **FAKE))
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    volume = image.read_bytes()
    with BackupReader(repo, manifest) as reader:
        f = reader.file(MiB, 2 * MiB)
        assert (f.get_size(), f.tell()) == (2 * MiB, 0)
        assert f.read(100) == volume[MiB : MiB + 100] and f.get_offset() == 100
        f.seek(-10, 2)
        assert f.read() == volume[3 * MiB - 10 : 3 * MiB], "the slice ends where it says"
        f.seek(0)
        buf = bytearray(5000)
        assert f.readinto(buf) == 5000 and bytes(buf) == volume[MiB : MiB + 5000]
        assert 0 < reader.fetched_bytes < len(volume)
