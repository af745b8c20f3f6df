"""A store in an S3 bucket (``s3://bucket/prefix``), the only store module that imports boto3/botocore.

Contract, on top of the Store protocol in ``base.py``:

* Credentials, region and endpoint come from the standard AWS chain (``movers.aws``: ``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``AWS_REGION``,
  ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``~/.aws/config`` and ``~/.aws/credentials``);
  explicit constructor options override the chain.
* A custom (non-AWS) endpoint gets path-style addressing unless ``path_style`` says otherwise.
* botocore's own retries are off (one attempt per call): wrap the store in ``RetryingStore``.
* ``put_new`` is one conditional PutObject (``If-None-Match: *``; 412 PreconditionFailed means the
  key exists). An endpoint that has not proven conditional writes (below) gets HEAD then PUT instead,
  for the rest of the store's life (a racing writer's object may be rewritten: ``put_new`` is only for
  keys whose racing writers write the same bytes). 409 ConditionalRequestConflict (a concurrent
  write or delete of the same key) is transient: the retry gets 412 if the other write won, or
  writes if it failed or was a delete (taking 409 for "exists" could leave a key deleted that the
  caller counts on).
* Conditional writes are trusted only once proven, by a probe before the first ``put_new`` or
  ``create`` (PUT ``claims/probe-<random>``, PUT it again
  with ``If-None-Match: *``, which must answer 412; then DELETE it). An endpoint that ignores the
  header (such as s3rver) or answers 501 is never trusted again by this store object.
* ``create`` (configs, key slots, manifests) is one conditional PutObject where conditional writes are
  proven. Elsewhere (and for objects above ``multipart_threshold``) it follows a claim protocol: HEAD the
  key (exists: False); PUT the claim ``claims/<key>/<random>``; LIST ``claims/<key>/``; any other
  claim there that is not ``CLAIM_STALE_S`` older than ours (by the store's LastModified clock) means a
  racing writer: withdraw (DELETE the claim), back off at random and start again (a few times, then a
  ``TransientStoreError``); alone: HEAD the key again (a winner that finished has deleted its claim),
  PUT it, GET it back and compare (False if it holds other bytes), DELETE the claim. Two writers never
  both see themselves alone (S3's listings are strongly consistent: the later claim's LIST sees the
  earlier claim). A claimant that is not ready to PUT within ``CLAIM_ACT_S`` of sending its claim
  withdraws (a ``TransientStoreError``: the retry starts again). Residual window: a writer whose PUT
  request is delayed in flight more than ``CLAIM_STALE_S - CLAIM_ACT_S`` after a check passed, or one
  that does not follow the protocol (another tool, a mover older than it), can still rewrite a key; the
  read-back then reports the loss to whichever writer reads last, never to both as a success unless the
  late PUT lands after the other's read-back.
* A bucket that refuses writes without an integrity header (object lock with a default retention)
  gets Content-MD5 on every write from its first refusal on; other buckets never pay the MD5.
* ``put`` of more than ``multipart_threshold`` bytes is a multipart upload that is aborted on
  any failure, ``KeyboardInterrupt`` included, so it leaves neither a partial object nor a
  dangling upload (unless the abort itself fails, which is logged).
* ``requests`` counts the HTTP requests sent, by kind (``movers.repo.store.counting``).
* Vendor errors are translated here into ``movers.errors``; messages name the endpoint and the
  ``s3://`` location but never the access key, secret or session token.
* ``size``/``exists`` use HEAD, whose 404 cannot tell a missing bucket from a missing key:
  call ``check()`` first to fail fast on a wrong bucket, endpoint or credentials.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import random
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
import botocore.exceptions as bce
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from movers.aws import CREDENTIALS_HINT as _CREDENTIALS_HINT
from movers.aws import client_config
from movers.aws import error_code as _error_code
from movers.aws import is_aws_endpoint as _is_aws_endpoint
from movers.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    MoverError,
    ObjectNotFound,
    PermanentStoreError,
    TransientStoreError,
    UsageError,
)
from movers.redaction import KNOWN, Redactor, has_userinfo, hide_userinfo
from movers.repo.store.base import validate_key
from movers.repo.store.counting import RequestCounts

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB  # S3 rejects smaller parts (except the last one)
MAX_PARTS = 10_000

CLAIM_PREFIX = "claims/"  # claims of keys being created without conditional writes, and probes
CLAIM_STALE_S = 120.0  # a claim this much older than ours (store clock) is a dead writer's: ignored
CLAIM_ACT_S = 30.0  # a claimant PUTs within this of sending its claim, or withdraws
CLAIM_ROUNDS = 8  # rounds lost to racing claims before a create gives up (transient)

_NOT_FOUND_CODES = {"NoSuchKey", "NotFound", "404"}
_ACCESS_CODES = {
    "AccessDenied",
    "Forbidden",
    "403",
    "401",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
    "AccountProblem",
}
_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
    "IncompleteBody",
    "ConditionalRequestConflict",  # 409: a concurrent write or delete of the key; a retry learns the outcome
    "500",
    "502",
    "503",
    "504",
}


_REQUEST_KINDS = {  # botocore operation -> movers.repo.store.counting kind
    "GetObject": "get",
    "PutObject": "put",
    "CreateMultipartUpload": "put",
    "UploadPart": "put",
    "CompleteMultipartUpload": "put",
    "HeadObject": "head",
    "HeadBucket": "head",
    "ListObjectsV2": "list_pages",
    "DeleteObject": "delete",
    "AbortMultipartUpload": "delete",
}


class _NoConditionalWrites(Exception):
    """The endpoint answered a conditional write with 501 NotImplemented."""


def _exists_already(err: bce.ClientError) -> bool:
    code, status = _error_code(err)
    return code == "PreconditionFailed" or status == 412


def _no_conditional_writes(err: bce.ClientError) -> bool:
    code, status = _error_code(err)
    return code == "NotImplemented" or status == 501


def _wants_content_md5(err: bce.ClientError) -> bool:
    """AWS says InvalidRequest "Content-MD5 OR x-amz-checksum- HTTP header is required ... with Object Lock
    parameters"; moto says MissingUploadObjectWithObjectLockHeaders."""
    code, _status = _error_code(err)
    message = str(err.response.get("Error", {}).get("Message", ""))
    return code == "MissingUploadObjectWithObjectLockHeaders" or (code == "InvalidRequest" and "Content-MD5" in message)


def _content_md5(data: bytes | bytearray) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


class S3Store:
    """Objects under ``prefix`` in an S3 (or S3-compatible) bucket; thread-safe.

    ``multipart_threshold``: objects larger than this are uploaded in parts of ``part_size``
    bytes (at least 5 MiB; grown automatically to stay within 10,000 parts).
    """

    def __init__(  # noqa: PLR0913 engine core: keyword-only settings of one store (endpoint, credentials, multipart, pool, timeouts), each with its default; grouping them would only move the list
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        path_style: bool | None = None,
        multipart_threshold: int = 64 * MiB,
        part_size: int = 16 * MiB,
        max_pool_connections: int = 16,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
    ) -> None:
        if not bucket:
            raise UsageError("S3 bucket name is empty")
        if part_size < MIN_PART_SIZE:
            raise UsageError(f"S3 part size must be at least {MIN_PART_SIZE} bytes, got {part_size}")
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        self.bucket = bucket
        self.prefix = prefix
        self._key_prefix = f"{prefix}/" if prefix else ""
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self._redactor = Redactor(access_key, secret_key, session_token)
        KNOWN.add(access_key, secret_key, session_token)
        self._conditional_writes: bool | None = None  # None: not proven either way yet (see the module doc)
        self._probe_lock = threading.Lock()
        self._content_md5 = False  # True once the bucket asked for Content-MD5 (object lock)
        self.endpoint_url = endpoint_url or "(default AWS endpoint)"
        if (access_key is None) != (secret_key is None):
            raise AccessDeniedError(
                f"incomplete AWS credentials for {self.describe()}: give both the access key and "
                "the secret key, or neither to use the AWS credential chain"
            )
        try:
            session = boto3.session.Session(
                aws_access_key_id=access_key,
                aws_secret_access_key=secret_key,
                aws_session_token=session_token,
                region_name=region,
                profile_name=profile,
            )
            self._client = self._make_client(
                session, endpoint_url, path_style, max_pool_connections, connect_timeout, read_timeout
            )
            if endpoint_url is None and path_style is None and not _is_aws_endpoint(self._client.meta.endpoint_url):
                # The chain (env or config file) named a custom endpoint: use path style there too.
                self._client = self._make_client(
                    session, None, True, max_pool_connections, connect_timeout, read_timeout
                )
            creds = session.get_credentials()
        except bce.ProfileNotFound:
            raise AccessDeniedError(
                f"AWS profile {profile!r} not found in ~/.aws/config or ~/.aws/credentials "
                f"(needed for {self.describe()})"
            ) from None
        except ValueError as err:  # e.g. a malformed endpoint URL
            raise UsageError(self._scrub(f"cannot set up S3 client for {self.describe()}: {err}")) from None
        except bce.BotoCoreError as err:  # e.g. partial credentials in the environment
            raise self._translate(err, "setup", None) from None
        if has_userinfo(self._client.meta.endpoint_url):
            raise UsageError(
                f"bad S3 endpoint URL {hide_userinfo(self._client.meta.endpoint_url)!r} (--s3-endpoint,"
                f" AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the AWS config): credentials do not belong in a URL;"
                f" {_CREDENTIALS_HINT}"
            )
        self.endpoint_url = self._client.meta.endpoint_url
        self.requests = RequestCounts()
        self._client.meta.events.register("before-send.s3", self._count_request)
        if creds is not None:  # also hide what the chain found (env vars, profile)
            self._redactor.add(creds.access_key, creds.secret_key, creds.token)
            KNOWN.add(creds.access_key, creds.secret_key, creds.token)

    @staticmethod
    def _make_client(session, endpoint_url, path_style, pool, connect_timeout, read_timeout):
        if path_style is None and endpoint_url is not None and not _is_aws_endpoint(endpoint_url):
            path_style = True
        config = client_config(
            connect_timeout,
            read_timeout,
            max_pool_connections=pool,
            # None leaves botocore's choice (default "auto", or ~/.aws/config's s3.addressing_style).
            s3={"addressing_style": "path" if path_style else "virtual"} if path_style is not None else None,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        return session.client("s3", endpoint_url=endpoint_url, config=config)

    def _count_request(self, request, event_name: str, **_) -> None:
        """botocore's ``before-send`` hook: called once per HTTP request (returning None sends it)."""
        kind = _REQUEST_KINDS.get(event_name.rsplit(".", 1)[-1])
        if kind == "get" and "Range" in request.headers:
            kind = "range_get"
        if kind is not None:
            self.requests.add(kind)

    # -- naming and error translation --------------------------------------------------------

    def describe(self) -> str:
        """``s3://bucket/prefix`` (``s3://bucket`` without prefix); never contains secrets."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __repr__(self) -> str:
        return f"S3Store({self.describe()!r}, endpoint={self.endpoint_url!r})"

    def _url(self, key: str | None) -> str:
        return f"s3://{self.bucket}/{self._key_prefix}{key}" if key else self.describe()

    def _scrub(self, message: str) -> str:
        return self._redactor(" ".join(message.split()))

    def _translate(self, err: BaseException, op: str, key: str | None) -> MoverError:
        where = f"S3 {op} {self._url(key)} at {self.endpoint_url}"
        if isinstance(err, bce.ClientError):
            error = err.response.get("Error", {})
            code, status = _error_code(err)
            detail = f"{code}: {error.get('Message') or 'no message'}"
            if code == "NoSuchBucket" or (key is None and (code in _NOT_FOUND_CODES or status == 404)):
                cls, msg = BucketNotFoundError, f"bucket {self.bucket} does not exist at {self.endpoint_url}"
            elif code in _NOT_FOUND_CODES or status == 404:
                cls, msg = ObjectNotFound, f"object {self._url(key)} not found at {self.endpoint_url}"
            elif code in _ACCESS_CODES or status in (401, 403):
                cls = AccessDeniedError
                msg = (
                    f"{where}: access denied ({detail}); check the credentials "
                    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and the bucket policy"
                )
            elif code in _TRANSIENT_CODES or status >= 500 or status == 429:
                cls, msg = TransientStoreError, f"{where} failed: {detail}"
            else:
                cls, msg = PermanentStoreError, f"{where} failed: {detail}"
        elif isinstance(err, bce.NoCredentialsError):
            cls, msg = AccessDeniedError, f"no AWS credentials for {self.describe()}: {_CREDENTIALS_HINT}"
        elif isinstance(err, bce.PartialCredentialsError):
            cls = AccessDeniedError
            msg = f"incomplete AWS credentials for {self.describe()} ({err}): {_CREDENTIALS_HINT}"
        elif isinstance(err, bce.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(err):
            cls, msg = PermanentStoreError, f"{where}: TLS certificate not trusted: {err}"
        elif isinstance(err, bce.ConnectionError):  # endpoint, connect timeout, proxy, TLS
            cls, msg = TransientStoreError, f"cannot reach S3 endpoint {self.endpoint_url} ({op}): {err}"
        elif isinstance(err, bce.HTTPClientError | bce.IncompleteReadError | Urllib3HTTPError | OSError):
            cls, msg = TransientStoreError, f"{where} failed: network error: {err}"
        else:
            cls, msg = PermanentStoreError, f"{where} failed: {type(err).__name__}: {err}"
        return cls(self._scrub(msg))

    @contextmanager
    def _errors(self, op: str, key: str | None = None) -> Iterator[None]:
        """Translate vendor exceptions raised inside the block (``key=None``: bucket-level call)."""
        try:
            yield
        except (bce.BotoCoreError, bce.ClientError, Urllib3HTTPError, OSError) as err:
            raise self._translate(err, op, key) from None

    def _full(self, key: str) -> str:
        return self._key_prefix + validate_key(key)

    # -- Store protocol ----------------------------------------------------------------------

    def check(self) -> None:
        """HeadBucket: raise a clear error now if the endpoint, bucket or credentials are wrong."""
        with self._errors("check"):
            self._client.head_bucket(Bucket=self.bucket)

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` atomically; multipart above ``multipart_threshold`` bytes."""
        self._put(key, data, conditional=False)

    def put_new(self, key: str, data: bytes) -> bool:
        """Store ``data`` unless ``key`` exists: one PutObject with ``If-None-Match: *`` (412: it
        exists) once the endpoint proved it honours that header (a probe first, see the module doc), else HEAD
        then PUT."""
        if self.conditional_writes:
            try:
                return self._put(key, data, conditional=True)
            except _NoConditionalWrites:
                pass
        if self.exists(key):
            return False
        self._put(key, data, conditional=False)
        return True

    def _put(self, key: str, data: bytes, conditional: bool) -> bool:
        full = self._full(key)
        if not isinstance(data, bytes | bytearray):
            data = bytes(data)
        if len(data) > self.multipart_threshold:
            if conditional and self.exists(key):  # a HEAD is cheaper than uploading parts to be refused
                return False
            return self._put_multipart(key, full, data, conditional)
        condition = {"IfNoneMatch": "*"} if conditional else {}
        with self._errors("put", key):
            try:
                self._write(self._client.put_object, data, Bucket=self.bucket, Key=full, **condition)
            except bce.ClientError as err:
                if conditional and _exists_already(err):
                    return False
                if conditional and _no_conditional_writes(err):
                    self._disable_conditional_writes(err)
                    raise _NoConditionalWrites from None
                raise
        return True

    @property
    def conditional_writes(self) -> bool:
        """Whether the endpoint proved it honours ``If-None-Match: *`` (probed on first use, see the module doc)."""
        if self._conditional_writes is None:
            with self._probe_lock:  # one probe, whichever thread writes first
                if self._conditional_writes is None:
                    self._probe_conditional_writes()
        return bool(self._conditional_writes)

    def create(self, key: str, data: bytes) -> bool:
        """Store ``data`` unless ``key`` exists, never rewriting it (the module doc: a conditional PutObject where
        the endpoint proved it honours ``If-None-Match``, else the claim protocol)."""
        self._full(key)  # validates it
        if self.conditional_writes and len(data) <= self.multipart_threshold:
            try:
                return self._put(key, data, conditional=True)
            except _NoConditionalWrites:
                pass
        rng = random.Random()
        for round_ in range(CLAIM_ROUNDS):
            if self.exists(key):
                return False
            created = self._claim_and_create(key, data)
            if created is not None:
                return created
            time.sleep(rng.uniform(0, min(2.0, 0.05 * 2**round_)))
        raise TransientStoreError(f"S3 create {self._url(key)} at {self.endpoint_url}: racing writers kept claiming it")

    def _claim_and_create(self, key: str, data: bytes) -> bool | None:
        """One round of the claim protocol: True (created), False (the key exists, or holds another writer's bytes
        after ours were written), None (a racing claim: withdrawn, try again)."""
        prefix = f"{CLAIM_PREFIX}{key}/"
        claim = prefix + secrets.token_hex(16)
        started = time.monotonic()
        self._put(claim, b"", conditional=False)
        try:
            claims = self._claims(prefix)
            mine = claims.get(claim)
            if mine is None:
                raise TransientStoreError(f"S3 create {self._url(key)}: the listing lacks the claim just written")
            for other, when in claims.items():
                if other == claim:
                    continue
                if (mine - when).total_seconds() < CLAIM_STALE_S:
                    return None
                self._forget(other)  # a dead writer's
            if self.exists(key):
                return False
            if time.monotonic() - started > CLAIM_ACT_S:
                raise TransientStoreError(f"S3 create {self._url(key)}: too slow to write within its claim")
            self._put(key, data, conditional=False)
            if self.get(key) != data:
                log.warning("%s was written by another writer at once: ours is not what it holds", self._url(key))
                return False
            return True
        finally:
            self._forget(claim)

    def _claims(self, prefix: str) -> dict[str, object]:
        """The claims directly under ``prefix`` (keys relative to the store) and their LastModified times."""
        full, strip, found = self._key_prefix + prefix, len(self._key_prefix), {}
        with self._errors("list", prefix):
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                for obj in page.get("Contents", ()):
                    if "/" not in obj["Key"][len(full) :]:
                        found[obj["Key"][strip:]] = obj["LastModified"]
        return found

    def _forget(self, key: str) -> None:
        """Delete a claim or probe; a failure is logged (a leftover claim is stale after ``CLAIM_STALE_S``)."""
        try:
            self.delete(key)
        except MoverError as err:
            log.warning("%s; it is ignored once stale", err)

    def _probe_conditional_writes(self) -> None:
        """Learn whether the endpoint honours ``If-None-Match: *`` (the module doc): the answer to a conditional
        PUT of a key that exists."""
        probe = f"{CLAIM_PREFIX}probe-{secrets.token_hex(8)}"
        self._put(probe, b"", conditional=False)
        try:
            with self._errors("put", probe):
                try:
                    self._write(
                        self._client.put_object, b"", Bucket=self.bucket, Key=self._full(probe), IfNoneMatch="*"
                    )
                    honoured, answer = False, "it rewrote an existing object"
                except bce.ClientError as err:
                    if _exists_already(err):
                        honoured, answer = True, ""
                    elif _no_conditional_writes(err):
                        honoured, answer = False, self._scrub(_error_code(err)[0] or "501")
                    else:
                        raise
        finally:
            self._forget(probe)
        self._conditional_writes = honoured
        if not honoured:
            log.warning(
                "%s at %s does not support conditional writes (%s): a config, key slot or manifest is created"
                " under a claim, other new objects are checked with HEAD before writing",
                self.describe(),
                self.endpoint_url,
                answer,
            )

    def _disable_conditional_writes(self, err: bce.ClientError) -> None:
        self._conditional_writes = False
        log.warning(
            "%s at %s does not support conditional writes (%s): checking with HEAD before writing a new object",
            self.describe(),
            self.endpoint_url,
            self._scrub(_error_code(err)[0] or "501"),
        )

    def _write(self, call, data: bytes | bytearray, **params):
        """``call(Body=data, **params)`` (PutObject, UploadPart), with a Content-MD5 header once the
        bucket asked for one (object lock with a default retention refuses writes without it)."""
        if self._content_md5:
            return call(Body=data, ContentMD5=_content_md5(data), **params)
        try:
            return call(Body=data, **params)
        except bce.ClientError as err:
            if not _wants_content_md5(err):
                raise
        log.info("%s requires Content-MD5 on writes (object lock): sending it from now on", self.describe())
        self._content_md5 = True
        return call(Body=data, ContentMD5=_content_md5(data), **params)

    def _put_multipart(self, key: str, full: str, data: bytes | bytearray, conditional: bool) -> bool:
        part_size = max(self.part_size, math.ceil(len(data) / MAX_PARTS))
        with self._errors("put", key):
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=full)["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, len(data), part_size), start=1):
                etag = self._upload_part(key, upload_id, number, bytes(data[start : start + part_size]))
                parts.append({"PartNumber": number, "ETag": etag})
            written = self._complete(key, upload_id, parts, conditional)
        except BaseException:
            self._abort(key, upload_id)
            raise
        if not written:
            self._abort(key, upload_id)
        return written

    def _complete(self, key: str, upload_id: str, parts: list[dict], conditional: bool) -> bool:
        """Complete the upload (``If-None-Match: *`` if ``conditional``); False if the key exists."""
        params = {
            "Bucket": self.bucket,
            "Key": self._full(key),
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": parts},
        }
        with self._errors("put", key):
            if conditional and self._conditional_writes is not False:
                try:
                    self._client.complete_multipart_upload(IfNoneMatch="*", **params)
                    return True
                except bce.ClientError as err:
                    if _exists_already(err):
                        return False
                    if not _no_conditional_writes(err):
                        raise
                    self._disable_conditional_writes(err)
            self._client.complete_multipart_upload(**params)
        return True

    def _upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> str:
        """Upload part ``number`` of ``key``'s multipart upload; return its ETag."""
        with self._errors(f"put (part {number})", key):
            resp = self._write(
                self._client.upload_part,
                body,
                Bucket=self.bucket,
                Key=self._full(key),
                UploadId=upload_id,
                PartNumber=number,
            )
        return resp["ETag"]

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            with self._errors("abort multipart upload", key):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=self._full(key), UploadId=upload_id)
        except MoverError as err:
            log.warning("%s; the incomplete upload stays until a bucket lifecycle rule removes it", err)

    def get(self, key: str) -> bytes:
        full = self._full(key)
        with self._errors("get", key):
            body = self._client.get_object(Bucket=self.bucket, Key=full)["Body"]
            try:
                return body.read()
            finally:
                body.close()

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end of the object, none past it)."""
        full = self._full(key)
        if offset < 0 or length < 0:
            raise UsageError(f"invalid range offset={offset} length={length} for {self._url(key)}")
        if length == 0:
            if not self.exists(key):
                raise ObjectNotFound(f"object {self._url(key)} not found at {self.endpoint_url}")
            return b""
        with self._errors("get", key):
            try:
                resp = self._client.get_object(
                    Bucket=self.bucket, Key=full, Range=f"bytes={offset}-{offset + length - 1}"
                )
            except bce.ClientError as err:
                status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if err.response.get("Error", {}).get("Code") == "InvalidRange" or status == 416:
                    return b""  # offset at or past the end of an existing object
                raise
            body = resp["Body"]
            try:
                return body.read()
            finally:
                body.close()

    def size(self, key: str) -> int:
        full = self._full(key)
        with self._errors("size", key):
            return int(self._client.head_object(Bucket=self.bucket, Key=full)["ContentLength"])

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix`` relative to the store prefix, ascending (S3 returns byte order)."""
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key_prefix + prefix
        )
        pages = iter(pages)
        strip = len(self._key_prefix)
        while True:
            with self._errors("list"):
                page = next(pages, None)
            if page is None:
                return
            for obj in page.get("Contents", ()):
                key = obj["Key"][strip:]
                if key and not key.endswith("/"):  # skip "folder" marker objects
                    yield key

    def delete(self, key: str) -> None:
        full = self._full(key)
        with self._errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=full)
