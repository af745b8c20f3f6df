"""The ``maintain-repo`` flow and its tasks with Prefect's local API, on repositories in S3 (moto over
HTTP) built with the engine: retention by policy, prune, verify (full and sampled), dry runs, the
prune lock, artifacts and events."""

from __future__ import annotations

import json
import logging
import re

import pytest

from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.repo import pack
from movers.repo.config import RepoConfig
from movers.repo.manifest import POLICY_TAG, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import open_store
from reporting.maintenance_report import public_url
from tests.flowapp import artifact, flow_run_of, no_traceback_above_debug, run_events, run_logs
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
SIZE = 8 * MiB
CONFIG = RepoConfig(page_size=4 * MiB, pack_target=1 * MiB)


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture
def repo_url(s3_bucket, moto_server, monkeypatch):
    """An empty repository in a fresh bucket; the tasks find the S3 endpoint and keys in the environment."""
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_bucket[1]}/repo"
    Repository.init(open_store(url), CONFIG)
    return url


def _maintain(return_state=False, kubeconfig=None, **asked):
    """A ``maintain-repo`` run of the request ``asked`` (``movers.maintenance.request``)."""
    from flows.maintenance import maintain_repo

    return maintain_repo(asked, kubeconfig=kubeconfig, return_state=return_state)


def backups(url, tmp_path, plan: dict[str, int]) -> dict[str, tuple[str, str]]:
    """``plan`` = {volume: number of backups}: a full then incrementals of changed blocks, each recorded as made
    by the policy named as the volume's namespace. Returns {backup id: (volume, sha256 of the image it saved)}."""
    repo, expected = Repository.open(open_store(url)), {}
    for n, (volume, count) in enumerate(plan.items()):
        image = tmp_path / f"{volume.replace('/', '-')}.img"
        make_image(image, SIZE, seed=50 + n, data_fraction=0.8)
        for r in range(count):
            # the same blocks each round: an incremental's chunks are dead once a later one overwrote them
            changes = (
                None
                if r == 0
                else write_blocks(
                    image, [k * 509 % (SIZE // 4096) * 4096 for k in range(30)], seed=r + 10 * n, length=32768
                )
            )
            policy = {POLICY_TAG: volume.partition("/")[0]}
            m = run_backup(repo, str(image), VolumeIdentity(volume), extents=changes, force_full=r == 0, tags=policy)
            expected[m.backup_id] = (volume, sha256_file(image))
    return expected


def restores_exactly(url, expected, tmp_path) -> list[str]:
    """Restore every backup left; each must be bit-exact. Returns their ids."""
    repo = Repository.open(open_store(url))
    left = []
    for ref in repo.list_backups():
        out = tmp_path / "restored.img"
        run_restore(repo, repo.read_manifest(ref.volume, ref.backup_id), str(out))
        assert sha256_file(out) == expected[ref.backup_id][1], ref
        out.unlink()
        left.append(ref.backup_id)
    return left


def policy_file(tmp_path, url, namespace, **retention):
    path = tmp_path / f"{namespace}.yaml"
    rules = {"keep_last": 0, "keep_daily": 0, "keep_weekly": 0, "keep_monthly": 0, **retention}
    path.write_text(
        json.dumps(
            {
                "name": namespace,
                "namespace": namespace,
                "pvc_selector": {"matchLabels": {"a": "b"}},
                "repository": {"url": url},
                "retention": rules,
            }
        )
    )
    return str(path)


def artifacts(key):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        return prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))


def events(name, url):
    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

    from reporting.maintenance_report import public_url

    with get_client(sync_client=True) as prefect:
        page = prefect.read_events(
            EventFilter(
                event=EventNameFilter(name=[name]),
                resource=EventResourceFilter(id=[f"cbt-mover.repository.{public_url(url)}"]),
            ),
            limit=50,
        )
    return page.events


def test_policy_retention_then_prune_and_full_verify(repo_url, harness, tmp_path):
    from localcluster.kubelet.testing import wait_until
    from reporting.maintenance_report import artifact_key

    expected = backups(repo_url, tmp_path, {"shop/db": 4, "shop/logs": 3, "other/x": 2})
    policy = policy_file(tmp_path, repo_url, "shop", keep_last=2)
    store = open_store(repo_url)
    before = set(store.list())

    dry = _maintain(repo=repo_url, policy_paths=[policy], grace=0, verify="off", dry_run=True)
    assert set(store.list()) == before, "a dry run deletes nothing"
    assert dry["forgotten"] == 3 and dry["prune"]["packs_deleted"] + dry["prune"]["map_objects_deleted"] > 0
    [table] = artifacts(artifact_key(repo_url, "retention"))
    assert {row["action"] for row in json.loads(table.data)} == {"keep", "would forget"}

    done = _maintain(repo=repo_url, policy_paths=[policy], grace="0s", verify="full")
    assert done["forgotten"] == 3 and done["verify"]["ok"] and done["verify"]["mode"] == "full"
    assert done["prune"]["bytes_deleted"] > 0 and done["prune"]["skipped"] is None
    repo = Repository.open(store)
    by_volume = {v: [r.backup_id for r in repo.list_backups(v)] for v in ("shop/db", "shop/logs", "other/x")}
    made = {v: sorted(b for b, (vol, _) in expected.items() if vol == v) for v in by_volume}
    # the newest two of each volume of the policy's namespace; other namespaces untouched
    assert by_volume == {
        "shop/db": made["shop/db"][-2:],
        "shop/logs": made["shop/logs"][-2:],
        "other/x": made["other/x"],
    }
    assert sum(1 for k in store.list(pack.PACK_PREFIX)) < sum(1 for k in before if k.startswith(pack.PACK_PREFIX))
    assert len(restores_exactly(repo_url, expected, tmp_path)) == 6

    latest = {
        what: max(artifacts(artifact_key(repo_url, what)), key=lambda a: a.created)
        for what in ("retention", "prune", "verify")
    }
    rows = json.loads(latest["retention"].data)
    assert sorted(r["backup"] for r in rows if r["action"] == "forget") == sorted(
        made["shop/db"][:2] + made["shop/logs"][:1]
    )
    [prune_row] = json.loads(latest["prune"].data)
    assert prune_row["result"] == "done" and int(prune_row["packs deleted"]) == done["prune"]["packs_deleted"]
    assert {"forwarding objects", "running backups", "leases deleted", "duplicate packs", "referenced"} <= set(
        prune_row
    )
    assert all("_" not in header for header in prune_row), prune_row
    # full mode says what it measured, and only that (no sampled-only counters left at 0)
    text = latest["verify"].data
    assert "OK" in text and "- mode full: every referenced chunk read" in text, text
    checked = re.search(r"(\d+) backups and (\d+) map objects checked; (\d+) chunks decoded and hash-checked", text)
    assert checked and min(map(int, checked.groups())) > 0 and "referenced data" not in text, text
    completed = wait_until(lambda: events("cbt-mover.maintenance.completed", repo_url), 20, "completed event")
    assert any(e.payload.get("forgotten") == 3 for e in completed), [e.payload for e in completed]
    assert all("AWS_SECRET" not in json.dumps(e.payload) for e in completed)
    run = flow_run_of(done["run_id"])
    public = public_url(repo_url)
    assert run.name == f"{done['run_id']} {public}" and done["run_id"].startswith("maintain-"), run.name
    assert {"kind:maintenance", f"run:{done['run_id']}", f"repository:{public}"} <= set(run.tags), run.tags
    assert wait_until(lambda: run_events("cbt-mover.maintenance.started", done["run_id"]), 20, "started event")


def test_sampled_verify_finds_a_flipped_byte_and_the_flow_fails_after_its_artifacts(repo_url, harness, tmp_path):
    from localcluster.kubelet.testing import wait_until
    from reporting.maintenance_report import artifact_key
    from tasks.maintenance import verify_repo

    expected = backups(repo_url, tmp_path, {"app/data": 2})
    store = open_store(repo_url)
    repo = Repository.open(store)
    ref = repo.list_backups()[-1]
    entries = next(e for _p, e in repo.iter_map(repo.read_manifest(ref.volume, ref.backup_id)) if e)
    voff, _n, cid, _c = entries[len(entries) // 2]
    loc = repo.index().get(cid)
    key = pack.pack_key(loc.pack_id)
    data = bytearray(store.get(key))
    data[loc.offset + 5] ^= 0x01
    store.put(key, bytes(data))
    first = min(
        (b, o)
        for b in expected
        for _p, es in repo.iter_map(repo.read_manifest("app/data", b))
        for o, _n, c, _c in es
        if c == cid
    )

    clean_maps = verify_repo(repo_url, "sampled", 0.0, 1)
    assert clean_maps.ok and clean_maps.packs_read == 0  # the maps are fine: the damage is in the data
    found = verify_repo(repo_url, "sampled", 1.0, 1)
    assert not found.ok and [(d["volume"], d["backup_id"], d["offset"]) for d in found.damage] == [("app/data", *first)]
    assert voff >= first[1] or first[0] < ref.backup_id

    state = _maintain(repo=repo_url, prune=False, verify="sampled", sample=1.0, return_state=True)
    assert state.is_failed() and "found damage" in (state.message or ""), state
    [markdown] = artifacts(artifact_key(repo_url, "verify"))
    assert "DAMAGED" in markdown.data and f"| {first[1]} |" in markdown.data, markdown.data
    assert "- mode sampled (fraction 1.0" in markdown.data and "referenced data in the packs (" in markdown.data
    failed = wait_until(lambda: events("cbt-mover.maintenance.failed", repo_url), 20, "failed event")
    assert failed[0].payload["verify"]["damage"][0]["offset"] == first[1]
    logs = run_logs(state.state_details.flow_run_id)
    no_traceback_above_debug(logs)
    errors = [r.message for r in logs if r.level >= logging.ERROR and r.task_run_id is None]
    assert len(errors) == 1 and "failed in step verify: IntegrityError: verify of" in errors[0], errors
    report = artifact(artifact_key(repo_url, "failure"))
    assert "FAILED" in report.data and "step `verify`" in report.data and "found damage" in report.data, report.data
    assert not artifacts(artifact_key(repo_url, "prune")), "prune=False runs no prune"


def test_prune_waits_for_the_repository_lock_then_skips_and_forget_reports_missing_volumes(repo_url, harness, tmp_path):
    """The lock is the repository's own (``movers.repo.prunelock``): here a prune the CLI or another flow
    runs holds it; the flow's prune waits ``lock_wait`` for it, then skips (reported), and prunes once free."""
    from movers.repo.prunelock import PruneLock
    from tasks.maintenance import KeepRules, forget_backups, prune_repo

    expected = backups(repo_url, tmp_path, {"ns/a": 3})
    before = set(open_store(repo_url).list())
    with PruneLock(open_store(repo_url), "prune by the CLI"):  # another prune of this repository runs
        dry = prune_repo(repo_url, 0, True)  # a dry run writes nothing and takes no lock
        skipped = prune_repo(repo_url, 0, False, 1.0)
        summary = _maintain(repo=repo_url, keep_last=1, grace=0, verify="off", lock_wait=1.0)
    assert dry.skipped is None and dry.dry_run
    assert "holds the prune lock: prune by the CLI" in skipped.skipped, skipped
    assert "holds the prune lock" in summary["prune"]["skipped"], summary
    assert summary["forgotten"] == 2
    packs_before = {k for k in before if k.startswith(pack.PACK_PREFIX)}
    assert set(open_store(repo_url).list(pack.PACK_PREFIX)) == packs_before, "nothing pruned under another's lock"
    after = prune_repo(repo_url, 0, False, 60.0)  # released: the next run prunes
    assert after.skipped is None and after.report.packs_deleted > 0, after
    assert len(restores_exactly(repo_url, expected, tmp_path)) == 1

    result = forget_backups(repo_url, ["ns/a", "ns/gone"], KeepRules(keep_last=1))
    assert result.missing == ["ns/gone"] and [v.volume for v in result.report.volumes] == ["ns/a"]


def test_retention_groups_keep_each_policy_to_its_own_apply_overrides_and_skip_other_repositories(tmp_path):
    from flows.maintenance import retention_groups
    from movers.policy.model import load_policy

    url = "s3://bucket/repo"
    volumes = ["shop/db", "shop/logs", "web/x", "lonely/y"]
    for sub in ("a", "b", "o"):
        (tmp_path / sub).mkdir()
    a = load_policy(policy_file(tmp_path / "a", url, "shop", keep_last=3))
    b = load_policy(policy_file(tmp_path / "b", url, "shop", keep_daily=7))
    b = b.model_copy(update={"name": "shop-nightly"})
    other = load_policy(policy_file(tmp_path / "o", "s3://elsewhere/repo", "web", keep_last=1))
    no_overrides = dict.fromkeys(("keep_last", "keep_daily", "keep_weekly", "keep_monthly"))
    groups, notes = retention_groups(url, volumes, [a, b, other], no_overrides)
    # two policies over the same claims: each judges its own backups by its own rules (no merge)
    assert groups == [
        ({"keep_last": 3}, ["shop/db", "shop/logs"], "shop"),
        ({"keep_daily": 7}, ["shop/db", "shop/logs"], "shop-nightly"),
    ]
    assert any("elsewhere" in n for n in notes) and any("policies not given here" in n for n in notes)
    groups, _ = retention_groups(
        url, volumes, [a], {"keep_last": 1, "keep_daily": None, "keep_weekly": 2, "keep_monthly": None}
    )
    assert groups == [({"keep_last": 1, "keep_weekly": 2}, ["shop/db", "shop/logs"], "shop")]
    assert retention_groups(url, volumes, [a, a], no_overrides)[0] == [
        ({"keep_last": 3}, ["shop/db", "shop/logs"], "shop")
    ]
    assert retention_groups(url, volumes, [], {"keep_last": 2})[0] == [({"keep_last": 2}, None, None)]
    assert retention_groups(url, volumes, [], {"keep_last": None})[0] == []


def test_an_encrypted_repository_is_maintained_with_the_workers_key(
    s3_bucket, moto_server, monkeypatch, harness, tmp_path
):
    """Without ``key_secret`` the key comes from the worker's environment, as for the CLI: none there, the run
    fails saying how to give one; with it, retention, prune and a full verify run."""
    from flows.maintenance import key_for
    from movers.maintenance.request import MaintenanceRequest
    from movers.repo.keys import Credentials

    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_bucket[1]}/encrypted"
    key_env = {"CBT_MOVER_PASSWORD": "maintenance passphrase 5d0c"}
    repo = Repository.init(open_store(url), RepoConfig.new(encrypted=True), Credentials.gather(environ=key_env), 10)
    image = tmp_path / "db.img"
    for seed in (1, 2):
        make_image(image, SIZE, seed=seed, data_fraction=0.5)
        run_backup(repo, str(image), VolumeIdentity("shop/db"), force_full=True)

    state = _maintain(repo=url, keep_last=1, grace=0, verify="full", return_state=True)
    assert state.is_failed() and "is encrypted: set CBT_MOVER_PASSWORD" in (state.message or ""), state
    monkeypatch.setenv("CBT_MOVER_PASSWORD", key_env["CBT_MOVER_PASSWORD"])
    done = _maintain(repo=url, keep_last=1, grace=0, verify="full")
    assert done["forgotten"] == 1 and done["verify"]["ok"] and done["prune"]["packs_deleted"] > 0, done

    assert key_for(MaintenanceRequest(repo=url), None) is None
    given = MaintenanceRequest(repo=url, key_secret="shop/cbt-mover-repo")
    assert key_for(given, "/k") == {"kubeconfig": "/k", "namespace": "shop", "secret": "cbt-mover-repo"}


def test_maintenance_consolidates_a_fragmented_newest_backup(repo_url, harness, tmp_path):
    import random

    from reporting.maintenance_report import artifact_key

    repo = Repository.open(open_store(repo_url))
    image, rng = tmp_path / "frag.img", random.Random(3)
    image.write_bytes(rng.randbytes(SIZE))
    m = run_backup(repo, str(image), VolumeIdentity("app/frag"), extents=[(0, SIZE)])
    for n in range(6):  # scattered 4 KiB writes over 5% of the blocks, six times: chunks 26% dead
        offsets = rng.sample(range(0, SIZE, 4096), SIZE // 4096 // 20)
        m = run_backup(repo, str(image), VolumeIdentity("app/frag"), extents=write_blocks(image, offsets, seed=n))
    fragmented = run_restore(repo, m, str(tmp_path / "before.img")).fetched_bytes
    assert fragmented > 1.25 * SIZE

    done = _maintain(repo=repo_url, prune=False, verify="full")

    assert done["consolidate"]["consolidated"] == 1 and done["verify"]["ok"], done
    [row] = json.loads(artifact(artifact_key(repo_url, "consolidate")).data)
    assert row["volume"] == "app/frag" and row["result"] == "consolidated", row
    again = Repository.open(open_store(repo_url))
    stats = run_restore(again, again.resolve("app/frag", "latest"), str(tmp_path / "after.img"))
    assert sha256_file(tmp_path / "after.img") == sha256_file(image)
    assert stats.fetched_bytes <= 1.25 * SIZE < fragmented
