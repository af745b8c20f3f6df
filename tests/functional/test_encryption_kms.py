"""Key slots wrapped by an AWS KMS key (moto's KMS over HTTP on loopback; docs/format.md, "Encryption"): a
repository made, used and rotated with KMS alone, slots bound to their repository and slot, wrong, disabled and
unreachable keys.

moto (5.2) does not refuse Encrypt or Decrypt with a disabled key or one pending deletion; where a test needs the
answer AWS KMS gives then, ``S3Proxy`` stands between the CLI and moto and gives it (a JSON protocol error)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest

from localcluster.s3 import ACCESS_KEY, REGION, SECRET_KEY, free_port
from movers.errors import IntegrityError, UsageError
from movers.repo import keys
from tests.functional.test_cli import assert_one_line_error, run
from tests.functional.test_encryption import KEY, PASSPHRASE, VOLUME, backup
from tests.s3proxy import S3Proxy
from tests.volumes import make_image, sha256_file

MiB = 1 << 20


@pytest.fixture
def kms(moto_server):
    """``new_key()`` makes a KMS key in moto (its ARN), ``alias(arn)`` an alias of it; ``env`` reaches moto. Keys
    are scheduled for deletion and aliases deleted afterwards."""
    client = boto3.client(
        "kms",
        endpoint_url=moto_server.endpoint_url,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    made, aliases = [], []

    def new_key() -> str:
        made.append(client.create_key(Description="cbt-mover test")["KeyMetadata"]["Arn"])
        return made[-1]

    def alias(arn: str) -> str:
        aliases.append(f"alias/cbt-mover-test-{uuid.uuid4().hex[:12]}")
        client.create_alias(AliasName=aliases[-1], TargetKeyId=arn)
        return aliases[-1]

    yield SimpleNamespace(client=client, new_key=new_key, alias=alias, env=moto_server.env)
    for name in aliases:
        client.delete_alias(AliasName=name)
    for arn in made:
        if client.describe_key(KeyId=arn)["KeyMetadata"]["KeyState"] != "PendingDeletion":
            _delete(client, key_id(arn))


def key_id(arn: str) -> str:
    """The key id of a key ARN (moto answers DisableKey and ScheduleKeyDeletion of an ARN with a 500)."""
    return arn.rsplit("/", 1)[1]


def init_file_repo(root: Path, env: dict, *extra) -> str:
    url = f"file://{root}"
    doc = json.loads(run("init", "--repo", url, "--json", *extra, env=env, check_rc=0).stdout)
    return doc["key_slot"]


def test_a_kms_repository_backs_up_restores_and_rotates_to_a_passphrase(s3_bucket, moto_server, kms, tmp_path):
    """init --kms-key over S3: the slot records the key ARN and holds KMS's ciphertext of the master key bound to
    the repository and slot; backup, ls and restore with the KMS key alone; a passphrase slot added, the KMS slot
    removed (rotation), and the backups restore with the passphrase."""
    endpoint, bucket = s3_bucket
    arn = kms.new_key()
    aws = {**kms.env, "AWS_ENDPOINT_URL": endpoint}
    by_kms = {**aws, "CBT_MOVER_KMS_KEY": arn}
    url = f"s3://{bucket}/repo"
    init = json.loads(run("init", "--repo", url, "--kms-key", arn, "--json", env=aws, check_rc=0).stdout)
    slot = init["key_slot"]

    (listed,) = json.loads(run("key", "list", "--repo", url, "--json", env=by_kms, check_rc=0).stdout)["slots"]
    assert (listed["slot"], listed["kind"], listed["kms_key"], listed["opened"]) == (slot, "kms", arn, True)
    stored = json.loads(moto_server.client().get_object(Bucket=bucket, Key=f"repo/keys/{slot}")["Body"].read())
    assert stored["kms"] == {"key": arn} and "kdf" not in stored
    wrapped = base64.b64decode(stored["wrapped"])
    context = {"cbt-mover-repository": init["repo_id"], "cbt-mover-key-slot": slot}
    master = kms.client.decrypt(CiphertextBlob=wrapped, EncryptionContext=context)["Plaintext"]
    assert len(master) == 32
    with pytest.raises(kms.client.exceptions.InvalidCiphertextException):
        kms.client.decrypt(CiphertextBlob=wrapped, EncryptionContext={**context, "cbt-mover-key-slot": "0" * 16})

    image = tmp_path / "vol.img"
    make_image(image, 2 * MiB, seed=5)
    first = backup(url, image, by_kms, "--scan")
    listing = run("ls", "--repo", url, "--json", "--log-level", "DEBUG", env=by_kms, check_rc=0)
    assert [b["backup_id"] for b in json.loads(listing.stdout)["backups"]] == [first["backup_id"]]
    assert "DEBUG" in listing.stderr or "INFO" in listing.stderr  # it logged, and no form of the master key
    for shown in (master.hex(), base64.b64encode(master).decode(), stored["wrapped"]):
        assert shown not in listing.stdout + listing.stderr
    out = tmp_path / "out.img"
    run("restore", "--repo", url, "--volume", VOLUME, "--device", out, env=by_kms, check_rc=0)
    assert sha256_file(out) == sha256_file(image)
    assert_one_line_error(run("ls", "--repo", url, env=aws), 6, "is encrypted", "--kms-key KEY")

    new_pass = {"CBT_MOVER_NEW_PASSWORD": PASSPHRASE, "CBT_MOVER_KDF_COST": "10"}
    added = json.loads(run("key", "add", "--repo", url, "--json", env={**by_kms, **new_pass}, check_rc=0).stdout)
    assert added["kind"] == "passphrase"
    removing = run("key", "remove", "--repo", url, slot, env=by_kms)
    assert_one_line_error(removing, 2, "opened the repository")
    by_pass = {**aws, **KEY}
    assert (
        run("key", "remove", "--repo", url, slot, env=by_pass, check_rc=0).stdout.strip() == f"removed key slot {slot}"
    )
    assert_one_line_error(run("ls", "--repo", url, env=by_kms), 6, f"CBT_MOVER_KMS_KEY {arn}", "no kms slot")
    second = backup(url, image, by_pass, "--scan")
    assert second["parent"] == first["backup_id"]
    out.unlink()
    restore = ["restore", "--repo", url, "--volume", VOLUME, "--backup", first["backup_id"], "--device", out]
    proc = run(*restore, env=by_pass, check_rc=0)
    assert sha256_file(out) == sha256_file(image) and PASSPHRASE not in proc.stdout + proc.stderr


def test_a_slot_moved_to_another_repository_or_slot_does_not_open(kms, tmp_path):
    """The EncryptionContext names the repository and the slot: a slot copied into another repository (same KMS
    key), or renamed to another slot of its own, is refused by KMS (exit code 6)."""
    arn = kms.new_key()
    env = {**kms.env, "CBT_MOVER_KMS_KEY": arn}
    first, second = tmp_path / "first", tmp_path / "second"
    first_slot, second_slot = init_file_repo(first, env), init_file_repo(second, env)
    copied = (first / "keys" / first_slot).read_bytes()
    (second / "keys" / second_slot).unlink()
    (second / "keys" / first_slot).write_bytes(copied)
    moved = run("ls", "--repo", f"file://{second}", env=env)
    assert_one_line_error(moved, 6, f"key slot keys/{first_slot}", "InvalidCiphertextException", "copied")

    renamed = "0123456789abcdef"
    doc = json.loads(copied)
    (first / "keys" / first_slot).unlink()
    (first / "keys" / renamed).write_text(json.dumps({**doc, "slot": renamed}))
    assert_one_line_error(run("ls", "--repo", f"file://{first}", env=env), 6, "InvalidCiphertextException")


def test_a_wrong_kms_key_is_refused_and_an_alias_of_the_right_one_opens(kms, tmp_path):
    """Decrypt names the key the user gives: another key (by ARN, id or alias) or an alias that does not exist is
    exit code 6 in one line naming the slot's key and the given one; an alias of the slot's key opens."""
    right, wrong = kms.new_key(), kms.new_key()
    root = tmp_path / "repo"
    init_file_repo(root, kms.env, "--kms-key", right)
    url = f"file://{root}"
    for given in (wrong, key_id(wrong), kms.alias(wrong), "alias/cbt-mover-test-absent"):
        proc = run("ls", "--repo", url, "--kms-key", given, env=kms.env)
        at = f"AWS KMS at {kms.env['AWS_ENDPOINT_URL']} refused Decrypt"  # not AWS's endpoint: named
        assert_one_line_error(proc, 6, at, f"wrapped by {right}", f"with key {given}")
    assert run("ls", "--repo", url, "--kms-key", kms.alias(right), env=kms.env).returncode == 0
    assert run("ls", "--repo", url, env={**kms.env, "CBT_MOVER_KMS_KEY": key_id(right)}).returncode == 0


def _disable(client, key_id: str) -> None:
    client.disable_key(KeyId=key_id)


def _delete(client, key_id: str) -> None:
    client.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=7)


@pytest.mark.parametrize(
    "make_unusable, code, says",
    [
        (_disable, "DisabledException", "the key is disabled"),
        (_delete, "KMSInvalidStateException", "the key is not usable in its state (pending deletion?)"),
    ],
)
def test_a_disabled_or_deleted_kms_key_is_exit_6(kms, tmp_path, make_unusable, code, says):
    """A key disabled (or scheduled for deletion) after init: opening is exit code 6 in one line with KMS's
    reason; init with it (Encrypt refused) is exit code 6 too and writes nothing."""
    arn = kms.new_key()
    root = tmp_path / "repo"
    init_file_repo(root, kms.env, "--kms-key", arn)
    make_unusable(kms.client, key_id(arn))
    refuse = {"TrentService.Decrypt", "TrentService.Encrypt"}  # what AWS KMS answers; moto does not
    with S3Proxy(kms.env["AWS_ENDPOINT_URL"], lambda r: (400, code) if r.target in refuse else None) as proxy:
        env = {**kms.env, "AWS_ENDPOINT_URL_KMS": proxy.endpoint_url, "CBT_MOVER_KMS_KEY": arn}
        assert_one_line_error(run("ls", "--repo", f"file://{root}", env=env), 6, f"{code}: {says}", arn)
        fresh = tmp_path / "fresh"
        assert_one_line_error(run("init", "--repo", f"file://{fresh}", env=env), 6, "refused Encrypt", code)
        assert not fresh.exists()
        assert [r.target for r in proxy.seen("POST")] == ["TrentService.Decrypt", "TrentService.Encrypt"]


def test_kms_throttling_is_retried_and_an_unreachable_kms_is_exit_5_within_the_budget(kms, tmp_path):
    """Throttling and 5xx are retried within --retry-for (then the command succeeds); KMS unreachable past the
    budget is exit code 5 in one line (init writes nothing)."""
    arn = kms.new_key()
    root = tmp_path / "repo"
    init_file_repo(root, kms.env, "--kms-key", arn)
    answers = iter([(400, "ThrottlingException"), (503, "KMSInternalException")])
    with S3Proxy(kms.env["AWS_ENDPOINT_URL"], lambda r: next(answers, None) if r.target else None) as proxy:
        env = {**kms.env, "AWS_ENDPOINT_URL_KMS": proxy.endpoint_url, "CBT_MOVER_KMS_KEY": arn}
        run("ls", "--repo", f"file://{root}", "--retry-for", "30s", env=env, check_rc=0)
        assert [r.target for r in proxy.seen("POST")] == ["TrentService.Decrypt"] * 3

    dead = {**kms.env, "AWS_ENDPOINT_URL_KMS": f"http://127.0.0.1:{free_port()}", "CBT_MOVER_KMS_KEY": arn}
    quiet = ["--retry-for", "2s", "--log-level", "ERROR"]
    started = time.monotonic()
    proc = run("ls", "--repo", f"file://{root}", *quiet, env=dead)
    assert_one_line_error(proc, 5, "cannot reach AWS KMS", "gave up after")
    assert time.monotonic() - started < 30
    fresh = tmp_path / "fresh"
    assert_one_line_error(run("init", "--repo", f"file://{fresh}", *quiet, env=dead), 5, "cannot reach AWS KMS")
    assert not fresh.exists()


def test_a_kms_key_without_a_region_or_of_no_kms_form_is_a_usage_error(kms, tmp_path):
    arn = kms.new_key()
    no_region = {k: v for k, v in kms.env.items() if k != "AWS_REGION"} | {"AWS_CONFIG_FILE": str(tmp_path / "no")}
    url = f"file://{tmp_path / 'repo'}"
    proc = run("init", "--repo", url, "--kms-key", key_id(arn), env=no_region)
    assert_one_line_error(proc, 2, "names no region", "give the key's ARN")
    run("init", "--repo", url, "--kms-key", arn, env=no_region, check_rc=0)  # the ARN says where
    assert_one_line_error(run("ls", "--repo", url, "--kms-key", "my key", env=kms.env), 2, "is not an AWS KMS key")


def test_kms_slots_and_keys_are_checked_without_calling_kms():
    """A kms slot must name a key ARN (its region picks the endpoint: no host can be smuggled in); a KMS key is
    checked for its form when given; neither shows more than the key id."""
    good = {
        "format": "cbt-mover-key-slot",
        "slot": "0123456789abcdef",
        "kind": "kms",
        "created": "",
        "kms": {"key": "arn:aws:kms:eu-west-1:123456789012:key/8deec2a3-4dd6-4d59-a3d7-38dfa82a7de4"},
        "wrapped": base64.b64encode(b"blob").decode(),
    }
    assert keys.parse_slot("keys/0123456789abcdef", json.dumps(good).encode()).kms_key == good["kms"]["key"]
    for bad in ("arn:aws:kms:evil.example.com/x:123456789012:key/8deec2a3-4dd6-4d59-a3d7-38dfa82a7de4", None, 5):
        with pytest.raises(IntegrityError, match="keys/0123456789abcdef is damaged"):
            keys.parse_slot("keys/0123456789abcdef", json.dumps({**good, "kms": {"key": bad}}).encode())
    with pytest.raises(UsageError, match="CBT_MOVER_KMS_KEY 'a b' is not an AWS KMS key"):
        keys.Credentials.gather(environ={"CBT_MOVER_KMS_KEY": "a b"})
    given = keys.Credentials.gather(environ={"CBT_MOVER_KMS_KEY": "alias/backups"}, aws_profile="p", retry_for=5)
    assert given.sources == "CBT_MOVER_KMS_KEY alias/backups" and repr(given.secrets[0]) == "KmsKey('alias/backups')"
