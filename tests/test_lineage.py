"""``movers.repo.lineage``: a delta's base is a backup of the same source volume, or there is none and why."""

from __future__ import annotations

import pytest

from movers.errors import UsageError
from movers.pipeline.backup import run_backup
from movers.repo.lineage import BaseChoice, backup_with_handle, choose_base, same_volume
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


def _backup(repo, image, snap_handle, pv_handle=None, pv_uid=None):
    volume = VolumeIdentity(VOL, namespace="shop", pvc="data", pv_volume_handle=pv_handle, pv_uid=pv_uid)
    return run_backup(repo, image, volume, snapshot=SnapshotIdentity(snapshot_handle=snap_handle))


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
    assert choose_base(repo, VOL, "vol-1") == BaseChoice(None, f"no earlier backup of {VOL}: full backup")
    legacy = _backup(repo, image, "snap-0")  # written before volume identities were recorded
    handle, why = choose_base(repo, VOL, "vol-1", "u1")
    assert handle is None and "records no source volume" in why and legacy.backup_id in why
    first = _backup(repo, image, "snap-1", "vol-1", "u1")
    assert choose_base(repo, VOL, "vol-1", "u1").handle == "snap-1"
    assert first.backup_id in choose_base(repo, VOL, "vol-1", "u1").reason
    assert choose_base(repo, VOL, "vol-1", None).handle == "snap-1", "the uid is compared only where both are known"

    # the PVC bound to another volume (a restore into a new claim, a re-created PVC): no base
    handle, why = choose_base(repo, VOL, "vol-2", "u9")
    assert handle is None
    assert why == (
        "the PVC is bound to another volume than the last backup's (volume handle vol-2, the last"
        " backup's vol-1): full backup"
    )
    handle, why = choose_base(repo, VOL, "vol-1", "u2")
    assert handle is None and why.startswith("the source PV was re-created (uid u2, the last backup's u1)")
    assert choose_base(repo, VOL, None, None).handle is None, "an unknown source cannot be verified"

    # after the full backup of the new volume, its deltas build on that one; the older volume's stays usable
    _backup(repo, image, "snap-2", "vol-2", "u9")
    _backup(repo, image, None, "vol-2", "u9")  # a backup without a snapshot handle is no base
    assert choose_base(repo, VOL, "vol-2", "u9").handle == "snap-2"
    assert choose_base(repo, VOL, "vol-1", "u1").handle == "snap-1", "the newest backup of that volume"


def test_backup_with_handle(repo, image):
    first = _backup(repo, image, "snap-1", "vol-1")
    assert backup_with_handle(repo, VOL, "snap-1").backup_id == first.backup_id
    with pytest.raises(UsageError, match="recorded snapshot handle snap-x"):
        backup_with_handle(repo, VOL, "snap-x")
