"""Extents build on the backup they are changes since, never on whichever backup is newest.

The race of issue 21: a full backup of the same volume committing between the extents' computation and the
incremental. Played deterministically: the full backup commits after the extents were written and before the
incremental starts (through the CLI), or from inside the incremental's extents stream (in-process).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from movers.errors import NotFoundError, UsageError
from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.repo.deltabase import AmbiguousParent, delta_parent
from movers.repo.manifest import SnapshotIdentity, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import open_store
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20


def repo_objects(url: str) -> dict[str, bytes]:
    root = Path(url[len("file://") :])
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def backup_json(repo: str, device: Path, *flags: str, stdin: str | None = None) -> dict:
    proc = run("backup", "--repo", repo, "--volume", "v", "--device", device, "--json", *flags, stdin=stdin, check_rc=0)
    return json.loads(proc.stdout)


def jsonl(extents, summary: dict | None = None) -> str:
    lines = [json.dumps({"offset": o, "length": n}) for o, n in extents]
    return "\n".join([*lines, *([json.dumps({"summary": summary})] if summary else [])]) + "\n"


@pytest.fixture
def race(repo, tmp_path):
    """b1 (snapshot h1) of image one; the extents of the changes since it (image two, written as
    ``cbt-mover extents`` writes them, with the summary line, and without); then a full backup b3 of the
    same volume (snapshot h3, other data) commits: the newest backup is not the extents' base."""
    one, two, three = tmp_path / "one.img", tmp_path / "two.img", tmp_path / "three.img"
    make_image(one, 4 * MiB, seed=31)
    b1 = backup_json(repo, one, "--scan", "--snapshot-handle", "h1")["backup_id"]
    shutil.copy(one, two)
    changes = write_blocks(two, [64 * 1024, 3 * MiB], seed=32)
    with_summary, plain = tmp_path / "delta.jsonl", tmp_path / "plain.jsonl"
    with_summary.write_text(jsonl(changes, {"mode": "delta", "base_handle": "h1", "extents": len(changes)}))
    plain.write_text(jsonl(changes))
    make_image(three, 4 * MiB, seed=33)
    b3 = backup_json(repo, three, "--scan", "--full", "--snapshot-handle", "h3")["backup_id"]
    return {"b1": b1, "b3": b3, "two": two, "delta": with_summary, "plain": plain}


def restored(repo: str, backup_id: str, tmp_path: Path) -> str:
    out = tmp_path / f"restored-{backup_id}.img"
    run("restore", "--repo", repo, "--volume", "v", "--backup", backup_id, "--device", out, check_rc=0)
    return sha256_file(out)


def test_extents_build_on_the_backup_they_are_changes_since(repo, race, tmp_path):
    two = race["two"]
    # the summary line of `cbt-mover extents` names the base snapshot: the parent is its backup, not b3
    doc = backup_json(repo, two, "--extents", race["delta"])
    assert (doc["mode"], doc["parent"]) == ("incremental-cbt", race["b1"])
    assert restored(repo, doc["backup_id"], tmp_path) == sha256_file(two)
    # so is the backup --parent or --base-handle names, from a file or stdin
    for flags in (["--parent", race["b1"]], ["--base-handle", "h1"]):
        doc = backup_json(repo, two, "--extents", race["plain"], *flags)
        assert doc["parent"] == race["b1"]
        assert restored(repo, doc["backup_id"], tmp_path) == sha256_file(two)
    doc = backup_json(repo, two, "--extents", "-", "--base-handle", "h1", stdin=race["plain"].read_text())
    assert doc["parent"] == race["b1"] and restored(repo, doc["backup_id"], tmp_path) == sha256_file(two)


def test_extents_that_do_not_say_their_base_are_refused_and_change_nothing(repo, race):
    before = repo_objects(repo)
    args = ["backup", "--repo", repo, "--volume", "v", "--device", race["two"]]
    for source, stdin in ((race["plain"], None), ("-", race["plain"].read_text())):
        proc = run(*args, "--extents", source, stdin=stdin)
        assert_one_line_error(proc, 2, "do not say which backup", race["b3"], "--parent")
    # a named parent that is not the extents' base, a handle two backups recorded, contradictions
    proc = run(*args, "--extents", race["delta"], "--parent", race["b3"])
    assert_one_line_error(proc, 2, "changes since snapshot h1", f"backup {race['b3']}", "recorded snapshot h3")
    proc = run(*args, "--extents", race["delta"], "--base-handle", "h3")
    assert_one_line_error(proc, 2, "--base-handle h3 is not the snapshot the extents' summary line names (h1)")
    proc = run(*args, "--extents", race["plain"], "--base-handle", "nope")
    assert_one_line_error(proc, 2, "no backup of volume v recorded snapshot handle nope")
    proc = run(*args, "--extents", race["plain"], "--parent", "20260101T000000000000Z-000000")
    assert_one_line_error(proc, 3, "backup 20260101T000000000000Z-000000 of volume v not found")
    for parent, what in (("latest", "not latest"), ("../x", "is not a backup id")):
        assert_one_line_error(run(*args, "--extents", race["plain"], "--parent", parent), 2, what)
    assert_one_line_error(run(*args, "--extents", race["plain"], "--parent", race["b1"], "--full"), 2, "--full")
    assert repo_objects(repo) == before
    backup_json(repo, race["two"], "--scan", "--snapshot-handle", "h1")  # a second backup of snapshot h1
    before = repo_objects(repo)
    proc = run(*args, "--extents", race["delta"])
    assert_one_line_error(proc, 2, "2 backups of volume v recorded snapshot handle h1", "--parent")
    assert repo_objects(repo) == before
    assert backup_json(repo, race["two"], "--extents", race["delta"], "--parent", race["b1"])["parent"] == race["b1"]


def test_allocated_extents_and_a_first_backup_are_full(repo, race, tmp_path):
    allocated = tmp_path / "allocated.jsonl"
    allocated.write_text(jsonl([(0, 4 * MiB)], {"mode": "allocated", "base_handle": None}))
    doc = backup_json(repo, race["two"], "--extents", allocated)
    assert (doc["mode"], doc["parent"]) == ("full", None)
    assert restored(repo, doc["backup_id"], tmp_path) == sha256_file(race["two"])
    first = ["backup", "--repo", repo, "--volume", "w", "--device", race["two"], "--extents", race["plain"], "--json"]
    assert json.loads(run(*first, check_rc=0).stdout)["mode"] == "full"  # no backup of w: nothing to build on


def test_a_full_backup_committing_during_the_incremental_is_not_its_parent(tmp_path):
    """In-process: the full backup commits while the incremental reads its extents (after it took its lease and
    found its parent); the incremental still builds on the backup it was given."""
    repo = Repository.init(open_store("memory://"))
    one, two, three = tmp_path / "one.img", tmp_path / "two.img", tmp_path / "three.img"
    make_image(one, 2 * MiB, seed=41)
    make_image(three, 2 * MiB, seed=43)
    volume = VolumeIdentity("v")
    b1 = run_backup(repo, str(one), volume, snapshot=SnapshotIdentity(snapshot_handle="h1"))
    shutil.copy(one, two)
    changes = write_blocks(two, [8192, MiB + 4096], seed=42)
    committed = []

    def extents():
        committed.append(run_backup(repo, str(three), volume, force_full=True))
        yield from changes

    for named in ({"parent": b1.backup_id}, {"base_handle": "h1"}):
        committed.clear()
        inc = run_backup(repo, str(two), volume, extents=extents(), **named)
        assert committed and repo.latest("v").backup_id == inc.backup_id
        assert inc.parent == b1.backup_id and inc.mode == "incremental-cbt"
        out = tmp_path / f"out-{inc.backup_id}.img"
        run_restore(repo, inc, str(out))
        assert sha256_file(out) == sha256_file(two)


def test_delta_parent_refuses_what_is_not_known():
    repo = Repository.init(open_store("memory://"))
    with pytest.raises(UsageError, match="recorded snapshot handle h"):
        delta_parent(repo, "v", base_handle="h")
    with pytest.raises(NotFoundError):
        delta_parent(repo, "v", parent_id="20260101T000000000000Z-000000")
    with pytest.raises(ValueError):
        delta_parent(repo, "v")
    assert issubclass(AmbiguousParent, UsageError)


def test_the_flow_passes_the_parent_it_planned_to_the_mover():
    from movers.backup.movers import mover_objects
    from movers.backup.plan import VolumePlan
    from movers.policy.model import parse_policy
    from tests.unit.backup.test_backup_plan import _request

    member = {"pvc": "data", "snapshot": "snap", "restore_size": None, "size": "1Gi", "handle": "h1"}
    policy = parse_policy(
        {
            "name": "shop",
            "namespace": "ns",
            "pvc_selector": {"matchLabels": {"app": "db"}},
            "repository": {"url": "s3://b"},
            "mover": {"image": "cbt-mover"},
        }
    )
    base = {"handle": "h0", "reason": "delta since b0", "parent": "b0"}
    changes = _request(mover_objects("run-1", member, VolumePlan.of(base, "aud"), policy)[1]).changes
    assert (changes.base_handle, changes.parent) == ("h0", "b0")
    for plan in (VolumePlan.of({"handle": None, "reason": "first", "parent": None}, "aud"), VolumePlan.of(base, None)):
        changes = _request(mover_objects("run-1", member, plan, policy)[1]).changes
        assert changes.parent is None and changes.base_handle is None


def test_a_cbt_delta_builds_on_the_named_parent_and_never_guesses(cbt_env, tmp_path):
    """Two backups recorded the base snapshot's handle: without --parent the mover reads the allocated blocks (a
    full backup, saying why) instead of choosing one; with --parent (what the flow passes) a delta on it."""
    from tests.cluster.test_cbt_client import cbt_args, changed_blocks

    env = cbt_env
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    base = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    first = ["--device", env.base_img, *cbt_args(env, "snap-base"), "--snapshot-handle", env.base.handle]
    b1, b2 = (json.loads(run(*base, *first, check_rc=0).stdout)["backup_id"] for _ in range(2))
    delta = [*base, "--device", env.target_img, *cbt_args(env), "--base-handle", env.base.handle]
    doc = json.loads(run(*delta, check_rc=0).stdout)
    assert (doc["mode"], doc["change_source"]) == ("full", "cbt-allocated")
    assert "2 backups of volume apps/data recorded snapshot handle" in doc["cbt_fallback"]
    doc = json.loads(run(*delta, "--parent", b1, check_rc=0).stdout)
    assert (doc["mode"], doc["change_source"], doc["parent"]) == ("incremental-cbt", "cbt-delta", b1)
    assert doc["changed_bytes"] == sum(n for _, n in changed_blocks(env.base_img, env.target_img))
    out = tmp_path / "restored.img"
    run("restore", "--repo", repo, "--volume", "apps/data", "--backup", doc["backup_id"], "--device", out, check_rc=0)
    assert sha256_file(out) == sha256_file(env.target_img)
    wrong = run(*delta[:-1], env.target.handle, "--snapshot-handle", "h9", "--parent", b2)  # b2 is of the base
    assert_one_line_error(wrong, 2, f"backup {b2} of apps/data recorded snapshot {env.base.handle}")
    assert_one_line_error(run(*base, "--device", env.target_img, *cbt_args(env), "--parent", b2), 2, "--base-handle")


@pytest.fixture
def cbt_env(tmp_path):
    from tests.cluster.test_cbt_client import running_env

    with running_env(tmp_path, "FIXED_LENGTH") as e:
        yield e


def test_what_cbt_mover_extents_prints_names_the_base_for_backup_extents(cbt_env, tmp_path):
    """``cbt-mover extents --base-handle H | cbt-mover backup --extents -`` builds on the backup of H, though a
    full backup of the volume committed in between; a listing from a starting offset names nothing."""
    from tests.cluster.test_cbt_client import cbt_args

    env = cbt_env
    repo = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", repo, check_rc=0)
    base = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    b1 = json.loads(run(*base, "--device", env.base_img, "--scan", "--snapshot-handle", env.base.handle).stdout)
    listing = run("extents", *cbt_args(env), "--base-handle", env.base.handle, check_rc=0).stdout
    run(*base, "--device", env.target_img, "--scan", "--full", check_rc=0)  # the newest is not the extents' base
    doc = json.loads(run(*base, "--device", env.target_img, "--extents", "-", stdin=listing, check_rc=0).stdout)
    assert (doc["mode"], doc["parent"]) == ("incremental-cbt", b1["backup_id"])
    out = tmp_path / "restored.img"
    run("restore", "--repo", repo, "--volume", "apps/data", "--backup", doc["backup_id"], "--device", out, check_rc=0)
    assert sha256_file(out) == sha256_file(env.target_img)
    part = run("extents", *cbt_args(env), "--base-handle", env.base.handle, "--starting-offset", "4096").stdout
    proc = run(*base, "--device", env.target_img, "--extents", "-", stdin=part)
    assert_one_line_error(proc, 2, "do not say which backup")
