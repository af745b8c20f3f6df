"""``movers.repo.lineage``: a delta's base is a backup of the same source volume, or there is none and why."""

from __future__ import annotations

import pytest

from movers.pipeline.backup import run_backup
from movers.repo.lineage import BaseChoice, choose_base, same_volume
from movers.repo.manifest import SnapshotIdentity, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import make_image

VOL = "shop/data"


@pytest.fixture
def repo():
    return Repository.init(MemoryStore())


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "v.img"
    make_image(path, 1 << 20, seed=7)
    return str(path)


def _backup(repo, image, snap_handle, pv_handle=None, pv_uid=None, name=None):
    volume = VolumeIdentity(VOL, namespace="shop", pvc="data", pv_volume_handle=pv_handle, pv_uid=pv_uid)
    snapshot = SnapshotIdentity(volume_snapshot=name, namespace="shop" if name else None, snapshot_handle=snap_handle)
    return run_backup(repo, image, volume, snapshot=snapshot)


def _current(pv_volume_handle, pv_uid=None):
    """The source volume a delta is asked for now: its CSI volume handle and PV uid."""
    return VolumeIdentity(VOL, pv_volume_handle=pv_volume_handle, pv_uid=pv_uid)


def test_same_volume():
    a = VolumeIdentity("v", pv_volume_handle="vol-1", pv_uid="u1")
    assert same_volume(a, VolumeIdentity("v", pv_volume_handle="vol-1", pv_uid="u1")) is None
    assert same_volume(a, VolumeIdentity("v", pv_volume_handle="vol-1")) is None, "a uid on one side only"
    assert same_volume(VolumeIdentity("v"), a) is None, "nothing recorded says they differ"
    assert "another volume" in same_volume(a, VolumeIdentity("v", pv_volume_handle="vol-2"))
    assert "re-created (uid u2, the base's u1)" in same_volume(
        a, VolumeIdentity("v", pv_volume_handle="vol-1", pv_uid="u2")
    )


def test_choose_base(repo, image):
    assert choose_base(repo, _current("vol-1")) == BaseChoice(None, f"no earlier backup of {VOL}: full backup")
    legacy = _backup(repo, image, "snap-0")  # written before volume identities were recorded
    handle, why, *_ = choose_base(repo, _current("vol-1", "u1"))
    assert handle is None and "records no source volume" in why and legacy.backup_id in why
    first = _backup(repo, image, "snap-1", "vol-1", "u1")
    assert choose_base(repo, _current("vol-1", "u1")).handle == "snap-1"
    assert first.backup_id in choose_base(repo, _current("vol-1", "u1")).reason
    assert choose_base(repo, _current("vol-1", None)).handle == "snap-1", (
        "the uid is compared only where both are known"
    )

    # the PVC bound to another volume (a restore into a new claim, a re-created PVC): no base
    handle, why, *_ = choose_base(repo, _current("vol-2", "u9"))
    assert handle is None
    assert why == (
        "the PVC is bound to another volume than the last backup's (volume handle vol-2, the last"
        " backup's vol-1): full backup"
    )
    handle, why, *_ = choose_base(repo, _current("vol-1", "u2"))
    assert handle is None and why.startswith("the source PV was re-created (uid u2, the last backup's u1)")
    assert choose_base(repo, _current(None, None)).handle is None, "an unknown source cannot be verified"

    # after the full backup of the new volume, its deltas build on that one; the older volume's stays usable
    _backup(repo, image, "snap-2", "vol-2", "u9")
    _backup(repo, image, None, "vol-2", "u9")  # a backup without a snapshot handle is no base
    assert choose_base(repo, _current("vol-2", "u9")).handle == "snap-2"
    assert choose_base(repo, _current("vol-1", "u1")).handle == "snap-1", "the newest backup of that volume"


def test_the_base_is_the_newest_backup_whose_snapshot_still_exists(repo, image):
    """After a partial run (its cleanup deleted its snapshots) the delta is since the previous kept base, and the
    reason says which backup was passed over and why; the base's VolumeSnapshot name comes with it."""
    kept = _backup(repo, image, "snap-1", "vol-1", "u1", name="run1-data")
    partial = _backup(repo, image, "snap-2", "vol-1", "u1", name="run2-data")
    exists = {"run1-data": "snap-1", "run2-data": "snap-2"}
    asked: list[str] = []

    def missing(snapshot):
        asked.append(snapshot.volume_snapshot)
        if exists.get(snapshot.volume_snapshot) != snapshot.snapshot_handle:
            return f"VolumeSnapshot shop/{snapshot.volume_snapshot} no longer exists"
        return None

    assert choose_base(repo, _current("vol-1", "u1"), missing) == BaseChoice(
        "snap-2",
        f"delta since backup {partial.backup_id} (snapshot snap-2) of the same volume vol-1",
        "run2-data",
        partial.backup_id,
    )
    assert asked == ["run2-data"], "newest first, stopping at the first that exists"
    del exists["run2-data"]
    handle, why, name, parent = choose_base(repo, _current("vol-1", "u1"), missing)
    assert (handle, name, parent) == ("snap-1", "run1-data", kept.backup_id), "the parent is the base's backup"
    assert why == (
        f"delta since backup {kept.backup_id} (snapshot snap-1) of the same volume vol-1; the newer backup"
        f" {partial.backup_id} is no base: VolumeSnapshot shop/run2-data no longer exists"
    )
    exists["run1-data"] = "snap-9"  # a snapshot of that name made since: not the one the backup recorded
    handle, why, name, parent = choose_base(repo, _current("vol-1", "u1"), missing)
    assert handle is None and name is None and parent is None
    assert why == (
        f"no backup of {VOL} has its snapshot in the cluster any more (backup {partial.backup_id}: VolumeSnapshot"
        " shop/run2-data no longer exists; 1 older one(s) likewise): full backup"
    )
    assert choose_base(repo, _current("vol-2", "u1"), missing).reason.startswith(
        "the PVC is bound to another volume"
    ), "another volume's backups are not asked about"
    assert choose_base(repo, _current("vol-1", "u1")).handle == "snap-2", "without a check every snapshot counts"
