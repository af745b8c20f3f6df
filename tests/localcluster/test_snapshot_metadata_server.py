"""The local SnapshotMetadata server (localcluster.snapshot_metadata) through real gRPC over TLS on loopback.

Every call goes through ``grpc.secure_channel`` trusting the generated CA and the generated stub, so these tests
pin the wire behaviour clients rely on: hostpath-like tuples, sidecar-like errors, and each fault knob.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from localcluster.snapshot_metadata import (
    SERVICE,
    Faults,
    ImageSnapshot,
    InMemoryCatalog,
    SnapshotMetadataServer,
    SnapshotNotFound,
    StaticTokens,
    SyntheticSnapshot,
    make_ca_and_cert,
)
from movers.cbt._pb import schema_pb2 as pb
from movers.cbt._pb import schema_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
BS = 4096
NS = "apps"
AUDIENCE = "sms.test"
CODE = grpc.StatusCode
# Image A (600 blocks): data runs 2-4, 6, 10 (one non-zero byte), 255-257 (across a 1 MiB piece), 599;
# block 5 is written but all zeros, so it is not allocated; everything else is a hole.
A_BLOCKS = {2: b"a", 3: b"a", 4: b"a", 5: b"\0", 6: b"b", 255: b"c", 256: b"c", 257: b"c", 599: b"d"}
A_ALLOCATED = [2, 3, 4, 6, 10, 255, 256, 257, 599]
A_CAPACITY = 600 * BS


def write_image(path: Path, capacity: int, blocks: dict[int, bytes]) -> Path:
    with open(path, "wb") as f:
        f.truncate(capacity)
        for index, fill in blocks.items():
            os.pwrite(f.fileno(), fill * BS, index * BS)
    return path


def image_a(path: Path) -> Path:
    write_image(path, A_CAPACITY, A_BLOCKS)
    with open(path, "r+b") as f:
        os.pwrite(f.fileno(), b"\1", 11 * BS - 1)  # the last byte of block 10
    return path


def fixed(blocks) -> list[tuple[int, int]]:
    return [(b * BS, BS) for b in blocks]


def tuples(messages) -> list[tuple[int, int]]:
    return [(b.byte_offset, b.size_bytes) for m in messages for b in m.block_metadata]


def drain(call) -> tuple[list, grpc.RpcError | None]:
    """The messages of a stream and the error that ended it (None for a clean end)."""
    got = []
    try:
        for message in call:
            got.append(message)
    except grpc.RpcError as exc:
        return got, exc
    return got, None


class Env:
    """A catalog with image A (``a``), its changed copy (``b``), tokens and a client channel per server."""

    def __init__(self, tmp_path: Path, tls, servers: list, channels: list):
        self.tmp_path, self.tls, self._servers, self._channels = tmp_path, tls, servers, channels
        self.tokens = StaticTokens(AUDIENCE)
        self.token = self.tokens.issue([NS])
        self.catalog = InMemoryCatalog()
        self.a = self.catalog.add(ImageSnapshot(image_a(tmp_path / "a.img"), namespace=NS, name="a", volume_id="v"))
        self.faults = Faults()

    def serve(self, **kw) -> SnapshotMetadataServer:
        kw.setdefault("faults", self.faults)
        server = SnapshotMetadataServer(self.catalog, self.tokens, tls=self.tls, **kw)
        self._servers.append(server)
        server.start()
        self.server = server
        channel = grpc.secure_channel(server.address, grpc.ssl_channel_credentials(root_certificates=server.ca_pem))
        self._channels.append(channel)
        self.stub = schema_pb2_grpc.SnapshotMetadataStub(channel)
        self.channel = channel
        return server

    def allocated(self, name="a", *, token=None, namespace=NS, offset=0, max_results=0):
        req = pb.GetMetadataAllocatedRequest(
            security_token=self.token if token is None else token,
            namespace=namespace,
            snapshot_name=name,
            starting_offset=offset,
            max_results=max_results,
        )
        return drain(self.stub.GetMetadataAllocated(req, timeout=30))

    def delta(self, base, target, *, token=None, namespace=NS, offset=0, max_results=0):
        req = pb.GetMetadataDeltaRequest(
            security_token=self.token if token is None else token,
            namespace=namespace,
            base_snapshot_id=base,
            target_snapshot_name=target,
            starting_offset=offset,
            max_results=max_results,
        )
        return drain(self.stub.GetMetadataDelta(req, timeout=30))


@pytest.fixture(scope="module")
def tls():
    return make_ca_and_cert(["csi-snapshot-metadata.csi-driver"])


@pytest.fixture
def env(tmp_path, tls):
    servers: list[SnapshotMetadataServer] = []
    channels: list[grpc.Channel] = []
    try:
        e = Env(tmp_path, tls, servers, channels)
        e.serve()
        yield e
    finally:
        for channel in channels:
            channel.close()
        for server in servers:
            server.stop()


def ok(result):
    messages, error = result
    assert error is None, error
    return messages


def failed(result, code: grpc.StatusCode, details: str | None = None) -> grpc.RpcError:
    _, error = result
    assert error is not None and error.code() == code, error
    if details is not None:
        assert details in error.details()
    return error


# --- allocated and delta, both styles ---


def test_allocated_fixed_length(env):
    messages = ok(env.allocated())
    assert tuples(messages) == fixed(A_ALLOCATED)
    assert all(m.block_metadata_type == pb.FIXED_LENGTH and m.volume_capacity_bytes == A_CAPACITY for m in messages)


def test_allocated_variable_length_merges_adjacent_blocks(env):
    env.serve(block_type="VARIABLE_LENGTH")
    messages = ok(env.allocated())
    assert tuples(messages) == [(2 * BS, 3 * BS), (6 * BS, BS), (10 * BS, BS), (255 * BS, 3 * BS), (599 * BS, BS)]
    assert all(m.block_metadata_type == pb.VARIABLE_LENGTH and m.volume_capacity_bytes == A_CAPACITY for m in messages)


@pytest.fixture
def target(env):
    """A copy of image A with block 3 rewritten, 6 zeroed, 30 new and 599 beyond a hole in neither."""
    path = env.tmp_path / "b.img"
    path.write_bytes((env.tmp_path / "a.img").read_bytes())
    write_image_blocks = {3: b"x", 6: b"\0", 30: b"e"}
    with open(path, "r+b") as f:
        for index, fill in write_image_blocks.items():
            os.pwrite(f.fileno(), fill * BS, index * BS)
    return env.catalog.add(ImageSnapshot(path, namespace=NS, name="b", volume_id="v"))


def test_delta_reports_changed_blocks_only_including_zeroed_ones(env, target):
    assert tuples(ok(env.delta(env.a.handle, "b"))) == fixed([3, 6, 30])
    env.serve(block_type="VARIABLE_LENGTH")
    assert tuples(ok(env.delta(env.a.handle, "b"))) == fixed([3, 6, 30])  # none adjacent


def test_delta_variable_length_merges(env):
    path = write_image(env.tmp_path / "c.img", A_CAPACITY, {**A_BLOCKS, 7: b"n", 8: b"n", 256: b"z"})
    with open(path, "r+b") as f:
        os.pwrite(f.fileno(), b"\1", 11 * BS - 1)
    env.catalog.add(ImageSnapshot(path, namespace=NS, name="c", volume_id="v"))
    env.serve(block_type="VARIABLE_LENGTH")
    assert tuples(ok(env.delta(env.a.handle, "c"))) == [(7 * BS, 2 * BS), (256 * BS, BS)]


def test_unchanged_delta_is_a_stream_of_zero_messages(env):
    env.catalog.add(ImageSnapshot(env.tmp_path / "a.img", namespace=NS, name="same", volume_id="v"))
    assert ok(env.delta(env.a.handle, "same")) == []


def test_paging_with_max_results(env):
    messages = ok(env.allocated(max_results=4))
    assert [len(m.block_metadata) for m in messages] == [4, 4, 1]
    assert tuples(messages) == fixed(A_ALLOCATED)
    env.catalog.add(SyntheticSnapshot(600 * BS, namespace=NS, name="syn"))
    assert [len(m.block_metadata) for m in ok(env.allocated("syn"))] == [256, 256, 88]  # 0 means 256


def test_resume_from_starting_offset(env):
    assert tuples(ok(env.allocated(offset=6 * BS))) == fixed(A_ALLOCATED[3:])
    assert tuples(ok(env.allocated(offset=6 * BS + 100))) == fixed(A_ALLOCATED[3:])  # the block holding the offset
    assert tuples(ok(env.allocated(offset=7 * BS))) == fixed(A_ALLOCATED[4:])
    assert ok(env.allocated(offset=A_CAPACITY)) == []  # resuming after the very last tuple: a clean empty stream
    env.serve(block_type="VARIABLE_LENGTH")
    assert tuples(ok(env.allocated(offset=3 * BS)))[0] == (3 * BS, 2 * BS)  # a run cut at the resume point


def test_starting_offset_out_of_range(env, target):
    failed(env.allocated(offset=A_CAPACITY + 1), CODE.OUT_OF_RANGE)
    failed(env.allocated(offset=-1), CODE.OUT_OF_RANGE)
    failed(env.delta(env.a.handle, "b", offset=A_CAPACITY + BS), CODE.OUT_OF_RANGE)


def test_capacity_not_a_multiple_of_the_block_size(env):
    path = write_image(env.tmp_path / "odd.img", 4 * BS, {1: b"o"})
    with open(path, "ab") as f:
        f.write(b"t" * 100)
    env.catalog.add(ImageSnapshot(path, namespace=NS, name="odd", volume_id="odd"))
    messages = ok(env.allocated("odd"))
    assert tuples(messages) == fixed([1, 4]) and messages[0].volume_capacity_bytes == 4 * BS + 100
    env.serve(block_type="VARIABLE_LENGTH")
    assert tuples(ok(env.allocated("odd"))) == [(BS, BS), (4 * BS, 100)]


def test_large_sparse_image_skips_holes(env):
    path = write_image(env.tmp_path / "big.img", 4 << 30, {1: b"q", (4 << 30) // BS - 1: b"q"})
    env.catalog.add(ImageSnapshot(path, namespace=NS, name="big", volume_id="big"))
    started = time.monotonic()
    assert tuples(ok(env.allocated("big"))) == fixed([1, (4 << 30) // BS - 1])
    assert time.monotonic() - started < 5  # reading 4 GiB of holes would take far longer


def test_synthetic_snapshots_stream_many_blocks(env):
    n = 1 << 18
    env.catalog.add(SyntheticSnapshot(n * BS, namespace=NS, name="all", volume_id="syn"))
    base = env.catalog.add(SyntheticSnapshot(n * BS, 1, namespace=NS, name="base", volume_id="syn"))
    env.catalog.add(SyntheticSnapshot(n * BS, 3, namespace=NS, name="third", volume_id="syn"))
    for _ in range(2):  # the second call replays the cached encoding
        messages = ok(env.allocated("all", max_results=4096))
        assert len(messages) == n // 4096 and sum(len(m.block_metadata) for m in messages) == n
        assert messages[-1].block_metadata[-1].byte_offset == (n - 1) * BS
    assert tuples(ok(env.delta(base.handle, "third", offset=4 * BS, max_results=4096)))[:2] == fixed([6, 9])
    env.serve(block_type="VARIABLE_LENGTH")
    assert tuples(ok(env.allocated("all"))) == [(0, n * BS)]


# --- request checks, auth and lookups ---


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e.allocated(token=""), "securityToken is missing"),
        (lambda e: e.allocated(namespace=""), "namespace parameter cannot be empty"),
        (lambda e: e.allocated(""), "snapshotName cannot be empty"),
        (lambda e: e.delta("", "a"), "baseSnapshotId cannot be empty"),
        (lambda e: e.delta(e.a.handle, ""), "targetSnapshotName cannot be empty"),
        (lambda e: e.delta("", "", token=""), "securityToken is missing"),
        (lambda e: e.allocated(max_results=-1), "max_results"),
    ],
)
def test_invalid_arguments_with_the_sidecar_messages(env, call, message):
    error = failed(call(env), CODE.INVALID_ARGUMENT)
    assert error.details() == message or message == "max_results"


def test_authentication_and_authorization(env):
    tokens = env.tokens
    failed(env.allocated(token="not-a-token"), CODE.UNAUTHENTICATED, "unauthenticated user")
    failed(env.allocated(token=tokens.issue(audience="someone-else")), CODE.UNAUTHENTICATED)
    failed(env.allocated(token=tokens.issue(expires_in=0)), CODE.UNAUTHENTICATED)
    failed(env.allocated(token=tokens.issue(["other"])), CODE.PERMISSION_DENIED, "user does not have permissions")
    failed(env.delta(env.a.handle, "a", token=tokens.issue(["other"])), CODE.PERMISSION_DENIED)
    assert ok(env.allocated(token=tokens.issue(["other", NS])))
    assert ok(env.allocated(token=tokens.issue()))  # "*" = every namespace
    revoked = tokens.issue()
    tokens.revoke(revoked)
    failed(env.allocated(token=revoked), CODE.UNAUTHENTICATED)
    # the token is checked before the snapshot is looked up, so nothing leaks to a stranger
    failed(env.allocated("missing", token="not-a-token"), CODE.UNAUTHENTICATED)


def test_snapshot_lookups(env, target):
    failed(env.allocated("missing"), CODE.UNAVAILABLE)  # the sidecar's answer for the target VolumeSnapshot
    failed(env.delta(env.a.handle, "missing"), CODE.UNAVAILABLE)
    failed(env.delta("no-such-handle", "b"), CODE.NOT_FOUND)
    target.ready = False
    failed(env.allocated("b"), CODE.UNAVAILABLE)
    target.ready = True
    env.a.ready = False
    failed(env.delta(env.a.handle, "b"), CODE.UNAVAILABLE)
    env.a.ready = True
    env.catalog.add(ImageSnapshot(target.path, namespace=NS, name="elsewhere", volume_id="other-volume"))
    failed(env.delta(env.a.handle, "elsewhere"), CODE.INVALID_ARGUMENT, "snapshots don't belong to the same Volume")
    with pytest.raises(SnapshotNotFound):
        env.catalog.by_handle("no-such-handle")


def test_the_v010_sidecar_names_the_delta_base_by_volumesnapshot(env, target):
    """``base_by_name``: the v0.1.0 sidecar (external-snapshot-metadata v0.1.0, field 3 ``base_snapshot_name``):
    the base is a VolumeSnapshot of the request's namespace, looked up first; a handle there is a missing name."""
    env.serve(base_by_name=True)
    assert tuples(ok(env.delta("a", "b"))) == fixed([3, 6, 30])
    failed(env.delta(env.a.handle, "b"), CODE.UNAVAILABLE, f"failed to get VolumeSnapshot '{NS}/{env.a.handle}'")
    failed(env.delta("", "b"), CODE.INVALID_ARGUMENT, "baseSnapshotName cannot be empty")
    env.a.ready = False
    failed(env.delta("a", "missing"), CODE.UNAVAILABLE, "the VolumeSnapshot is not yet ready, name: a")
    env.a.ready = True
    env.catalog.add(ImageSnapshot(target.path, namespace=NS, name="elsewhere", volume_id="other-volume"))
    failed(env.delta("a", "elsewhere"), CODE.INVALID_ARGUMENT, "baseSnapshot and targetSnapshot does not belong")


# --- transport ---


def test_health_is_serving(env):
    health = health_pb2_grpc.HealthStub(env.channel)
    for service in ("", SERVICE):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_tls_is_required_and_verified(env, tls):
    with grpc.insecure_channel(env.server.address) as plain:
        stub = schema_pb2_grpc.SnapshotMetadataStub(plain)
        req = pb.GetMetadataAllocatedRequest(security_token=env.token, namespace=NS, snapshot_name="a")
        failed(drain(stub.GetMetadataAllocated(req, timeout=10)), CODE.UNAVAILABLE)
    stranger = grpc.ssl_channel_credentials(root_certificates=make_ca_and_cert().ca_pem)
    with grpc.secure_channel(env.server.address, stranger) as other:
        stub = schema_pb2_grpc.SnapshotMetadataStub(other)
        failed(drain(stub.GetMetadataAllocated(req, timeout=10)), CODE.UNAVAILABLE)
    port = env.server.address.rsplit(":", 1)[1]
    with grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(tls.ca_pem)) as by_name:
        assert tuples(ok(drain(schema_pb2_grpc.SnapshotMetadataStub(by_name).GetMetadataAllocated(req, timeout=10))))
    cert = x509.load_pem_x509_certificate(tls.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "csi-snapshot-metadata.csi-driver"} <= set(sans.get_values_for_type(x509.DNSName))
    assert "key_pem" not in repr(tls) and b"PRIVATE KEY" in tls.key_pem


# --- faults and counters ---


def test_fail_with_fails_the_next_calls_only(env):
    env.faults.update(fail_with=CODE.RESOURCE_EXHAUSTED, fail_times=2)
    failed(env.allocated(), CODE.RESOURCE_EXHAUSTED)
    failed(env.delta(env.a.handle, "a"), CODE.RESOURCE_EXHAUSTED)
    assert tuples(ok(env.allocated())) == fixed(A_ALLOCATED)
    assert env.server.calls == {"GetMetadataAllocated": 2, "GetMetadataDelta": 1}


def test_cut_stream_then_resume_succeeds(env):
    env.faults.update(cut_after_messages=2, cut_times=1)
    messages, error = env.allocated(max_results=2)
    assert error is not None and error.code() == CODE.UNAVAILABLE and len(messages) == 2
    got = tuples(messages)
    resumed = ok(env.allocated(offset=got[-1][0] + got[-1][1], max_results=2))
    assert got + tuples(resumed) == fixed(A_ALLOCATED)
    assert [r.starting_offset for r in env.server.requests] == [0, 7 * BS]


def test_cut_replaces_the_clean_end_and_honours_code(env):
    env.faults.update(cut_after_messages=3, cut_times=2, cut_code=CODE.INTERNAL)
    messages, error = env.allocated(max_results=3)  # exactly 3 messages: the error comes instead of the end
    assert len(messages) == 3 and error.code() == CODE.INTERNAL
    messages, error = env.allocated(max_results=4)  # 3 of 3 messages again
    assert len(messages) == 3 and error.code() == CODE.INTERNAL
    assert tuples(ok(env.allocated(max_results=3))) == fixed(A_ALLOCATED)  # cut_times used up
    env.faults.update(cut_after_messages=0, cut_times=1)
    messages, error = env.allocated()
    assert messages == [] and error.code() == CODE.INTERNAL
    env.faults.update(cut_after_messages=5, cut_times=1)
    assert len(ok(env.allocated(max_results=3))) == 3  # shorter streams are not cut


def test_delay_between_messages_and_stop_ends_streams(env):
    env.faults.delay_between_messages = 0.05
    started = time.monotonic()
    assert len(ok(env.allocated(max_results=3))) == 3
    assert time.monotonic() - started >= 0.1
    env.faults.delay_between_messages = 60
    call = env.stub.GetMetadataAllocated(
        pb.GetMetadataAllocatedRequest(security_token=env.token, namespace=NS, snapshot_name="a", max_results=1)
    )
    next(call)
    stopper = threading.Thread(target=env.server.stop)
    started = time.monotonic()
    stopper.start()
    messages, error = drain(call)
    stopper.join(timeout=10)
    assert error is not None and time.monotonic() - started < 10


def test_resend_overlap_blocks(env):
    env.faults.resend_overlap_blocks = 3
    assert tuples(ok(env.allocated(offset=6 * BS))) == fixed(A_ALLOCATED[1:])  # from block 3
    assert tuples(ok(env.allocated())) == fixed(A_ALLOCATED)  # no effect from offset 0


def test_bad_order_type_and_capacity_changes(env):
    env.faults.update(bad_order_at_message=1)
    messages = ok(env.allocated(max_results=3))
    assert tuples(messages[1:2]) == fixed([6, 10, 10])  # the last tuple repeats the one before it
    env.faults.update(bad_order_at_message=1)
    assert tuples(ok(env.allocated(max_results=1))[1:2]) == fixed([2])  # goes back to the previous message's
    env.faults.update(bad_order_at_message=None, change_type_at_message=1, change_capacity_at_message=2)
    messages = ok(env.allocated(max_results=3))
    assert [m.block_metadata_type for m in messages] == [pb.FIXED_LENGTH, pb.VARIABLE_LENGTH, pb.FIXED_LENGTH]
    assert [m.volume_capacity_bytes for m in messages] == [A_CAPACITY, A_CAPACITY, A_CAPACITY + BS]
    assert tuples(messages) == fixed(A_ALLOCATED)
    env.faults.reset()
    assert ok(env.allocated(max_results=3))[1].block_metadata_type == pb.FIXED_LENGTH


def test_past_capacity(env, target):
    env.faults.past_capacity = True
    messages = ok(env.allocated())
    assert tuples(messages) == [*fixed(A_ALLOCATED), (A_CAPACITY, BS)]
    assert messages[-1].volume_capacity_bytes == A_CAPACITY
    assert tuples(ok(env.delta(env.a.handle, "b"))) == [*fixed([3, 6, 30]), (A_CAPACITY, BS)]


def test_faults_knobs_and_request_records(env):
    with pytest.raises(TypeError):
        env.faults.update(cut_after=1)
    ok(env.allocated(offset=BS, max_results=7))
    record = env.server.last_request
    assert (record.method, record.namespace, record.snapshot_name, record.starting_offset, record.max_results) == (
        "GetMetadataAllocated",
        NS,
        "a",
        BS,
        7,
    )
    assert record.security_token == env.token and env.token not in repr(record) and env.token not in repr(env.tokens)
    ok(env.delta(env.a.handle, "a"))
    assert env.server.last_request.base_snapshot_id == env.a.handle
    assert env.server.calls["GetMetadataDelta"] == 1 and len(env.server.requests) == 2


# --- python -m localcluster.snapshot_metadata ---


def test_main_serves_images(tmp_path):
    image = image_a(tmp_path / "a.img")
    ca = tmp_path / "ca.pem"
    cmd = [sys.executable, "-m", "localcluster.snapshot_metadata", "--image", f"{NS}/a={image}", "--ca-out", str(ca)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        lines = {}
        for line in proc.stdout:
            key, _, value = line.partition(": ")
            lines[key] = value.strip()
            if line.startswith("serving"):
                break
        assert ca.read_bytes().startswith(b"-----BEGIN CERTIFICATE")
        with grpc.secure_channel(lines["address"], grpc.ssl_channel_credentials(ca.read_bytes())) as channel:
            req = pb.GetMetadataAllocatedRequest(security_token=lines["token"], namespace=NS, snapshot_name="a")
            call = schema_pb2_grpc.SnapshotMetadataStub(channel).GetMetadataAllocated(req, timeout=10)
            assert tuples(ok(drain(call))) == fixed(A_ALLOCATED)
    finally:
        proc.terminate()
        try:
            # a bound on a stuck server, not a speed goal: a fresh venv on a busy CI machine is slow
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()
            proc.stdout.close()
