"""Encrypted repositories through the CLI (file:// and S3 on moto): what is in the bucket, wrong and missing keys,
tampered, swapped and replayed objects (docs/format.md, "Encryption")."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
PASSPHRASE = "correct horse battery staple 7f3a"
# Scrypt at N=2^10 (CBT_MOVER_KDF_COST, recorded in each slot) keeps every command fast; the default is 2^16.
KEY = {"CBT_MOVER_PASSWORD": PASSPHRASE, "CBT_MOVER_KDF_COST": "10"}
NAMESPACE, PVC = "payroll-prod-x7", "ledger-db-q9"
VOLUME = f"{NAMESPACE}/{PVC}"
NAMES = (NAMESPACE, PVC, "pv-ledger-77c1", "snap-ledger-0042", "fast-ssd-zone9", "tag-value-k31")


def backup(repo, image, env, *extra, volume=VOLUME, check_rc=0):
    args = ["backup", "--repo", repo, "--volume", volume, "--device", image, "--json", *extra]
    return json.loads(run(*args, env=env, check_rc=check_rc).stdout or "{}")


def identity(namespace=NAMESPACE, pvc=PVC):
    return [
        *("--namespace", namespace, "--pvc", pvc, "--pv-name", "pv-ledger-77c1", "--snapshot", "snap-ledger-0042"),
        *(
            "--storage-class",
            "fast-ssd-zone9",
            "--tag",
            "app=tag-value-k31",
            "--pvc-labels",
            '{"team": "ledger-db-q9"}',
        ),
    ]


def objects_of_folder(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".tmp-")
    }


def objects_of_bucket(client, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object of the bucket (keys under ``prefix`` without it; the bucket holds nothing else)."""
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            found[obj["Key"].removeprefix(prefix)] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return found


def data_windows(image: Path, width: int = 32) -> set[bytes]:
    """Every ``width``-byte window of the image that is not all zeros."""
    data = image.read_bytes()
    zero = bytes(width)
    return {w for i in range(len(data) - width + 1) if (w := data[i : i + width]) != zero}


def leaks(objects: dict[str, bytes], windows: set[bytes], names=NAMES, width: int = 32) -> list[str]:
    found = []
    for key, data in objects.items():
        for name in names:
            if name in key or name.encode() in data:
                found.append(f"{key}: {name}")
        hits = sum(data[i : i + width] in windows for i in range(len(data) - width + 1))
        if hits:
            found.append(f"{key}: {hits} windows of volume data")
    return found


def _fail_a_backup(url: str, env: dict[str, str]) -> None:
    """Leave what a backup failing inside leaves (its lease, marked failed), as ``run_backup`` holds it."""
    import contextlib

    from localcluster.s3 import REGION
    from movers.repo.keys import Credentials
    from movers.repo.leases import Lease
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    s3 = {"endpoint_url": env.get("AWS_ENDPOINT_URL"), "region": REGION}
    s3 |= {"access_key": env.get("AWS_ACCESS_KEY_ID"), "secret_key": env.get("AWS_SECRET_ACCESS_KEY")}
    repo = Repository.open(open_store(url, **s3), Credentials.gather(environ=env))
    with contextlib.suppress(RuntimeError), Lease(repo.store, f"backup of volume {VOLUME}", keep_failed=True):
        raise RuntimeError("a backup failing after it took its lease")


def _fill(tmp_path: Path, request, scheme: str):
    """(repo URL, extra env, objects()) of a fresh repository location on ``scheme``."""
    if scheme == "file":
        root = tmp_path / "repo"
        return f"file://{root}", {}, lambda: objects_of_folder(root)
    endpoint, bucket = request.getfixturevalue("s3_bucket")
    moto = request.getfixturevalue("moto_server")
    env = {**moto.env, "AWS_ENDPOINT_URL": endpoint}
    return f"s3://{bucket}/repo", env, lambda: objects_of_bucket(moto.client(), bucket, "repo/")


@pytest.mark.parametrize("scheme", ["file", "s3"])
@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "control"])
def test_no_volume_data_and_no_name_in_any_object(tmp_path, request, scheme, encrypted):
    """Backups (full, incremental, a second volume), a failed backup's lease, forget and prune: no object or key
    of an encrypted repository holds a 32-byte window of the volume's data or a namespace, PVC or other name. The
    same steps on an unencrypted repository (the control) do leak both, so the scan can see them."""
    url, env, objects = _fill(tmp_path, request, scheme)
    env = {**env, **KEY} if encrypted else env
    init = ["init", "--repo", url] if encrypted else ["init", "--insecure-no-encryption", "--repo", url]
    run(*init, env=env, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 1 * MiB, seed=13, data_fraction=0.7)
    first = backup(url, image, env, "--scan", *identity())["backup_id"]
    changes = write_blocks(image, [64 * 1024, 300 * 1024], seed=5)
    extents = tmp_path / "changes.jsonl"
    extents.write_text("".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changes))
    backup(url, image, env, "--extents", extents, "--parent", first, *identity())
    backup(url, image, env, "--scan", *identity(pvc="other-ledger-db-q9"), volume=f"{NAMESPACE}/other-{PVC}")
    past_end = tmp_path / "past-end.jsonl"  # refused before anything is written
    past_end.write_text(json.dumps({"offset": 1 * MiB - 4096, "length": 8192}) + "\n")
    backup(url, image, env, "--extents", past_end, "--full", *identity(), check_rc=2)
    _fail_a_backup(url, env)
    run("forget", "--repo", url, "--keep-last", "1", env=env, check_rc=0)
    run("prune", "--repo", url, "--grace", "0", env=env, check_rc=0)

    stored = objects()
    assert any(k.startswith("leases/") for k in stored) and any(k.startswith("prune/") for k in stored)
    found = leaks(stored, data_windows(image))
    if encrypted:
        assert found == []
        listing = json.loads(run("ls", "--repo", url, "--json", env=env, check_rc=0).stdout)["backups"]
        assert sorted({(b["volume"], b["namespace"], b["pvc"]) for b in listing}) == [
            (VOLUME, NAMESPACE, PVC),
            (f"{NAMESPACE}/other-{PVC}", NAMESPACE, f"other-{PVC}"),
        ]
    else:
        assert any("windows of volume data" in f for f in found) and any(PVC in f for f in found)


@pytest.fixture
def encrypted(tmp_path):
    """(repo URL, its folder, the image, the first backup's result) of an encrypted file:// repository."""
    root = tmp_path / "repo"
    url = f"file://{root}"
    doc = json.loads(run("init", "--repo", url, "--json", env=KEY, check_rc=0).stdout)
    assert doc["encrypted"] and doc["chunk_hash"] == "blake3-keyed"
    image = tmp_path / "vol.img"
    make_image(image, 2 * MiB, seed=21, data_fraction=0.6)
    first = backup(url, image, KEY, "--scan", *identity())
    return url, root, image, first


def _restore(url, tmp_path, env=KEY, backup_id="latest"):
    out = tmp_path / f"out-{os.urandom(3).hex()}.img"
    proc = run("restore", "--repo", url, "--volume", VOLUME, "--backup", backup_id, "--device", out, env=env)
    return proc, out


def test_restore_verify_and_the_config_readers_without_encryption_refuse(encrypted, tmp_path):
    url, root, image, first = encrypted
    out = tmp_path / "out.img"
    args = ("restore", "--repo", url, "--volume", VOLUME, "--device", out, "--verify-device", "--json")
    assert json.loads(run(*args, env=KEY, check_rc=0).stdout)["readback"]["checked_bytes"] > 0  # keyed digests
    assert sha256_file(out) == sha256_file(image)
    assert json.loads(run("verify", "--repo", url, "--json", env=KEY, check_rc=0).stdout)["ok"]
    sampled = run("verify", "--repo", url, "--sample", "1", "--json", env=KEY, check_rc=0)
    assert json.loads(sampled.stdout)["ok"]
    config = json.loads((root / "config").read_bytes())
    # a reader that does not know these mandatory features refuses with exit code 7 (check_compatible)
    assert {"encrypted-v1", "blake3-keyed-chunks"} <= set(config["mandatory_features"])
    assert config["format_version"] == 2


COMMANDS = [
    ["ls"],
    ["verify"],
    ["restore", "--volume", VOLUME, "--device", "/dev/null"],
    ["backup", "--volume", VOLUME, "--device", "IMAGE", "--scan"],
    ["forget", "--keep-last", "1"],
    ["prune", "--grace", "0"],
    ["key", "list"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0] if c[0] != "key" else "key-list")
def test_missing_and_wrong_keys_are_one_line_and_exit_6(encrypted, tmp_path, command):
    url, _root, image, _first = encrypted
    sub, rest = command[0], [str(image) if a == "IMAGE" else a for a in command[1:]]
    args = [sub, *rest[:1], "--repo", url, *rest[1:]] if sub == "key" else [sub, "--repo", url, *rest]
    if sub == "restore":
        args[args.index("/dev/null")] = str(tmp_path / "target.img")
    missing = run(*args)
    assert_one_line_error(missing, 6, "is encrypted", "CBT_MOVER_PASSWORD", "--password-file", "--key-file")
    wrong = run(*args, env={"CBT_MOVER_PASSWORD": "not the passphrase"})
    assert_one_line_error(wrong, 6, "no key slot", "opens with the given key (CBT_MOVER_PASSWORD)")
    assert "not the passphrase" not in wrong.stderr
    keyfile = tmp_path / "wrong.key"
    keyfile.write_bytes(os.urandom(32))
    assert_one_line_error(run(*args, "--key-file", keyfile), 6, f"--key-file {keyfile}")


def test_key_options_and_files(encrypted, tmp_path):
    url, _root, _image, _first = encrypted
    pwfile = tmp_path / "pw"
    pwfile.write_text(PASSPHRASE + "\n")  # a trailing newline is not part of the passphrase
    assert run("ls", "--repo", url, "--password-file", pwfile).returncode == 0
    assert run("ls", "--repo", url, env={"CBT_MOVER_PASSWORD_FILE": str(pwfile)}).returncode == 0
    assert_one_line_error(run("ls", "--repo", url, "--password-file", pwfile, env=KEY), 2, "give the passphrase once")
    assert_one_line_error(run("ls", "--repo", url, "--password-file", tmp_path / "nope"), 2, "cannot read")
    assert_one_line_error(run("ls", "--repo", url, env={"CBT_MOVER_PASSWORD": ""}), 2, "is empty")
    short = tmp_path / "short.key"
    short.write_bytes(os.urandom(31))
    assert_one_line_error(run("ls", "--repo", url, "--key-file", short), 2, "at least 32 random bytes")


def test_init_needs_a_key_or_the_insecure_option(tmp_path):
    url = f"file://{tmp_path}/repo"
    assert_one_line_error(run("init", "--repo", url), 2, "CBT_MOVER_PASSWORD", "--insecure-no-encryption")
    keyfile = tmp_path / "k"
    keyfile.write_bytes(os.urandom(32))
    assert_one_line_error(run("init", "--repo", url, "--key-file", keyfile, env=KEY), 2, "first key slot takes one")
    assert_one_line_error(run("init", "--insecure-no-encryption", "--repo", url, env=KEY), 2, "unencrypted")
    assert not (tmp_path / "repo" / "config").exists()
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    # an unencrypted repository refuses a key: it was meant for an encrypted one (or this config was replaced)
    assert_one_line_error(run("ls", "--repo", url, env=KEY), 2, "is not encrypted, but a key was given")
    assert_one_line_error(run("key", "list", "--repo", url), 2, "is not encrypted")


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _keys(root: Path, prefix: str) -> list[str]:
    return sorted(k for k in objects_of_folder(root) if k.startswith(prefix))


def test_a_tampered_pack_chunk_names_the_pack_and_the_volume_offset(encrypted, tmp_path):
    url, root, _image, _first = encrypted
    pack = _keys(root, "packs/")[0]
    _flip(root / pack, 8 + 40)  # inside the first sealed chunk
    proc, _out = _restore(url, tmp_path)
    assert_one_line_error(proc, 4, "at volume offset", pack, "fails authentication")
    verify = run("verify", "--repo", url, env=KEY)
    assert verify.returncode == 4 and pack in verify.stderr and "fails authentication" in verify.stderr


def test_a_tampered_map_object_or_manifest_is_exit_4_naming_it(encrypted, tmp_path):
    url, root, _image, _first = encrypted
    (manifest,) = _keys(root, "backups/")
    pristine = (root / manifest).read_bytes()
    _flip(root / manifest, len(pristine) // 2)
    listing = run("ls", "--repo", url, env=KEY)
    assert listing.returncode == 4 and f"unreadable: object {manifest} fails authentication" in listing.stderr
    (root / manifest).write_bytes(pristine)
    map_key = _keys(root, "maps/")[0]
    _flip(root / map_key, 40)
    proc, _out = _restore(url, tmp_path)
    assert_one_line_error(proc, 4, f"object {map_key} fails authentication")


def test_an_object_moved_to_another_key_or_replayed_from_another_repository_fails(encrypted, tmp_path):
    url, root, image, _first = encrypted
    other_root = tmp_path / "other"
    run("init", "--repo", f"file://{other_root}", env=KEY, check_rc=0)  # the same passphrase
    backup(f"file://{other_root}", image, KEY, "--scan", *identity())
    pristine = objects_of_folder(root)

    page, directory = _keys(root, "maps/")  # one backup of a small volume: one page, one directory
    (root / directory).write_bytes(pristine[page])
    proc, _out = _restore(url, tmp_path)
    assert_one_line_error(proc, 4, f"object {directory} fails authentication")
    (root / directory).write_bytes(pristine[directory])

    (manifest,) = _keys(root, "backups/")
    (other_manifest,) = _keys(other_root, "backups/")
    assert manifest.split("/")[1] != other_manifest.split("/")[1]  # names are keyed per repository
    (root / manifest).write_bytes((other_root / other_manifest).read_bytes())
    assert f"object {manifest} fails authentication" in run("ls", "--repo", url, env=KEY).stderr
    (root / manifest).write_bytes(pristine[manifest])

    for pack in _keys(root, "packs/"):  # the other repository's packs (same data) under this one's keys
        (root / pack).write_bytes((other_root / _keys(other_root, "packs/")[0]).read_bytes())
    proc, _out = _restore(url, tmp_path)
    assert proc.returncode == 4 and "packs/" in proc.stderr, proc.stderr
    for key, data in pristine.items():
        (root / key).write_bytes(data)
    assert _restore(url, tmp_path)[0].returncode == 0


def test_a_tampered_key_slot(encrypted, tmp_path):
    """A slot whose wrapped key was changed opens with no key: exit 6 like a wrong key. A slot that is no longer a
    well-formed slot is damage: exit 4 naming it (when no other slot opens)."""
    url, root, _image, _first = encrypted
    (slot,) = _keys(root, "keys/")
    pristine = (root / slot).read_bytes()
    doc = json.loads(pristine)
    wrapped = bytearray(base64.b64decode(doc["wrapped"]))
    wrapped[20] ^= 1
    doc["wrapped"] = base64.b64encode(bytes(wrapped)).decode()
    (root / slot).write_text(json.dumps(doc))
    assert_one_line_error(run("ls", "--repo", url, env=KEY), 6, "no key slot")
    (root / slot).write_bytes(pristine[:-10])
    assert_one_line_error(run("ls", "--repo", url, env=KEY), 4, f"damaged key slot(s): {slot}")
    doc = json.loads(pristine)
    doc["kdf"]["n"] = 1 << 30  # would need 128 GiB: refused, not attempted
    (root / slot).write_text(json.dumps(doc))
    assert_one_line_error(run("ls", "--repo", url, env=KEY), 4, slot)
    (root / slot).write_bytes(pristine)
    assert run("ls", "--repo", url, env=KEY).returncode == 0


def test_dedup_across_backups_and_volumes(encrypted, tmp_path):
    url, _root, image, first = encrypted
    assert first["new_chunk_bytes"] > 0
    twin = backup(url, image, KEY, "--scan", volume="payroll-prod-x7/twin")  # same data, another volume
    assert twin["new_chunk_bytes"] == 0 and twin["dedup_bytes"] == first["new_chunk_bytes"]
    write_blocks(image, [128 * 1024], seed=9, length=64 * 1024)
    again = backup(url, image, KEY, "--scan")
    assert again["mode"] == "incremental-scan" and again["new_chunk_bytes"] == 64 * 1024
    proc, out = _restore(url, tmp_path)
    assert proc.returncode == 0 and sha256_file(out) == sha256_file(image)


def test_prune_repacks_an_encrypted_repository_over_s3(s3_bucket, moto_server, tmp_path):
    """Repacking re-seals the chunks it copies with the new packs' keys; restore and verify follow."""
    endpoint, bucket = s3_bucket
    env = {**moto_server.env, "AWS_ENDPOINT_URL": endpoint, **KEY}
    url = f"s3://{bucket}/repo"
    run("init", "--repo", url, env=env, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 32 * MiB, seed=3, data_fraction=1.0)
    first = backup(url, image, env, "--scan")["backup_id"]
    changed = write_blocks(image, range(0, 24 * MiB, 64 * 1024), seed=8, length=64 * 1024)
    extents = tmp_path / "extents.jsonl"
    extents.write_text("".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changed))
    backup(url, image, env, "--extents", extents, "--parent", first)
    run("forget", "--repo", url, "--keep-last", "1", env=env, check_rc=0)
    text = run("prune", "--repo", url, "--grace", "0", env=env, check_rc=0).stdout
    assert "repacked 1 (" in text, text
    out = tmp_path / "out.img"
    run("restore", "--repo", url, "--volume", VOLUME, "--device", out, env=env, check_rc=0)
    assert sha256_file(out) == sha256_file(image)
    assert json.loads(run("verify", "--repo", url, "--json", env=env, check_rc=0).stdout)["ok"]


def test_copying_a_repository_folder_keeps_it_readable(encrypted, tmp_path):
    """Nothing binds objects to where the store is: a copied repository opens and restores (its id is its own)."""
    url, root, image, _first = encrypted
    shutil.copytree(root, tmp_path / "copy")
    proc, out = _restore(f"file://{tmp_path / 'copy'}", tmp_path)
    assert proc.returncode == 0 and sha256_file(out) == sha256_file(image)
