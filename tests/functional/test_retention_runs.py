"""Retention by restore point, through the CLI as a user runs it: an application's runs are kept or forgotten
whole, the rules count complete runs, and the whole-application restore of "latest" still finds a complete run."""

from __future__ import annotations

import json

from movers.repo.repository import Repository
from movers.repo.selection import select
from movers.repo.store import open_store
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
APP = ["--tag", "cbt-mover.io/app=shop", "--namespace", "shop", "--run-pvcs", "data,logs"]


def _backup(url, pvc, image, run_id) -> str:
    """A scan backup of ``shop/<pvc>`` as a member of run ``run_id`` of the app shop; its backup id."""
    out = run(
        "backup",
        "--repo",
        url,
        "--volume",
        f"shop/{pvc}",
        "--pvc",
        pvc,
        "--device",
        image,
        "--scan",
        "--json",
        "--tag",
        f"cbt-mover.io/run={run_id}",
        *APP,
        check_rc=0,
    )
    return json.loads(out.stdout)["backup_id"]


def _images(tmp_path):
    images = {pvc: tmp_path / f"{pvc}.img" for pvc in ("data", "logs")}
    for n, path in enumerate(images.values()):
        make_image(path, 4 * MiB, seed=70 + n)
    return images


def _change(images, n):
    for pvc, path in images.items():
        write_blocks(path, [n * 4096 * 3], seed=n + (pvc == "logs") * 100)


def test_forget_keep_last_keeps_the_complete_run_and_the_app_restores_from_it(repo, tmp_path):
    """The sequence of issue 21: r1 and r2 complete, r3 partial (the logs mover failed), then forget
    --keep-last 1. Per-volume retention kept r3 of data and r2 of logs: no complete run was left and the
    whole-app restore of "latest" refused."""
    images = _images(tmp_path)
    made: dict[str, dict[str, tuple[str, str]]] = {}  # run -> pvc -> (backup id, sha256 of what it read)
    for n, run_id in enumerate(("r1", "r2", "r3"), 1):
        _change(images, n)
        for pvc in ("data",) if run_id == "r3" else ("data", "logs"):
            made.setdefault(run_id, {})[pvc] = (_backup(repo, pvc, images[pvc], run_id), sha256_file(images[pvc]))

    dry = run("forget", "--repo", repo, "--keep-last", "1", "--dry-run", check_rc=0).stdout
    assert "keep\trun r2 of shop (policy shop), complete\tnewest complete, last" in dry, dry
    assert "keep\trun r3 of shop (policy shop), partial (no backup of logs)\tpartial, newer than the newest" in dry
    assert "would forget\trun r1 of shop (policy shop), complete\tno rule keeps it" in dry, dry
    assert f"would forget\tshop/logs\t{made['r1']['logs'][0]}\trun r1" in dry, dry
    assert "would forget 2 backup(s)" in dry

    done = json.loads(run("forget", "--repo", repo, "--keep-last", "1", "--json", check_rc=0).stdout)
    assert sorted(r["run"] for r in done["runs"] if r["action"] == "keep") == ["r2", "r3"], done["runs"]
    assert len(done["deleted"]) == 2

    listing = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)
    runs = {r["run"]: r for r in listing["runs"]}
    assert set(runs) == {"r2", "r3"} and runs["r2"]["complete"] and runs["r3"]["missing"] == ["logs"], runs
    left = sorted((b["pvc"], b["tags"]["cbt-mover.io/run"]) for b in listing["backups"])
    assert left == [("data", "r2"), ("data", "r3"), ("logs", "r2")]

    # the whole-app restore of "latest" is the newest complete run, r2, and it restores what r2 read
    chosen = select(Repository.open(open_store(repo)), "shop", None, "latest")
    assert chosen.run == "r2" and chosen.complete and [s.pvc for s in chosen.volumes] == ["data", "logs"]
    for s in chosen.volumes:
        out = tmp_path / f"restored-{s.pvc}.img"
        backup_id, digest = made["r2"][s.pvc]
        assert s.manifest.backup_id == backup_id
        run("restore", "--repo", repo, "--volume", f"shop/{s.pvc}", "--backup", backup_id, "--device", out, check_rc=0)
        assert sha256_file(out) == digest, s.pvc

    # a newer complete run replaces both: the partial r3 is now older than it and goes with r2
    _change(images, 4)
    for pvc in ("data", "logs"):
        _backup(repo, pvc, images[pvc], "r4")
    text = run("forget", "--repo", repo, "--keep-last", "1", check_rc=0).stdout
    assert "forget\trun r3 of shop (policy shop), partial (no backup of logs)\tpartial, older than the newest" in text
    listing = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)
    assert [(r["run"], r["complete"]) for r in listing["runs"]] == [("r4", True)], listing["runs"]


def test_forget_of_one_volume_judges_its_runs_whole_and_a_policy_filter(repo, tmp_path):
    """``--volume`` deletes only that volume's backups, but by the verdict on whole runs (a kept run keeps it);
    ``--policy`` judges only the backups that policy made."""
    images = _images(tmp_path)
    for n, run_id in enumerate(("r1", "r2", "r3"), 1):
        _change(images, n)
        for pvc in ("data",) if run_id == "r3" else ("data", "logs"):
            _backup(repo, pvc, images[pvc], run_id)
    logs_only = json.loads(
        run("forget", "--repo", repo, "--volume", "shop/logs", "--keep-last", "1", "--json", check_rc=0).stdout
    )
    assert [v["volume"] for v in logs_only["volumes"]] == ["shop/logs"]
    assert [k["run"] for k in logs_only["volumes"][0]["kept"]] == ["r2"]  # per volume it was r2 too; r3 has none
    listing = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)
    assert sorted((b["pvc"], b["tags"]["cbt-mover.io/run"]) for b in listing["backups"]) == [
        ("data", "r1"),
        ("data", "r2"),
        ("data", "r3"),
        ("logs", "r2"),
    ]
    other = run("forget", "--repo", repo, "--policy", "nightly", "--keep-last", "1", "--json", check_rc=0)
    assert json.loads(other.stdout)["deleted"] == []  # no backup of policy nightly: nothing judged


def test_retiring_a_policys_backups_rules_keep_its_last_complete_run_until_named(repo, tmp_path):
    """A policy that no longer exists: ``forget --policy`` counts its backups (its newest complete run stays, as for
    any rule); ``forget --backup ID`` deletes exactly what is named, and bad input deletes nothing."""
    images = _images(tmp_path)
    ids = {}
    for n, run_id in enumerate(("r1", "r2"), 1):
        _change(images, n)
        ids[run_id] = [_backup(repo, pvc, images[pvc], run_id) for pvc in ("data", "logs")]
    retired = json.loads(
        run("forget", "--repo", repo, "--policy", "shop", "--keep-last", "1", "--json", check_rc=0).stdout
    )
    assert [(r["run"], r["action"]) for r in retired["runs"]] == [("r2", "keep"), ("r1", "forget")]
    store = sorted((tmp_path / "repo").rglob("*"))
    assert_one_line_error(
        run("forget", "--repo", repo, "--backup", ids["r2"][0], "--backup", "20240101T000000000000Z-abcdef"),
        3,
        "no backup 20240101T000000000000Z-abcdef",
        "nothing forgotten",
    )
    assert_one_line_error(
        run("forget", "--repo", repo, "--backup", ids["r2"][0], "--keep-last", "1"), 2, "give no --keep-* or --policy"
    )
    assert sorted((tmp_path / "repo").rglob("*")) == store, "bad input changes nothing"
    text = run("forget", "--repo", repo, *[x for b in ids["r2"] for x in ("--backup", b)], check_rc=0).stdout
    assert f"forget\tshop/data\t{ids['r2'][0]}\tnamed" in text and "forgot 2 backup(s)" in text, text
    assert json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"] == []
