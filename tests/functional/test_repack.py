"""Repacking partly used packs (format version 2): prune copies the chunks pages still name out of a
mostly dead pack, leaves a forwarding object, and frees the old pack; restores, verify and later
prunes follow the forwarding, through several hops, and a forwarding object goes once no page needs it."""

from __future__ import annotations

from movers.pipeline.backup import run_backup
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify, run_verify_sampled
from movers.repo.config import RepoConfig
from movers.repo.forwarding import MOVED_PREFIX, Forwarding, resolve
from movers.repo.index import ChunkLocation
from movers.repo.manifest import VolumeIdentity
from movers.repo.prune import prune
from movers.repo.repack import repack
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import RecordingStore, sha256_file, write_blocks

KiB, MiB = 1 << 10, 1 << 20
CONFIG = RepoConfig(chunk_max=256 * KiB, page_size=4 * MiB, pack_target=2 * MiB)
VOLUME = VolumeIdentity("app/data")


def _image(tmp_path, size=4 * MiB):
    image = tmp_path / "vol.img"
    with open(image, "wb") as f:
        f.write(bytes(size))
    write_blocks(image, range(0, size, 64 * KiB), seed=3, length=64 * KiB)  # random data everywhere
    return image


def _overwrite(repo, image, start, end, seed):
    """An incremental of the volume after new data was written over [start, end)."""
    changed = write_blocks(image, range(start, end, 64 * KiB), seed=seed, length=64 * KiB)
    return run_backup(repo, str(image), VOLUME, extents=changed)


def _forget_all_but_latest(store, repo):
    for ref in repo.list_backups(VOLUME.id)[:-1]:
        store.delete(ref.key)


def _restores(repo, image, tmp_path) -> bool:
    target = tmp_path / "restored.img"
    target.unlink(missing_ok=True)
    run_restore(repo, repo.resolve(VOLUME.id, "latest"), str(target))
    return sha256_file(target) == sha256_file(image)


def _thin_repository(tmp_path):
    """A full backup of 4 MiB (16 chunks, two packs of 8), then an incremental over its first 3.25 MiB, and the
    full forgotten: the first pack is wholly dead, of the second 5 chunks of 8 are."""
    store = RecordingStore(MemoryStore())
    repo = Repository.init(store, CONFIG)
    image = _image(tmp_path)
    run_backup(repo, str(image), VOLUME)
    _overwrite(repo, image, 0, 3 * MiB + 256 * KiB, seed=4)
    _forget_all_but_latest(store, repo)
    return store, repo, image


def test_a_mostly_dead_pack_is_repacked_forwarded_and_freed_and_restores_follow(tmp_path):
    store, repo, image = _thin_repository(tmp_path)
    packs_before = set(store.list("packs/"))

    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0)

    assert (report.packs_repacked, report.bytes_repacked) == (1, 3 * 256 * KiB)
    packs_after = set(store.list("packs/"))
    gone = packs_before - packs_after
    assert len(gone) == 2  # the dead pack and the repacked one
    moved = list(store.list(MOVED_PREFIX))
    assert len(moved) == 1 and moved[0].split("/")[1] in {key.rsplit("/", 1)[-1] for key in gone}
    store.reset()
    assert _restores(Repository.open(store), image, tmp_path)
    assert moved[0].rsplit("/", 1)[0] + "/" in store.listed  # the restore followed the forwarding
    again = prune(Repository.open(store), grace_s=0, lease_ttl_s=0, dry_run=True)
    assert (again.packs_repacked, again.packs_partly_used, again.dead_bytes) == (0, 0, 0)
    for verify in (run_verify, lambda r, refs: run_verify_sampled(r, refs, sample=1.0, seed=1)):
        result = verify(Repository.open(store), repo.list_backups())
        assert result.ok and result.chunks_verified > 0, result.damage


def test_the_old_pack_stays_for_the_grace_and_a_dry_run_writes_nothing(tmp_path):
    store, repo, image = _thin_repository(tmp_path)
    keys = set(store.list())
    dry = prune(Repository.open(store), grace_s=0, lease_ttl_s=0, dry_run=True)
    assert dry.packs_repacked == 1 and set(store.list()) == keys

    report = prune(Repository.open(store), grace_s=3600, lease_ttl_s=0)
    assert report.packs_repacked == 1 and report.packs_deleted == 0
    assert set(store.list("packs/")) > {k for k in keys if k.startswith("packs/")}  # old ones kept, a new one
    assert _restores(Repository.open(store), image, tmp_path)


def test_forwarding_is_followed_through_several_hops_and_freed_once_no_page_names_the_pack(tmp_path):
    store, repo, image = _thin_repository(tmp_path)
    prune(Repository.open(store), grace_s=0, lease_ttl_s=0)
    first = set(store.list(MOVED_PREFIX))
    # the last 0.75 MiB (3 chunks, now in the new pack) : 2 of them overwritten, the pack is 2/3 dead
    _overwrite(repo, image, 3 * MiB + 256 * KiB, 3 * MiB + 768 * KiB, seed=5)
    _forget_all_but_latest(store, repo)
    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0)
    assert report.packs_repacked == 1
    assert set(store.list(MOVED_PREFIX)) > first  # the latest backup's pages still name the first pack
    assert _restores(Repository.open(store), image, tmp_path)  # two hops
    assert run_verify(Repository.open(store), repo.list_backups()).ok

    _overwrite(repo, image, 3 * MiB, 4 * MiB, seed=6)  # nothing of the old packs is named any more
    _forget_all_but_latest(store, repo)
    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0)
    assert report.forwarding_objects_deleted == 2 and not list(store.list(MOVED_PREFIX))
    assert _restores(Repository.open(store), image, tmp_path)


def test_after_a_crash_between_forwarding_and_delete_both_copies_read_and_the_next_prune_frees_the_old(tmp_path):
    store, repo, image = _thin_repository(tmp_path)
    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0, dry_run=True)
    assert report.packs_repacked == 1
    thin_pack = _thin_packs(repo)
    repack(Repository.open(store), thin_pack)  # what a prune killed right after writing the forwarding leaves
    packs = set(store.list("packs/"))
    assert _restores(Repository.open(store), image, tmp_path)

    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0)
    assert report.packs_repacked == 0 and report.packs_deleted == 2  # the dead pack and the forwarded one
    assert set(store.list("packs/")) < packs
    assert _restores(Repository.open(store), image, tmp_path)


def test_a_version_1_repository_is_not_repacked(tmp_path):
    store = MemoryStore()
    repo = Repository.init(
        store, RepoConfig(chunk_max=256 * KiB, page_size=4 * MiB, pack_target=2 * MiB, format_version=1)
    )
    image = _image(tmp_path)
    run_backup(repo, str(image), VOLUME)
    _overwrite(repo, image, 0, 3 * MiB + 256 * KiB, seed=4)
    _forget_all_but_latest(store, repo)
    report = prune(Repository.open(store), grace_s=0, lease_ttl_s=0)
    assert report.packs_repacked == 0 and report.dead_bytes > 0 and not list(store.list(MOVED_PREFIX))


def test_a_chunk_is_live_in_the_last_pack_on_its_way_that_exists():
    a, b, c, cid = bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32, bytes([9]) * 32
    forwarding = Forwarding()
    forwarding.add(a, "moved/a/1", {cid: ChunkLocation(b, 8, 10, 10, 1)})
    forwarding.add(b, "moved/b/1", {cid: ChunkLocation(c, 8, 10, 10, 1)})
    assert resolve({a: {cid}}, {a, b, c}, forwarding) == ({c: {cid}}, {a, b})
    assert resolve({a: {cid}}, {a, b}, forwarding) == ({b: {cid}}, {a})  # c is gone: b's copy is the live one
    assert resolve({a: {cid}}, {a}, forwarding) == ({a: {cid}}, set())
    assert resolve({a: {cid}}, set(), forwarding) == ({a: {cid}}, set())  # nowhere: where the page says (damage)


def _thin_packs(repo):
    """The packs a prune would repack now, with their live entries (as prune finds them)."""
    from movers.repo.pack import pack_id_from_key

    live = {}
    for ref in repo.list_backups():
        manifest = repo.read_manifest(ref.volume, ref.backup_id)
        for _index, entries, locator in repo.iter_located_map(manifest):
            for entry in entries:
                loc = locator.get(entry[2])
                live.setdefault(loc.pack_id, set()).add(entry[2])
    out = {}
    for key in repo.store.list("packs/"):
        pid = pack_id_from_key(key)
        entries = repo.read_pack_trailer(key)
        named = [e for e in entries if e.chunk_id in live.get(pid, ())]
        if named and sum(e.stored_len for e in named) * 2 <= sum(e.stored_len for e in entries):
            out[pid] = named
    return out


def test_prune_repacks_over_s3_and_the_cli_restore_follows(s3_bucket, tmp_path):
    """Default settings (4 MiB chunks, 16 MiB packs): a 32 MiB volume in two packs of four chunks; six chunks
    overwritten and the full forgotten leave the second pack half dead."""
    import json

    from tests.functional.test_cli import run

    endpoint, bucket = s3_bucket
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    env["AWS_ENDPOINT_URL"] = endpoint
    url = f"s3://{bucket}/repo"
    run("init", "--insecure-no-encryption", "--repo", url, env=env, check_rc=0)
    image = _image(tmp_path, 32 * MiB)
    first = run(
        "backup", "--repo", url, "--volume", VOLUME.id, "--device", image, "--scan", "--json", env=env, check_rc=0
    )
    changed = write_blocks(image, range(0, 24 * MiB, 64 * KiB), seed=8, length=64 * KiB)
    extents = tmp_path / "extents.jsonl"
    extents.write_text("".join(json.dumps({"offset": o, "length": n}) + "\n" for o, n in changed))
    parent = ["--parent", json.loads(first.stdout)["backup_id"]]
    run(
        "backup",
        "--repo",
        url,
        "--volume",
        VOLUME.id,
        "--device",
        image,
        "--extents",
        extents,
        *parent,
        env=env,
        check_rc=0,
    )
    run("forget", "--repo", url, "--keep-last", "1", env=env, check_rc=0)

    text = run("prune", "--repo", url, "--grace", "0", env=env, check_rc=0).stdout
    assert "repacked 1 (8.0 MiB copied)" in text, text
    out = tmp_path / "out.img"
    run("restore", "--repo", url, "--volume", VOLUME.id, "--device", out, env=env, check_rc=0)
    assert sha256_file(out) == sha256_file(image)
    assert json.loads(run("verify", "--repo", url, "--json", env=env, check_rc=0).stdout)["ok"]


def test_the_emptiest_packs_are_repacked_first_within_the_bound(tmp_path):
    store, repo, image = _thin_repository(tmp_path)
    assert prune(Repository.open(store), grace_s=0, lease_ttl_s=0, dry_run=True, repack_max_bytes=0).packs_repacked == 0
    at_bound = prune(Repository.open(store), grace_s=0, lease_ttl_s=0, dry_run=True, repack_max_bytes=768 * KiB)
    assert at_bound.packs_repacked == 1
    below = prune(Repository.open(store), grace_s=0, lease_ttl_s=0, dry_run=True, repack_max_bytes=768 * KiB - 1)
    assert below.packs_repacked == 0


def test_the_cli_refuses_a_bad_repack_bound(tmp_path):
    from tests.functional.test_cli import assert_one_line_error, run

    url = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    for bad in ("lots", "-1Gi"):
        assert_one_line_error(run("prune", "--repo", url, f"--repack-max={bad}"), 2, "--repack-max")
