"""``cbt-mover mount`` as users run it: a real subprocess serving a real FUSE mount of a backup in a ``file://``
repository, the image loop-mounted read-only by the kernel's ext4, read with ordinary system calls.

Mounting needs root and FUSE (skipped with the reason otherwise); the refusals before any mount need neither.
Whatever a test mounts it unmounts, and every loop device it attaches it detaches.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster.kubelet.testing import wait_until
from movers.repo import pack
from movers.repo.repository import Repository
from movers.repo.store import open_store
from tests.volumes import loop_device, make_image

MiB = 1 << 20
CLI = [sys.executable, "-m", "movers"]
VOLUME = "ns/data"
IMAGE_NAME = "ns_data.img"
PASSWORD = "mount test passphrase"
ACCEPTANCE_S = 3.0  # issue 24: the 1 MiB file reads back within 3 s of starting the mount


def _fuse_missing() -> str | None:
    if os.geteuid() != 0:
        return "mounting FUSE and loop devices needs root"
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return "needs /dev/fuse and fusermount3 (fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (OSError, AttributeError) as err:
        return f"libfuse 3 cannot be loaded: {err}"
    return None


needs_fuse = pytest.mark.skipif(_fuse_missing() is not None, reason=str(_fuse_missing()))


def _env(encrypted: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CBT_MOVER_"))}
    if encrypted:
        env.update(CBT_MOVER_PASSWORD=PASSWORD, CBT_MOVER_KDF_COST="10")
    return env


def run(*args, encrypted: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, env={**_env(encrypted), **(env or {})}, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, rc: int, *fragments: str) -> None:
    assert proc.returncode == rc, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cbt-mover: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@dataclass(frozen=True)
class Backed:
    """An ext4 image backed up with ``--scan``: its files, the repository and the backup's numbers."""

    repo: str
    encrypted: bool
    image: Path
    small: bytes
    backup_id: str
    capacity: int
    restore_fetched: int  # a full restore's fetched bytes: the stored volume


@pytest.fixture(scope="module")
def ext4_image(tmp_path_factory) -> tuple[Path, bytes]:
    """A 256 MiB ext4 image (``mkfs.ext4 -d``, no mount) holding a 64 MiB and a 1 MiB file of random bytes."""
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("needs mkfs.ext4")
    work = tmp_path_factory.mktemp("ext4")
    src = work / "src"
    src.mkdir()
    small = os.urandom(MiB)
    (src / "big.bin").write_bytes(os.urandom(64 * MiB))
    (src / "small.bin").write_bytes(small)
    image = work / "fs.img"
    subprocess.run(["mkfs.ext4", "-q", "-d", str(src), str(image), "256M"], check=True, capture_output=True)
    return image, small


def _backed_up(tmp: Path, image: Path, small: bytes, encrypted: bool) -> Backed:
    repo = f"file://{tmp}/repo"
    init = ["init", "--repo", repo] + ([] if encrypted else ["--insecure-no-encryption"])
    assert run(*init, encrypted=encrypted).returncode == 0
    backup = run(
        "backup", "--repo", repo, "--volume", VOLUME, "--device", image, "--scan", "--json", encrypted=encrypted
    )
    assert backup.returncode == 0, backup.stderr
    made = json.loads(backup.stdout)
    restore = run(
        "restore", "--repo", repo, "--volume", VOLUME, "--device", tmp / "full.img", "--json", encrypted=encrypted
    )
    assert restore.returncode == 0, restore.stderr
    (tmp / "full.img").unlink()
    return Backed(
        repo,
        encrypted,
        image,
        small,
        made["backup_id"],
        made["capacity_bytes"],
        json.loads(restore.stdout)["fetched_bytes"],
    )


@pytest.fixture(scope="module")
def backups(ext4_image, tmp_path_factory) -> dict[bool, Backed]:
    """The ext4 image backed up into a plain and into an encrypted repository (by ``encrypted``)."""
    image, small = ext4_image
    return {enc: _backed_up(tmp_path_factory.mktemp("repo"), image, small, enc) for enc in (False, True)}


class Mount:
    """A running ``cbt-mover mount`` of a backup (the subprocess) and its mount point."""

    def __init__(self, proc: subprocess.Popen, mountpoint: Path) -> None:
        self.proc, self.mountpoint = proc, mountpoint
        self.image = mountpoint / IMAGE_NAME

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Signal the command and wait for it: its exit status, stdout and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return any(line.split()[4] == str(path) for line in f)


@contextlib.contextmanager
def mounted(backed: Backed, mountpoint: Path, *extra: str) -> Iterator[Mount]:
    """``cbt-mover mount --json`` of ``backed`` at ``mountpoint``, waited for until its image is there (the
    directory is empty before); stopped and unmounted afterwards whatever happened."""
    mountpoint.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [*CLI, "mount", "--repo", backed.repo, "--volume", VOLUME, "--json", *extra, str(mountpoint)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(backed.encrypted),
    )
    mount = Mount(proc, mountpoint)
    try:
        wait_until(lambda: proc.poll() is not None or mount.image.exists(), timeout=30, what="the mount")
        assert proc.poll() is None, proc.communicate()[1]
        yield mount
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=30)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if _mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)


@contextlib.contextmanager
def loop_mounted(image: Path, target: Path) -> Iterator[Path]:
    """``image`` on a read-only loop device mounted read-only at ``target``; unmounted and detached afterwards."""
    target.mkdir(exist_ok=True)
    with loop_device(image, read_only=True) as dev:
        subprocess.run(["mount", "-o", "ro", dev, str(target)], check=True, capture_output=True)
        try:
            yield target
        finally:
            subprocess.run(["umount", str(target)], check=False)


@needs_fuse
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_file_reads_back_from_the_mounted_image_within_3_s_fetching_little(backups, encrypted, tmp_path):
    backed = backups[encrypted]
    started = time.monotonic()
    with mounted(backed, tmp_path / "mnt") as mount:
        with loop_mounted(mount.image, tmp_path / "fs") as fs:
            assert (fs / "small.bin").read_bytes() == backed.small, "bit-exact"
            elapsed = time.monotonic() - started
        rc, out, err = mount.stop(signal.SIGTERM)
    print(f"mount to 1 MiB file read back ({'encrypted' if backed.encrypted else 'plain'}): {elapsed:.2f} s")
    assert elapsed < ACCEPTANCE_S, f"{elapsed:.2f} s from starting the mount to the file read back"
    assert rc == 0, err
    result = json.loads(out)
    assert out.count("\n") == 1 and result["volume"] == VOLUME and result["backup_id"] == backed.backup_id
    assert result["image"] == str(tmp_path / "mnt" / IMAGE_NAME) and result["chunks_fetched"] > 0
    assert 0 < result["fetched_bytes"] <= 0.10 * backed.restore_fetched, (result, backed.restore_fetched)
    assert result["duration_s"] > 0
    ready = [line for line in err.splitlines() if line.startswith("cbt-mover: ready: ")]
    assert len(ready) == 1 and str(tmp_path / "mnt" / IMAGE_NAME) in ready[0], err
    assert not _mounted(tmp_path / "mnt"), "unmounted on SIGTERM"


@needs_fuse
def test_the_image_is_read_only_of_the_volume_size_and_an_outside_unmount_ends_the_command(backups, tmp_path):
    backed = backups[False]
    with mounted(backed, tmp_path / "mnt") as mount:
        assert os.listdir(mount.mountpoint) == [IMAGE_NAME]
        st = os.stat(mount.image)
        assert st.st_size == backed.capacity and stat.S_IMODE(st.st_mode) == 0o444 and stat.S_ISREG(st.st_mode)
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC):
            with pytest.raises(OSError) as refused:
                os.open(mount.image, flags)
            assert refused.value.errno == errno.EROFS
        with pytest.raises(OSError) as refused:
            (mount.mountpoint / "new").write_bytes(b"x")
        assert refused.value.errno == errno.EROFS
        with open(mount.image, "rb") as f:
            assert f.read(4096) == backed.image.read_bytes()[:4096]
            f.seek(backed.capacity - 10)
            assert f.read(100) == backed.image.read_bytes()[-10:], "the image ends where the volume does"
        volume = backed.image.read_bytes()
        ranges = [
            (random.Random(n).randrange(backed.capacity), random.Random(n).choice([512, 70_000, MiB]))
            for n in range(64)
        ]

        def read(at_length: tuple[int, int]) -> bool:
            at, length = at_length
            with open(mount.image, "rb", buffering=0) as f:
                return os.pread(f.fileno(), length, at) == volume[at : at + length]

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(read, ranges)), "concurrent reads are each bit-exact"
        subprocess.run(["fusermount3", "-u", str(mount.mountpoint)], check=True)
        rc, out, err = mount.proc.wait(timeout=30), *mount.proc.communicate()
        assert rc == 0, err
        assert json.loads(out)["fetched_bytes"] > 0
        assert "Traceback" not in err and not _mounted(mount.mountpoint)


@needs_fuse
def test_a_damaged_chunk_fails_its_reads_with_eio_and_one_line_while_the_rest_serves(tmp_path):
    image = tmp_path / "v.img"
    make_image(image, 16 * MiB, seed=7, data_fraction=0.9)
    volume = image.read_bytes()
    repo_url = f"file://{tmp_path}/repo"
    assert run("init", "--repo", repo_url, "--insecure-no-encryption").returncode == 0
    assert run("backup", "--repo", repo_url, "--volume", VOLUME, "--device", image, "--scan").returncode == 0
    repo = Repository.open(open_store(repo_url))
    manifest = repo.latest(VOLUME)
    entries = sorted(e for _i, page, _l in repo.iter_located_map(manifest) for e in page)
    voff, length, cid, _coff = entries[len(entries) // 2]
    loc = repo.index().get(cid)
    path = tmp_path / "repo" / pack.pack_key(loc.pack_id)
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.stored_len // 2] ^= 0x01
    path.write_bytes(bytes(data))
    other = next(e for e in entries if e[2] != cid and e[0] >= voff + length + 2 * MiB)
    backed = Backed(repo_url, False, image, b"", manifest.backup_id, manifest.capacity_bytes, 0)
    with mounted(backed, tmp_path / "mnt") as mount:
        fd = os.open(mount.image, os.O_RDONLY)
        try:
            for _attempt in range(2):
                with pytest.raises(OSError) as failed:
                    os.pread(fd, 4096, voff + length // 2 // 4096 * 4096)
                assert failed.value.errno == errno.EIO
            assert os.pread(fd, 4096, other[0]) == volume[other[0] : other[0] + 4096], "the rest still serves"
        finally:
            os.close(fd)
        rc, out, err = mount.stop(signal.SIGINT)
    assert rc == 0 and json.loads(out)["volume"] == VOLUME, err
    failures = [line for line in err.splitlines() if "cannot read bytes" in line]
    assert failures and "Traceback" not in err, err
    for line in failures:
        start, end = (int(n) for n in line.split("[", 1)[1].split(")", 1)[0].split(", "))
        assert start < voff + length and end > voff and f"of volume {VOLUME}" in line, line
    assert not _mounted(tmp_path / "mnt")


def test_no_fuse_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "mnt").mkdir()
    proc = run(
        "mount", "--repo", f"file://{tmp_path}/repo", "--volume", VOLUME, tmp_path / "mnt",
        env={"FUSE_LIBRARY_PATH": str(tmp_path / "no-libfuse3.so")},
    )  # fmt: skip
    assert_one_line_error(proc, 2, "FUSE is not available here")


def test_a_mount_point_that_is_missing_not_a_directory_or_not_empty_is_refused(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    for where, why in (("missing", "does not exist"), ("file", "is not a directory"), ("full", "is not empty")):
        proc = run("mount", "--repo", f"file://{tmp_path}/repo", "--volume", VOLUME, tmp_path / where)
        assert_one_line_error(proc, 2, why)
    assert (tmp_path / "full" / "x").read_text() == "x"


@needs_fuse
def test_an_unknown_volume_or_backup_is_exit_3_and_mounts_nothing(backups, tmp_path):
    backed = backups[False]
    (tmp_path / "mnt").mkdir()
    for extra in (["--volume", "ns/other"], ["--volume", VOLUME, "--backup", "20200101T000000000000Z-000000"]):
        proc = run("mount", "--repo", backed.repo, *extra, tmp_path / "mnt")
        assert_one_line_error(proc, 3, "not found" if "--backup" in extra else "no backups")
    assert not _mounted(tmp_path / "mnt") and os.listdir(tmp_path / "mnt") == []
