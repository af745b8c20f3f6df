"""The store layer through the CLI, as users run it: the requests a backup and a restore report, and a
repository in an object-locked bucket (moto over HTTP)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from movers.repo.store.counting import KINDS
from tests.s3proxy import S3Proxy
from tests.volumes import make_image, sha256_file

MiB = 1 << 20


def run(*args, env=None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CBT_MOVER_"))}
    return subprocess.run(
        [sys.executable, "-m", "movers", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=120,
    )


def cli(*args, env=None) -> dict:
    """Run ``cbt-mover ARGS --json``; assert it exits 0 and return its JSON result."""
    proc = run(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cbt-mover: error: "), proc.stderr
    return lines[0]


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 8 * MiB, seed=3)
    return path


@pytest.mark.s3
def test_backup_and_restore_report_the_requests_they_sent(s3_bucket, moto_server, image, tmp_path):
    endpoint, bucket = s3_bucket
    repo = f"s3://{bucket}/team/repo"
    with S3Proxy(endpoint) as proxy:
        env = {**moto_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
        cli("init", "--insecure-no-encryption", "--repo", repo, env=env)
        reported = {}
        for name, command in {
            "backup": ["backup", "--volume", "ns/pvc", "--device", image, "--scan"],
            "restore": ["restore", "--volume", "ns/pvc", "--device", tmp_path / "out.img"],
        }.items():
            before = len(proxy.requests)
            reported[name] = cli(*command, "--repo", repo, env=env)["requests"]
            assert set(reported[name]) == set(KINDS)
            assert sum(reported[name].values()) == len(proxy.requests) - before, name  # every request, no more
    assert sha256_file(tmp_path / "out.img") == sha256_file(image)
    assert reported["backup"]["put"] >= 3  # a pack, a map page, the manifest at least
    assert reported["restore"]["range_get"] + reported["restore"]["get"] >= 2


def test_a_local_repository_reports_requests_too(image, tmp_path):
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    doc = cli("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan")
    assert set(doc["requests"]) == set(KINDS) and doc["requests"]["put"] >= doc["objects_written"] >= 1


@pytest.mark.s3
def test_a_blip_of_seconds_is_ridden_out(s3_bucket, moto_server):
    """The endpoint answers 503 for 3 s (the issue's blip, which failed a backup before): the default
    budget rides it out, --retry-for 0 fails at once with the storage-unavailable exit code."""
    endpoint, bucket = s3_bucket
    repo = f"s3://{bucket}/r"
    cli("init", "--insecure-no-encryption", "--repo", repo, env=moto_server.env)
    blip: list[float] = []

    def unavailable_for_3s(request):
        blip.append(blip[0] if blip else time.monotonic())
        return (503, "ServiceUnavailable") if time.monotonic() - blip[0] < 3 else None

    with S3Proxy(endpoint, unavailable_for_3s) as proxy:
        env = {**moto_server.env, "AWS_ENDPOINT_URL": proxy.endpoint_url}
        proc = run("ls", "--repo", repo, "--retry-for", "0", env=env)
        assert proc.returncode == 5 and "ServiceUnavailable" in error_line(proc)
        proc = run("ls", "--repo", repo, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "ServiceUnavailable" in proc.stderr and "; retry 1 in" in proc.stderr
        assert json.loads(proc.stdout) == {"backups": [], "runs": [], "unreadable": []}
        assert time.monotonic() - blip[0] >= 3


@pytest.mark.parametrize(
    ("option", "env", "shown"), [(["--retry-for", "2h"], {}, "'2h'"), ([], {"CBT_MOVER_RETRY_FOR": "soon"}, "'soon'")]
)
def test_a_bad_retry_budget_is_bad_input(tmp_path, option, env, shown):
    proc = run("ls", "--repo", f"file://{tmp_path}/repo", *option, env=env)
    assert proc.returncode == 2
    line = error_line(proc)
    assert "--retry-for (or CBT_MOVER_RETRY_FOR)" in line and shown in line


def test_prune_sweeps_the_temporary_files_of_killed_writers(image, tmp_path):
    root = tmp_path / "repo"
    cli("init", "--insecure-no-encryption", "--repo", f"file://{root}")
    cli("backup", "--repo", f"file://{root}", "--volume", "v", "--device", image, "--scan")
    pack_dir = next((root / "packs").iterdir())
    old, fresh = pack_dir / ".tmp-killed", pack_dir / ".tmp-writing"
    old.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    cli("prune", "--repo", f"file://{root}", "--dry-run")
    assert old.exists()  # a dry run deletes nothing
    cli("prune", "--repo", f"file://{root}")
    assert not old.exists() and fresh.exists()


@pytest.fixture
def locked_bucket(moto_server):
    """A bucket with object lock on (so versioned) and a default retention of GOVERNANCE 1 day; emptied
    afterwards with the governance bypass (the test's own right, not the product's)."""
    client = moto_server.client()
    bucket = f"locked-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    client.put_object_lock_configuration(
        Bucket=bucket,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
        },
    )
    try:
        yield client, bucket
    finally:
        for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                client.delete_object(
                    Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"], BypassGovernanceRetention=True
                )
        client.delete_bucket(Bucket=bucket)


def _versions(client, bucket: str) -> tuple[dict[str, list[dict]], set[str]]:
    """``({key: [object versions]}, {keys whose latest version is a delete marker})``."""
    versions: dict[str, list[dict]] = {}
    deleted = set()
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []):
            versions.setdefault(v["Key"], []).append(v)
        deleted |= {m["Key"] for m in page.get("DeleteMarkers", []) if m["IsLatest"]}
    return versions, deleted


@pytest.mark.s3
def test_a_repository_in_an_object_locked_bucket(locked_bucket, moto_server, image, tmp_path):
    """init, backups, restores bit-exact, forget and prune all work; prune's deletes only add delete
    markers, so every object version stays, under retention, until a lifecycle rule removes it."""
    client, bucket = locked_bucket
    repo, env = f"s3://{bucket}/repo", moto_server.env
    cli("init", "--insecure-no-encryption", "--repo", repo, env=env)
    first_image = tmp_path / "first.img"
    shutil.copyfile(image, first_image)
    first = cli("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", env=env)
    make_image(image, 8 * MiB, seed=9)  # other content: the first backup's data becomes garbage once forgotten
    cli("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", env=env)
    cli(
        "restore",
        "--repo",
        repo,
        "--volume",
        "v",
        "--backup",
        first["backup_id"],
        "--device",
        tmp_path / "1.img",
        env=env,
    )
    assert sha256_file(tmp_path / "1.img") == sha256_file(first_image)

    forgot = cli("forget", "--repo", repo, "--volume", "v", "--keep-last", "1", env=env)
    assert len(forgot["deleted"]) == 1
    visible_before = {
        o["Key"] for p in client.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in p.get("Contents", [])
    }
    pruned = cli("prune", "--repo", repo, "--grace", "0", env=env)
    assert pruned["packs_deleted"] >= 1 and pruned["map_objects_deleted"] >= 1
    cli("restore", "--repo", repo, "--volume", "v", "--device", tmp_path / "2.img", env=env)
    assert sha256_file(tmp_path / "2.img") == sha256_file(image)
    assert cli("verify", "--repo", repo, env=env)["ok"] is True

    versions, deleted = _versions(client, bucket)
    visible_after = {
        o["Key"] for p in client.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in p.get("Contents", [])
    }
    pruned_keys = visible_before - visible_after
    assert any(k.startswith("repo/packs/") for k in pruned_keys) and any(
        k.startswith("repo/maps/") for k in pruned_keys
    )
    assert pruned_keys <= deleted  # a delete marker on top ...
    assert all(len(versions[k]) == 1 for k in pruned_keys)  # ... of the data, still there
    assert all(len(v) == 1 for v in versions.values())  # no key was ever written twice
    pack = next(k for k in pruned_keys if k.startswith("repo/packs/"))
    kept = client.head_object(Bucket=bucket, Key=pack, VersionId=versions[pack][0]["VersionId"])
    assert kept["ObjectLockMode"] == "GOVERNANCE"  # under retention: only a lifecycle rule, after it, reclaims it
    with pytest.raises(client.exceptions.ClientError, match="AccessDenied"):
        client.delete_object(Bucket=bucket, Key=pack, VersionId=versions[pack][0]["VersionId"])


@pytest.mark.s3
def test_content_md5_only_once_a_locked_bucket_asks_for_it(locked_bucket, s3_bucket, moto_server):
    from movers.repo.store.s3 import S3Store

    client, bucket = locked_bucket
    options = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}
    with S3Proxy(moto_server.endpoint_url) as proxy:
        store = S3Store(bucket, "p", endpoint_url=proxy.endpoint_url, **options)
        store.put("a", b"1")  # refused without an integrity header, then sent with Content-MD5
        assert store.put_new("b", b"2") is True and store.put_new("b", b"3") is False
        # put_new's probe of conditional writes (PUT, conditional PUT) comes first: with Content-MD5 too
        assert [("content-md5" in r.headers) for r in proxy.seen("PUT")] == [False, True, True, True, True, True]
        plain = S3Store(s3_bucket[1], "p", endpoint_url=proxy.endpoint_url, **options)
        del proxy.requests[:]
        plain.put("a", b"1")
        assert [("content-md5" in r.headers) for r in proxy.seen("PUT")] == [False]  # other buckets never pay it
    assert client.get_object(Bucket=bucket, Key="p/b")["Body"].read() == b"2"
