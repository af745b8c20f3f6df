"""Bad input through the CLI: one line and exit 2, checked before any work (the repository is left
exactly as it was), never an internal error (exit 1)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.functional.test_cli import CLI, assert_one_line_error, run
from tests.volumes import make_image, sha256_file

MiB = 1 << 20


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 4 * MiB, seed=5, data_fraction=1.0)
    return path


def repo_files(url: str) -> set[str]:
    root = Path(url[len("file://") :])
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_backup_of_a_directory_is_refused_before_any_work(repo, tmp_path):
    before = repo_files(repo)
    for source in (["--scan"], ["--extents", "-"]):
        proc = run("backup", "--repo", repo, "--volume", "v", "--device", tmp_path, *source, stdin="")
        assert_one_line_error(proc, 2, str(tmp_path), "is a directory")
    assert repo_files(repo) == before


def test_backup_of_something_neither_a_file_nor_a_block_device_is_refused(repo, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_one_line_error(
        run("backup", "--repo", repo, "--volume", "v", "--device", fifo, "--scan"), 2, "neither a block device"
    )
    empty = tmp_path / "empty.img"
    empty.touch()
    assert_one_line_error(run("backup", "--repo", repo, "--volume", "v", "--device", empty, "--scan"), 2, "empty")


def test_restore_onto_a_directory_or_into_a_missing_directory_is_refused_before_any_work(repo, image, tmp_path):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    before = repo_files(repo)
    # the repository is not even opened: a nonexistent one would be exit 3
    nowhere = f"file://{tmp_path}/no-repo-here"
    for url in (repo, nowhere):
        proc = run("restore", "--repo", url, "--volume", "v", "--device", tmp_path)
        assert_one_line_error(proc, 2, str(tmp_path), "is a directory")
        proc = run("restore", "--repo", url, "--volume", "v", "--device", tmp_path / "no-dir" / "out.img")
        assert_one_line_error(proc, 2, "no-dir", "does not exist")
    assert repo_files(repo) == before and not (tmp_path / "no-dir").exists()


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 1 MiB tmpfs mounted for the test (root only), unmounted afterwards."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"tmpfs mounts unavailable: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_restore_onto_a_full_filesystem_is_a_usage_error(repo, image, tiny_tmpfs):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    target = tiny_tmpfs / "out.img"
    proc = run("restore", "--repo", repo, "--volume", "v", "--device", target)
    assert_one_line_error(proc, 2, str(target), "No space left on device", "incomplete")


def _file_size_limit(limit: int):
    """For ``preexec_fn``: files the process writes cannot grow past ``limit`` bytes (writes fail with
    EFBIG: Python ignores SIGXFSZ)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_restore_past_the_file_size_limit_is_a_usage_error(repo, image, tmp_path):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    target = tmp_path / "out.img"

    def restore_limited() -> subprocess.CompletedProcess:
        return subprocess.run(
            [*CLI, "restore", "--repo", repo, "--volume", "v", "--device", str(target)],
            capture_output=True,
            text=True,
            preexec_fn=_file_size_limit(MiB),
            timeout=120,
        )

    assert_one_line_error(restore_limited(), 2, str(target), "File too large")
    # an existing, large enough file: the limit is met while writing, not while sizing
    target.write_bytes(bytes(4 * MiB))
    assert_one_line_error(restore_limited(), 2, str(target), "File too large", "incomplete")
    run("restore", "--repo", repo, "--volume", "v", "--device", target, check_rc=0)
    assert sha256_file(target) == sha256_file(image)


def test_a_long_volume_id_is_refused_before_any_work(repo, image):
    before = repo_files(repo)
    proc = run("backup", "--repo", repo, "--volume", "a" * 2000, "--device", image, "--scan")
    assert_one_line_error(proc, 2, "2000 characters", "too long", "at most 255")
    assert repo_files(repo) == before  # nothing uploaded, no lease


BAD_IDS = [
    ("", "not valid"),
    ("a\nb", "'a\\nb' is not valid"),
    ("a\tb", "control character"),
    (" v", "leading or trailing space"),
    ("v ", "leading or trailing space"),
    ("caf\u00e9", "printable ASCII"),
    ("a" * 256, "256 bytes, at most 255"),
    ("/" * 86, "258 bytes"),  # 86 characters, 3 bytes each once quoted
]


@pytest.mark.parametrize("volume,fragment", BAD_IDS)
@pytest.mark.parametrize("command", ["backup", "restore", "ls", "verify", "forget"])
def test_every_command_checks_the_volume_id_before_opening_the_repository(tmp_path, image, command, volume, fragment):
    nowhere = f"file://{tmp_path}/no-repo-here"  # exit 3 if it were opened
    extra = {"backup": ["--device", image, "--scan"], "restore": ["--device", tmp_path / "o.img"]}.get(command, [])
    proc = run(command, "--repo", nowhere, f"--volume={volume}", *extra)
    assert_one_line_error(proc, 2, fragment)
    assert not (tmp_path / "o.img").exists()


def test_volume_ids_within_the_grammar_work_up_to_the_key_limit(repo, image, tmp_path):
    """255 key bytes fit a local folder repository's file names (and S3 keys); a namespace of 63 characters
    and a PVC name of 189 make such an id; spaces and punctuation inside an id are kept."""
    ids = ["a" * 255, "n" * 63 + "/" + "p" * 189, "c1/ns/data", "prod db:1@x+(y)~%", "~" * 85]
    for volume in ids:
        run("backup", "--repo", repo, "--volume", volume, "--device", image, "--scan", check_rc=0)
    listing = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"]
    assert sorted(b["volume"] for b in listing) == sorted(ids)
    text = run("ls", "--repo", repo, check_rc=0).stdout.splitlines()
    assert sorted(line.split("\t")[0] for line in text) == sorted(ids)
    out = tmp_path / "out.img"
    run("restore", "--repo", repo, "--volume", ids[1], "--device", out, check_rc=0)
    assert sha256_file(out) == sha256_file(image)


def test_ids_stored_before_the_grammar_are_listed_escaped_one_line_each(repo, image):
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    backups = Path(repo[len("file://") :]) / "backups"
    shutil.copytree(backups / "v", backups / "a%0Ab")  # what `--volume $'a\nb'` stored before the check
    lines = run("ls", "--repo", repo, check_rc=0).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["a\\nb", "v"]
    listing = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"]
    assert [b["volume"] for b in listing] == ["a\nb", "v"]
    # they stay verifiable (and so prunable: nothing reads them back through the grammar)
    assert json.loads(run("verify", "--repo", repo, "--json", check_rc=0).stdout)["backups_checked"] == 2


def test_run_backup_checks_the_volume_id_before_writing_anything(tmp_path, image):
    from movers.errors import UsageError
    from movers.pipeline.backup import run_backup
    from movers.repo.manifest import VolumeIdentity
    from movers.repo.repository import Repository
    from movers.repo.store import open_store

    url = f"file://{tmp_path}/engine-repo"
    repo = Repository.init(open_store(url))
    before = repo_files(url)
    with pytest.raises(UsageError, match="too long"):
        run_backup(repo, str(image), VolumeIdentity("ns/" + "p" * 300))
    assert repo_files(url) == before


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["backup", "--volume", "v"], "required: --device"),
        (["restroe"], "invalid choice: 'restroe'"),
        (["prune", "--repo", "file:///x", "--repack-max"], "--repack-max: expected one argument"),
        ([], "required: command"),
    ],
)
def test_argument_errors_are_one_line_with_a_hint(argv, fragment):
    proc = run(*argv)
    assert_one_line_error(proc, 2, fragment, "--help")


def test_version():
    from importlib.metadata import version

    proc = run("--version", check_rc=0)
    assert proc.stdout.strip() == f"cbt-mover {version('cbt-mover')}"


def test_the_cli_starts_without_the_policy_model():
    """Every command pays the CLI's imports: the policy model (pydantic, cron) is loaded only by what needs it
    (it cost each command 45 ms once ``install`` imported it at start)."""
    import subprocess
    import sys

    probe = (
        "import sys, movers.cli; movers.cli.build_parser();"
        " print(sorted(m for m in ('pydantic', 'movers.policy.checks') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_a_restore_starts_without_the_cluster_modules():
    """A restore's start-up is part of its recovery time: the writer's CLI path (``restore_volume``) loads none of
    the restore-app use case's cluster modules (``movers.restore`` re-exports them lazily), nor durationpy."""
    import subprocess
    import sys

    heavy = (
        "movers.kube.apply",
        "movers.restore.finish",
        "movers.restore.plan",
        "movers.restore.writers",
        "durationpy",
    )
    probe = (
        "import sys, movers.cli, movers.restore.volume; movers.cli.build_parser();"
        f" print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
    lazy = "from movers import restore as r; print(r.plan_targets.__module__, r.Target.__module__)"
    out = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["movers.restore.plan", "movers.restore.plan"]


def test_a_restore_checks_its_target_before_the_repository_key(repo, tmp_path):
    """The CLI opens the repository while the restore's modules load, but a bad target is still the error a
    restore reports first (the key's error only once the target is fine), and the target is left alone."""
    missing_dir = tmp_path / "no-such-dir" / "target.img"
    env = {"CBT_MOVER_PASSWORD": "a passphrase for an unencrypted repository"}
    proc = run("restore", "--repo", repo, "--volume", "v", "--device", missing_dir, env=env)
    assert proc.returncode == 2 and str(missing_dir.parent) in proc.stderr, proc.stderr
    assert not missing_dir.parent.exists()
    proc = run("restore", "--repo", repo, "--volume", "v", "--device", tmp_path / "target.img", env=env)
    assert_one_line_error(proc, 2, "is not encrypted, but a key was given")


def test_a_restore_without_a_cbt_delta_does_not_load_grpc(repo, image, tmp_path):
    """The gRPC stack (the SnapshotMetadata client) is part of a restore's start-up only when it asks for a delta."""
    import sys

    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    target = tmp_path / "target.img"
    shutil.copy(image, target)
    probe = (
        "import sys; from movers.cli import main;"
        f" rc = main(['restore', '--repo', {repo!r}, '--volume', 'v', '--device', {str(target)!r},"
        " '--overwrite', 'if-changed', '--json']);"
        " print(rc, 'grpc' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 False", out
