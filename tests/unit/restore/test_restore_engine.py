"""The engine side of restores: choosing backups of an application (runs, backup ids, untagged repositories)
and the read-back check of a restored device (whole chunks by hash, clipped chunks re-fetched, holes zero)."""

from __future__ import annotations

import os

import pytest

from movers.errors import IntegrityError, NotFoundError, UsageError
from movers.pipeline.backup import run_backup
from movers.pipeline.readback import verify_device
from movers.pipeline.restore import run_restore
from movers.repo.manifest import APP_TAG, RUN_TAG, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.selection import runs_of, select
from movers.repo.store import open_store
from tests.volumes import make_image, write_blocks

MiB = 1 << 20


@pytest.fixture
def repo(tmp_path):
    return Repository.init(open_store(f"file://{tmp_path}/repo"))


def _backup(repo, image, ns, pvc, run=None, **kw):
    tags = {RUN_TAG: run, APP_TAG: "shop"} if run else {}
    return run_backup(repo, str(image), VolumeIdentity(f"{ns}/{pvc}", namespace=ns, pvc=pvc), tags=tags, **kw)


def test_selection_by_latest_run_run_id_backup_id_and_untagged(repo, tmp_path):
    image = tmp_path / "v.img"
    make_image(image, 1 * MiB, seed=1)
    r1 = {p: _backup(repo, image, "shop", p, "run-1") for p in ("data", "logs")}
    r2_data = _backup(repo, image, "shop", "data", "run-2")  # run-2 backed up only data
    _backup(repo, image, "other", "data", "run-x")

    whole = select(repo, "shop", None)
    assert [(s.pvc, s.manifest.backup_id) for s in whole.volumes] == [("data", r2_data.backup_id)]
    assert whole.run == "run-2" and "latest" in whole.how
    assert whole.complete and "records no member list" in whole.notes[0], "runs from before member lists"
    both = select(repo, "shop", ["logs", "data"])
    assert both.run == "run-1", "the newest run that covers every PVC named"
    assert {s.pvc: s.manifest.backup_id for s in both.volumes} == {p: m.backup_id for p, m in r1.items()}
    assert select(repo, "shop", None, "run-1").run == "run-1"
    one = select(repo, "shop", ["logs"], r1["logs"].backup_id)
    assert [(s.pvc, s.manifest.backup_id) for s in one.volumes] == [("logs", r1["logs"].backup_id)]
    assert select(repo, "shop", None, r1["logs"].backup_id).volumes[0].pvc == "logs", "an id unique in the namespace"

    with pytest.raises(NotFoundError, match="run-2 has no backup of PVC.s. logs"):
        select(repo, "shop", ["data", "logs"], "run-2")
    with pytest.raises(NotFoundError, match="no backups of PVC.s. cache"):
        select(repo, "shop", ["cache"])
    with pytest.raises(NotFoundError, match="no backups of namespace nowhere"):
        select(repo, "nowhere", None)
    with pytest.raises(NotFoundError, match="no backup 20990101T000000000000Z-abcdef"):
        select(repo, "shop", ["data"], "20990101T000000000000Z-abcdef")
    with pytest.raises(NotFoundError, match="belongs to run 'nope'"):
        select(repo, "shop", None, "nope")
    with pytest.raises(UsageError, match="named twice"):
        select(repo, "shop", ["data", "data"])

    untagged = _backup(repo, image, "shop", "logs")  # a hand-made backup without tags is now the newest of logs
    fallback = select(repo, "shop", ["data", "logs"])
    assert fallback.run is None and "no run tag" in fallback.how
    assert {s.pvc: s.manifest.backup_id for s in fallback.volumes} == {
        "data": r2_data.backup_id,
        "logs": untagged.backup_id,
    }


def test_whole_app_latest_is_the_newest_complete_run_and_a_partial_run_needs_a_choice(repo, tmp_path):
    image = tmp_path / "v.img"
    make_image(image, 1 * MiB, seed=4)
    members = ["data", "logs"]
    r1 = {p: _backup(repo, image, "shop", p, "run-1", run_pvcs=members) for p in members}
    r2_data = _backup(repo, image, "shop", "data", "run-2", run_pvcs=members)  # the mover of logs failed
    assert r2_data.run_pvcs == ["data", "logs"]

    latest = select(repo, "shop", None)
    assert latest.run == "run-1" and latest.complete and latest.missing == ()
    assert {s.pvc: s.manifest.backup_id for s in latest.volumes} == {p: m.backup_id for p, m in r1.items()}
    assert "latest complete run" in latest.how and "a newer run is partial" in latest.how
    assert latest.notes == ("newer run run-2 is partial: no backup of PVC(s) logs",)

    with pytest.raises(
        UsageError,
        match=r"run run-2 of namespace shop is partial: it has no backup of PVC\(s\) logs"
        r".*allow_partial=True",
    ):
        select(repo, "shop", None, "run-2")
    partial = select(repo, "shop", None, "run-2", allow_partial=True)
    assert (partial.run, partial.missing, partial.complete) == ("run-2", ("logs",), False)
    assert [s.pvc for s in partial.volumes] == ["data"]
    named = select(repo, "shop", ["data"], "run-2")  # the PVCs named: nothing left out that was asked for
    assert [s.manifest.backup_id for s in named.volumes] == [r2_data.backup_id]
    assert [
        (r.run, r.complete, r.missing)
        for r in runs_of(repo.read_manifest(ref.volume, ref.backup_id) for ref in repo.list_backups())
    ] == [("run-2", False, ("logs",)), ("run-1", True, ())]

    # a namespace whose only run is partial: latest needs the explicit choice too
    _backup(repo, image, "solo", "data", "run-9", run_pvcs=members)
    with pytest.raises(UsageError, match=r"the latest run run-9 \(no run is complete\).*no backup of PVC\(s\) logs"):
        select(repo, "solo", None)
    assert select(repo, "solo", None, allow_partial=True).missing == ("logs",)

    # a newer complete run wins again, read from the newest backups alone
    r3 = {p: _backup(repo, image, "shop", p, "run-3", run_pvcs=members) for p in members}
    again = select(repo, "shop", None)
    assert again.run == "run-3" and again.how == "run run-3 (the latest)" and again.notes == ()
    assert {s.pvc: s.manifest.backup_id for s in again.volumes} == {p: m.backup_id for p, m in r3.items()}


def test_read_back_checks_whole_and_clipped_chunks_and_holes(repo, tmp_path):
    image = tmp_path / "v.img"
    make_image(image, 12 * MiB, seed=3, data_fraction=0.7)
    full = _backup(repo, image, "ns", "v", extents=[(0, 12 * MiB)])
    long_entry = next(e for _, entries in repo.iter_map(full) for e in entries if e[1] >= 192 * 1024)
    inside = long_entry[0] + 64 * 1024  # an incremental write inside a chunk: the chunk is clipped
    changed = write_blocks(image, [inside + 4096 * i for i in range(3)], seed=5)
    incremental = _backup(repo, image, "ns", "v", extents=changed)
    assert incremental.mode == "incremental-cbt"

    target = tmp_path / "restored.img"
    run_restore(repo, incremental, str(target))
    stats = verify_device(repo, incremental, str(target))
    assert stats.checked_bytes + stats.zero_bytes == 12 * MiB
    assert stats.refetched_bytes > 0, "the incremental clipped chunks of the full: those are fetched again"

    scan = _backup(repo, image, "ns", "v")  # nothing changed: a scan incremental keeps the map (and digests)
    write_blocks(image, [inside + 256 * 1024], seed=6)
    scan = _backup(repo, image, "ns", "v")
    assert scan.mode == "incremental-scan"
    scanned = tmp_path / "scanned.img"
    run_restore(repo, scan, str(scanned))
    by_digest = verify_device(repo, scan, str(scanned))
    assert by_digest.checked_bytes + by_digest.zero_bytes == 12 * MiB
    assert by_digest.refetched_bytes == 0, "a scan clips at 64 KiB blocks whose digests are known: nothing re-fetched"
    with open(scanned, "r+b") as f:
        os.pwrite(f.fileno(), b"\x01", long_entry[0] + 5)  # in the clipped part the block digest checks
    with pytest.raises(IntegrityError, match=f"at volume offset {long_entry[0]} differs from the backup"):
        verify_device(repo, scan, str(scanned))

    with open(target, "r+b") as f:  # a lost write inside a chunk
        os.pwrite(f.fileno(), b"\x00" * 16, inside + 70 * 1024)
    with pytest.raises(IntegrityError, match=rf"at volume offset {inside + 12 * 1024} differs"):
        verify_device(repo, incremental, str(target))
    run_restore(repo, incremental, str(target))
    hole = next(off for off in range(0, 12 * MiB, 64 * 1024) if _is_zero(image, off))
    with open(target, "r+b") as f:  # stale data where the backup has a hole
        os.pwrite(f.fileno(), b"stale", hole + 100)
    with pytest.raises(IntegrityError, match="should read as zeros"):
        verify_device(repo, incremental, str(target))


def _is_zero(path, off) -> bool:
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(64 * 1024) == bytes(64 * 1024)


def test_restore_volume_writes_the_latest_backup_reads_it_back_and_reports_what_it_did(repo, tmp_path):
    """``movers.restore.volume.restore_volume``: the writer's one entry point, the same for the pod and the CLI."""
    from movers.restore.request import RestoreRequest
    from movers.restore.volume import restore_volume

    image, target = tmp_path / "v.img", tmp_path / "target.img"
    make_image(image, 2 * MiB, seed=3)
    done = _backup(repo, image, "shop", "data")
    target.write_bytes(b"\xff" * (2 * MiB))
    phases = []

    class Display:
        def phase(self, name, *, part=0, parts=1):
            phases.append((name, part, parts))
            return lambda done, total, **detail: None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    request = RestoreRequest(volume="shop/data", device=str(target), verify_device=True, workers=2)
    result = restore_volume(lambda: repo, request, progress=Display)

    assert target.read_bytes() == image.read_bytes()
    assert (result.backup_id, result.volume, result.mode) == (done.backup_id, "shop/data", done.mode)
    assert result.readback is not None and result.readback.checked_bytes + result.readback.zero_bytes == 2 * MiB
    assert phases == [("restore", 0, 2), ("readback", 1, 2)]


def test_restore_volume_checks_the_target_before_it_opens_the_repository(tmp_path):
    from movers.restore.request import RestoreRequest
    from movers.restore.volume import restore_volume

    def never():
        raise AssertionError("the repository was opened for a target that cannot be written")

    with pytest.raises(UsageError):
        restore_volume(never, RestoreRequest(volume="shop/data", device=str(tmp_path / "no" / "such.img")))
