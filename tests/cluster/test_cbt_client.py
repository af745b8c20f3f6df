"""The CBT client against the local SnapshotMetadata server: real gRPC over TLS on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from localcluster.snapshot_metadata import (
    Faults,
    ImageSnapshot,
    InMemoryCatalog,
    SnapshotMetadataServer,
    StaticTokens,
    make_ca_and_cert,
)
from movers.cbt.client import SnapshotMetadataClient
from movers.cbt.tokens import FileToken
from movers.errors import (
    CbtAuthError,
    CbtBaseRejectedError,
    CbtProtocolError,
    CbtRequestError,
    CbtTransientError,
    CbtUnavailableError,
)
from movers.pipeline.backup import BackupOptions, run_backup
from movers.repo.manifest import VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.store import MemoryStore
from tests.volumes import coalesce, make_image, sha256_file, write_blocks

MiB = 1 << 20
K = 4096
NS = "apps"
AUDIENCE = "sms.example"


def nonzero_blocks(path) -> list[tuple[int, int]]:
    out = []
    with open(path, "rb") as f:
        off = 0
        while block := f.read(K):
            if block.count(0) != len(block):
                out.append((off, len(block)))
            off += len(block)
    return coalesce(out)


def changed_blocks(a, b) -> list[tuple[int, int]]:
    out = []
    with open(a, "rb") as fa, open(b, "rb") as fb:
        off = 0
        while (x := fa.read(K)) or (y := fb.read(K)):
            y = fb.read(K) if x else y
            if x != y:
                out.append((off, K))
            off += K
    return coalesce(out)


class Env:
    """Two snapshots of one volume (base, target), a server and a valid token."""

    def __init__(self, tmp_path: Path, block_type: str):
        self.dir = tmp_path
        self.base_img = tmp_path / "base.img"
        make_image(self.base_img, 8 * MiB, seed=21)
        self.target_img = tmp_path / "target.img"
        shutil.copy(self.base_img, self.target_img)
        write_blocks(self.target_img, [0, 5 * K, 6 * K, 3 * MiB, 8 * MiB - K], seed=22)
        self.catalog = InMemoryCatalog()
        self.base = self.catalog.add(ImageSnapshot(self.base_img, namespace=NS, name="snap-base", volume_id="vol"))
        self.target = self.catalog.add(ImageSnapshot(self.target_img, namespace=NS, name="snap-2", volume_id="vol"))
        self.tokens = StaticTokens(AUDIENCE)
        self.faults = Faults()
        self.server = SnapshotMetadataServer(self.catalog, self.tokens, block_type=block_type, faults=self.faults)
        self.token = self.tokens.issue([NS])
        self.token_file = tmp_path / "token"
        self.token_file.write_text(self.token)
        self.ca_file = tmp_path / "ca.pem"

    def client(self, **kw) -> SnapshotMetadataClient:
        kw.setdefault("sleep", lambda s: None)
        return SnapshotMetadataClient(self.server.address, self.server.ca_pem, FileToken(str(self.token_file)), **kw)


@contextlib.contextmanager
def running_env(tmp_path, block_type: str) -> Iterator[Env]:
    """An ``Env`` whose server runs (its CA written to ``ca_file``), stopped on exit."""
    e = Env(tmp_path, block_type)
    e.server.start()
    e.ca_file.write_bytes(e.server.ca_pem)
    try:
        yield e
    finally:
        e.server.stop()


@pytest.fixture(params=["FIXED_LENGTH", "VARIABLE_LENGTH"])
def env(request, tmp_path):
    with running_env(tmp_path, request.param) as e:
        yield e


def test_allocated_and_delta_match_the_images(env):
    with env.client(max_results=7) as c:
        stream = c.allocated(NS, "snap-2")
        assert list(stream) == nonzero_blocks(env.target_img)
        assert stream.capacity == 8 * MiB and stream.messages > 1
        delta = c.delta(NS, env.base.handle, "snap-2")
        assert list(delta) == changed_blocks(env.base_img, env.target_img)
        assert delta.block_type == env.server.block_type


@pytest.mark.parametrize("cut_after", [1, 2, 5])
@pytest.mark.parametrize("overlap", [0, 3])
def test_resume_after_cuts_gives_identical_extents(env, cut_after, overlap):
    with env.client(max_results=3) as c:
        expected = list(c.allocated(NS, "snap-2"))
        env.faults.update(cut_after_messages=cut_after, cut_times=4, resend_overlap_blocks=overlap)
        stream = c.allocated(NS, "snap-2")
        assert list(stream) == expected
        assert 1 <= stream.resumes <= 4
        assert env.server.calls["GetMetadataAllocated"] == 1 + 1 + stream.resumes  # expected, then the cut stream


def test_token_is_refreshed_when_a_resumed_call_is_unauthenticated(env):
    second = env.tokens.issue([NS])
    asked = []

    class Rotating:
        def token(self, fresh=False):
            asked.append(fresh)
            if len(asked) == 2:  # the first token expires while the stream is cut
                env.tokens.revoke(env.token)
            return second if fresh else env.token

    env.faults.update(cut_after_messages=1, cut_times=1)
    with SnapshotMetadataClient(
        env.server.address, env.server.ca_pem, Rotating(), max_results=2, sleep=lambda s: None
    ) as c:
        assert list(c.allocated(NS, "snap-2")) == nonzero_blocks(env.target_img)
    assert asked == [False, False, True]


def test_auth_failures_are_clear_and_not_retried(env):
    env.token_file.write_text(env.tokens.issue([NS], audience="someone-else"))
    with env.client() as c, pytest.raises(CbtAuthError) as err:
        list(c.allocated(NS, "snap-2"))
    msg = str(err.value)
    assert "UNAUTHENTICATED" in msg and env.server.address in msg and f"namespace {NS}" in msg and "RBAC" in msg
    assert env.server.calls["GetMetadataAllocated"] == 1
    env.token_file.write_text(env.tokens.issue(["other-ns"]))
    with env.client() as c, pytest.raises(CbtAuthError, match="PERMISSION_DENIED"):
        list(c.delta(NS, env.base.handle, "snap-2"))


@pytest.mark.parametrize(
    "knob, fragment",
    [
        ({"bad_order_at_message": 2}, "before the end of the previous tuple"),
        ({"change_type_at_message": 2}, "block_metadata_type changed"),
        ({"change_capacity_at_message": 2}, "volume_capacity_bytes changed"),
    ],
)
def test_bad_streams_are_protocol_errors(env, knob, fragment):
    env.faults.update(**knob)
    with env.client(max_results=2) as c, pytest.raises(CbtProtocolError, match=fragment):
        list(c.allocated(NS, "snap-2"))


def test_block_past_capacity_is_clamped(tmp_path):
    e = Env(tmp_path, "FIXED_LENGTH")
    odd = tmp_path / "odd.img"
    odd.write_bytes(b"\x01" * (3 * K + 100))
    e.catalog.add(ImageSnapshot(odd, namespace=NS, name="odd", volume_id="odd"))
    with e.server, e.client() as c:
        assert list(c.allocated(NS, "odd")) == [(0, 3 * K + 100)]


def test_zero_message_delta_means_no_changes(env):
    with env.client() as c:
        stream = c.delta(NS, env.target.handle, "snap-2")
        assert list(stream) == [] and stream.messages == 0 and stream.capacity is None


@pytest.mark.parametrize("code", [grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED])
def test_cbt_unavailable_codes(env, code):
    env.faults.update(fail_with=code, fail_times=1)
    with env.client() as c, pytest.raises(CbtUnavailableError, match="CBT unavailable"):
        list(c.delta(NS, env.base.handle, "snap-2"))


def test_a_base_the_delta_refuses_and_bad_requests_are_clear(env):
    with env.client() as c:
        with pytest.raises(CbtBaseRejectedError, match="refused for base no-such-handle: .* NOT_FOUND"):
            list(c.delta(NS, "no-such-handle", "snap-2"))
        other = env.catalog.add(ImageSnapshot(env.base_img, namespace=NS, name="elsewhere", volume_id="vol-b"))
        with pytest.raises(CbtBaseRejectedError, match="INVALID_ARGUMENT: snapshots don't belong to the same Volume"):
            list(c.delta(NS, other.handle, "snap-2"))
        assert issubclass(CbtBaseRejectedError, CbtUnavailableError) and CbtBaseRejectedError.exit_code == 9
        env.faults.update(fail_with=grpc.StatusCode.INVALID_ARGUMENT, fail_times=1)
        with pytest.raises(CbtRequestError, match="INVALID_ARGUMENT"):  # not about a base: a bad request
            list(c.allocated(NS, "snap-2"))


def test_retries_are_bounded(env):
    env.faults.update(fail_with=grpc.StatusCode.UNAVAILABLE, fail_times=50)
    with env.client(retries=3) as c, pytest.raises(CbtTransientError, match="4 times"):
        list(c.allocated(NS, "snap-2"))
    assert env.server.calls["GetMetadataAllocated"] == 4


def test_tls_is_verified(env):
    other_ca = make_ca_and_cert().ca_pem
    with (
        SnapshotMetadataClient(
            env.server.address, other_ca, FileToken(str(env.token_file)), retries=1, sleep=lambda s: None
        ) as c,
        pytest.raises(CbtTransientError),
    ):
        list(c.allocated(NS, "snap-2"))
    with pytest.raises(CbtRequestError, match="PEM"):
        SnapshotMetadataClient(env.server.address, b"", FileToken(str(env.token_file)))


def test_reading_starts_before_the_stream_ends(env):
    env.faults.update(delay_between_messages=0.02)
    repo = Repository.init(MemoryStore())
    marks = {}

    def progress(done, total, **_):
        marks.setdefault("first_read", time.monotonic())

    with env.client(max_results=2) as c:
        stream = c.allocated(NS, "snap-2")

        def timed():
            yield from stream
            marks["stream_end"] = time.monotonic()

        opts = BackupOptions(max_inflight=64 * 1024)  # consume results as they come
        m = run_backup(repo, str(env.target_img), VolumeIdentity("v"), extents=timed(), progress=progress, options=opts)
    assert marks["first_read"] < marks["stream_end"]
    assert stream.messages > 10 and m.mode == "full"


# -- the CLI: extents listing, backups from CBT, fallback, no token leaks -------------------------------------


def cli(*args, check=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.run(
        [sys.executable, "-m", "movers", *map(str, args)], capture_output=True, text=True, timeout=120, env=env
    )
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


def cbt_args(env, snapshot="snap-2"):
    return [
        "--cbt-address",
        env.server.address,
        "--cbt-ca-file",
        env.ca_file,
        "--cbt-token-file",
        env.token_file,
        "--namespace",
        NS,
        "--snapshot",
        snapshot,
    ]


def test_extents_command_lists_like_the_lister(env):
    out = cli("extents", *cbt_args(env), "--base-handle", env.base.handle, "--cbt-max-results", "2").stdout
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines.pop()["summary"]
    assert [(d["offset"], d["length"]) for d in lines] == changed_blocks(env.base_img, env.target_img)
    assert summary["mode"] == "delta" and summary["extents"] == len(lines) and summary["capacity_bytes"] == 8 * MiB


def test_full_then_delta_backup_via_cli_restores_byte_identical(env, tmp_path):
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    base = ["backup", "--repo", repo, "--volume", "apps/data", "--json", "--log-level", "DEBUG"]
    full = cli(*base, "--device", env.base_img, *cbt_args(env, "snap-base"), "--snapshot-handle", env.base.handle)
    doc = json.loads(full.stdout)
    assert doc["mode"] == "full" and doc["change_source"] == "cbt-allocated"
    inc = cli(
        *base,
        "--device",
        env.target_img,
        *cbt_args(env),
        "--base-handle",
        env.base.handle,
        "--snapshot-handle",
        env.target.handle,
    )
    doc2 = json.loads(inc.stdout)
    assert doc2["mode"] == "incremental-cbt" and doc2["change_source"] == "cbt-delta"
    assert doc2["changed_bytes"] == sum(n for _, n in changed_blocks(env.base_img, env.target_img))
    out = tmp_path / "restored.img"
    cli("restore", "--repo", repo, "--volume", "apps/data", "--device", out)
    assert sha256_file(out) == sha256_file(env.target_img)
    # the token never appears in logs, output, or any repository object
    for text in (full.stdout, full.stderr, inc.stdout, inc.stderr):
        assert env.token not in text
    assert "DEBUG" in inc.stderr
    for path in Path(tmp_path / "repo").rglob("*"):
        if path.is_file():
            assert env.token.encode() not in path.read_bytes()
    # an auth failure names the service but not the token
    env.tokens.revoke(env.token)
    bad = cli(*base, "--device", env.target_img, *cbt_args(env), check=6)
    assert env.server.address in bad.stderr and env.token not in bad.stderr


def test_cbt_unavailable_falls_back_to_scan_or_fails(env, tmp_path):
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    env.faults.update(fail_with=grpc.StatusCode.FAILED_PRECONDITION, fail_times=2)
    args = ["backup", "--repo", repo, "--volume", "v", "--device", env.target_img, *cbt_args(env), "--json"]
    doc = json.loads(cli(*args).stdout)
    assert doc["change_source"] == "scan" and "FAILED_PRECONDITION" in doc["cbt_fallback"]
    failed = cli(*args, "--cbt-fallback", "fail", check=9)
    assert "CBT unavailable" in failed.stderr


def test_delta_needs_a_backup_of_its_base(env, tmp_path):
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    proc = cli(
        "backup",
        "--repo",
        repo,
        "--volume",
        "v",
        "--device",
        env.target_img,
        *cbt_args(env),
        "--base-handle",
        env.base.handle,
        check=2,
    )
    assert "recorded snapshot handle" in proc.stderr


def test_many_concurrent_streams(env):
    results = []
    with env.client(max_results=5) as c:
        threads = [threading.Thread(target=lambda: results.append(list(c.allocated(NS, "snap-2")))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 4 and all(r == results[0] for r in results)


def test_a_refused_delta_falls_back_to_a_full_backup_from_the_allocated_blocks(env, tmp_path):
    """INVALID_ARGUMENT (the base is another volume's snapshot) or NOT_FOUND (the base is gone) for the
    delta: a full backup from GetMetadataAllocated, with the reason in the result (it was exit 2 / a scan)."""
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    other = env.catalog.add(ImageSnapshot(env.base_img, namespace=NS, name="elsewhere", volume_id="vol-b"))
    common = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    cli(*common, "--device", env.base_img, *cbt_args(env, "elsewhere"), "--snapshot-handle", other.handle)
    cli(*common, "--device", env.base_img, "--scan", "--snapshot-handle", "deleted-handle")
    for base, code in ((other.handle, "INVALID_ARGUMENT"), ("deleted-handle", "NOT_FOUND")):
        calls = dict(env.server.calls)
        doc = json.loads(cli(*common, "--device", env.target_img, *cbt_args(env), "--base-handle", base).stdout)
        assert (doc["mode"], doc["parent"], doc["change_source"]) == ("full", None, "cbt-allocated"), doc
        assert code in doc["cbt_fallback"] and "full backup from the allocated blocks" in doc["cbt_fallback"]
        assert env.server.calls["GetMetadataDelta"] == calls.get("GetMetadataDelta", 0) + 1
        assert env.server.calls["GetMetadataAllocated"] == calls.get("GetMetadataAllocated", 0) + 1
        assert doc["changed_bytes"] == sum(n for _, n in nonzero_blocks(env.target_img))
        out = tmp_path / "restored.img"
        cli("restore", "--repo", repo, "--volume", "apps/data", "--backup", doc["backup_id"], "--device", out)
        assert sha256_file(out) == sha256_file(env.target_img)


def test_no_delta_across_two_volumes(env, tmp_path):
    """The base's backup records another source volume (handle or PV uid): no delta is asked at all."""
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    common = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    base = [*common, "--device", env.base_img, *cbt_args(env, "snap-base"), "--snapshot-handle", env.base.handle]
    first = json.loads(cli(*base, "--pv-handle", "vol-a", "--pv-uid", "uid-1").stdout)
    assert first["pv_volume_handle"] == "vol-a"
    target = [*common, "--device", env.target_img, *cbt_args(env), "--base-handle", env.base.handle]
    for identity, words in (
        (
            ["--pv-handle", "vol-b"],
            "bound to another volume than the base backup's (volume handle vol-b, the base's vol-a)",
        ),
        (["--pv-handle", "vol-a", "--pv-uid", "uid-2"], "source PV was re-created"),
    ):
        deltas = env.server.calls.get("GetMetadataDelta", 0)
        doc = json.loads(cli(*target, *identity).stdout)
        assert (doc["mode"], doc["change_source"]) == ("full", "cbt-allocated") and words in doc["cbt_fallback"]
        assert env.server.calls.get("GetMetadataDelta", 0) == deltas, "no delta asked across volumes"
    same = json.loads(cli(*target, "--pv-handle", "vol-a", "--pv-uid", "uid-1").stdout)
    assert (same["mode"], same["change_source"], same["parent"]) == ("incremental-cbt", "cbt-delta", first["backup_id"])
    assert "cbt_fallback" not in same


def test_full_with_a_base_handle_reads_the_allocated_blocks(env, tmp_path):
    """--full --base-handle stored only the delta's ranges as a full backup (the rest as holes)."""
    repo = f"file://{tmp_path}/repo"
    cli("init", "--insecure-no-encryption", "--repo", repo)
    common = ["backup", "--repo", repo, "--volume", "apps/data", "--json"]
    cli(*common, "--device", env.base_img, *cbt_args(env, "snap-base"), "--snapshot-handle", env.base.handle)
    doc = json.loads(
        cli(*common, "--device", env.target_img, *cbt_args(env), "--base-handle", env.base.handle, "--full").stdout
    )
    assert (doc["mode"], doc["change_source"]) == ("full", "cbt-allocated")
    out = tmp_path / "restored.img"
    cli("restore", "--repo", repo, "--volume", "apps/data", "--device", out)
    assert sha256_file(out) == sha256_file(env.target_img)


# -- extents in the upstream snapshot-metadata-lister's forms (tools/snapshot-metadata-lister, pkg/iterator) --

TABLE_HEAD = [
    "Record#   VolCapBytes  BlockMetadataType   ByteOffset     SizeBytes",
    "------- -------------- ----------------- -------------- --------------",
]
TYPE_NUMBERS = {"FIXED_LENGTH": 1, "VARIABLE_LENGTH": 2}


def lister_args(env, *more):
    """A lister command line (its flag spellings) plus the explicit TLS connection of these tests."""
    conn = ["--cbt-address", env.server.address, "--cbt-ca-file", env.ca_file, "--cbt-token-file", env.token_file]
    return ["extents", *conn, "-n", NS, "-s", "snap-2", *more]


def table_rows(out: str) -> list[tuple[int, int, str, int, int]]:
    lines = out.splitlines()
    assert lines[:2] == TABLE_HEAD, out
    rows = []
    for line in lines[2:]:
        number, capacity, kind, offset, size = line.split()
        row = (int(number), int(capacity), kind, int(offset), int(size))
        assert line == "%7d %14d %17s %14d %14d" % row, "the lister's row format"  # noqa: UP031 (Go's, as written)
        rows.append(row)
    return rows


def test_extents_prints_the_listers_table_and_json(env):
    table = table_rows(cli(*lister_args(env, "-P", env.base.handle, "--max-results", "2", "-o", "table")).stdout)
    text = cli(*lister_args(env, "-previous-snapshot-id", env.base.handle, "-max-results", "2", "-o", "json")).stdout
    records = json.loads(text)
    assert text == json.dumps(records, separators=(",", ":")), "Go's compact encoding, no newline after the array"
    assert [list(r) for r in records] == [["block_metadata_type", "volume_capacity_bytes", "block_metadata"]] * len(
        records
    )
    assert records[0]["block_metadata"][0] == {"size_bytes": K}, "a zero byte_offset is left out, as Go's omitempty"
    from_json = [
        (n, r["volume_capacity_bytes"], r["block_metadata_type"], t.get("byte_offset", 0), t["size_bytes"])
        for n, r in enumerate(records, 1)
        for t in r["block_metadata"]
    ]
    kind = env.server.block_type
    assert [(n, c, TYPE_NUMBERS[k], o, s) for n, c, k, o, s in table] == from_json
    assert {(c, k) for _n, c, k, _o, _s in table} == {(8 * MiB, kind)}
    assert all(len(r["block_metadata"]) <= 2 for r in records), "--max-results tuples per record"
    assert [n for n, *_ in table] == sorted(n for n, *_ in table) and table[-1][0] == len(records)
    assert coalesce([(o, s) for *_, o, s in table]) == changed_blocks(env.base_img, env.target_img)


def test_extents_in_the_listers_forms_of_nothing_and_from_an_offset(env):
    same = ["-P", env.target.handle]  # the changes of a snapshot since itself: none
    assert cli(*lister_args(env, *same, "-o", "json")).stdout == "[]"
    assert cli(*lister_args(env, *same, "-o", "table")).stdout == ""
    start = 3 * MiB + 100
    text = cli(*lister_args(env, "-P", env.base.handle, "--starting-offset", start, "-o", "json")).stdout
    tuples = [(t.get("byte_offset", 0), t["size_bytes"]) for r in json.loads(text) for t in r["block_metadata"]]
    assert tuples == [(o, s) for o, s in changed_blocks(env.base_img, env.target_img) if o + s > start]
    bad = cli(*lister_args(env, "--starting-offset", "-1"), check=2)
    assert bad.stderr.startswith("cbt-mover: error: --starting-offset") and len(bad.stderr.splitlines()) == 1


def test_lister_records_skip_what_a_resumed_call_sent_twice(env):
    with env.client(max_results=3) as c:
        expected = [t for _n, tuples in c.allocated(NS, "snap-2").records() for t in tuples]
        env.faults.update(cut_after_messages=2, cut_times=2, resend_overlap_blocks=3)
        stream = c.allocated(NS, "snap-2")
        records = list(stream.records())
    assert stream.resumes >= 1
    assert [n for n, _ in records] == list(range(1, len(records) + 1))
    assert coalesce([t for _n, tuples in records for t in tuples]) == coalesce(expected)
    flat = [t for _n, tuples in records for t in tuples]
    assert all(a[0] + a[1] <= b[0] for a, b in zip(flat, flat[1:], strict=False)), "no tuple twice"
