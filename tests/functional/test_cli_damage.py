"""Damaged repositories seen through the CLI: ``ls`` lists every readable backup and names the
unreadable ones; ``verify --json`` damage entries carry the fields their messages name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.functional.test_cli import run
from tests.volumes import make_image

MiB = 1 << 20


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 4 * MiB, seed=6, data_fraction=1.0)
    return path


def backup(repo, volume, image) -> str:
    proc = run("backup", "--repo", repo, "--volume", volume, "--device", image, "--scan", "--json", check_rc=0)
    return json.loads(proc.stdout)["backup_id"]


def manifest_path(repo: str, volume: str, backup_id: str) -> Path:
    return Path(repo[len("file://") :]) / "backups" / volume / backup_id


def split_stderr(proc) -> tuple[list[str], str]:
    """The ``unreadable: ...`` lines of stderr and its last line (progress lines left out)."""
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("progress ")]
    assert "Traceback" not in proc.stderr and lines, proc.stderr
    return lines[:-1], lines[-1]


def test_ls_lists_every_readable_backup_and_names_the_damaged_one(repo, image):
    ids = {v: [backup(repo, v, image), backup(repo, v, image)] for v in ("v", "w")}
    damaged = manifest_path(repo, "v", ids["v"][0])
    damaged.write_bytes(b"{not json")
    key = f"backups/v/{ids['v'][0]}"

    proc = run("ls", "--repo", repo)
    assert proc.returncode == 4, proc.stderr
    listed = [line.split("\t")[:2] for line in proc.stdout.splitlines()]
    assert listed == [["v", ids["v"][1]], ["w", ids["w"][0]], ["w", ids["w"][1]]]
    problems, last = split_stderr(proc)
    assert problems == [f"unreadable: {key} is not valid JSON"]
    assert last.startswith("cbt-mover: error: ") and "1 of 4 backup manifests cannot be read (damaged" in last

    proc = run("ls", "--repo", repo, "--json")
    assert proc.returncode == 4
    doc = json.loads(proc.stdout)
    assert [b["backup_id"] for b in doc["backups"]] == [ids["v"][1], *ids["w"]]
    assert doc["unreadable"] == [
        {"key": key, "volume": "v", "backup_id": ids["v"][0], "error": f"{key} is not valid JSON"}
    ]
    assert split_stderr(proc)[1].startswith("cbt-mover: error: ")

    proc = run("ls", "--repo", repo, "--volume", "w", "--json")  # the damage is not in what was asked for
    assert proc.returncode == 0 and json.loads(proc.stdout)["unreadable"] == []


def test_ls_of_a_manifest_from_a_newer_version_exits_7_and_lists_the_rest(repo, image):
    old, new = backup(repo, "v", image), backup(repo, "v", image)
    path = manifest_path(repo, "v", new)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "format_version": 99}))
    proc = run("ls", "--repo", repo)
    assert proc.returncode == 7, proc.stderr
    assert [line.split("\t")[1] for line in proc.stdout.splitlines()] == [old]
    problems, last = split_stderr(proc)
    assert len(problems) == 1 and f"backups/v/{new}" in problems[0] and "format version 99" in problems[0]
    # a damaged one as well: damage wins (exit 4)
    manifest_path(repo, "v", old).write_bytes(b"[]")
    assert run("ls", "--repo", repo).returncode == 4


def open_repo(url: str):
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    return Repository.open(open_store(url))


def verify_json(repo_url: str, *flags) -> dict:
    proc = run("verify", "--repo", repo_url, "--json", *flags)
    assert proc.returncode == 4, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["damage"]) == len(doc["errors"]) >= 1
    for entry, line in zip(doc["damage"], doc["errors"], strict=True):  # the fields say what the line says
        assert set(entry) == {"volume", "backup_id", "offset", "length", "object", "error"}
        assert line.startswith(f"{entry['volume']}/{entry['backup_id']}") and line.endswith(entry["error"])
        if entry["offset"] is not None:
            assert f"at volume offset {entry['offset']} ({entry['length']} bytes)" in line, line
        else:
            assert "volume offset" not in line and entry["length"] is None, line
    return doc


def damage_fields(doc: dict) -> list[tuple]:
    return [(d["volume"], d["backup_id"], d["offset"], d["length"], d["object"]) for d in doc["damage"]]


@pytest.mark.parametrize("flags", [[], ["--sample", "1"]], ids=["full", "sampled"])
def test_verify_names_the_volume_range_and_pack_of_a_damaged_chunk(repo, image, flags):
    from movers.repo import pack

    backup_id = backup(repo, "v", image)
    r = open_repo(repo)
    entries = next(e for _p, e in r.iter_map(r.read_manifest("v", backup_id)) if e)
    voff, length, cid, _coff = entries[len(entries) // 2]
    loc = r.index().get(cid)
    path = Path(repo[len("file://") :]) / pack.pack_key(loc.pack_id)
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.stored_len // 2] ^= 0x01
    path.write_bytes(bytes(data))
    doc = verify_json(repo, *flags)
    assert damage_fields(doc) == [("v", backup_id, voff, length, pack.pack_key(loc.pack_id))]


@pytest.mark.parametrize("flags", [[], ["--sample", "0"]], ids=["full", "sampled"])
def test_verify_names_damaged_manifests_directories_pages_and_chunks_in_no_pack(repo, tmp_path, flags):
    from movers.repo import pack, volmap

    root = Path(repo[len("file://") :])
    ids = {}
    for seed, volume in enumerate(("manifest", "dir", "page", "chunk")):  # each its own data, map and packs
        make_image(tmp_path / f"{volume}.img", 4 * MiB, seed=10 + seed, data_fraction=1.0)
        ids[volume] = backup(repo, volume, tmp_path / f"{volume}.img")
    r = open_repo(repo)
    m = {v: r.read_manifest(v, b) for v, b in ids.items()}
    capacity = m["dir"].capacity_bytes
    page_size = m["dir"].map.page_size

    (root / "backups" / "manifest" / ids["manifest"]).write_bytes(b"{}")
    dir_key = volmap.map_key(bytes.fromhex(m["dir"].map.dirs[0]))
    (page_id, _n), *_ = r.page_slots(m["page"])
    page_key = volmap.map_key(page_id)
    (root / dir_key).write_bytes(b"damaged")
    (root / page_key).write_bytes(b"damaged")
    # a chunk of "chunk", whose pack is gone (the index leaves gone packs out: the chunk is in no pack)
    entries = next(e for _p, e in r.iter_map(m["chunk"]) if e)
    voff, length, cid, _coff = entries[0]
    gone = pack.pack_key(r.index().get(cid).pack_id)
    (root / gone).unlink()

    doc = verify_json(repo, *flags)
    found = {d[0]: d[1:] for d in damage_fields(doc)}
    assert found["manifest"] == (ids["manifest"], None, None, f"backups/manifest/{ids['manifest']}")
    assert found["dir"] == (ids["dir"], 0, capacity, dir_key)
    assert found["page"][:4] == (ids["page"], 0, min(page_size, capacity), page_key)
    assert found["chunk"] == (ids["chunk"], voff, length, gone)
