"""No sequence of backups, forgets, prunes and restores makes a restore succeed with data that differs from what
its backup read, and no committed backup that is still listed becomes unrestorable.

Seeded random trials, in-process on a memory store (format versions 1 and 2, small chunks, pages and packs so
that a few hundred KiB make many objects): full backups (scan, or extents of every data block), scans on the
newest backup, extents incrementals since a backup chosen at random (named by id or by its snapshot handle;
its changes computed from the snapshot that backup read), a full backup committing between the extents'
computation and the incremental or while the incremental reads them, a forget or a prune (any grace, the
prune's clock moved on) while it reads them, retries that record a snapshot handle twice, forget with random
rules, prune with any grace (0 included) and repacking or not, restores onto new and dirty targets. Every
trial ends by restoring and verifying every listed backup. A failing trial names its seed: rerun it with
``CBT_MOVER_STRESS_SEED=N``; ``CBT_MOVER_STRESS_TRIALS`` sets how many trials run (default 16).

Then a handful of the same steps through the CLI (one seeded sequence).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from movers.errors import MoverError, NotFoundError
from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify
from movers.repo.config import RepoConfig
from movers.repo.deltabase import AmbiguousParent
from movers.repo.manifest import SnapshotIdentity, VolumeIdentity
from movers.repo.prune import prune
from movers.repo.repository import Repository
from movers.repo.retention import forget
from movers.repo.retention_rules import Policy
from movers.repo.store import MemoryStore

KiB = 1 << 10
BLOCK = 4 * KiB
TRIALS = int(os.environ.get("CBT_MOVER_STRESS_TRIALS", "16"))
SEED = os.environ.get("CBT_MOVER_STRESS_SEED")


@dataclass
class Volume:
    name: str
    path: Path
    data: bytearray

    def write(self) -> None:
        self.path.write_bytes(self.data)


@dataclass
class World:
    """The repository, the volumes' current data, and what each backup read (by backup id)."""

    rng: random.Random
    repo: Repository
    volumes: list[Volume]
    tmp: Path
    read: dict[str, bytes] = field(default_factory=dict)  # backup id -> the volume's data it read
    handle_of: dict[str, str] = field(default_factory=dict)  # backup id -> the snapshot handle it recorded
    vol_of: dict[str, str] = field(default_factory=dict)  # backup id -> its volume
    clock: float = field(default_factory=time.time)  # prune's clock, moved on by hours and days
    handles: int = 0
    log: list[str] = field(default_factory=list)

    def listed(self, volume: str | None = None) -> list[tuple[str, str]]:
        return [(r.volume, r.backup_id) for r in self.repo.list_backups(volume)]


def mutate(w: World, vol: Volume) -> None:
    """Random writes: data, zeros (holes), a few blocks or a long run."""
    for _ in range(w.rng.randint(1, 6)):
        length = w.rng.choice([BLOCK, 3 * BLOCK, 16 * BLOCK, 70 * KiB, 192 * KiB])
        offset = w.rng.randrange(0, len(vol.data) - length + 1, BLOCK // 2)
        fill = bytes(length) if w.rng.random() < 0.25 else w.rng.randbytes(length)
        vol.data[offset : offset + length] = fill
    vol.write()


def data_extents(data: bytes) -> list[tuple[int, int]]:
    return coalesce([(o, BLOCK) for o in range(0, len(data), BLOCK) if any(data[o : o + BLOCK])])


def changed_extents(old: bytes, new: bytes) -> list[tuple[int, int]]:
    return coalesce([(o, BLOCK) for o in range(0, len(new), BLOCK) if old[o : o + BLOCK] != new[o : o + BLOCK]])


def coalesce(extents: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for off, length in extents:
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((off, length))
    return out


def commit(w: World, vol: Volume, handle: str | None = None, **kw) -> str:
    """A backup of ``vol`` as it is now, recording a new snapshot handle (or ``handle``)."""
    if handle is None:
        w.handles += 1
        handle = f"h{w.handles}"
    m = run_backup(
        w.repo, str(vol.path), VolumeIdentity(vol.name), snapshot=SnapshotIdentity(snapshot_handle=handle), **kw
    )
    w.read[m.backup_id] = bytes(vol.data)
    w.handle_of[m.backup_id] = handle
    w.vol_of[m.backup_id] = vol.name
    w.log.append(f"{m.mode} {m.backup_id} of {vol.name} (parent {m.parent}, {handle})")
    return m.backup_id


def op_full(w: World, vol: Volume) -> None:
    if w.rng.random() < 0.5:
        commit(w, vol, force_full=True)
    else:
        commit(w, vol, extents=data_extents(vol.data), force_full=True)


def op_scan(w: World, vol: Volume) -> None:
    commit(w, vol)


def op_retry(w: World, vol: Volume) -> None:
    """A second backup of the snapshot the newest backup read (a mover retried after it committed)."""
    listed = w.listed(vol.name)
    if listed and w.read[listed[-1][1]] == bytes(vol.data):
        commit(w, vol, handle=w.handle_of[listed[-1][1]], force_full=True)


def op_incremental(w: World, vol: Volume) -> None:
    """Extents since a backup chosen at random (maybe forgotten by now), with a concurrent commit, forget or
    prune between their computation and the incremental or while it reads them."""
    candidates = [b for b, v in w.vol_of.items() if v == vol.name]
    if not candidates:
        return
    base = w.rng.choice(candidates)
    extents = changed_extents(w.read[base], bytes(vol.data))
    by_handle = w.rng.random() < 0.5
    named = {"base_handle": w.handle_of[base]} if by_handle else {"parent": base}
    if w.rng.random() < 0.3:  # a full backup of the same volume commits after the extents were computed
        op_full(w, vol)
    meanwhile = w.rng.choice(["nothing", "full", "forget", "prune", "forget+prune"])

    def stream():
        if meanwhile == "full":
            op_full(w, vol)
        if "forget" in meanwhile:
            op_forget(w)
        if "prune" in meanwhile:
            op_prune(w)
        yield from extents

    listed = {b for _v, b in w.listed(vol.name)}
    holders = [b for b in listed if w.handle_of[b] == w.handle_of[base]]  # all read the same snapshot
    expected = (holders[0] if len(holders) == 1 else None) if by_handle else (base if base in listed else None)
    try:
        backup_id = commit(w, vol, extents=stream(), **named)
    except MoverError as err:
        assert expected is None, f"an incremental since listed backup {expected} ({named}) failed: {err}"
        assert not by_handle or len(holders) < 2 or isinstance(err, AmbiguousParent), err
        w.log.append(f"refused: incremental since {base} ({named}): {err}")
        return
    m = w.repo.read_manifest(vol.name, backup_id)
    assert expected is not None and m.parent == expected, f"{backup_id} built on {m.parent} ({named}, {expected})"
    assert w.read[expected] == w.read[base]


def op_forget(w: World) -> None:
    rules = {}
    while not rules:
        for rule in ("keep_last", "keep_daily", "keep_weekly", "keep_monthly"):
            if w.rng.random() < 0.4:
                rules[rule] = w.rng.randint(0, 2) if rule == "keep_last" else 1
    if not any(rules.values()):
        rules["keep_last"] = 1
    volume = w.rng.choice([None, *(v.name for v in w.volumes)])
    try:
        report = forget(w.repo, volume, rules=Policy(**rules))
    except NotFoundError:
        return
    w.log.append(f"forget {volume} {rules}: {report.deleted}")


def op_prune(w: World) -> None:
    w.clock += w.rng.choice([0, 60, 7200, 2 * 86400])
    grace = w.rng.choice([0, 0, 3600, 86400])
    r = prune(
        w.repo,
        grace_s=grace,
        now=w.clock,
        backup_wait_s=0,
        repack_max_bytes=w.rng.choice([0, 64 * KiB, 1 << 30]),
    )
    w.log.append(
        f"prune grace {grace}: {r.packs_deleted} packs, {r.map_objects_deleted} maps, {r.packs_repacked} repacked"
    )


def op_restore(w: World, backup: tuple[str, str] | None = None) -> None:
    listed = w.listed()
    if not listed:
        return
    volume, backup_id = backup or w.rng.choice(listed)
    manifest = w.repo.read_manifest(volume, backup_id)
    target = w.tmp / f"restore-{w.rng.randrange(1 << 30)}.img"
    if w.rng.random() < 0.5:  # a dirty target of the right size: holes must be zeroed
        target.write_bytes(w.rng.randbytes(manifest.capacity_bytes))
    try:
        run_restore(w.repo, manifest, str(target), workers=2)
    except MoverError as err:
        raise AssertionError(f"listed backup {volume}/{backup_id} no longer restores: {err}") from None
    got = target.read_bytes()
    target.unlink()
    assert got == w.read[backup_id], f"restore of {volume}/{backup_id} succeeded with other data than it read"


OPS = [
    ("mutate", 5),
    ("full", 2),
    ("scan", 2),
    ("incremental", 6),
    ("retry", 1),
    ("forget", 2),
    ("prune", 2),
    ("forget+prune", 2),
    ("restore", 3),
]


ON_A_VOLUME = {"full": op_full, "scan": op_scan, "incremental": op_incremental, "retry": op_retry}
ON_THE_REPO = {
    "forget": op_forget,
    "prune": op_prune,
    "forget+prune": lambda w: (op_forget(w), op_prune(w)),
    "restore": op_restore,
}


def trial(seed: int, tmp: Path) -> World:
    rng = random.Random(seed)
    version = rng.choice([1, 2])
    config = RepoConfig(chunk_max=64 * KiB, page_size=128 * KiB, pack_target=96 * KiB, format_version=version)
    repo = Repository.init(MemoryStore(), config)
    volumes = []
    for n in range(rng.choice([1, 2])):
        size = rng.choice([256, 320, 512]) * KiB
        vol = Volume(f"ns/v{n}", tmp / f"v{n}.img", bytearray(rng.randbytes(size)))
        vol.data[size // 2 : size // 2 + 64 * KiB] = bytes(64 * KiB)
        vol.write()
        volumes.append(vol)
    w = World(rng, repo, volumes, tmp)
    names, weights = zip(*OPS, strict=True)
    for _ in range(rng.randint(10, 22)):
        op = rng.choices(names, weights)[0]
        vol = rng.choice(volumes)
        if op == "mutate":
            mutate(w, vol)
        elif op in ON_A_VOLUME:
            ON_A_VOLUME[op](w, vol)
        else:
            ON_THE_REPO[op](w)
    for backup in w.listed():
        op_restore(w, backup)
    report = run_verify(w.repo, w.repo.list_backups(), workers=2)
    assert report.ok, report.errors
    return w


def seeds() -> list[int]:
    if SEED is not None:
        return [int(SEED)]
    return [random.SystemRandom().randrange(1 << 32) for _ in range(TRIALS)]


def test_no_sequence_restores_other_data_than_the_backup_read(tmp_path):
    started = time.monotonic()
    for seed in seeds():
        tmp = tmp_path / f"seed-{seed}"
        tmp.mkdir()
        try:
            trial(seed, tmp)
        except Exception as err:
            raise AssertionError(f"stress trial failed, rerun with CBT_MOVER_STRESS_SEED={seed}: {err!r}") from err
    assert time.monotonic() - started < 120


def test_a_seeded_cli_sequence_restores_what_each_backup_read(repo, tmp_path):
    """The same through the CLI, a handful of commands: backups (a scan, extents since a backup named by the
    extents' summary line while a full backup committed meanwhile, extents named by --parent), forget and
    prune --grace 0, then every listed backup restored."""
    import json

    from tests.functional.test_cli import run

    seed = int(SEED) if SEED is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    device = tmp_path / "vol.img"
    data = bytearray(rng.randbytes(384 * KiB))
    read: dict[str, bytes] = {}

    def backup(*flags: str, stdin: str | None = None) -> dict:
        device.write_bytes(data)
        args = ["backup", "--repo", repo, "--volume", "v", "--device", device, "--json", *flags]
        doc = json.loads(run(*args, stdin=stdin, check_rc=0).stdout)
        read[doc["backup_id"]] = bytes(data)
        return doc

    def change() -> None:
        for _ in range(rng.randint(1, 4)):
            offset = rng.randrange(0, len(data) - 32 * KiB, BLOCK)
            data[offset : offset + 32 * KiB] = rng.randbytes(32 * KiB)

    try:
        base = backup("--scan", "--snapshot-handle", "h1")
        old = bytes(data)
        change()
        summary = json.dumps({"summary": {"mode": "delta", "base_handle": "h1"}})
        extents = "".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changed_extents(old, data))
        now = bytes(data)
        change()
        backup("--scan", "--full", "--snapshot-handle", "h2")  # commits between the extents and their backup
        data[:] = now
        inc = backup("--extents", "-", "--snapshot-handle", "h3", stdin=extents + summary + "\n")
        assert inc["parent"] == base["backup_id"]
        change()
        more = "".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changed_extents(now, data))
        assert backup("--extents", "-", "--parent", inc["backup_id"], stdin=more)["parent"] == inc["backup_id"]
        run("forget", "--repo", repo, "--keep-last", str(rng.randint(1, 3)), check_rc=0)
        run("prune", "--repo", repo, "--grace", "0", check_rc=0)
        listed = json.loads(run("ls", "--repo", repo, "--json", check_rc=0).stdout)["backups"]
        assert listed
        for b in listed:
            out = tmp_path / f"{b['backup_id']}.img"
            run("restore", "--repo", repo, "--volume", "v", "--backup", b["backup_id"], "--device", out, check_rc=0)
            assert out.read_bytes() == read[b["backup_id"]], b["backup_id"]
    except AssertionError as err:
        raise AssertionError(f"CLI sequence failed, rerun with CBT_MOVER_STRESS_SEED={seed}: {err}") from None
