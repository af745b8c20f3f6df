"""Prune keeps one copy of each referenced chunk (issue 12: after forget, re-upload and prune, 112-144 MiB of
~420 MiB of packs were second copies, kept forever).

Why there were second copies: backups re-upload the chunks of packs a prune state lists, each into a pack of its
own with a random padding chunk (``movers.pipeline.fresh.distinct_pack``); two backups doing so at once (the
flow backs up an application's volumes in parallel) write two packs with the same chunks, and prune kept every
unlisted pack holding a referenced chunk."""

from __future__ import annotations

import threading
from collections import Counter

from movers.pipeline.backup import run_backup
from movers.repo import pack
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.pack import PackEntry
from movers.repo.prune import DUPLICATE_HOLD_S, choose_homes, prune
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.functional.test_prune import DAY, T0, check_all_restore, forgotten_content
from tests.volumes import sha256_file

V1 = {"page_size": 4 << 20, "pack_target": 2 << 20, "format_version": 1}


class ListingTogether(MemoryStore):
    """The first ``parties`` listings of ``packs/`` (one per backup loading its chunk index) are all taken before
    any of them returns: the backups run at once and none sees the others' packs."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier: threading.Barrier | None = None
        self.parties = parties

    def list(self, prefix=""):
        keys = list(super().list(prefix))
        if prefix == pack.PACK_PREFIX and self.barrier is not None and self.parties:
            self.parties -= 1
            self.barrier.wait(30)
        return iter(keys)


def copies(repo) -> tuple[Counter, int]:
    """How many packs hold each chunk the backups reference, and the stored bytes of one copy of each."""
    referenced = {
        e[2]
        for ref in repo.list_backups()
        for _i, entries in repo.iter_map(repo.read_manifest(ref.volume, ref.backup_id))
        for e in entries
    }
    held: Counter = Counter()
    size: dict[bytes, int] = {}
    for key in repo.store.list(pack.PACK_PREFIX):
        for e in repo.read_pack_trailer(key):
            if e.chunk_id in referenced:
                held[e.chunk_id] += 1
                size[e.chunk_id] = e.stored_len
    assert set(held) == referenced, "every referenced chunk has a copy"
    return held, sum(size.values())


def pack_bytes(store) -> int:
    return sum(store.size(k) for k in store.list(pack.PACK_PREFIX))


def test_two_backups_that_re_upload_the_same_listed_chunks_leave_one_copy_after_prune(tmp_path):
    """Format version 1 (version 2 pages name the copy they read: tests/unit/repo/test_format_v2.py)."""
    store = ListingTogether(2)
    content_a, expected = forgotten_content(store, tmp_path, config=RepoConfig(**V1))
    listing = prune(Repository.open(store), grace_s=DAY, now=T0)  # lists content A's packs: backups re-upload
    assert listing.packs_in_grace > 0
    store.barrier = threading.Barrier(2)
    done = []

    def backup(volume):
        m = run_backup(Repository.open(store), str(content_a), VolumeIdentity(volume), force_full=True)
        done.append(m)
        expected[m.backup_id] = (volume, sha256_file(content_a))

    threads = [threading.Thread(target=backup, args=(v,)) for v in ("vol-c", "vol-d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(done) == 2 and all(m.stats["dedup_bytes"] == 0 for m in done), "both re-uploaded everything"
    held, live_bytes = copies(Repository.open(store))
    assert max(held.values()) == 3, "A's chunks: the listed pack and one re-upload each"

    # The duplicates are listed (backups and readers then use the copy that stays) and held a day from then.
    first = prune(Repository.open(store), grace_s=DAY, now=T0 + DAY)
    assert first.duplicate_packs_in_grace == first.packs_in_grace > 0 and first.packs_deleted == 0
    assert first.kept_chunk_bytes - first.dead_bytes == live_bytes
    early = prune(Repository.open(store), grace_s=0, now=T0 + DAY + DUPLICATE_HOLD_S - 60)
    assert early.packs_deleted == 0, "grace 0 does not shorten the hold of duplicate copies"
    final = prune(Repository.open(store), grace_s=DAY, now=T0 + 2 * DAY)
    assert final.packs_deleted == final.duplicate_packs_deleted == first.duplicate_packs_in_grace
    held, live_bytes_after = copies(Repository.open(store))
    assert set(held.values()) == {1} and live_bytes_after == live_bytes, "exactly one copy of each chunk"
    overhead = pack_bytes(store) - live_bytes  # pack headers, trailers and padding chunks
    assert 0 < overhead <= 1024 * final.packs_kept, (pack_bytes(store), live_bytes)
    assert final.dead_bytes <= 16 * final.packs_kept  # at most a padding chunk per pack
    assert check_all_restore(Repository.open(store), expected, tmp_path) == 3


def entry(cid: bytes, size: int = 100) -> PackEntry:
    return PackEntry(cid, 0, size, size, 0)


def test_choose_homes_keeps_few_packs_and_is_deterministic():
    a, b, c, d, unused = (bytes([n]) * 32 for n in range(5))
    p1, p2, p3, p4 = (bytes([0xA0 + n]) * 32 for n in range(4))
    packs = {
        p1: [entry(a), entry(b)],
        p2: [entry(b), entry(c)],
        p3: [entry(a), entry(c), entry(unused, 10_000)],
        p4: [entry(d), entry(a)],  # the only copy of d: stays, so a lives there too
    }
    home = choose_homes(packs, {a, b, c, d})
    assert home == {d: p4, a: p4, b: p2, c: p2}, "two packs stay: p4 (the only d) and p2 (both b and c)"
    assert choose_homes(dict(reversed(packs.items())), {a, b, c, d}) == home
    assert choose_homes({p1: [entry(a)]}, {b}) == {}
