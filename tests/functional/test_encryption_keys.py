"""Key slots of an encrypted repository: rotation while backups go on, the slot rules, the API tasks use."""

from __future__ import annotations

import json
import os

import pytest

from movers.errors import RepositoryKeyError, UsageError
from movers.repo import keys
from movers.repo.config import RepoConfig
from movers.repo.keys import Credentials
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.functional.test_cli import assert_one_line_error, run
from tests.functional.test_encryption import KEY, PASSPHRASE, VOLUME, backup
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
FAST = {"CBT_MOVER_KDF_COST": "10"}


def slots(url, env) -> list[dict]:
    return json.loads(run("key", "list", "--repo", url, "--json", env=env, check_rc=0).stdout)["slots"]


def test_rotation_while_backups_go_on(tmp_path):
    """add a key-file slot, replace the passphrase (passwd), back up with each key, restore the old backups with
    the new passphrase, remove the key-file slot; the last slot and the slot that opens stay."""
    url = f"file://{tmp_path}/repo"
    run("init", "--repo", url, env=KEY, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 2 * MiB, seed=2)
    first = backup(url, image, KEY, "--scan")
    first_copy = tmp_path / "first.img"
    first_copy.write_bytes(image.read_bytes())

    keyfile = tmp_path / "repo.key"
    keyfile.write_bytes(os.urandom(32))
    added = json.loads(
        run("key", "add", "--repo", url, "--new-key-file", keyfile, "--json", env=KEY, check_rc=0).stdout
    )
    listed = slots(url, {"CBT_MOVER_KEY_FILE": str(keyfile)})
    assert {(s["slot"], s["kind"], s["opened"]) for s in listed} >= {(added["added"], "keyfile", True)}
    assert len(listed) == 2 and next(s for s in listed if s["kind"] == "passphrase")["kdf"]["n"] == 1 << 10

    new_pass = {**FAST, "CBT_MOVER_PASSWORD": "the new passphrase"}
    passwd = run(
        "key", "passwd", "--repo", url, "--json", env={**KEY, "CBT_MOVER_NEW_PASSWORD": new_pass["CBT_MOVER_PASSWORD"]}
    )
    assert passwd.returncode == 0, passwd.stderr
    assert_one_line_error(run("ls", "--repo", url, env=KEY), 6, "no key slot")  # the old passphrase is gone

    write_blocks(image, [0, 1 * MiB], seed=3)
    second = backup(url, image, {"CBT_MOVER_KEY_FILE": str(keyfile)}, "--scan")
    write_blocks(image, [512 * 1024], seed=4)
    third = backup(url, image, new_pass, "--scan")
    assert second["parent"] == first["backup_id"] and third["parent"] == second["backup_id"]
    for backup_id, expected in ((first["backup_id"], first_copy), (third["backup_id"], image)):
        out = tmp_path / f"{backup_id}.img"
        run(
            "restore",
            "--repo",
            url,
            "--volume",
            VOLUME,
            "--backup",
            backup_id,
            "--device",
            out,
            env=new_pass,
            check_rc=0,
        )
        assert sha256_file(out) == sha256_file(expected)

    by_keyfile = ["--key-file", keyfile]
    assert_one_line_error(run("key", "remove", "--repo", url, *by_keyfile, added["added"]), 2, "opened the repository")
    run("key", "remove", "--repo", url, added["added"], env=new_pass, check_rc=0)
    assert_one_line_error(run("ls", "--repo", url, *by_keyfile), 6, "no key slot")
    (last,) = slots(url, new_pass)
    assert_one_line_error(run("key", "remove", "--repo", url, last["slot"], env=new_pass), 2, "last")
    assert_one_line_error(run("key", "remove", "--repo", url, "0123456789abcdef", env=new_pass), 3, "no key slot")
    assert_one_line_error(run("key", "remove", "--repo", url, "../config", env=new_pass), 2, "not a key slot id")
    assert json.loads(run("verify", "--repo", url, "--json", env=new_pass, check_rc=0).stdout)["ok"]


def test_add_and_passwd_need_exactly_one_new_key(tmp_path):
    url = f"file://{tmp_path}/repo"
    run("init", "--repo", url, env=KEY, check_rc=0)
    assert_one_line_error(run("key", "add", "--repo", url, env=KEY), 2, "CBT_MOVER_NEW_PASSWORD", "--new-key-file")
    keyfile = tmp_path / "k"
    keyfile.write_bytes(os.urandom(64))
    both = {**KEY, "CBT_MOVER_NEW_PASSWORD": "x"}
    assert_one_line_error(run("key", "passwd", "--repo", url, "--new-key-file", keyfile, env=both), 2, "one new key")
    assert len(slots(url, KEY)) == 1


def test_the_kdf_cost_is_checked_and_recorded(tmp_path):
    url = f"file://{tmp_path}/repo"
    env = {"CBT_MOVER_PASSWORD": PASSPHRASE}
    assert_one_line_error(run("init", "--repo", url, env={**env, "CBT_MOVER_KDF_COST": "30"}), 2, "CBT_MOVER_KDF_COST")
    assert not (tmp_path / "repo").exists()
    run("init", "--repo", url, env={**env, "CBT_MOVER_KDF_COST": "11"}, check_rc=0)
    assert slots(url, env)[0]["kdf"] == {"name": "scrypt", "n": 1 << 11, "r": 8, "p": 1}
    assert keys.kdf_cost({}) == keys.DEFAULT_KDF_COST == 16


def test_the_api_tasks_use_opens_with_the_environment_and_hides_secrets():
    store = MemoryStore()
    given = Credentials.gather(environ={"CBT_MOVER_PASSWORD": PASSPHRASE})
    repo = Repository.init(store, RepoConfig.new(encrypted=True), given, kdf_cost=10)
    assert Repository.open(store, given).keys.master == repo.keys.master
    with pytest.raises(RepositoryKeyError, match="is encrypted: set CBT_MOVER_PASSWORD"):
        Repository.open(store, Credentials.gather(environ={}))
    with pytest.raises(RepositoryKeyError, match="no key slot"):
        Repository.open(store, Credentials.gather(environ={"CBT_MOVER_PASSWORD": "nope"}))
    for shown in (repr(given), repr(repo.keys), repr(repo.store), repr(repo.keys.pack_seal(b"p" * 32))):
        assert PASSPHRASE not in shown and repo.keys.master.hex() not in shown and "master" not in shown
    plain = MemoryStore()
    Repository.init(plain)  # the engine's default stays unencrypted
    assert not Repository.open(plain).config.encrypted
    with pytest.raises(UsageError, match="not encrypted, but a key was given"):
        Repository.open(plain, given)


def test_an_edited_config_cannot_turn_off_keyed_ids():
    """The config is plaintext; one claiming encryption with unkeyed ids (or keyed ids without encryption) is
    damage, so no writer stores ids that reveal content."""
    from movers.errors import IntegrityError
    from movers.repo.manifest import ENCRYPTED_FEATURES

    downgraded = tuple("blake3-chunks" if f == "blake3-keyed-chunks" else f for f in ENCRYPTED_FEATURES)
    with pytest.raises(IntegrityError, match="encrypted repository is format version 2 with blake3-keyed"):
        RepoConfig(mandatory_features=downgraded)
    with pytest.raises(IntegrityError, match="need an encrypted repository"):
        RepoConfig(mandatory_features=tuple(f for f in ENCRYPTED_FEATURES if f != "encrypted-v1"))


def test_sealed_pack_chunks_open_only_where_they_were_sealed():
    """Each chunk is sealed with its pack's key and its id: two chunks swapped within a pack, a chunk copied into
    another pack, or a changed trailer fail; the plain header says the pack is sealed."""
    from movers.errors import IntegrityError
    from movers.repo import pack

    store = MemoryStore()
    repo = Repository.init(store, RepoConfig.new(encrypted=True), Credentials.gather(environ=KEY), kdf_cost=10)
    raws = [os.urandom(1000), os.urandom(1000)]
    pack_id = os.urandom(32)
    builder = repo.new_pack(pack_id)
    entries = [builder.add(repo.content_hash.chunk_id(raw), raw, len(raw), 1) for raw in raws]
    _id, data, _entries = builder.finish()
    data = bytes(data)
    assert data.startswith(pack.SEALED_HEADER) and all(e.stored_len == 1000 + 28 for e in entries)
    assert raws[0] not in data and raws[1] not in data
    for e, raw in zip(entries, raws, strict=True):
        assert repo.decode_chunk(pack_id, data[e.offset : e.offset + e.stored_len], 1, 1000, e.chunk_id) == raw
    first, second = entries
    swapped = data[second.offset : second.offset + second.stored_len]
    with pytest.raises(IntegrityError, match=f"chunk {first.chunk_id.hex()[:16]} fails authentication"):
        repo.decode_chunk(pack_id, swapped, 1, 1000, first.chunk_id)
    with pytest.raises(IntegrityError, match="fails authentication"):
        repo.decode_chunk(os.urandom(32), data[first.offset : first.offset + first.stored_len], 1, 1000, first.chunk_id)
    store.put(pack.pack_key(pack_id), data)
    assert repo.read_pack_trailer(pack.pack_key(pack_id)) == entries
    trailer_at = second.offset + second.stored_len
    store.put(pack.pack_key(pack_id), data[:trailer_at] + bytes([data[trailer_at] ^ 1]) + data[trailer_at + 1 :])
    with pytest.raises(IntegrityError, match="pack trailer fails authentication"):
        repo.read_pack_trailer(pack.pack_key(pack_id))
