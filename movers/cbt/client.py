"""Client of the Kubernetes SnapshotMetadata service (KEP-3314): changed block tracking.

``SnapshotMetadataClient.allocated(namespace, snapshot)`` and ``.delta(namespace,
base_handle, snapshot)`` return an ``ExtentStream``: one ascending iterator of coalesced
``(offset, length)`` extents, validated while it streams (``movers.cbt.stream``).

* TLS only: the channel trusts exactly the CA bundle given (the SnapshotMetadataService's
  ``caCert``); there is no insecure mode. ``tls_server_name`` overrides the name checked
  against the certificate, it does not disable the check.
* The token goes in the request's ``security_token`` (never in metadata, logs or errors).
* Resume: the sidecar cuts every stream after 10 minutes and networks fail. On UNAVAILABLE,
  DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED or a broken stream the call is re-issued with
  ``starting_offset`` = end of the last tuple received (with a fresh token after an
  UNAUTHENTICATED on a resumed call), re-sent tuples are dropped or clipped, and the extents
  are identical to an uninterrupted run. At most ``retries`` consecutive failures without
  progress, with exponential backoff.
* Errors: UNAUTHENTICATED / PERMISSION_DENIED -> ``CbtAuthError``; on a delta, INVALID_ARGUMENT
  (e.g. base and target of different volumes) and NOT_FOUND (the base is gone) ->
  ``CbtBaseRejectedError`` (a full backup from the allocated blocks instead); FAILED_PRECONDITION,
  UNIMPLEMENTED, NOT_FOUND -> ``CbtUnavailableError`` (fall back to a scan);
  INVALID_ARGUMENT, OUT_OF_RANGE -> ``CbtRequestError``; contract violations ->
  ``CbtProtocolError``; retries exhausted -> ``CbtTransientError``.
* A stream of zero messages means no changes: ``capacity`` stays None (take it from the
  snapshot).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from operator import itemgetter

import grpc

from movers.cbt._pb import schema_pb2 as pb
from movers.cbt.stream import TYPE_NAMES, ExtentAssembler
from movers.cbt.tokens import TokenSource
from movers.errors import (
    CbtAuthError,
    CbtBaseRejectedError,
    CbtProtocolError,
    CbtRequestError,
    CbtTransientError,
    CbtUnavailableError,
)

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 << 20
RETRIABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
BROKEN_STREAM_HINTS = ("rst_stream", "stream removed", "connection reset", "socket closed", "goaway", "eof")
UNAVAILABLE_CODES = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND}


class SnapshotMetadataClient:
    def __init__(  # noqa: PLR0913 engine core: the connection and its keyword-only call settings (page size, timeout, retries, backoff, TLS name, test clock), each with its default; grouping them would only move the list
        self,
        address: str,
        ca_pem: bytes,
        token_source: TokenSource,
        *,
        max_results: int = 4096,
        call_timeout: float = 570.0,
        retries: int = 5,
        backoff: float = 0.5,
        tls_server_name: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not ca_pem or b"BEGIN CERTIFICATE" not in ca_pem:
            raise CbtRequestError("the CBT CA bundle is empty or not PEM: TLS verification needs the service's CA")
        if max_results < 0:
            raise CbtRequestError("max_results must be >= 0 (0 lets the server choose)")
        options = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        self.address = address
        self.channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca_pem), options)
        # responses arrive undecoded: ExtentAssembler.feed_raw decodes them without an object per tuple
        service = "/" + pb.DESCRIPTOR.services_by_name["SnapshotMetadata"].full_name
        self._allocated = self.channel.unary_stream(
            f"{service}/GetMetadataAllocated", request_serializer=pb.GetMetadataAllocatedRequest.SerializeToString
        )
        self._delta = self.channel.unary_stream(
            f"{service}/GetMetadataDelta", request_serializer=pb.GetMetadataDeltaRequest.SerializeToString
        )
        self.token_source = token_source
        self.max_results = max_results
        self.call_timeout = call_timeout
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> SnapshotMetadataClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SnapshotMetadataClient({self.address!r})"

    def allocated(
        self, namespace: str, snapshot: str, clamp_to: int | None = None, starting_offset: int = 0
    ) -> ExtentStream:
        """The allocated ranges of VolumeSnapshot ``namespace/snapshot`` (from the block holding
        ``starting_offset``)."""

        def call(token: str, offset: int):
            req = pb.GetMetadataAllocatedRequest(
                security_token=token,
                namespace=namespace,
                snapshot_name=snapshot,
                starting_offset=offset,
                max_results=self.max_results,
            )
            return self._allocated(req, timeout=self.call_timeout)

        what = f"allocated blocks of {namespace}/{snapshot}"
        return ExtentStream(self, call, namespace, what, clamp_to, None, starting_offset)

    def delta(
        self, namespace: str, base_handle: str, snapshot: str, clamp_to: int | None = None, starting_offset: int = 0
    ) -> ExtentStream:
        """The ranges changed between the snapshot with CSI handle ``base_handle`` and the
        VolumeSnapshot ``namespace/snapshot`` (from the block holding ``starting_offset``). For a v1alpha1
        service (sidecar v0.1.0: field 3 is ``base_snapshot_name``) ``base_handle`` is the base's VolumeSnapshot
        name instead (``movers.cbt.source``)."""

        def call(token: str, offset: int):
            req = pb.GetMetadataDeltaRequest(
                security_token=token,
                namespace=namespace,
                base_snapshot_id=base_handle,
                target_snapshot_name=snapshot,
                starting_offset=offset,
                max_results=self.max_results,
            )
            return self._delta(req, timeout=self.call_timeout)

        what = f"changes of {namespace}/{snapshot} since {base_handle}"
        return ExtentStream(self, call, namespace, what, clamp_to, base_handle, starting_offset)


class ExtentStream:
    """Iterate once for the extents (or once over ``records()``); ``capacity``, ``block_type``, ``messages``,
    ``tuples``, ``resumes`` describe what was received."""

    def __init__(
        self,
        client: SnapshotMetadataClient,
        call,
        namespace: str,
        what: str,
        clamp_to: int | None,
        base_handle: str | None = None,
        starting_offset: int = 0,
    ) -> None:
        if starting_offset < 0:
            raise CbtRequestError(f"the starting offset must be >= 0, not {starting_offset}")
        self.starting_offset = starting_offset
        self.client = client
        self.base_handle = base_handle  # a delta since this snapshot; None: allocated blocks
        self._call = call
        self.namespace = namespace
        self.what = what
        self.assembler = ExtentAssembler(clamp_to)
        self.resumes = 0
        self.extents = 0
        self.bytes = 0

    @property
    def capacity(self) -> int | None:
        return self.assembler.capacity

    @property
    def block_type(self) -> str | None:
        bt = self.assembler.block_type
        return TYPE_NAMES.get(bt) if bt is not None else None

    @property
    def messages(self) -> int:
        return self.assembler.messages

    @property
    def tuples(self) -> int:
        return self.assembler.tuples

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for batch in self._batches():
            self.extents += len(batch)
            self.bytes += sum(map(itemgetter(1), batch))
            yield from batch

    def records(self) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """The messages instead of the extents: ``(record number, [(byte_offset, size_bytes), ...])`` per message
        with the tuples as the service sent them, validated, numbered from 1 (the upstream lister's records). After
        a resumed call, tuples sent twice are left out, and a message of nothing but those is no record."""
        asm, seen, number = self.assembler, 0, 0
        for _batch in self._batches():
            if asm.messages == seen:  # the end of the stream, not a message
                continue
            seen = asm.messages
            if asm.last_tuples is not None:
                number += 1
                yield number, list(zip(*asm.last_tuples, strict=True))

    def _batches(self) -> Iterator[list[tuple[int, int]]]:
        asm = self.assembler
        client = self.client
        failures = 0
        fresh_token = False
        offset = self.starting_offset
        while True:
            token = client.token_source.token(fresh=fresh_token)
            log.debug("CBT call for %s at starting_offset %d, max_results %d", self.what, offset, client.max_results)
            call = self._call(token, offset)
            progress_before = asm.end
            try:
                for raw in call:
                    yield asm.feed_raw(raw)
                yield asm.finish()
                log.debug(
                    "CBT stream of %s complete: %d messages, %d tuples, %d resumes",
                    self.what,
                    asm.messages,
                    asm.tuples,
                    self.resumes,
                )
                return
            except grpc.RpcError as err:
                code, details = err.code(), _redact(err.details() or "", token)
                retriable = code in RETRIABLE or _broken_stream(code, details)
                if code == grpc.StatusCode.UNAUTHENTICATED and offset > 0 and not fresh_token:
                    retriable = fresh_token = True  # the token may have expired during a long stream
                elif not retriable:
                    raise self._error(code, details) from None
                else:
                    fresh_token = False
                if asm.end > progress_before:
                    failures = 0
                failures += 1
                if failures > client.retries:
                    raise CbtTransientError(
                        f"SnapshotMetadata service at {client.address}: {self.what} failed {failures} times in a row"
                        f" without progress, last with {code.name}: {details}"
                    ) from None
                delay = min(30.0, client.backoff * 2 ** (failures - 1)) * (0.5 + random.random() / 2)
                log.warning(
                    "CBT stream of %s interrupted at offset %d (%s: %s); resuming in %.1f s",
                    self.what,
                    asm.end,
                    code.name,
                    details,
                    delay,
                )
                client.sleep(delay)
                offset = asm.end
                asm.resumed_at(offset)
                self.resumes += 1
            finally:
                call.cancel()

    def _error(self, code: grpc.StatusCode, details: str) -> Exception:
        where = f"SnapshotMetadata service at {self.client.address} ({self.what})"
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return CbtAuthError(
                f"{where} refused the request with {code.name}: {details}. The mover's ServiceAccount needs a token"
                f" for the SnapshotMetadataService audience and RBAC get on volumesnapshots"
                f" (snapshot.storage.k8s.io) in namespace {self.namespace}"
            )
        if self.base_handle and code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
            return CbtBaseRejectedError(
                f"CBT delta refused for base {self.base_handle}: {where} answered {code.name}: {details}"
            )
        if code in UNAVAILABLE_CODES:
            return CbtUnavailableError(f"CBT unavailable: {where} answered {code.name}: {details}")
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
            return CbtRequestError(f"{where} rejected the request with {code.name}: {details}")
        return CbtProtocolError(f"{where} failed with {code.name}: {details}")


def _broken_stream(code: grpc.StatusCode, details: str) -> bool:
    if code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED):
        return False
    lowered = details.lower()
    return any(hint in lowered for hint in BROKEN_STREAM_HINTS)


def _redact(text: str, token: str) -> str:
    return text.replace(token, "***") if token else text
