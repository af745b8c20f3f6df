"""Restore in place (``movers.pipeline.inplace``): onto a device holding another version of the volume, compare
by what the map records, fetch and write only what differs, and leave the device bit-exact."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from localcluster.kubelet.testing import wait_until
from movers.errors import UsageError
from movers.pipeline.backup import run_backup
from movers.pipeline.inplace import TargetBusy, restore_in_place
from movers.pipeline.restore import run_restore
from movers.repo.config import RepoConfig
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import open_store
from tests.volumes import loop_device, make_image, write_blocks

MiB = 1 << 20
SIZE = 16 * MiB


@pytest.fixture
def repo(tmp_path):
    return Repository.init(open_store(f"file://{tmp_path}/repo"))


def _changed(path, regions, length=256 * 1024, seed=9):
    """Random bytes over ``regions`` (offsets) of ``length`` each; the changed extents."""
    return write_blocks(path, regions, seed=seed, length=length)


def test_compare_fetches_and_writes_only_what_differs_and_leaves_the_device_bit_exact(repo, tmp_path):
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=1, data_fraction=0.8)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    device = tmp_path / "live.img"
    shutil.copyfile(image, device)
    changed = _changed(device, [1 * MiB, 5 * MiB + 4096, 11 * MiB])
    with open(device, "r+b") as f:  # a range the backup holds as a hole now holds data
        hole = next(off for off in range(0, SIZE, 64 * 1024) if image.read_bytes()[off : off + 65536] == bytes(65536))
        os.pwrite(f.fileno(), b"\x01" * 4096, hole)
    full = run_restore(repo, manifest, str(tmp_path / "fresh.img"))

    stats = restore_in_place(repo, manifest, str(device), workers=2)

    assert device.read_bytes() == image.read_bytes()
    changed_bytes = sum(n for _o, n in changed) + 4096
    assert stats.written_bytes + stats.zeroed_bytes == changed_bytes, "each changed 4 KiB block, and only those"
    assert stats.zeroed_bytes >= 4096, "the hole that held data (and changed regions over holes) zeroed"
    assert stats.compared_bytes >= SIZE, "without extents the whole device is compared"
    assert 0 < stats.chunks_verified <= 2 * 3, "the chunks under the three changed regions (one or two each)"
    assert stats.fetched_bytes <= 0.3 * full.fetched_bytes, (stats, full.fetched_bytes)
    again = restore_in_place(repo, manifest, str(device), workers=2)
    assert (again.fetched_bytes, again.written_bytes, again.zeroed_bytes) == (0, 0, 0), "nothing differs any more"


def test_with_extents_only_the_extents_are_read(repo, tmp_path):
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=2, data_fraction=0.8)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    device = tmp_path / "live.img"
    shutil.copyfile(image, device)
    changed = _changed(device, [2 * MiB, 9 * MiB + 8192])

    stats = restore_in_place(repo, manifest, str(device), extents=changed, workers=2)

    assert device.read_bytes() == image.read_bytes()
    assert stats.compared_bytes == sum(n for _o, n in changed), stats
    assert stats.written_bytes <= sum(n for _o, n in changed)


def test_blocks_a_cbt_incremental_read_in_part_are_compared_by_chunk(repo, tmp_path):
    """An incremental from extents leaves 64 KiB blocks without a digest: they are compared by their chunks' hashes
    and, for parts of chunks, with the fetched chunk."""
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=3, data_fraction=0.9)
    run_backup(repo, str(image), VolumeIdentity("ns/v"))
    extents = write_blocks(image, [3 * MiB + 4096, 7 * MiB + 12288], seed=4)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"), extents=extents)
    device = tmp_path / "live.img"
    shutil.copyfile(image, device)
    write_blocks(device, [3 * MiB + 4096, 12 * MiB], seed=5)

    stats = restore_in_place(repo, manifest, str(device), workers=2)

    assert device.read_bytes() == image.read_bytes()
    assert stats.written_bytes <= 2 * 4096, stats


@pytest.mark.parametrize("size", [SIZE - 4096, SIZE + MiB])
def test_a_target_of_another_size_is_refused_and_left_alone(repo, tmp_path, size):
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=6)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    device = tmp_path / "other.img"
    device.write_bytes(b"\x07" * size)
    with pytest.raises(UsageError, match=f"has {size} bytes, the backup's volume {SIZE}"):
        restore_in_place(repo, manifest, str(device))
    assert device.read_bytes() == b"\x07" * size
    with pytest.raises(UsageError, match="does not exist"):
        restore_in_place(repo, manifest, str(tmp_path / "missing.img"))


@pytest.fixture
def zeroed_loop_device(tmp_path):
    backing = tmp_path / "backing.img"
    backing.write_bytes(bytes(SIZE))
    with loop_device(backing) as dev:
        yield dev, backing


def _exclusive(dev: str) -> bool:
    """Whether nothing holds ``dev`` exclusively (the kernel may finish releasing a superblock after umount
    returns, and a parallel test's probe may hold it for a moment)."""
    try:
        os.close(os.open(dev, os.O_RDONLY | os.O_EXCL))
    except OSError:
        return False
    return True


def test_a_device_in_use_is_refused_and_its_backing_file_too(repo, tmp_path, zeroed_loop_device):
    """A mounted block device (Linux refuses ``O_EXCL`` then), and an image file that backs a loop device."""
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("needs mkfs.ext4")
    dev, backing = zeroed_loop_device
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=7)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    with pytest.raises(TargetBusy, match=f"{backing} is in use: it backs {dev}"):
        restore_in_place(repo, manifest, str(backing))
    subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", dev, str(mnt)], check=True)
    try:
        before = open(dev, "rb").read()
        with pytest.raises(TargetBusy, match=f"{dev} is in use"):
            restore_in_place(repo, manifest, dev)
        assert open(dev, "rb").read() == before
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    wait_until(lambda: _exclusive(dev), 10, f"{dev} released by the unmount")
    stats = restore_in_place(repo, manifest, dev, workers=2)  # unmounted: restored
    assert open(dev, "rb").read() == image.read_bytes() and stats.written_bytes > 0


# ---------------------------------------------------------------- the CLI: cbt-mover restore --overwrite if-changed


@pytest.fixture
def cli_backup(tmp_path):
    """A repository (``file://``, unencrypted), an image backed up with ``--scan``, the backup's id."""
    import json

    from tests.functional.test_cli import run

    url = f"file://{tmp_path}/cli-repo"
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    image = tmp_path / "vol.img"
    make_image(image, SIZE, seed=11, data_fraction=0.8)
    proc = run("backup", "--repo", url, "--volume", "v", "--device", image, "--scan", "--json", check_rc=0)
    return url, image, json.loads(proc.stdout)["backup_id"]


def test_the_cli_restores_in_place_and_says_what_it_compared_fetched_and_wrote(cli_backup, tmp_path):
    import json

    from tests.functional.test_cli import run

    url, image, backup_id = cli_backup
    device = tmp_path / "live.img"
    shutil.copyfile(image, device)
    changed = _changed(device, [4 * MiB, 13 * MiB])
    extents = tmp_path / "changed.jsonl"
    extents.write_text("".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changed))
    args = ("restore", "--repo", url, "--volume", "v", "--device", device, "--overwrite", "if-changed", "--json")

    by_compare = json.loads(run(*args, "--verify-device", check_rc=0).stdout)
    assert device.read_bytes() == image.read_bytes()
    assert by_compare["backup_id"] == backup_id and by_compare["compared_bytes"] >= SIZE
    assert by_compare["written_bytes"] + by_compare["zeroed_bytes"] == sum(n for _o, n in changed)
    assert 0 < by_compare["fetched_bytes"] and by_compare["readback"]["checked_bytes"] > 0

    _changed(device, [4 * MiB, 13 * MiB])
    by_extents = json.loads(run(*args, "--extents", extents, check_rc=0).stdout)
    assert device.read_bytes() == image.read_bytes()
    assert by_extents["compared_bytes"] == sum(n for _o, n in changed), "only the extents are read"
    text = run(*args[:-1], check_rc=0).stdout
    assert f"in place: compared {SIZE // MiB}.0 MiB, fetched 0 B, wrote 0 B" in text, text


def test_the_cli_refuses_what_cannot_restore_in_place_in_one_line_and_writes_nothing(cli_backup, tmp_path):
    from tests.functional.test_cli import assert_one_line_error, run

    url, _image, _backup_id = cli_backup
    device = tmp_path / "live.img"
    device.write_bytes(b"\x05" * SIZE)
    outside = tmp_path / "outside.jsonl"
    outside.write_text(f'{{"offset": {SIZE - 4096}, "length": 8192}}\n')
    small = tmp_path / "small.img"
    small.write_bytes(b"\x05" * (SIZE // 2))
    base = ("restore", "--repo", url, "--volume", "v")
    cases = [
        ((*base, "--device", device, "--extents", outside), "it needs --overwrite if-changed"),
        ((*base, "--device", device, "--overwrite", "if-changed", "--assume-zeroed"), "contradict"),
        ((*base, "--device", device, "--overwrite", "if-changed", "--extents", outside), "past the device end"),
        ((*base, "--device", small, "--overwrite", "if-changed"), "an in-place restore needs a device of the volume"),
        ((*base, "--device", tmp_path / "none.img", "--overwrite", "if-changed"), "does not exist"),
    ]
    for args, words in cases:
        assert_one_line_error(run(*args), 2, words)
    assert device.read_bytes() == b"\x05" * SIZE and small.read_bytes() == b"\x05" * (SIZE // 2)
    assert not (tmp_path / "none.img").exists()


def test_an_empty_sparse_image_is_compared_by_its_holes_and_filled(repo, tmp_path):
    """The holes of an image file read as zeros without a read (``SEEK_DATA``): compared with the zero digest; the
    blocks the backup holds data in differ, and are written."""
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=12, data_fraction=0.5)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    device = tmp_path / "sparse.img"
    with open(device, "wb") as f:
        f.truncate(SIZE)

    stats = restore_in_place(repo, manifest, str(device), workers=2)

    assert device.read_bytes() == image.read_bytes()
    data = (
        SIZE - sum(1 for off in range(0, SIZE, 65536) if image.read_bytes()[off : off + 65536] == bytes(65536)) * 65536
    )
    assert stats.written_bytes == data and stats.zeroed_bytes == 0, (stats, data)
    assert stats.compared_bytes >= SIZE


def test_a_block_device_larger_than_the_volume_is_restored_and_its_tail_left_alone(repo, tmp_path):
    """Provisioners round sizes up: a block device of at least the volume's size is a target, as for a full
    restore; the bytes past the volume are not touched."""
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=13)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    backing = tmp_path / "larger.img"
    backing.write_bytes(b"\x09" * (SIZE + MiB))
    with loop_device(backing) as dev:
        restore_in_place(repo, manifest, dev, workers=2)
    data = backing.read_bytes()
    assert data[:SIZE] == image.read_bytes() and data[SIZE:] == b"\x09" * MiB


@pytest.mark.parametrize("version", [1, 2])
def test_with_extents_only_the_map_pages_they_touch_are_read(tmp_path, version):
    """Extents name what differs: the map is read where they are (the pages they touch), not whole, and the chunks
    fetched are theirs; version 1 pages (no chunk locations) find their chunks in the index."""
    config = RepoConfig(chunk_max=256 * 1024, page_size=MiB, format_version=version)
    repo = Repository.init(open_store(f"file://{tmp_path}/repo"), config)
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=14, data_fraction=0.9)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"))
    assert len(repo.page_slots(manifest)) == SIZE // MiB
    device = tmp_path / "live.img"
    shutil.copyfile(image, device)
    changed = _changed(device, [5 * MiB + 8192], length=8192)
    repo = Repository.open(open_store(f"file://{tmp_path}/repo"))  # counts from zero
    manifest = repo.resolve("ns/v", "latest")
    before = repo.store.requests.as_dict()["get"]

    stats = restore_in_place(repo, manifest, str(device), extents=changed, workers=2)

    assert device.read_bytes() == image.read_bytes()
    assert stats.written_bytes == 8192 and stats.chunks_verified == 1, stats
    map_gets = repo.store.requests.as_dict()["get"] - before
    # the map's directory and the one page touched, plus the index objects for version 1: not the 16 pages
    assert map_gets <= 4, map_gets


@pytest.mark.parametrize("version", [1, 2])
def test_a_compare_is_bit_exact_whatever_the_map_records(tmp_path, version):
    """Blocks with a digest (zeros compared as zeros, data by hash), blocks a CBT incremental read in part (by
    their chunks' hashes, version 1 chunks located by the index), holes that now hold data, and data that is now
    zeros: all made bit-exact, writing only the 4 KiB blocks that differ."""
    config = RepoConfig(chunk_max=256 * 1024, page_size=4 * MiB, format_version=version)
    repo = Repository.init(open_store(f"file://{tmp_path}/repo"), config)
    image = tmp_path / "v.img"
    make_image(image, SIZE, seed=15, data_fraction=0.7)
    run_backup(repo, str(image), VolumeIdentity("ns/v"))
    extents = write_blocks(image, [2 * MiB + 4096, 9 * MiB + 12288], seed=16)
    manifest = run_backup(repo, str(image), VolumeIdentity("ns/v"), extents=extents)
    content = image.read_bytes()
    hole = next(off for off in range(0, SIZE, 65536) if content[off : off + 65536] == bytes(65536))
    data = next(off for off in range(0, SIZE, 65536) if content[off : off + 4096] != bytes(4096))
    device = tmp_path / "live.img"
    device.write_bytes(content)  # every block allocated: its zeros are read, not skipped as holes
    changed = write_blocks(device, [2 * MiB + 4096, 12 * MiB], seed=17)
    with open(device, "r+b") as f:
        os.pwrite(f.fileno(), b"\x07" * 4096, hole + 8192)  # a hole of the backup now holds data
        os.pwrite(f.fileno(), bytes(4096), data)  # data of the backup now zeros

    stats = restore_in_place(repo, manifest, str(device), workers=2)

    assert device.read_bytes() == content
    assert stats.written_bytes + stats.zeroed_bytes <= sum(n for _o, n in changed) + 2 * 4096, stats
    again = restore_in_place(repo, manifest, str(device), workers=2)  # parts of chunks without a digest: fetched
    assert (again.written_bytes, again.zeroed_bytes) == (0, 0) and device.read_bytes() == content
