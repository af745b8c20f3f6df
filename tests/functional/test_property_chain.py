"""Property: every backup of a random chain of incrementals restores bit-exact."""

from __future__ import annotations

import hashlib
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from movers.pipeline.backup import BackupOptions, run_backup
from movers.pipeline.restore import run_restore
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import coalesce

KiB = 1024
BLOCK = 4096

# Small chunks and pages so that a few MiB span many pages and more than one map directory.
CONFIGS = [RepoConfig(chunk_max=64 * KiB, page_size=64 * KiB), RepoConfig(chunk_max=64 * KiB, page_size=256 * KiB)]

op = st.one_of(
    st.tuples(st.just("scatter"), st.lists(st.integers(0, 10**9), min_size=1, max_size=40)),
    st.tuples(st.just("extent"), st.integers(0, 10**9), st.integers(1, 300)),  # blocks
    st.tuples(st.just("zero"), st.integers(0, 10**9), st.integers(1, 100)),
    st.tuples(st.just("text"), st.integers(0, 10**9), st.integers(1, 50)),
    st.tuples(
        st.just("last"),
    ),
)
step = st.tuples(st.lists(op, min_size=0, max_size=4), st.sampled_from(["cbt", "cbt", "cbt", "scan"]))


def apply(fd: int, capacity: int, ops, rng_bytes) -> list[tuple[int, int]]:
    """Apply the writes of one step; return the changed extents (4 KiB granular, coalesced)."""
    nblocks = -(-capacity // BLOCK)
    writes = []  # (offset, blocks, kind)
    for o in ops:
        if o[0] == "scatter":
            writes += [((b % nblocks) * BLOCK, 1, "random") for b in o[1]]
        elif o[0] == "last":
            writes.append(((nblocks - 1) * BLOCK, 1, "random"))
        else:
            writes.append(((o[1] % nblocks) * BLOCK, o[2], o[0]))
    changed = []
    for off, blocks, kind in writes:
        length = min(blocks * BLOCK, capacity - off)
        if kind == "zero":
            data = bytes(length)
        elif kind == "text":
            data = ((b"row %d ok\n" % off) * (length // 8 + 1))[:length]
        else:
            data = rng_bytes(length)
        os.pwrite(fd, data, off)
        changed.append((off, length))
    return coalesce(sorted(changed))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cfg=st.sampled_from(CONFIGS),
    capacity_blocks=st.integers(300, 1500),
    tail=st.sampled_from([0, 1, 513, 4095]),
    steps=st.lists(step, min_size=10, max_size=12),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_incremental_chain_restores_bit_exact(tmp_path, cfg, capacity_blocks, tail, steps, seed):
    import random

    rng = random.Random(seed)
    capacity = capacity_blocks * BLOCK + tail
    img = tmp_path / "vol.img"
    with open(img, "wb") as f:
        f.truncate(capacity)
        os.pwrite(f.fileno(), rng.randbytes(capacity // 3), capacity // 5)
    repo = Repository.init(MemoryStore(), cfg)
    opts = BackupOptions(workers=2, max_inflight=256 * KiB)
    vol = VolumeIdentity("prop")
    history = []
    with open(img, "r+b") as f:
        m = run_backup(repo, str(img), vol, options=opts)
        history.append((m, hashlib.sha256(open(img, "rb").read()).hexdigest()))
        for ops, kind in steps:
            extents = apply(f.fileno(), capacity, ops, rng.randbytes)
            if kind == "scan":
                m = run_backup(repo, str(img), vol, options=opts)
            else:
                m = run_backup(repo, str(img), vol, extents=extents, options=opts)
                assert m.stats["new_chunk_bytes"] <= 2 * sum(n for _, n in extents)
            history.append((m, hashlib.sha256(open(img, "rb").read()).hexdigest()))
    for manifest, digest in history:
        out = tmp_path / "restore.img"
        out.unlink(missing_ok=True)
        run_restore(repo, manifest, str(out))
        assert hashlib.sha256(out.read_bytes()).hexdigest() == digest, f"backup {manifest.backup_id} differs"
