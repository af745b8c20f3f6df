"""The content hash of a repository (``movers.repo.contenthash``): version 2 repositories made now name chunks and
digest blocks with BLAKE3, those whose config records ``sha256-chunks`` (every one made before) or no hash keep
SHA-256, and a reader refuses a hash it does not know (exit code 7) before it reads or writes any data."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import blake3
import pytest
import zstandard

from movers.errors import IntegrityError
from movers.pipeline.backup import run_backup
from movers.pipeline.readback import verify_device
from movers.pipeline.restore import run_restore
from movers.pipeline.verify import run_verify
from movers.repo import pack, volmap
from movers.repo.chunks import RAW
from movers.repo.config import CONFIG_KEY, RepoConfig
from movers.repo.contenthash import BLAKE3, SHA256
from movers.repo.digests import DIGEST_BLOCK, DIGEST_LEN, UNKNOWN
from movers.repo.manifest import Manifest, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import LocalStore, MemoryStore
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, sha256_file, write_blocks

MiB = 1 << 20
VOL = VolumeIdentity("app/data")
# The config of a version 2 repository made before BLAKE3, as such repositories hold it (written by hand, not by
# the code under test).
SHA256_V2_CONFIG = {
    "chunk_max": 4 * MiB,
    "created": "2026-11-20T10:00:00+00:00",
    "format": "cbt-mover-repository",
    "format_version": 2,
    "mandatory_features": ["paged-map-v1", "located-pages", "sha256-chunks", "zstd"],
    "pack_target": 2 * MiB,
    "page_size": 4 * MiB,
    "repo_id": "0123456789abcdef0123456789abcdef",
}


def _stored_chunks(store) -> dict[bytes, bytes]:
    """Chunk id -> raw bytes of every chunk in every pack, decoded without checking the id."""
    chunks = {}
    for key in store.list(pack.PACK_PREFIX):
        data = store.get(key)
        offset, length = pack.trailer_location(data[-pack.FOOTER_LEN :], len(data))
        for e in pack.parse_trailer(data[offset : offset + length]):
            stored = data[e.offset : e.offset + e.stored_len]
            raw = stored if e.flags == RAW else zstandard.ZstdDecompressor().decompress(stored, e.raw_len)
            chunks[e.chunk_id] = raw
    return chunks


def _block_digests(repo: Repository, manifest: Manifest) -> list[tuple[int, bytes]]:
    """(volume offset, digest) of every known block digest of a backup's map."""
    out = []
    for index, (page_id, _n) in enumerate(repo.page_slots(manifest)):
        if page_id == volmap.NO_PAGE:
            continue
        digests = repo.read_located_page(page_id)[1]
        first = index * manifest.map.page_size
        for i in range(0, len(digests), DIGEST_LEN):
            if digests[i : i + DIGEST_LEN] != UNKNOWN:
                out.append((first + i // DIGEST_LEN * DIGEST_BLOCK, digests[i : i + DIGEST_LEN]))
    return out


def _check_hashed_with(repo: Repository, manifest: Manifest, image: Path, digest) -> None:
    """Every chunk id and known block digest of ``manifest`` is ``digest`` (bytes -> 32 bytes) of the data."""
    chunks = _stored_chunks(repo.store)
    assert chunks and all(cid == digest(raw) for cid, raw in chunks.items())
    blocks = _block_digests(repo, manifest)
    data = image.read_bytes()
    assert len(blocks) == len(data) // DIGEST_BLOCK  # a full scan knows every block
    assert all(d == digest(data[off : off + DIGEST_BLOCK])[:DIGEST_LEN] for off, d in blocks)


def _restored(repo: Repository, manifest: Manifest, tmp_path: Path) -> str:
    out = tmp_path / "restored.img"
    out.unlink(missing_ok=True)
    run_restore(repo, manifest, str(out))
    return sha256_file(out)


def _b3(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "vol.img"
    make_image(path, 8 * MiB, seed=21)
    return path


def test_a_new_repository_hashes_with_blake3_restores_bit_exact_and_dedups(image, tmp_path):
    store = MemoryStore()
    repo = Repository.init(store, RepoConfig(page_size=4 * MiB, pack_target=2 * MiB))
    doc = json.loads(store.get(CONFIG_KEY))
    assert doc["format_version"] == 2 and "blake3-chunks" in doc["mandatory_features"]
    assert "sha256-chunks" not in doc["mandatory_features"]
    repo = Repository.open(store)
    assert repo.content_hash is BLAKE3

    full = run_backup(repo, str(image), VOL)  # a scan: digests of every block
    assert "blake3-chunks" in full.mandatory_features
    _check_hashed_with(repo, full, image, _b3)
    assert _restored(repo, full, tmp_path) == sha256_file(image)

    # dedup across backups: another volume with the same data stores no chunk; a scan of the unchanged image
    # compares BLAKE3 block digests and re-stores nothing
    other = run_backup(repo, str(image), VolumeIdentity("app/copy"))
    assert other.stats["new_chunk_bytes"] == 0 and other.stats["dedup_bytes"] > 0
    same = run_backup(repo, str(image), VOL)
    assert same.mode == "incremental-scan" and same.stats["read_bytes"] == 8 * MiB
    assert same.stats["changed_bytes"] == 0 and same.stats["new_chunk_bytes"] == 0

    changed = write_blocks(image, [MiB + 4096, 5 * MiB])
    scan = run_backup(repo, str(image), VOL)
    assert scan.stats["changed_bytes"] == 2 * DIGEST_BLOCK  # the two blocks whose digest changed
    cbt = run_backup(repo, str(image), VOL, extents=changed)
    for m in (scan, cbt):
        assert _restored(repo, m, tmp_path) == sha256_file(image)


def test_a_flipped_byte_in_a_blake3_repository_fails_restore_verify_and_read_back(tmp_path):
    img = tmp_path / "v.img"
    with open(img, "wb") as f:
        f.truncate(16 * MiB)
        os.pwrite(f.fileno(), os.urandom(4 * MiB), 8 * MiB)
    root = tmp_path / "repo"
    repo = Repository.init(LocalStore(root))
    assert repo.content_hash is BLAKE3
    m = run_backup(repo, str(img), VolumeIdentity("v"))
    out = tmp_path / "out.img"
    run_restore(repo, m, str(out))
    assert verify_device(repo, m, str(out)).checked_bytes == 4 * MiB  # read-back hashes with BLAKE3 too
    assert run_verify(repo, repo.list_backups()).ok

    with open(out, "r+b") as f:  # a byte flipped (a written zero was no change when the random byte was zero)
        os.pwrite(f.fileno(), bytes([os.pread(f.fileno(), 1, 9 * MiB)[0] ^ 0xFF]), 9 * MiB)
    with pytest.raises(IntegrityError, match=f"volume offset {8 * MiB}"):
        verify_device(repo, m, str(out))
    (pack_path,) = list((root / "packs").glob("*/*"))
    data = bytearray(pack_path.read_bytes())
    data[100] ^= 0xFF
    pack_path.write_bytes(bytes(data))
    repo = Repository.open(LocalStore(root))
    with pytest.raises(IntegrityError, match=f"volume offset {8 * MiB}"):
        run_restore(repo, m, str(tmp_path / "again.img"))
    report = run_verify(repo, repo.list_backups())
    assert not report.ok and f"volume offset {8 * MiB}" in report.errors[0]


def test_a_version_2_repository_that_recorded_sha256_keeps_it(image, tmp_path):
    store = MemoryStore()
    written = json.dumps(SHA256_V2_CONFIG).encode()
    store.put(CONFIG_KEY, written)
    repo = Repository.open(store)
    assert repo.content_hash is SHA256 and repo.config.located

    full = run_backup(repo, str(image), VOL)
    assert "sha256-chunks" in full.mandatory_features and "blake3-chunks" not in full.mandatory_features
    _check_hashed_with(repo, full, image, _sha)
    write_blocks(image, [3 * MiB])
    scan = run_backup(repo, str(image), VOL)
    assert scan.stats["changed_bytes"] == DIGEST_BLOCK  # its SHA-256 digests still compare with the full's
    assert _restored(Repository.open(store), scan, tmp_path) == sha256_file(image)
    assert store.get(CONFIG_KEY) == written  # the config is never rewritten
    assert run_verify(repo, repo.list_backups()).ok


def test_a_config_naming_no_hash_means_sha256_and_one_naming_two_is_damaged():
    doc = {**SHA256_V2_CONFIG, "format_version": 1, "mandatory_features": ["paged-map-v1", "zstd"]}
    assert RepoConfig.decode(json.dumps(doc).encode()).content_hash is SHA256
    assert RepoConfig(format_version=1).content_hash is SHA256  # version 1 is written as it always was
    doc["mandatory_features"] = ["paged-map-v1", "sha256-chunks", "blake3-chunks", "zstd"]
    with pytest.raises(IntegrityError, match="more than one chunk hash: blake3-chunks, sha256-chunks"):
        RepoConfig.decode(json.dumps(doc).encode())


def _write_config(url: str, features: list[str]) -> None:
    path = Path(url[len("file://") :]) / CONFIG_KEY
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "mandatory_features": features}))


def test_cli_refuses_a_hash_it_does_not_know_with_exit_7_and_two_hashes_with_exit_4(repo, tmp_path):
    image = tmp_path / "vol.img"
    make_image(image, 4 * MiB, seed=22)
    run("backup", "--repo", repo, "--volume", "v", "--device", image, "--scan", check_rc=0)
    _write_config(repo, ["paged-map-v1", "located-pages", "k12-chunks", "zstd"])
    for args in (
        ("ls",),
        ("restore", "--volume", "v", "--device", tmp_path / "out.img"),
        ("backup", "--volume", "v", "--device", image, "--scan"),
        ("verify",),
    ):
        assert_one_line_error(run(*args, "--repo", repo), 7, "k12-chunks", "upgrade")
    assert not (tmp_path / "out.img").exists()
    _write_config(repo, ["paged-map-v1", "located-pages", "sha256-chunks", "blake3-chunks", "zstd"])
    assert_one_line_error(run("ls", "--repo", repo), 4, "more than one chunk hash")


def test_cli_init_says_which_hash_it_recorded(tmp_path):
    proc = run("init", "--insecure-no-encryption", "--repo", f"file://{tmp_path}/r", "--json", check_rc=0)
    assert json.loads(proc.stdout)["chunk_hash"] == "blake3"
