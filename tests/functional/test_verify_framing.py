"""A pack's framing (header, footer, trailer) damaged: restores still work, and verify says so, full and sampled.

Damage as tests/functional/test_cli_damage.py makes it: bytes of a ``file://`` repository's pack flipped in place.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import pytest

from movers.repo import pack
from tests.functional.test_cli import run
from tests.volumes import make_image, sha256_file

MiB = 1 << 20
KEY = {"CBT_MOVER_PASSWORD": "framing test passphrase 41c2", "CBT_MOVER_KDF_COST": "10"}


def damage_header(data: bytearray) -> None:
    data[3] ^= 0x20


def damage_footer_magic(data: bytearray) -> None:
    data[-1] ^= 0x01


def damage_trailer(data: bytearray) -> None:
    data[-pack.FOOTER_LEN - 3] ^= 0x01


def claim_2gib_trailer(data: bytearray) -> None:
    data[-pack.FOOTER_LEN : -pack.FOOTER_LEN + 4] = struct.pack("<I", 2 << 30)


DAMAGE = {
    "header magic": (damage_header, "pack header is damaged"),
    "footer magic": (damage_footer_magic, "pack footer is damaged"),
    "trailer": (damage_trailer, "pack trailer"),
    "2 GiB trailer": (claim_2gib_trailer, "pack footer is damaged"),
}


@pytest.fixture(params=[False, True], ids=["plain", "encrypted"])
def backed_up(request, tmp_path):
    """(repo URL, env, the volume image, the backup id, the pack files) of one backup of one volume."""
    root = tmp_path / "repo"
    url, env = f"file://{root}", KEY if request.param else {}
    run("init", "--repo", url, *([] if request.param else ["--insecure-no-encryption"]), env=env, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=17, data_fraction=1.0)
    proc = run("backup", "--repo", url, "--volume", "v", "--device", image, "--scan", "--json", env=env, check_rc=0)
    packs = sorted(p for p in (root / "packs").rglob("*") if p.is_file())
    assert packs
    return url, env, image, json.loads(proc.stdout)["backup_id"], packs


@pytest.mark.parametrize("kind", DAMAGE)
def test_verify_reports_damaged_framing_that_restores_do_not_meet(backed_up, kind, tmp_path):
    url, env, image, backup_id, packs = backed_up
    damage, says = DAMAGE[kind]
    target = packs[0]
    data = bytearray(target.read_bytes())
    damage(data)
    target.write_bytes(bytes(data))
    key = str(target.relative_to(Path(url[len("file://") :])))

    out = tmp_path / "restored.img"
    run("restore", "--repo", url, "--volume", "v", "--device", out, env=env, check_rc=0)
    assert sha256_file(out) == sha256_file(image), "restores read through the index and still work"
    for flags in ([], ["--sample", "1"]):
        proc = run("verify", "--repo", url, "--json", *flags, env=env)
        assert proc.returncode == 4, (flags, proc.stderr)
        doc = json.loads(proc.stdout)
        assert [(d["volume"], d["backup_id"], d["object"], d["offset"]) for d in doc["damage"]] == [
            ("v", backup_id, key, None)
        ], doc["damage"]
        assert says in doc["damage"][0]["error"] and "restores read its chunks" in doc["damage"][0]["error"]
    text = run("verify", "--repo", url, env=env)
    assert text.returncode == 4 and f"damaged: v/{backup_id}: pack {key}: {says}" in text.stderr


def test_a_claimed_2_gib_trailer_is_not_read_or_allocated(tmp_path):
    """In-process, the memory verify takes with a footer claiming 2 GiB stays far below it."""
    from movers.pipeline.verify import run_verify
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    root = tmp_path / "repo"
    url = f"file://{root}"
    run("init", "--repo", url, "--insecure-no-encryption", check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 1 * MiB, seed=18, data_fraction=1.0)
    run("backup", "--repo", url, "--volume", "v", "--device", image, "--scan", check_rc=0)
    for path in (p for p in (root / "packs").rglob("*") if p.is_file()):
        data = bytearray(path.read_bytes())
        claim_2gib_trailer(data)
        path.write_bytes(bytes(data))
    repo = Repository.open(open_store(url))
    tracemalloc.start()
    try:
        report = run_verify(repo, repo.list_backups(), workers=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not report.ok and all("pack footer is damaged" in e for e in report.errors), report.errors
    assert peak < 64 * MiB, peak
