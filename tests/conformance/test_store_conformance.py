"""Conformance of every Store with the guarantees in ``movers/repo/store/base.py``, plus the
S3 error translation, multipart abort, RetryingStore, FaultyStore and ``open_store`` contracts."""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable

import botocore.exceptions as bce
import pytest
from botocore.stub import Stubber
from urllib3.exceptions import ProtocolError

from movers.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    MoverError,
    NotFoundError,
    ObjectNotFound,
    PermanentStoreError,
    StoreError,
    TransientStoreError,
    UsageError,
)
from movers.repo.config import RepoConfig
from movers.repo.repository import Repository
from movers.repo.store import (
    LocalStore,
    MemoryStore,
    RetryingStore,
    Store,
    open_store,
)
from movers.repo.store.retry import parse_retry_for
from movers.repo.store.s3 import S3Store
from movers.testing.faulty import FaultyStore, SimulatedCrash
from tests.s3proxy import Request, S3Proxy, SilentServer

MiB = 1024 * 1024
FAKE = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}


def make_s3(endpoint: str, bucket: str, prefix: str = "repo", cls: type[S3Store] = S3Store, **kw) -> S3Store:
    """An S3Store with 5 MiB multipart threshold and parts, so tests exercise multipart cheaply."""
    return cls(bucket, prefix, endpoint_url=endpoint, multipart_threshold=5 * MiB, part_size=5 * MiB, **{**FAKE, **kw})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens here once the socket is closed


STORES = [
    "memory",
    "local",
    "local-retrying",
    pytest.param("s3", marks=pytest.mark.s3),
    pytest.param("s3-without-conditional-writes", marks=pytest.mark.s3),
]


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    if request.param == "local-retrying":
        return open_store(f"file://{tmp_path}/store")
    if request.param == "s3":
        endpoint, bucket = request.getfixturevalue("s3_bucket")
    else:
        endpoint, bucket = request.getfixturevalue("unconditional_s3")
    return make_s3(endpoint, bucket)


# -- conformance: every guarantee of base.py, on every store -------------------------------------


def test_is_a_store_with_a_description(store):
    assert isinstance(store, Store)
    assert "://" in store.describe()


def test_put_get_round_trip_and_replace(store):
    store.put("a/empty", b"")
    store.put("a/bytes", bytes(range(256)))
    assert store.get("a/empty") == b""
    assert store.get("a/bytes") == bytes(range(256))
    store.put("a/bytes", b"replaced")
    assert store.get("a/bytes") == b"replaced"


@pytest.fixture(scope="module")
def random_70mib() -> bytes:
    return os.urandom(70 * MiB)


@pytest.mark.parametrize("size", [5 * MiB, 5 * MiB + 1, 70 * MiB])
def test_large_objects_round_trip(request, store, size, random_70mib):
    data = random_70mib[:size]
    store.put("packs/big", data)
    assert store.size("packs/big") == size
    assert store.get("packs/big") == data
    boundary = 5 * MiB  # a multipart part boundary on S3
    assert store.get_range("packs/big", boundary - 10, 20) == data[boundary - 10 : boundary + 10]
    if isinstance(store, S3Store):
        client = request.getfixturevalue("moto_server").client()
        etag = client.head_object(Bucket=store.bucket, Key="repo/packs/big")["ETag"]
        parts = -(-size // (5 * MiB))
        assert etag.strip('"').endswith(f"-{parts}") == (size > 5 * MiB), etag


def test_get_range(store):
    data = bytes(range(256)) * 4
    store.put("r", data)
    store.put("e", b"")
    assert store.get_range("r", 100, 50) == data[100:150]
    assert store.get_range("r", 0, 10) == data[:10]
    assert store.get_range("r", 1000, 24) == data[1000:]
    assert store.get_range("r", 1000, 100) == data[1000:]  # past the end: the available bytes
    assert store.get_range("r", 1024, 10) == b""
    assert store.get_range("r", 5000, 10) == b""
    assert store.get_range("r", 10, 0) == b""
    assert store.get_range("e", 0, 10) == b""


def test_size_and_exists(store):
    store.put("s/three", b"abc")
    store.put("s/zero", b"")
    assert store.size("s/three") == 3
    assert store.size("s/zero") == 0
    assert store.exists("s/three") and store.exists("s/zero")
    assert not store.exists("s/missing")
    assert not store.exists("s")  # a prefix of keys is not an object


def test_missing_key_raises_object_not_found(store):
    store.put("present", b"x")
    for call in (
        lambda: store.get("missing"),
        lambda: store.get_range("missing", 0, 1),
        lambda: store.size("missing"),
        lambda: store.get_range("missing", 0, 0),
    ):
        with pytest.raises(ObjectNotFound) as info:
            call()
        assert isinstance(info.value, NotFoundError) and isinstance(info.value, StoreError)
        assert "missing" in str(info.value)


KEYS = [
    "packs/ab/1",
    "packs/ab/2",
    "packs/a-b",
    "packs/a.b",
    "packs/a0",
    "packs/A",
    "packs/_x",
    "packs/%41",
    "packs/b",
    "index/1",
    "index/0",
    "packsx",
    "z",
    "Z9",
]


def test_list_is_ascending_and_filters_by_prefix(store):
    for key in random.Random(7).sample(KEYS, len(KEYS)):
        store.put(key, key.encode())
    everything = sorted(KEYS, key=str.encode)  # byte order
    assert list(store.list()) == everything
    assert list(store.list("")) == everything
    assert list(store.list("packs/")) == [k for k in everything if k.startswith("packs/")]
    assert list(store.list("packs/a")) == ["packs/a-b", "packs/a.b", "packs/a0", "packs/ab/1", "packs/ab/2"]
    assert list(store.list("packs")) == [k for k in everything if k.startswith("packs")]
    assert list(store.list("packs/ab/")) == ["packs/ab/1", "packs/ab/2"]
    assert list(store.list("index/1")) == ["index/1"]
    assert list(store.list("nothing")) == []
    assert list(store.list("nothing/")) == []


def test_delete_is_idempotent(store):
    store.put("d/x", b"1")
    store.put("d/y", b"2")
    store.delete("d/x")
    store.delete("d/x")
    store.delete("d/never")
    assert not store.exists("d/x")
    with pytest.raises(ObjectNotFound):
        store.get("d/x")
    assert list(store.list("d/")) == ["d/y"]


BAD_KEYS = [
    *("", "/a", "a/", "a//b", ".", "..", "a/../b", "./a", "a b", "a\\b", "ä", "a?b", "a*b", "a\nb"),
    *(".tmp-x", "a/.tmp-x/b", "packs/.tmp-1"),  # reserved for a local store's temporary files
]


def test_invalid_keys_are_rejected(store):
    for key in BAD_KEYS:
        with pytest.raises(UsageError):
            store.put(key, b"x")
        with pytest.raises(UsageError):
            store.put_new(key, b"x")
    assert list(store.list()) == []


def test_put_new_writes_only_a_key_that_does_not_exist(store):
    assert store.put_new("packs/ab/1", b"first") is True
    assert store.put_new("packs/ab/1", b"second") is False
    assert store.get("packs/ab/1") == b"first"
    store.put("packs/ab/2", b"put")
    assert store.put_new("packs/ab/2", b"other") is False and store.get("packs/ab/2") == b"put"
    store.delete("packs/ab/1")
    assert store.put_new("packs/ab/1", b"again") is True and store.get("packs/ab/1") == b"again"
    assert store.put_new("e", b"") is True and store.put_new("e", b"x") is False and store.get("e") == b""
    assert list(store.list()) == ["e", "packs/ab/1", "packs/ab/2"]


def _one_writer_wins_each_round(store, write, writers: int, rounds: int = 20) -> None:
    """``writers`` threads ``write(key, data)`` one new key at once, ``rounds`` times: each time exactly one wins
    and the key holds its bytes."""
    for round_ in range(rounds):
        key, start, won = f"k/{round_}", threading.Barrier(writers), []

        def writer(n: int, key=key, start=start, won=won) -> None:
            start.wait()
            if write(key, b"%d" % n * 1000):
                won.append(n)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and store.get(key) == b"%d" % won[0] * 1000


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_put_new_of_racing_writers_writes_once(tmp_path, kind):
    store = MemoryStore() if kind == "memory" else LocalStore(tmp_path)
    _one_writer_wins_each_round(store, store.put_new, writers=8)
    if kind == "local":
        assert [p.name for p in tmp_path.rglob(".tmp-*")] == []  # no temporary file stays behind


def test_create_never_rewrites_a_key(store):
    """Configs, key slots and manifests are created: never rewritten, whatever the store (S3 without conditional
    writes included), and a key that exists is left as it was."""
    assert store.create("config", b"first") is True
    assert store.create("config", b"second") is False
    assert store.get("config") == b"first"
    store.put("backups/v/1", b"put")
    assert store.create("backups/v/1", b"other") is False and store.get("backups/v/1") == b"put"
    store.delete("config")
    assert store.create("config", b"again") is True and store.get("config") == b"again"
    with pytest.raises(UsageError):
        store.create("a//b", b"x")
    assert list(store.list()) == ["backups/v/1", "config"]  # no claim or probe stays behind


@pytest.mark.parametrize(
    "kind",
    [
        "memory",
        "local",
        "local-retrying",
        "local-without-hard-links",
        pytest.param("s3-no-conditional", marks=pytest.mark.s3),
    ],
)
def test_create_of_racing_writers_writes_once(request, tmp_path, kind):
    """Of 6 writers creating one key at once, one wins and the key holds its bytes (20 rounds)."""
    if kind == "memory":
        store = MemoryStore()
    elif kind == "local":
        store = LocalStore(tmp_path)
    elif kind == "local-retrying":
        store = open_store(f"file://{tmp_path}")
    elif kind == "local-without-hard-links":
        store = LocalStore(tmp_path)
        store._hard_links = False  # as on a filesystem that refused a link: creating takes a lock file
    else:
        store = make_s3(*request.getfixturevalue("unconditional_s3"))
        assert store.conditional_writes is False
    _one_writer_wins_each_round(store, store.create, writers=6)
    assert [k for k in store.list() if not k.startswith("k/")] == []
    assert [p.name for p in tmp_path.rglob(".tmp-*")] == []  # no temporary or lock file stays behind


@pytest.mark.s3
def test_s3_conditional_writes_are_trusted_only_once_proven(s3_bucket, caplog):
    """An endpoint that ignores If-None-Match answers 200 to a conditional write of a key that exists: the probe
    sees that, and neither put_new nor create sends a conditional write there again."""
    endpoint, bucket = s3_bucket
    with S3Proxy(endpoint) as proxy:
        store = make_s3(proxy.endpoint_url, bucket)
        assert store.create("config", b"c") is True
        assert [(r.method, r.conditional) for r in proxy.requests] == [
            ("PUT", False),  # the probe object
            ("PUT", True),  # again, conditionally: moto answers 412
            ("DELETE", False),
            ("PUT", True),  # the config
        ]
        assert store.conditional_writes is True and store.create("config", b"d") is False
    with S3Proxy(endpoint, ignore_conditions=True) as proxy:
        store = make_s3(proxy.endpoint_url, bucket)
        with caplog.at_level(logging.WARNING, logger="movers"):
            assert store.create("config", b"e") is False  # the probe: HEAD finds it before any claim
        assert store.conditional_writes is False and "does not support conditional writes" in caplog.text
        assert [r.method for r in proxy.requests] == ["PUT", "PUT", "DELETE", "HEAD"]
        del proxy.requests[:]
        assert store.create("keys/1", b"slot") is True
        methods = [r.method for r in proxy.requests]
        assert methods == ["HEAD", "PUT", "GET", "HEAD", "PUT", "GET", "DELETE"]  # claim, list, check, write, read
        assert not any(r.conditional for r in proxy.requests)
    assert store.get("config") == b"c" and store.get("keys/1") == b"slot"


def test_requests_are_counted_by_kind(store):
    if isinstance(store, S3Store):
        assert store.conditional_writes in (True, False)  # its probe is counted too: not in the figures below
        counted = store.requests.as_dict()
        store.requests = type(store.requests)()
        assert counted["put"] == 2 and counted["delete"] == 1
    store.put("c/a", b"abc")
    assert store.put_new("c/b", b"x") is True
    assert store.put_new("c/b", b"y") is False
    store.get("c/a")
    store.get_range("c/a", 1, 1)
    store.size("c/a")
    store.exists("c/zz")
    assert list(store.list("c/")) == ["c/a", "c/b"]
    store.delete("c/a")
    expected = {"put": 3, "get": 1, "range_get": 1, "head": 2, "list_pages": 1, "delete": 1}
    if not getattr(store, "conditional_writes", True):  # put_new is HEAD then PUT there
        expected.update(put=2, head=4)
    assert store.requests.as_dict() == expected


def test_listings_count_the_pages_s3_would_return():
    store = MemoryStore()
    for n in range(2001):
        store.put(f"k/{n:05}", b"")
    before = store.requests.as_dict()["list_pages"]
    assert len(list(store.list("k/"))) == 2001 and len(list(store.list("none/"))) == 0
    assert store.requests.as_dict()["list_pages"] - before == 3 + 1
    with pytest.raises(ValueError):
        store.requests.add("post")


@pytest.mark.s3
def test_s3_counts_every_http_request(s3_bucket, random_70mib):
    """What S3Store counts is what the endpoint saw: multipart calls, fallbacks and retried attempts included."""
    endpoint, bucket = s3_bucket
    unavailable = []

    def once_unavailable(request: Request):
        if request.method == "GET" and not unavailable:
            unavailable.append(request)
            return 503, "ServiceUnavailable"
        return None

    with S3Proxy(endpoint, once_unavailable) as proxy:
        inner = make_s3(proxy.endpoint_url, bucket)
        store = RetryingStore(inner, sleep=Sleeps())
        store.put("big", random_70mib[: 11 * MiB])  # create, 3 parts, complete
        store.put("small", b"s")
        assert store.get("small") == b"s"  # 503, then the retry
        store.get_range("big", 0, 10)
        assert store.put_new("small", b"t") is False
        assert list(store.list()) == ["big", "small"]
        store.delete("small")
        store.check()
        by_method = Counter(r.method for r in proxy.requests)
    counts = store.requests.as_dict()  # put_new's probe: PUT, PUT, DELETE
    assert counts == {"put": 9, "get": 2, "range_get": 1, "head": 1, "list_pages": 1, "delete": 2}
    assert sum(counts.values()) == len(proxy.requests)
    assert by_method == {"PUT": 7, "POST": 2, "GET": 4, "HEAD": 1, "DELETE": 2}


def test_local_put_new_of_a_key_that_names_a_folder_fails_like_put(tmp_path):
    store = LocalStore(tmp_path)
    store.put("a/b", b"x")
    for write in (store.put, store.put_new):
        with pytest.raises(PermanentStoreError, match="local store error on a"):
            write("a", b"y")
    assert list(store.list()) == ["a/b"] and list(tmp_path.rglob(".tmp-*")) == []


KILLED_WRITER = r"""
import resource, signal, sys
from movers.repo.store import LocalStore
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: let the kernel kill the writer mid-write
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
LocalStore(sys.argv[1]).put_new("packs/ab/abcd", b"x" * (2 << 20))
"""


def test_temporary_files_of_a_killed_writer_are_never_listed_and_swept_once_old(tmp_path):
    root = tmp_path / "repo"
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(root)], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGXFSZ, proc.stderr
    (left,) = root.rglob(".tmp-*")
    assert left.stat().st_size == MiB
    store = LocalStore(root)
    store.put("packs/ab/other", b"o")
    assert list(store.list()) == ["packs/ab/other"] and not store.exists("packs/ab/abcd")
    fresh = root / "packs" / "ab" / ".tmp-in-progress"  # another writer's, still being written
    fresh.write_bytes(b"f")
    assert store.sweep_temporaries(3600) == (0, 0)  # both are fresh
    an_hour_and_more = time.time() - 3601
    os.utime(left, (an_hour_and_more, an_hour_and_more))
    assert open_store(f"file://{root}").sweep_temporaries() == (1, MiB)  # through the retrying wrapper
    assert not left.exists() and fresh.exists() and store.get("packs/ab/other") == b"o"
    assert RetryingStore(MemoryStore()).sweep_temporaries() == (0, 0)


# -- S3 specifics ------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_prefixes_isolate_and_describe(s3_bucket):
    endpoint, bucket = s3_bucket
    a, ab, root = make_s3(endpoint, bucket, "a"), make_s3(endpoint, bucket, "/ab/"), make_s3(endpoint, bucket, "")
    a.put("k", b"a")
    ab.put("k", b"ab")
    assert (a.get("k"), ab.get("k")) == (b"a", b"ab")
    assert list(a.list()) == ["k"] and list(ab.list()) == ["k"]
    assert list(root.list()) == ["a/k", "ab/k"]
    assert (a.describe(), ab.describe(), root.describe()) == (f"s3://{bucket}/a", f"s3://{bucket}/ab", f"s3://{bucket}")


def test_s3_addressing_style():
    def style(**kw):
        return (S3Store("bkt", **FAKE, **kw)._client.meta.config.s3 or {}).get("addressing_style", "auto")

    assert style(endpoint_url="http://127.0.0.1:9") == "path"
    assert style(endpoint_url="http://127.0.0.1:9", path_style=False) == "virtual"
    assert style(endpoint_url="https://s3.eu-west-1.amazonaws.com") == "auto"  # AWS: virtual-hosted
    assert style(endpoint_url="https://s3.eu-west-1.amazonaws.com", path_style=True) == "path"


def _fail_on_call(n: int, exc: BaseException):
    calls = []

    def hook(**_):
        calls.append(1)
        if len(calls) == n:
            raise exc

    return hook


class _InterruptedPartStore(S3Store):
    def _upload_part(self, key, upload_id, number, body):
        if number == 2:
            raise KeyboardInterrupt
        return super()._upload_part(key, upload_id, number, body)


@pytest.mark.s3
@pytest.mark.parametrize("failure", ["upload_part_error", "complete_error", "keyboard_interrupt"])
def test_s3_failed_multipart_upload_is_aborted(moto_server, s3_bucket, failure):
    endpoint, bucket = s3_bucket
    closed = bce.ConnectionClosedError(endpoint_url=endpoint)
    if failure == "keyboard_interrupt":
        store, expected = make_s3(endpoint, bucket, cls=_InterruptedPartStore), KeyboardInterrupt
    else:
        store, expected = make_s3(endpoint, bucket), TransientStoreError
        event, nth = ("UploadPart", 2) if failure == "upload_part_error" else ("CompleteMultipartUpload", 1)
        store._client.meta.events.register(f"before-call.s3.{event}", _fail_on_call(nth, closed))
    with pytest.raises(expected):
        store.put("packs/p", os.urandom(12 * MiB))
    client = moto_server.client()
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert not store.exists("packs/p")
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def _conditional_puts(proxy: S3Proxy) -> list[bool]:
    return [r.conditional for r in proxy.seen("PUT")]


@pytest.mark.s3
def test_s3_put_once_is_one_conditional_put_without_head(s3_bucket):
    endpoint, bucket = s3_bucket
    with S3Proxy(endpoint) as proxy:
        repo = Repository(make_s3(proxy.endpoint_url, bucket), RepoConfig())
        assert repo.store.conditional_writes  # the probe, once per store: PUT, PUT, DELETE
        del proxy.requests[:]
        assert repo.put_once("packs/aa/1", b"pack") == 4
        assert repo.put_once("packs/aa/1", b"pack") == 0  # moto answered 412 PreconditionFailed
    assert [r.method for r in proxy.requests] == ["PUT", "PUT"] and _conditional_puts(proxy) == [True, True]
    assert repo.store.get("packs/aa/1") == b"pack"


@pytest.mark.s3
def test_s3_put_new_of_a_large_object(s3_bucket, moto_server, random_70mib):
    endpoint, bucket = s3_bucket
    data, other = random_70mib[: 6 * MiB], random_70mib[6 * MiB : 12 * MiB]
    with S3Proxy(endpoint) as proxy:
        store = make_s3(proxy.endpoint_url, bucket)
        assert store.put_new("packs/big", data) is True
        complete = [r for r in proxy.seen("POST") if "uploadId=" in r.path]
        assert len(complete) == 1 and complete[0].conditional
        before = len(proxy.requests)
        assert store.put_new("packs/big", other) is False
        assert [r.method for r in proxy.requests[before:]] == ["HEAD"]  # no part is uploaded to be refused
    assert store.get("packs/big") == data

    # another writer creates the key while our parts upload: the conditional completion refuses, we abort
    client = moto_server.client()

    def racing_writer(request: Request):
        if request.method == "POST" and request.path.endswith("?uploads"):
            client.put_object(Bucket=bucket, Key="repo/packs/raced", Body=b"theirs")
        return None

    with S3Proxy(endpoint, racing_writer) as proxy:
        assert make_s3(proxy.endpoint_url, bucket).put_new("packs/raced", data) is False
    assert store.get("packs/raced") == b"theirs"
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


@pytest.mark.s3
def test_s3_put_new_without_conditional_writes_falls_back_to_head_then_put(s3_bucket, caplog):
    endpoint, bucket = s3_bucket
    refuse = lambda r: (501, "NotImplemented") if r.conditional else None  # noqa: E731
    with S3Proxy(endpoint, refuse) as proxy:
        store = make_s3(proxy.endpoint_url, bucket)
        with caplog.at_level(logging.WARNING, logger="movers"):
            assert store.put_new("a", b"1") is True
        probe = [("PUT", False), ("PUT", True), ("DELETE", False)]  # the second PUT answered 501
        assert [(r.method, r.conditional) for r in proxy.requests] == [*probe, ("HEAD", False), ("PUT", False)]
        assert "does not support conditional writes" in caplog.text
        del proxy.requests[:]
        assert store.put_new("b", b"2") is True and store.put_new("a", b"x") is False  # remembered: no 501 again
        assert [(r.method, r.conditional) for r in proxy.requests] == [("HEAD", False), ("PUT", False), ("HEAD", False)]
    assert (store.get("a"), store.get("b")) == (b"1", b"2")


@pytest.mark.s3
@pytest.mark.parametrize("exists", [False, True])
def test_s3_conditional_write_conflict_is_retried(s3_bucket, exists):
    """409 ConditionalRequestConflict (a concurrent write or delete of the key) is transient: the retry
    learns whether the key exists (412) or writes it."""
    endpoint, bucket = s3_bucket
    conflicts = []

    def conflict_once(request: Request):
        if request.conditional and request.path.endswith("/k") and not conflicts:
            conflicts.append(request)
            return 409, "ConditionalRequestConflict"
        return None

    with S3Proxy(endpoint, conflict_once) as proxy:
        store = make_s3(proxy.endpoint_url, bucket)
        if exists:
            store.put("k", b"theirs")
        assert RetryingStore(store, sleep=Sleeps()).put_new("k", b"ours") is (not exists)
        assert _conditional_puts(proxy)[-2:] == [True, True]
    assert store.get("k") == (b"theirs" if exists else b"ours")


# Translation of vendor errors, without a server: Stubber fakes S3 error responses, and a
# before-send hook raises the connection-level exceptions botocore would raise.


@pytest.fixture(scope="module")
def offline_s3() -> S3Store:
    """One store pointing nowhere (nothing listens on port 9), shared to save client set-up time."""
    return S3Store("bkt", "pfx", endpoint_url="http://127.0.0.1:9", **FAKE)


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, ObjectNotFound),
        ("AccessDenied", 403, AccessDeniedError),
        ("InvalidAccessKeyId", 403, AccessDeniedError),
        ("SignatureDoesNotMatch", 403, AccessDeniedError),
        ("SlowDown", 503, TransientStoreError),
        ("ServiceUnavailable", 503, TransientStoreError),
        ("InternalError", 500, TransientStoreError),
        ("RequestTimeout", 400, TransientStoreError),
        ("NoSuchBucket", 404, BucketNotFoundError),
        ("InvalidArgument", 400, PermanentStoreError),
    ],
)
def test_s3_service_errors_are_translated(offline_s3, code, status, expected):
    store = offline_s3
    with Stubber(store._client) as stub:
        stub.add_client_error("get_object", service_error_code=code, service_message="msg", http_status_code=status)
        with pytest.raises(MoverError) as info:
            store.get("k")
    assert type(info.value) is expected
    assert "http://127.0.0.1:9" in str(info.value)
    assert ("bucket bkt does not exist" if code == "NoSuchBucket" else "s3://bkt/pfx/k") in str(info.value)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (bce.EndpointConnectionError(endpoint_url="http://x"), TransientStoreError),
        (bce.ConnectTimeoutError(endpoint_url="http://x"), TransientStoreError),
        (bce.ReadTimeoutError(endpoint_url="http://x"), TransientStoreError),
        (bce.ConnectionClosedError(endpoint_url="http://x"), TransientStoreError),
        (bce.ResponseStreamingError(error="reset"), TransientStoreError),
        (ProtocolError("Connection aborted."), TransientStoreError),
        (ConnectionResetError(104, "reset by peer"), TransientStoreError),
        (bce.NoCredentialsError(), AccessDeniedError),
        (bce.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), AccessDeniedError),
        (bce.ParamValidationError(report="bad"), PermanentStoreError),
    ],
)
def test_s3_client_errors_are_translated_and_not_retried_by_botocore(offline_s3, exc, expected):
    calls = []

    def hook(**_):
        calls.append(1)
        raise exc

    events = offline_s3._client.meta.events
    events.register("before-send.s3.GetObject", hook)
    try:
        with pytest.raises(MoverError) as info:
            offline_s3.get("k")
    finally:
        events.unregister("before-send.s3.GetObject", hook)
    assert type(info.value) is expected
    assert len(calls) == 1  # botocore's own retries are off
    if expected is AccessDeniedError:
        assert "AWS_ACCESS_KEY_ID" in str(info.value) and "AWS_PROFILE" in str(info.value)


SECRETS = {
    "access_key": "AKIADISTINCTIVE0KEY1",
    "secret_key": "SeCrEt/distinctive+VALUE/0123456789abcdef",
    "session_token": "TOKEN-distinctive-0123456789-xyz",
}


def _all_text(err: BaseException) -> str:
    """What a user or a log can see: messages and reprs along the chain that Python prints,
    and the printed traceback itself (vendor errors are suppressed context, never shown)."""
    shown = ["".join(traceback.format_exception(err))]
    exc: BaseException | None = err
    while exc is not None:
        shown += [str(exc), repr(exc)]
        if exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            exc = None if exc.__suppress_context__ else exc.__context__
    return "\n".join(shown)


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS.values():
        assert secret not in text


@pytest.mark.s3
def test_s3_credentials_never_shown(s3_bucket, caplog):
    endpoint, bucket = s3_bucket
    store = S3Store(bucket, "p", endpoint_url=endpoint, region="us-east-1", **SECRETS)
    store.put("k", b"v")  # moto accepts any credentials
    _assert_no_secret(repr(store) + store.describe() + repr(RetryingStore(store)) + str(vars(store)))
    missing_bucket = S3Store(f"{bucket}-missing", endpoint_url=endpoint, **SECRETS)
    unreachable = RetryingStore(
        S3Store(bucket, endpoint_url=f"http://127.0.0.1:{closed_port()}", **SECRETS),
        retry_for=1,
        **fake_time(FakeClock()),
    )
    failures = [
        lambda: store.get("missing"),
        missing_bucket.check,
        lambda: missing_bucket.get("k"),
        unreachable.check,
        lambda: unreachable.put("k", b"v"),
    ]
    with caplog.at_level(logging.DEBUG, logger="movers"):  # ours; botocore's DEBUG log shows the key id
        for failure in failures:
            with pytest.raises(StoreError) as info:
                failure()
            _assert_no_secret(_all_text(info.value))
    assert "retry 1 in" in caplog.text
    _assert_no_secret(caplog.text)
    # Even a server that echoes the credentials back cannot make us print them.
    with Stubber(store._client) as stub:
        stub.add_client_error(
            "get_object", "InvalidAccessKeyId", http_status_code=403, service_message=" ".join(SECRETS.values())
        )
        with pytest.raises(AccessDeniedError) as info:
            store.get("k")
    _assert_no_secret(_all_text(info.value))


@pytest.mark.s3
def test_s3_check(s3_bucket):
    endpoint, bucket = s3_bucket
    make_s3(endpoint, bucket).check()
    with pytest.raises(PermanentStoreError) as info:
        make_s3(endpoint, f"{bucket}-nope").check()
    assert type(info.value) is BucketNotFoundError and f"{bucket}-nope" in str(info.value)
    dead = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(TransientStoreError, match=f"cannot reach S3 endpoint {dead}"):
        make_s3(dead, bucket).check()
    with pytest.raises(TransientStoreError, match=r"gave up after \d+ attempts in 2 s"):
        RetryingStore(make_s3(dead, bucket), retry_for=2, **fake_time(FakeClock())).check()


def test_s3_a_hung_endpoint_fails_in_bounded_time():
    """An endpoint that accepts connections and never answers: each request ends at its read timeout
    (botocore does not retry it), and the retrying store within its budget plus one attempt."""
    with SilentServer() as hung:
        store = S3Store("bkt", "p", endpoint_url=hung.endpoint_url, connect_timeout=1, read_timeout=0.5, **FAKE)
        started = time.monotonic()
        with pytest.raises(TransientStoreError, match="Read timeout"):
            store.get("k")
        assert time.monotonic() - started < 2.0 and hung.accepted == 1
        # a PUT waits up to 1 s for "100 Continue" (botocore's Expect header), then for its read timeout
        for call, attempt_s in ((lambda r: list(r.list()), 0.5), (lambda r: r.put_new("k", b"v"), 1.5)):
            retrying = RetryingStore(store, retry_for=2, base_delay=0.1, max_delay=0.2)
            call = functools.partial(call, retrying)
            accepted, started = hung.accepted, time.monotonic()
            with pytest.raises(TransientStoreError, match=r"gave up after \d+ attempts in [23] s"):
                call()
            assert 2 <= time.monotonic() - started < 2 + attempt_s + 0.5
            assert hung.accepted - accepted >= 2  # one connection per attempt: none is retried inside botocore


@pytest.mark.s3
def test_s3_missing_bucket_is_permanent(s3_bucket):
    endpoint, bucket = s3_bucket
    store = make_s3(endpoint, f"{bucket}-nope")
    for call in (
        lambda: store.get("k"),
        lambda: store.put("k", b"v"),
        lambda: list(store.list()),
        lambda: store.delete("k"),
        lambda: store.get_range("k", 0, 5),
    ):
        with pytest.raises(PermanentStoreError, match=f"bucket {bucket}-nope does not exist"):
            call()


CHAIN_SCRIPT = r"""
import json, os, sys
import movers.repo.store as stores
stores.open_store("memory://"); stores.open_store("file:///tmp")
out = {"lazy": "boto3" not in sys.modules}
from movers.repo.store import S3Store
endpoint, bucket, tmp = sys.argv[1:]
def run(name, env, **kw):
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[k]
    os.environ.update(AWS_CONFIG_FILE=f"{tmp}/config", AWS_SHARED_CREDENTIALS_FILE=f"{tmp}/none",
                      AWS_EC2_METADATA_DISABLED="true", **env)
    try:
        store = S3Store(bucket, "chain", **kw)
        store.check()
        store.put(name, b"ok")
        out[name] = [store.get(name).decode(), store._client.meta.config.s3["addressing_style"]]
    except Exception as err:
        out[name] = [type(err).__name__, str(err)]
with open(f"{tmp}/config", "w") as f:
    f.write(f"[profile moto]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
            f"region = us-east-1\nendpoint_url = {endpoint}\n")
keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
run("env", {**keys, "AWS_ENDPOINT_URL": endpoint})
run("env_s3", {**keys, "AWS_ENDPOINT_URL_S3": endpoint, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
run("profile_env", {"AWS_PROFILE": "moto"})
run("profile_opt", {}, profile="moto")
run("explicit_overrides", {"AWS_PROFILE": "moto", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
    endpoint_url=endpoint, access_key="testing", secret_key="testing")
run("none", {}, endpoint_url=endpoint)
run("partial", {"AWS_ACCESS_KEY_ID": "testing"}, endpoint_url=endpoint)
run("no_profile", {}, endpoint_url=endpoint, profile="nope")
print(json.dumps(out))
"""


@pytest.mark.s3
def test_s3_credentials_and_endpoint_from_the_aws_chain(s3_bucket, tmp_path):
    endpoint, bucket = s3_bucket
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHAIN_SCRIPT, endpoint, bucket, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out.pop("lazy") is True  # boto3 is imported only for s3:// stores
    for case in ("env", "env_s3", "profile_env", "profile_opt", "explicit_overrides"):
        assert out[case] == ["ok", "path"], (case, out[case])
    for case in ("none", "partial", "no_profile"):
        assert out[case][0] == "AccessDeniedError", (case, out[case])
    assert "AWS_ACCESS_KEY_ID" in out["none"][1] and "AWS_PROFILE" in out["none"][1]
    assert "AWS_SECRET_ACCESS_KEY" in out["partial"][1]
    assert "'nope'" in out["no_profile"][1]


# -- RetryingStore -----------------------------------------------------------------------------


class FakeClock:
    """A monotonic clock for RetryingStore that only its ``sleep`` (or a test) moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def fake_time(clock: FakeClock) -> dict:
    return {"sleep": clock.sleep, "clock": clock}


def Sleeps() -> Callable[[float], None]:  # noqa: N802 - a sleep that takes no time, for stores that recover
    return FakeClock().sleep


def test_retrying_store_retries_transient_errors_then_succeeds():
    faulty, clock = FaultyStore(MemoryStore()), FakeClock()
    store = RetryingStore(faulty, base_delay=0.2, max_delay=5.0, **fake_time(clock))
    faulty.fail("put", TransientStoreError, times=2)
    faulty.fail("get", TransientStoreError("flaky"), times=3)
    store.put("k", b"v")
    assert store.get("k") == b"v"
    assert (faulty.calls["put"], faulty.calls["get"]) == (3, 4)
    assert faulty.puts == ["k"]
    caps = [0.2, 0.4, 0.2, 0.4, 0.8]
    assert len(clock.sleeps) == 5 and all(0 <= s <= cap for s, cap in zip(clock.sleeps, caps, strict=True))


def test_retrying_store_budget_is_the_outages_not_each_calls():
    """Calls made during an outage share its budget; once it is spent every call fails at once, without an
    attempt, until the store answers again (a success ends the outage)."""
    faulty, clock = FaultyStore(MemoryStore()), FakeClock()
    faulty.put("k", b"v")
    down = [True]
    faulty.fail_while(lambda: down[0], TransientStoreError("endpoint down"))
    store = RetryingStore(faulty, retry_for=60, **fake_time(clock))
    with pytest.raises(TransientStoreError, match="gave up"):
        store.get("k")
    assert 60 <= clock.now < 61
    for call in (lambda: store.put("lease", b"x"), lambda: store.delete("lease"), lambda: list(store.list())):
        before = sum(faulty.calls.values())
        with pytest.raises(TransientStoreError, match="longer than the retry budget") as info:
            call()
        assert sum(faulty.calls.values()) == before and info.value.retriable is False  # not even one attempt
    assert clock.now < 61

    store2 = RetryingStore(faulty, retry_for=60, **fake_time(clock))
    clock.now += 1000
    faulty.fail("get", TransientStoreError, times=1)
    down[0] = False
    assert store2.get("k") == b"v"  # an outage that has ended leaves no trace
    down[0] = True
    started = clock.now
    with pytest.raises(TransientStoreError, match="gave up"):
        store2.get("k")
    assert 60 <= clock.now - started < 61
    down[0] = False  # back: the first call that answers ends the outage
    with pytest.raises(TransientStoreError, match="not tried again"):
        store2.size("k")  # (no call tries while the budget is spent: the command it serves has failed)


def test_retrying_store_rides_out_an_outage_of_minutes(caplog):
    faulty, clock = FaultyStore(MemoryStore()), FakeClock()
    faulty.put("k", b"v")
    faulty.fail_while(lambda: clock.now < 240, TransientStoreError("endpoint down"))
    store = RetryingStore(faulty, **fake_time(clock))  # the defaults: 5 minutes, backoff capped at 10 s
    with caplog.at_level(logging.WARNING, logger="movers.repo.store.retry"):
        assert store.get("k") == b"v"
    assert 240 <= clock.now < 250 and max(clock.sleeps) <= 10.0
    assert faulty.calls["get"] == len(clock.sleeps) + 1 >= 24  # polled at least every 10 s
    retries = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(retries) == len(clock.sleeps) and "endpoint down; retry 1 in" in retries[0].getMessage()


def test_retrying_store_budget_ends_an_outage():
    faulty, clock = FaultyStore(MemoryStore()), FakeClock()
    faulty.fail_while(lambda: True, TransientStoreError("endpoint down"))
    store = RetryingStore(faulty, retry_for=300, **fake_time(clock))
    with pytest.raises(TransientStoreError, match=r"endpoint down \(gave up after \d+ attempts in 300 s\)") as info:
        store.size("k")
    assert isinstance(info.value.__cause__, TransientStoreError)
    assert clock.now == pytest.approx(300)  # the last sleep is cut short: the last attempt starts at the deadline
    assert faulty.calls["size"] == len(clock.sleeps) + 1
    assert not info.value.retriable  # the budget is where outages are ridden out: tasks do not retry it again

    faulty, clock = FaultyStore(MemoryStore()), FakeClock()
    faulty.fail_while(lambda: True, TransientStoreError("endpoint down"))
    with pytest.raises(TransientStoreError, match="gave up after 1 attempts") as info:
        RetryingStore(faulty, retry_for=0, **fake_time(clock)).get("k")
    assert clock.sleeps == []
    assert info.value.retriable  # no budget: the caller's retries are the only ones


def test_retrying_store_budget_bounds_attempts_that_hang():
    """Attempts that each take 25 s (timeouts) end within the budget plus one attempt."""
    faulty, clock = FaultyStore(MemoryStore()), FakeClock()

    def hung() -> bool:
        clock.now += 25
        return True

    faulty.fail_while(hung, TransientStoreError("read timeout"))
    with pytest.raises(TransientStoreError, match="gave up"):
        RetryingStore(faulty, retry_for=120, **fake_time(clock)).get("k")
    assert 120 <= clock.now <= 120 + 25


def test_retry_budget_parsing():
    assert [parse_retry_for(v) for v in ("5m", "90s", "0", 30, "1h")] == [300, 90, 0, 30, 3600]
    for bad in ("61m", "-1s", "soon", "", True):
        with pytest.raises(ValueError):
            parse_retry_for(bad)
    with pytest.raises(ValueError):
        RetryingStore(MemoryStore(), retry_for=-1)


@pytest.mark.parametrize(
    "error",
    [PermanentStoreError("bad"), AccessDeniedError("no"), UsageError("x"), ObjectNotFound("gone"), KeyboardInterrupt()],
)
def test_retrying_store_does_not_retry_other_errors(error):
    faulty, clock = FaultyStore(MemoryStore()), FakeClock()
    faulty.fail("get", error, times=5)
    with pytest.raises(type(error)):
        RetryingStore(faulty, **fake_time(clock)).get("k")
    assert faulty.calls["get"] == 1 and clock.sleeps == []


def test_retrying_store_lists_completely_after_a_retry():
    faulty = FaultyStore(MemoryStore())
    for key in ("b", "a", "c"):
        faulty.put(key, b"")
    faulty.fail("list", TransientStoreError, times=1)
    store = RetryingStore(faulty, sleep=Sleeps())
    assert list(store.list()) == ["a", "b", "c"]
    assert faulty.calls["list"] == 2


def test_a_local_listing_walks_the_directories_as_it_goes(tmp_path):
    """Before: a local store collected every key under the prefix before yielding the first (prune's listing of
    a million packs held them all); now it reads one directory at a time, like S3's pages."""
    store = LocalStore(tmp_path)
    for d in range(3):
        for n in range(2):
            store.put(f"packs/{d:02x}/{n}", b"")
    listing = store.list("packs/")
    assert next(listing) == "packs/00/0"
    store.delete("packs/02/0")
    store.put("packs/01/2", b"")
    assert list(listing) == ["packs/00/1", "packs/01/0", "packs/01/1", "packs/01/2", "packs/02/1"]


class BreakingListings(MemoryStore):
    """A memory store whose listings fail (transiently) after ``after`` keys, ``times`` times."""

    def __init__(self, after: int, times: int) -> None:
        super().__init__()
        self.after, self.times, self.listings, self.produced = after, times, 0, 0

    def list(self, prefix: str = ""):
        self.listings += 1
        for n, key in enumerate(super().list(prefix)):
            if n == self.after and self.times:
                self.times -= 1
                raise TransientStoreError("connection reset while listing")
            self.produced += 1
            yield key


def test_retrying_store_resumes_a_listing_that_fails_halfway_after_the_last_key_it_yielded():
    """Before: the listing was held whole inside the retry (millions of keys in memory for a prune); now it
    streams, and a failure halfway neither repeats nor skips a key. The budget runs from the last key."""
    inner, clock = BreakingListings(after=3, times=2), FakeClock()
    keys = [f"packs/{n:02x}" for n in range(10)]
    for key in keys:
        inner.put(key, b"")
    store = RetryingStore(inner, retry_for=10, **fake_time(clock))
    listing = store.list("packs/")
    assert next(listing) == keys[0] and inner.produced == 1, "a key comes as soon as it is listed"
    assert [next(listing) for _ in range(2)] == keys[1:3]
    assert list(listing) == keys[3:] and inner.listings == 3
    inner.times, clock.now = 30, 0.0  # keeps failing at the same key: no progress, the budget runs out
    with pytest.raises(TransientStoreError, match="gave up after"):
        list(store.list("packs/"))
    assert 10 <= clock.now < 11


def test_retrying_store_delegates_describe_repr_and_check(tmp_path):
    inner = LocalStore(tmp_path)
    store = RetryingStore(inner)
    assert store.describe() == inner.describe()
    assert repr(inner) in repr(store)
    store.check()  # the local store has no check(): nothing to do


# -- FaultyStore -------------------------------------------------------------------------------


def test_faulty_store_crash_after_puts():
    faulty = FaultyStore(MemoryStore())
    faulty.crash_after_puts(2, prefix="packs/")
    faulty.put("index/0", b"i")  # does not match the prefix
    faulty.put("packs/1", b"11")
    faulty.put("packs/2", b"22")
    try:
        faulty.put("packs/3", b"33")
    except Exception:
        pytest.fail("SimulatedCrash was caught by 'except Exception'")
    except SimulatedCrash:
        pass
    with pytest.raises(SimulatedCrash):
        faulty.get("packs/1")  # the "process" is dead until recover()
    faulty.recover()
    assert list(faulty.list()) == ["index/0", "packs/1", "packs/2"]
    assert faulty.puts == ["index/0", "packs/1", "packs/2"] and faulty.bytes_put == 5
    assert faulty.calls["put"] == 4


def test_faulty_store_matches_key_prefix_and_is_thread_safe():
    faulty = FaultyStore(MemoryStore())
    faulty.fail("put", TransientStoreError, times=20, key_prefix="t")
    faulty.put("other", b"x")  # not matching: goes through
    errors = []

    def worker(n: int) -> None:
        for i in range(50):
            try:
                faulty.put(f"t{n}/{i}", b"ab")
            except TransientStoreError:
                errors.append(1)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 20 and faulty.pending_faults() == 0
    assert faulty.calls["put"] == 401 and len(faulty.puts) == 381 and faulty.bytes_put == 1 + 380 * 2
    with pytest.raises(ValueError):
        faulty.fail("frobnicate", TransientStoreError)


# -- open_store --------------------------------------------------------------------------------


def test_open_store_accepted_forms(tmp_path):
    assert isinstance(open_store("memory://"), MemoryStore)
    assert open_store("memory://") is not open_store("memory://")
    local = open_store(f"file://{tmp_path}/repo")
    assert isinstance(local, RetryingStore) and isinstance(local.inner, LocalStore)
    assert local.describe() == f"file://{tmp_path}/repo"
    s3 = open_store("s3://my-bucket/backups/prod/", endpoint_url="http://127.0.0.1:9", **FAKE)
    assert isinstance(s3, RetryingStore) and isinstance(s3.inner, S3Store)
    assert (s3.inner.bucket, s3.inner.prefix, s3.describe()) == (
        "my-bucket",
        "backups/prod",
        "s3://my-bucket/backups/prod",
    )
    assert open_store("s3://my-bucket", **FAKE).describe() == "s3://my-bucket"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "bucket/path",
        "/abs/path",
        "ftp://host/x",
        "http://host/x",
        "s3://",
        "s3:///prefix",
        "s3://b/x",
        "s3://Bad_Bucket!/x",
        "s3://bucket/a//b",
        "s3://bucket/x?versionId=1",
        "s3://AKIADISTINCTIVE0KEY1:secret@bucket/x",
        "s3://bucket:99/x",
        "file://relative/path",
        "file:relative",
        "file://",
        "memory://something",
        "http://[::1",
    ],
)
def test_open_store_rejects_bad_urls(url):
    with pytest.raises(UsageError) as info:
        open_store(url)
    message = str(info.value)
    assert "\n" not in message
    assert "s3://BUCKET[/PREFIX]" in message and "file:///ABSOLUTE/PATH" in message and "memory://" in message
    assert "AKIADISTINCTIVE0KEY1" not in message


def test_of_two_inits_that_both_found_no_repository_one_wins(tmp_path):
    """``init`` creates the config with a create-only write: a store that says nothing exists (two inits that
    checked at once) still lets only one of them create it."""
    from movers.repo.config import RepoConfig
    from movers.repo.repository import Repository

    class Unseeing(LocalStore):
        def exists(self, key: str) -> bool:
            return False

    store = Unseeing(tmp_path / "repo")
    first = Repository.init(store, RepoConfig())
    with pytest.raises(UsageError, match="already a cbt-mover repository"):
        Repository.init(store, RepoConfig())
    assert Repository.open(store).config.repo_id == first.config.repo_id
