"""Unit tests of the pure byte formats and planning code."""

from __future__ import annotations

import json
import os

import pytest

from movers.errors import IncompatibleError, IntegrityError, UsageError
from movers.extents import parse_jsonl, validated
from movers.pipeline.planner import plan_reads, scan_reads, split_on_grid
from movers.pipeline.zeros import data_runs
from movers.repo import pack, volmap
from movers.repo.chunks import RAW, ZSTD, decode_chunk, encode_chunk
from movers.repo.config import RepoConfig
from movers.repo.contenthash import SHA256
from movers.repo.index import ChunkIndex, decode_index, encode_index
from movers.repo.manifest import Manifest, MapRef, SnapshotIdentity, VolumeIdentity, new_backup_id, volume_prefix

MiB = 1 << 20


def test_chunk_roundtrip_compressible_and_raw():
    text = b"abc" * 10000
    stored, flags = encode_chunk(text, 3)
    assert flags == ZSTD and len(stored) < len(text)
    assert decode_chunk(stored, flags, len(text), SHA256.chunk_id(text), SHA256) == text
    rnd = os.urandom(4096)
    stored, flags = encode_chunk(rnd, 3)
    assert flags == RAW and stored == rnd


def test_raw_chunk_decodes_to_the_stored_view_itself_not_a_copy():
    data = os.urandom(4096)
    view = memoryview(b"pack" + data)[4:]
    assert decode_chunk(view, RAW, len(data), SHA256.chunk_id(data), SHA256) is view
    with pytest.raises(IntegrityError):
        decode_chunk(view, RAW, len(data), SHA256.chunk_id(b"other"), SHA256)


def test_chunk_hash_mismatch_is_integrity_error():
    data = b"x" * 5000
    stored, flags = encode_chunk(data, 3)
    with pytest.raises(IntegrityError):
        decode_chunk(stored, flags, len(data), SHA256.chunk_id(b"y" * 5000), SHA256)
    with pytest.raises(IntegrityError):
        decode_chunk(stored[:-3] + b"zzz", flags, len(data), SHA256.chunk_id(data), SHA256)


def test_pack_is_self_describing():
    b = pack.PackBuilder()
    chunks = [bytes([i]) * (1000 + i) for i in range(5)]
    for c in chunks:
        stored, flags = encode_chunk(c, 1)
        b.add(SHA256.chunk_id(c), stored, len(c), flags)
    pack_id, data, entries = b.finish()
    assert data.startswith(pack.HEADER)
    off, length = pack.trailer_location(data[-pack.FOOTER_LEN :], len(data))
    parsed = pack.parse_trailer(data[off : off + length])
    assert parsed == entries
    for e, c in zip(parsed, chunks, strict=True):
        assert decode_chunk(data[e.offset : e.offset + e.stored_len], e.flags, e.raw_len, e.chunk_id, SHA256) == c
    assert pack.pack_id_from_key(pack.pack_key(pack_id)) == pack_id


def test_pack_footer_damage_detected():
    b = pack.PackBuilder()
    b.add(SHA256.chunk_id(b"a"), b"a", 1, RAW)
    _, data, _ = b.finish()
    with pytest.raises(IntegrityError):
        pack.trailer_location(data[-pack.FOOTER_LEN :].replace(b"CBTPEND", b"XXXXXXX"), len(data))
    with pytest.raises(IntegrityError):
        pack.parse_trailer(b"not zstd")


def test_index_roundtrip_and_first_location_wins():
    e1 = pack.PackEntry(b"a" * 32, 8, 10, 20, ZSTD)
    e2 = pack.PackEntry(b"b" * 32, 18, 5, 5, RAW)
    key, data = encode_index([(b"P" * 32, [e1, e2]), (b"Q" * 32, [e1])])
    assert key.startswith("index/")
    decoded = list(decode_index(data))
    assert decoded == [(b"P" * 32, [e1, e2]), (b"Q" * 32, [e1])]
    idx = ChunkIndex()
    for pid, entries in decoded:
        idx.add_pack(pid, entries)
    assert idx.get(b"a" * 32).pack_id == b"P" * 32 and len(idx) == 2 and b"b" * 32 in idx
    with pytest.raises(IntegrityError):
        list(decode_index(b"garbage"))


def test_page_and_dir_roundtrip_and_hash_check():
    entries = [(0, 4096, b"c" * 32, 0), (8192, 100, b"d" * 32, 7)]
    pid, data = volmap.encode_page(0, 1 << 20, entries)
    assert volmap.decode_page(data, pid) == (0, 1 << 20, entries, b"")
    digests = bytes(range(16)) * 16
    pid2, data2 = volmap.encode_page(0, 1 << 20, entries, digests)
    assert volmap.decode_page(data2, pid2) == (0, 1 << 20, entries, digests) and pid2 != pid
    with pytest.raises(IntegrityError):
        volmap.decode_page(data, b"\0" * 31 + b"\1")
    did, ddata = volmap.encode_dir([(pid, 2), (volmap.NO_PAGE, 0)])
    assert volmap.decode_dir(ddata, did) == [(pid, 2), (volmap.NO_PAGE, 0)]
    with pytest.raises(IntegrityError):
        volmap.decode_dir(data)


def C(i):
    return bytes([i]) * 32


def test_overlay_clips_parent_and_inserts_new():
    parent = [(0, 100, C(1), 0), (100, 100, C(2), 0), (300, 100, C(3), 50)]
    covered = [(50, 120), (320, 330)]
    new = [(60, 10, C(9), 0)]
    out = volmap.overlay(parent, covered, new)
    assert out == [
        (0, 50, C(1), 0),
        (60, 10, C(9), 0),
        (120, 80, C(2), 20),
        (300, 20, C(3), 50),
        (330, 70, C(3), 80),
    ]
    volmap.check_entries(out, 0, 400)


def test_overlay_covered_range_spanning_several_entries():
    parent = [(0, 10, C(1), 0), (10, 10, C(2), 0), (20, 10, C(3), 0), (30, 10, C(4), 0)]
    assert volmap.overlay(parent, [(5, 35)], []) == [(0, 5, C(1), 0), (35, 5, C(4), 5)]
    assert volmap.overlay([], [(0, 10)], [(0, 10, C(5), 0)]) == [(0, 10, C(5), 0)]


def test_check_entries_rejects_overlap_and_out_of_range():
    with pytest.raises(IntegrityError):
        volmap.check_entries([(0, 10, C(1), 0), (5, 10, C(2), 0)], 0, 100)
    with pytest.raises(IntegrityError):
        volmap.check_entries([(95, 10, C(1), 0)], 0, 100)


def test_plan_reads_merges_within_twice_the_changed_bytes():
    # Two 4 KiB writes 4 KiB apart merge (12 KiB read for 8 KiB changed), far ones do not.
    reads = list(plan_reads([(0, 4096), (8192, 4096), (1 << 20, 4096)], chunk_max=4 * MiB))
    assert reads == [(0, 12288), (1 << 20, 4096)]
    # A gap larger than the changed bytes is not merged even if small.
    assert list(plan_reads([(0, 4096), (4 * 4096, 4096)], chunk_max=4 * MiB)) == [(0, 4096), (16384, 4096)]


def test_plan_reads_split_on_absolute_grid():
    reads = list(plan_reads([(3 * MiB, 6 * MiB)], chunk_max=4 * MiB))
    assert reads == [(3 * MiB, MiB), (4 * MiB, 4 * MiB), (8 * MiB, MiB)]
    assert list(split_on_grid(0, 10, 4)) == [(0, 4), (4, 4), (8, 2)]
    assert list(scan_reads(9 * MiB + 5, 4 * MiB))[-1] == (8 * MiB, MiB + 5)


def test_plan_reads_amplification_bound_on_scattered_blocks():
    import random

    rng = random.Random(7)
    blocks = sorted(rng.sample(range(262144), 2621))
    extents = [(b * 4096, 4096) for b in blocks]
    read = sum(n for _, n in plan_reads(extents, chunk_max=4 * MiB))
    assert read <= 2 * 2621 * 4096


def test_data_runs_holes():
    z = bytes(64 * 1024)
    d = b"\1" * 4096
    assert data_runs(bytes(200000)) == []
    assert data_runs(d + z + d) == [(0, 4096), (4096 + 65536, 4096 + 65536 + 4096)]
    # a short zero run inside data stays in the chunk; zeros at the edges are trimmed
    assert data_runs(d + bytes(4096) + d) == [(0, 12288)]
    assert data_runs(bytes(4096) + d + bytes(100)) == [(4096, 8192)]
    assert data_runs(d[:100]) == [(0, 100)]


def test_extents_parse_and_validate():
    lines = ['{"offset": 0, "length": 4096}', "", '{"offset": 8192, "length": 4096}', '{"summary": {"n": 2}}']
    assert list(validated(parse_jsonl(lines), 16384)) == [(0, 4096), (8192, 4096)]
    with pytest.raises(UsageError, match="line 1"):
        list(parse_jsonl(["nope"]))
    with pytest.raises(UsageError, match="line 1"):
        list(parse_jsonl(['{"offset": "1", "length": 2}']))
    with pytest.raises(UsageError, match="sorted"):
        list(validated([(8192, 4096), (0, 4096)], 1 << 20))
    with pytest.raises(UsageError, match="sorted"):
        list(validated([(0, 8192), (4096, 4096)], 1 << 20))
    with pytest.raises(UsageError, match="device end"):
        list(validated([(0, 8192)], 4096))
    with pytest.raises(UsageError):
        list(validated([(0, 0)], 4096))


def _manifest(**overrides) -> Manifest:
    m = Manifest(
        backup_id=new_backup_id(),
        volume=VolumeIdentity("ns/pvc-a", "c1", "ns", "pvc-a", "vh-1", "hostpath.csi.k8s.io"),
        capacity_bytes=1 << 30,
        snapshot=SnapshotIdentity("snap-1", "ns", "snaphandle-1", "vgs-1", "vgsh-1"),
        parent=None,
        mode="full",
        created="2026-11-21T00:00:00+00:00",
        map=MapRef(256 * MiB, 256, [None], 0),
    )
    for k, v in overrides.items():
        setattr(m, k, v)
    return m


def test_manifest_roundtrip_records_identity():
    m = _manifest()
    back = Manifest.decode(m.encode())
    assert back == m
    assert back.volume.csi_driver == "hostpath.csi.k8s.io" and back.snapshot.snapshot_handle == "snaphandle-1"
    assert m.key == volume_prefix("ns/pvc-a") + m.backup_id
    assert "/" not in m.key[len("backups/") :].split("/")[0]


def test_manifest_refuses_unknown_version_and_mandatory_feature():
    doc = json.loads(_manifest().encode())
    doc["format_version"] = 3
    with pytest.raises(IncompatibleError, match="version 3"):
        Manifest.decode(json.dumps(doc).encode())
    doc["format_version"] = 1
    doc["mandatory_features"].append("encryption-v9")
    with pytest.raises(IncompatibleError, match="encryption-v9"):
        Manifest.decode(json.dumps(doc).encode())
    with pytest.raises(IntegrityError):
        Manifest.decode(b"{not json")


def test_config_versioning():
    cfg = RepoConfig()
    assert RepoConfig.decode(cfg.encode()) == cfg
    doc = json.loads(cfg.encode())
    doc["optional_thing"] = 1  # unknown optional fields are ignored
    assert RepoConfig.decode(json.dumps(doc).encode()) == cfg
    doc["mandatory_features"] = [*doc["mandatory_features"], "future-feature"]
    with pytest.raises(IncompatibleError, match="future-feature"):
        RepoConfig.decode(json.dumps(doc).encode())
    doc = json.loads(cfg.encode())
    doc["format_version"] = 99
    with pytest.raises(IncompatibleError):
        RepoConfig.decode(json.dumps(doc).encode())
    with pytest.raises(IntegrityError):
        RepoConfig.decode(b'{"format": "something-else"}')


def test_backup_ids_sort_by_time():
    from datetime import UTC, datetime, timedelta

    t = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [new_backup_id(t + timedelta(microseconds=i * 7)) for i in range(50)]
    assert ids == sorted(ids)
