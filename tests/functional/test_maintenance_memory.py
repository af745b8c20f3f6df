"""Prune and verify hold a small constant per chunk (issue 12, maintenance at scale): measured with tracemalloc
on a folder repository of ~90,000 chunks and 80 backups, written directly with the format's encoders.

The bounds are what docs/format.md ("Forget and prune") states, with a margin for the per-pack and per-page
costs of a repository this small.
"""

from __future__ import annotations

import hashlib
import shutil
import tracemalloc
from dataclasses import replace

import pytest

from movers.pipeline.verify import run_verify, run_verify_sampled
from movers.repo import pack, volmap
from movers.repo.chunks import RAW
from movers.repo.config import RepoConfig
from movers.repo.index import ChunkLocation, encode_index, encode_sharded_index
from movers.repo.manifest import Manifest, MapRef, SnapshotIdentity, VolumeIdentity
from movers.repo.prune import prune
from movers.repo.repository import Repository
from movers.repo.store import LocalStore

T0 = 1_700_000_000.0
CONFIG = RepoConfig(page_size=16 << 20)
SPACING = 64 << 10  # volume bytes per map entry: 256 entries per page
VOLUMES, PAGES, BACKUPS, FORGOTTEN = 8, 32, 14, 4
CHUNK = 64


def generate(repo: Repository) -> int:
    """Per volume a full backup of PAGES pages, then incrementals each re-writing one page with new chunks; the
    first FORGOTTEN backups have no manifest. Packs of 256 chunks. Returns the chunks stored."""
    located, store = repo.config.located, repo.store
    epp = CONFIG.page_size // SPACING
    stored = 0
    for v in range(VOLUMES):
        where: dict[bytes, ChunkLocation] = {}
        volume, pages, parent = [], [], None
        for b in range(BACKUPS):
            new = [hashlib.sha256(b"%d-%d-%d" % (v, b, n)).digest() * 2 for n in range(epp * (PAGES if not b else 1))]
            packs = []
            for at in range(0, len(new), 256):
                builder = pack.PackBuilder(hashlib.sha256(b"pack %d %d %d" % (v, b, at)).digest() if located else None)
                for raw in new[at : at + 256]:
                    builder.add(repo.content_hash.chunk_id(raw), raw, CHUNK, RAW)
                pack_id, data, entries = builder.finish()
                store.put(pack.pack_key(pack_id), data)
                packs.append((pack_id, entries))
                where.update({e.chunk_id: ChunkLocation(pack_id, e.offset, CHUNK, CHUNK, RAW) for e in entries})
            stored += len(new)
            for key, data in encode_sharded_index(packs) if located and not b else [encode_index(packs)]:
                store.put(key, data)
            cids = [repo.content_hash.chunk_id(raw) for raw in new]
            touched = range(PAGES) if not b else [b * 7 % PAGES]
            if not b:
                volume = cids
            else:
                volume[touched[0] * epp : (touched[0] + 1) * epp] = cids
            for p in touched:
                entries = [(n * SPACING, CHUNK, volume[n], 0) for n in range(p * epp, (p + 1) * epp)]
                locations = {e[2]: where[e[2]] for e in entries} if located else None
                page_id, data = volmap.encode_page(p * CONFIG.page_size, CONFIG.page_size, entries, b"", locations)
                store.put(volmap.map_key(page_id), data)
                if b:
                    pages[p] = page_id
                else:
                    pages.append(page_id)
            dir_id, data = volmap.encode_dir([(page_id, epp) for page_id in pages])
            store.put(volmap.map_key(dir_id), data)
            backup_id = f"2026010{b // 10}T0{b % 10}0000000000Z-{v:06x}"
            if b >= FORGOTTEN:
                manifest = Manifest(
                    backup_id=backup_id,
                    volume=VolumeIdentity(f"vol-{v}"),
                    capacity_bytes=PAGES * CONFIG.page_size,
                    snapshot=SnapshotIdentity(),
                    parent=parent,
                    mode="incremental-cbt" if parent else "full",
                    created="2026-01-01T00:00:00+00:00",
                    map=MapRef(CONFIG.page_size, volmap.DIR_FANOUT, [dir_id.hex()], PAGES * epp),
                    format_version=repo.config.format_version,
                    mandatory_features=list(repo.config.mandatory_features),
                )
                store.put(manifest.key, manifest.encode())
            parent = backup_id
    return stored


@pytest.fixture(scope="module", params=[1, 2], ids=["v1", "v2"])
def generated(request, tmp_path_factory):
    """A folder repository (a store that keeps nothing in memory), generated once per version."""
    root = tmp_path_factory.mktemp(f"generated-v{request.param}") / "repo"
    repo = Repository.init(LocalStore(root), replace(CONFIG, format_version=request.param))
    return request.param, root, generate(repo)


def peak(work) -> int:
    """The peak of the memory ``work()`` allocated (what it keeps included), in bytes."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Bytes per stored chunk (docs/format.md, "Forget and prune"), by command and format version, plus SLACK for what
# does not grow with the repository (read buffers, listings of a few thousand keys). Before the compact tables
# this test measured (v1 / v2): prune --dry-run 302 / 387, prune 489 / 481, verify 343 / 105, verify --sample
# 428 / 355.
BOUND = {
    ("prune --dry-run", 1): 75,
    ("prune --dry-run", 2): 80,
    ("prune", 1): 80,
    ("prune", 2): 80,
    ("verify", 1): 75,
    ("verify", 2): 55,
    ("verify --sample", 1): 160,
    ("verify --sample", 2): 105,
}
SLACK = 2 << 20


@pytest.mark.parametrize("command", ["prune --dry-run", "verify --sample", "verify", "prune"])
def test_prune_and_verify_hold_a_small_constant_per_chunk(generated, command, tmp_path):
    version, generated_root, chunks = generated
    root = tmp_path / "repo"
    shutil.copytree(generated_root, root)  # a repository of its own: prune deletes
    repo = Repository.open(LocalStore(root))
    refs = repo.list_backups()
    assert chunks > 60_000 and len(refs) == VOLUMES * (BACKUPS - FORGOTTEN)
    results = []
    work = {
        "prune --dry-run": lambda: results.append(prune(repo, dry_run=True, now=T0)),
        "verify --sample": lambda: results.append(run_verify_sampled(repo, refs, 0.1, seed=1)),
        "verify": lambda: results.append(run_verify(repo, refs)),
        "prune": lambda: results.append(prune(repo, grace_s=0, now=T0, backup_wait_s=0)),
    }[command]
    used = peak(work)
    [result] = results
    if command.startswith("prune"):
        assert result.chunks_referenced > chunks // 2 and result.packs_deleted + result.packs_in_grace > 0
    else:
        assert result.ok and max(result.chunks_referenced, result.chunks_verified) > chunks // 2
    assert used < BOUND[command, version] * chunks + SLACK, f"{(used - SLACK) / chunks:.0f} bytes per chunk"
