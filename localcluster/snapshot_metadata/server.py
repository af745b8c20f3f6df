"""A SnapshotMetadata gRPC server on loopback that behaves like the external-snapshot-metadata sidecar in front
of the CSI hostpath driver. A test double for tests, benchmarks and the local cluster.

``SnapshotMetadataServer(catalog, validator, ...)`` serves ``snapshotmetadata.SnapshotMetadata`` and
``grpc.health.v1.Health`` (SERVING for "" and the service name) over server-side TLS only. Use it as a context
manager, or ``start()``/``stop()``. Clients dial ``.address`` trusting ``.ca_pem``.

Each RPC, in the sidecar's order:

1. injected ``fail_with`` (see ``faults``);
2. field checks, INVALID_ARGUMENT with the sidecar's messages ("securityToken is missing", ...);
   a negative max_results is INVALID_ARGUMENT too;
3. ``validator.validate(token, namespace)``: UNAUTHENTICATED / PERMISSION_DENIED (any other error: INTERNAL);
4. target VolumeSnapshot missing or not ready: UNAVAILABLE; refused by the catalog (``SnapshotRefused``, e.g. its
   VolumeSnapshotClass cannot be resolved): the catalog's code and message; delta base handle unknown: NOT_FOUND,
   not ready: UNAVAILABLE; different volumes: INVALID_ARGUMENT "snapshots don't belong to the same Volume";
   with ``base_by_name`` (the v0.1.0 sidecar, whose field 3 is ``base_snapshot_name``): the base is the
   VolumeSnapshot of that name in the request's namespace, looked up before the target: empty INVALID_ARGUMENT
   "baseSnapshotName cannot be empty", missing UNAVAILABLE "failed to get VolumeSnapshot '<ns>/<name>': ...",
   not ready UNAVAILABLE "the VolumeSnapshot is not yet ready, name: <name>", refused as a target is, different
   volumes INVALID_ARGUMENT "baseSnapshot and targetSnapshot does not belong to the same volume" (v0.1.0
   compared the snapshots' source PVC names; this double compares their volumes);
5. ``starting_offset`` < 0 or > capacity: OUT_OF_RANGE (== capacity is an empty, successful stream);
6. the stream: from block ``starting_offset // block_size``, FIXED_LENGTH sends one ``block_size`` tuple per
   allocated/changed block (the last one runs past a capacity that is not a multiple of ``block_size``),
   VARIABLE_LENGTH one tuple per run of adjacent blocks (clipped to the capacity);
   ``max_results`` 0 means 256 tuples a message; every message carries the type and the capacity; nothing is
   sent for an empty batch, so an unchanged delta is a stream of zero messages.

Responses are serialized by this module (``stream``; the handlers send bytes as they are), and the streams of
immutable (synthetic) snapshots are encoded once and replayed, so benchmarks measure the client.

``calls`` counts calls per RPC name and ``requests`` keeps every request seen (``RequestRecord``, whose repr
never shows the token); the server never logs tokens.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from localcluster.snapshot_metadata import auth, stream
from localcluster.snapshot_metadata.faults import CallPlan, Faults, shape
from localcluster.snapshot_metadata.snapshots import Snapshot, SnapshotCatalog, SnapshotNotFound, SnapshotRefused
from localcluster.snapshot_metadata.tls import TlsMaterial, make_ca_and_cert
from movers.cbt._pb import schema_pb2 as pb

log = logging.getLogger(__name__)
SERVICE = "snapshotmetadata.SnapshotMetadata"
DEFAULT_MAX_RESULTS = 256
MESSAGE_LIMIT = 64 << 20
BLOCK_TYPES = {"FIXED_LENGTH": pb.FIXED_LENGTH, "VARIABLE_LENGTH": pb.VARIABLE_LENGTH}


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it; ``snapshot_name`` is the target of a delta."""

    method: str
    namespace: str
    snapshot_name: str
    base_snapshot_id: str
    starting_offset: int
    max_results: int
    security_token: str = field(repr=False)


class SnapshotMetadataServer:
    """The server; ``port=0`` picks a free port (see ``.address`` after ``start()``), ``tls=None`` makes a CA.

    ``faults`` may be shared with the test and changed while serving; ``max_workers`` bounds concurrent RPCs.
    ``base_by_name``: the v0.1.0 sidecar's delta (its base named by VolumeSnapshot name, see the module doc).
    """

    def __init__(
        self,
        catalog: SnapshotCatalog,
        validator: auth.TokenValidator,
        *,
        block_type: str = "FIXED_LENGTH",
        block_size: int = 4096,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsMaterial | None = None,
        faults: Faults | None = None,
        max_workers: int = 16,
        base_by_name: bool = False,
    ):
        if block_type not in BLOCK_TYPES:
            raise ValueError(f"block_type must be one of {sorted(BLOCK_TYPES)}")
        if block_size <= 0:
            raise ValueError("block_size must be > 0")
        self.catalog, self.validator = catalog, validator
        self.block_type, self.block_size = block_type, block_size
        self.host, self.port = host, port
        self.tls = tls or make_ca_and_cert()
        self.faults = faults if faults is not None else Faults()
        self.max_workers = max_workers
        self.base_by_name = base_by_name
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._requests: list[RequestRecord] = []
        self._server: grpc.Server | None = None
        self._health: health.HealthServicer | None = None
        self._stopping = threading.Event()
        self._cache = stream.MessageCache()

    # lifecycle

    @property
    def ca_pem(self) -> bytes:
        return self.tls.ca_pem

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> SnapshotMetadataServer:
        if self._server is not None:
            raise RuntimeError("server already started")
        options = [
            ("grpc.max_send_message_length", MESSAGE_LIMIT),
            ("grpc.max_receive_message_length", MESSAGE_LIMIT),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            ThreadPoolExecutor(self.max_workers, thread_name_prefix="snapshot-metadata"), options=options
        )
        handlers = {
            "GetMetadataAllocated": grpc.unary_stream_rpc_method_handler(
                self.GetMetadataAllocated, pb.GetMetadataAllocatedRequest.FromString, None
            ),
            "GetMetadataDelta": grpc.unary_stream_rpc_method_handler(
                self.GetMetadataDelta, pb.GetMetadataDeltaRequest.FromString, None
            ),
        }
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self._health = health.HealthServicer()
        for name in ("", SERVICE):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        creds = grpc.ssl_server_credentials([(self.tls.key_pem, self.tls.cert_pem)], require_client_auth=False)
        try:
            port = server.add_secure_port(f"{self.host}:{self.port}", creds)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc}") from None
        if not port:
            raise OSError(f"cannot listen on {self.host}:{self.port}")
        self.port = port
        self._stopping.clear()
        server.start()
        self._server = server
        log.info("SnapshotMetadata server listening on %s (%s)", self.address, self.block_type)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stop serving (idempotent); delays in flight end at once, streams are cancelled after ``grace``."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        server.stop(grace).wait()

    def __enter__(self) -> SnapshotMetadataServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # counters

    @property
    def calls(self) -> Counter[str]:
        """Calls per RPC name so far (a copy; 0 for an RPC never called)."""
        with self._lock:
            return Counter(self._calls)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._requests)

    @property
    def last_request(self) -> RequestRecord | None:
        with self._lock:
            return self._requests[-1] if self._requests else None

    # RPCs

    def GetMetadataAllocated(self, request, context):  # noqa: N802 (gRPC method name)
        record = RequestRecord(
            "GetMetadataAllocated",
            request.namespace,
            request.snapshot_name,
            "",
            request.starting_offset,
            request.max_results,
            request.security_token,
        )
        plan = self._begin(record, context, [(request.snapshot_name, "snapshotName cannot be empty")])
        target = self._target(request.namespace, request.snapshot_name, context)
        start_block, max_results = self._window(record, plan, target, context)
        runs = target.allocated_runs(self.block_size, start_block)
        key = None if target.cache_key is None else ("allocated", target.cache_key, start_block, max_results)
        yield from self._stream(plan, runs, target.capacity, max_results, key, context)

    def GetMetadataDelta(self, request, context):  # noqa: N802 (gRPC method name)
        record = RequestRecord(
            "GetMetadataDelta",
            request.namespace,
            request.target_snapshot_name,
            request.base_snapshot_id,
            request.starting_offset,
            request.max_results,
            request.security_token,
        )
        base_field = "baseSnapshotName" if self.base_by_name else "baseSnapshotId"
        required = [
            (request.base_snapshot_id, f"{base_field} cannot be empty"),
            (request.target_snapshot_name, "targetSnapshotName cannot be empty"),
        ]
        plan = self._begin(record, context, required)
        if self.base_by_name:
            base = self._base_by_name(request.namespace, request.base_snapshot_id, context)
            target = self._target(request.namespace, request.target_snapshot_name, context)
            if base.volume_id != target.volume_id:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "baseSnapshot and targetSnapshot does not belong to the same volume",
                )
        else:
            target = self._target(request.namespace, request.target_snapshot_name, context)
            try:
                base = self.catalog.by_handle(request.base_snapshot_id)
            except SnapshotNotFound:
                context.abort(grpc.StatusCode.NOT_FOUND, f"snapshot {request.base_snapshot_id} not found")
            if not base.ready:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"snapshot {request.base_snapshot_id} is not ready")
            if base.volume_id != target.volume_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "snapshots don't belong to the same Volume")
        start_block, max_results = self._window(record, plan, target, context)
        runs = target.changed_runs(base, self.block_size, start_block)
        key = None
        if target.cache_key is not None and base.cache_key is not None:
            key = ("delta", target.cache_key, base.cache_key, start_block, max_results)
        yield from self._stream(plan, runs, target.capacity, max_results, key, context)

    # steps

    def _begin(self, record: RequestRecord, context, required: list[tuple[str, str]]) -> CallPlan:
        """Count the call, apply fail_with, check the fields and the token; abort on any failure."""
        with self._lock:
            self._calls[record.method] += 1
            self._requests.append(record)
        log.debug("%r", record)
        plan = self.faults.plan()
        if plan.fail_with is not None:
            context.abort(plan.fail_with, "injected failure")
        checks = [
            (record.security_token, "securityToken is missing"),
            (record.namespace, "namespace parameter cannot be empty"),
            *required,
        ]
        for value, message in checks:
            if not value:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        if record.max_results < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "max_results cannot be negative")
        failure = None
        try:
            self.validator.validate(record.security_token, record.namespace)
        except auth.Unauthenticated:
            failure = (grpc.StatusCode.UNAUTHENTICATED, auth.UNAUTHENTICATED_MSG)
        except auth.PermissionDenied as exc:
            failure = (grpc.StatusCode.PERMISSION_DENIED, str(exc) or auth.PERMISSION_DENIED_MSG)
        except Exception as exc:  # a validator that cannot decide: the sidecar's failed TokenReview/SAR
            failure = (grpc.StatusCode.INTERNAL, f"failed to authenticate user: {type(exc).__name__}")
        if failure:
            context.abort(*failure)
        return plan

    def _target(self, namespace: str, name: str, context) -> Snapshot:
        try:
            snap = self.catalog.by_name(namespace, name)
        except SnapshotRefused as exc:
            context.abort(grpc.StatusCode[exc.code], str(exc))
        except SnapshotNotFound:
            snap = None
        if snap is None or not snap.ready:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"VolumeSnapshot {namespace}/{name} is not ready")
        return snap

    def _base_by_name(self, namespace: str, name: str, context) -> Snapshot:
        """The v0.1.0 sidecar's base: the VolumeSnapshot ``namespace/name`` (see the module doc)."""
        try:
            snap = self.catalog.by_name(namespace, name)
        except SnapshotRefused as exc:
            context.abort(grpc.StatusCode[exc.code], str(exc))
        except SnapshotNotFound as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"failed to get VolumeSnapshot '{namespace}/{name}': {exc}")
        if not snap.ready:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the VolumeSnapshot is not yet ready, name: {name}")
        return snap

    def _window(self, record: RequestRecord, plan: CallPlan, target: Snapshot, context) -> tuple[int, int]:
        offset = record.starting_offset
        if offset < 0 or offset > target.capacity:
            context.abort(grpc.StatusCode.OUT_OF_RANGE, f"starting_offset {offset} is outside [0, {target.capacity}]")
        start_block = offset // self.block_size
        if offset > 0:
            start_block = max(0, start_block - plan.resend_overlap_blocks)
        return start_block, record.max_results or DEFAULT_MAX_RESULTS

    def _messages(self, plan: CallPlan, runs, capacity: int, max_results: int, key) -> Iterator[bytes]:
        """The encoded messages; replayed from the cache for immutable snapshots when no fault reshapes them."""
        fixed = self.block_type == "FIXED_LENGTH"
        kind = BLOCK_TYPES[self.block_type]
        batches = stream.batches(runs, fixed, self.block_size, capacity, max_results)
        if not plan.reshapes:
            if key is None:
                return (stream.encode(batch, kind, capacity) for batch in batches)
            key = (*key, self.block_type, self.block_size, capacity)
            cached = self._cache.get(key)
            if cached is not None:
                return iter(cached)
            return self._cache.through(key, (stream.encode(batch, kind, capacity) for batch in batches))
        other = pb.VARIABLE_LENGTH if fixed else pb.FIXED_LENGTH
        return (
            stream.encode(
                batch,
                other if i == plan.change_type_at_message else kind,
                capacity + (self.block_size if i == plan.change_capacity_at_message else 0),
            )
            for i, batch in enumerate(shape(plan, batches, self.block_size, capacity))
        )

    def _stream(self, plan: CallPlan, runs, capacity: int, max_results: int, key, context) -> Iterator[bytes]:
        cut = plan.cut_after_messages
        if cut == 0:
            context.abort(plan.cut_code, "stream cut (injected)")
        for i, message in enumerate(self._messages(plan, runs, capacity, max_results, key)):
            if i and plan.delay_between_messages and self._stopping.wait(plan.delay_between_messages):
                # stopping: the stream ends in an error, as the server's stop would cancel it (not with the rest of
                # its messages sent in the moment before the cancellation reaches this thread)
                context.abort(grpc.StatusCode.UNAVAILABLE, "server stopping")
            yield message
            if cut is not None and i + 1 >= cut:
                context.abort(plan.cut_code, f"stream cut after {i + 1} messages (injected)")
