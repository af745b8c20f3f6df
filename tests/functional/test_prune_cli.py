"""``cbt-mover forget`` and ``cbt-mover prune`` as users run them."""

from __future__ import annotations

import json

from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20


def test_forget_then_prune_via_cli(tmp_path):
    url = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, 8 * MiB, seed=5)
    for n in range(3):
        if n:
            write_blocks(image, [n * 4096 * 50], seed=n)
        run("backup", "--repo", url, "--volume", "v", "--device", image, "--scan", check_rc=0)
    want = sha256_file(image)

    dry = json.loads(run("forget", "--repo", url, "--keep-last", "1", "--dry-run", "--json", check_rc=0).stdout)
    assert dry["dry_run"] and len(dry["deleted"]) == 2
    assert dry["volumes"][0]["kept"][0]["reasons"] == ["newest", "last"]
    text = run("forget", "--repo", url, "--volume", "v", "--keep-last", "1", check_rc=0).stdout
    assert "forgot 2 backup(s)" in text and "keep\tv\t" in text

    dry = json.loads(run("prune", "--repo", url, "--grace", "0", "--dry-run", "--json", check_rc=0).stdout)
    assert dry["dry_run"] and dry["map_objects_deleted"] > 0
    kept = json.loads(run("prune", "--repo", url, "--json", check_rc=0).stdout)  # default grace 24h: all in grace
    assert kept["map_objects_deleted"] == 0 and kept["map_objects_in_grace"] == dry["map_objects_deleted"]
    done = json.loads(run("prune", "--repo", url, "--grace", "0s", "--json", check_rc=0).stdout)
    assert done["map_objects_deleted"] == dry["map_objects_deleted"]
    assert "deleted 0 pack(s)" in run("prune", "--repo", url, "--grace", "0", check_rc=0).stdout

    out = tmp_path / "out.img"
    run("restore", "--repo", url, "--volume", "v", "--device", out, check_rc=0)
    assert sha256_file(out) == want
    assert json.loads(run("verify", "--repo", url, "--json", check_rc=0).stdout)["ok"]


def test_forget_and_prune_errors(tmp_path):
    url = f"file://{tmp_path}/repo"
    assert_one_line_error(run("forget", "--repo", url, "--keep-last", "1"), 3, "no cbt-mover repository")
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    assert_one_line_error(run("forget", "--repo", url), 2, "--keep-last")
    assert_one_line_error(run("forget", "--repo", url, "--keep-daily", "-1"), 2, "keep-daily")
    assert_one_line_error(run("forget", "--repo", url, "--volume", "x", "--keep-last", "1"), 3, "volume x")
    assert_one_line_error(run("prune", "--repo", url, "--grace", "soon"), 2, "--grace")
    assert_one_line_error(run("prune", "--repo", url, "--grace=-1h"), 2, "--grace")
