"""Object stores behind one protocol (``Store``), and ``open_store(url)`` to pick one by URL.

``S3Store`` is imported lazily (first use of ``movers.repo.store.S3Store`` or an ``s3://`` URL),
so importing this package does not import boto3.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from movers.errors import UsageError
from movers.redaction import has_userinfo, hide_userinfo
from movers.repo.store.base import Store, validate_key
from movers.repo.store.counting import RequestCounts
from movers.repo.store.local import LocalStore
from movers.repo.store.memory import MemoryStore
from movers.repo.store.retry import DEFAULT_RETRY_FOR, RetryingStore

if TYPE_CHECKING:
    from movers.repo.store.s3 import S3Store

__all__ = [
    "LocalStore",
    "MemoryStore",
    "RequestCounts",
    "RetryingStore",
    "S3Store",
    "Store",
    "open_store",
    "validate_key",
]

ACCEPTED_FORMS = "s3://BUCKET[/PREFIX], file:///ABSOLUTE/PATH or memory://"
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")


def __getattr__(name: str) -> Any:
    if name == "S3Store":
        from movers.repo.store.s3 import S3Store

        return S3Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _bad(url: str, why: str) -> UsageError:
    return UsageError(f"bad store URL {hide_userinfo(url)!r}: {why}; expected {ACCEPTED_FORMS}")


def open_store(url: str, *, retry_for: float = DEFAULT_RETRY_FOR, **s3_options: Any) -> Store:
    """Open the store named by ``url``.

    * ``s3://bucket/prefix`` -> ``RetryingStore(S3Store(bucket, prefix, **s3_options), retry_for)``
    * ``file:///abs/path`` -> ``RetryingStore(LocalStore(path), retry_for)``
    * ``memory://`` -> a fresh, empty ``MemoryStore`` (for tests)

    ``s3_options`` are ``S3Store`` keyword options; they are ignored for the other schemes. S3's connect and read
    timeouts default to what ``movers.aws.timeouts_within(retry_for)`` gives, so one attempt fits the budget.
    Anything else raises ``UsageError`` with a one-line message showing the accepted forms.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError for a malformed port
    except (ValueError, AttributeError):
        raise _bad(str(url), "malformed URL") from None
    if parts.query or parts.fragment:
        raise _bad(url, "query strings and fragments are not supported")
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path.strip("/"):
            raise _bad(url, "memory:// takes no location")
        return MemoryStore()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise _bad(url, "file URLs need an absolute path (three slashes: file:///path)")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise _bad(url, "file URLs need an absolute path")
        return RetryingStore(LocalStore(path), retry_for)
    if scheme == "s3":
        if has_userinfo(url) or port is not None:
            raise _bad(url, "put credentials and endpoint in options or the environment, not in the URL")
        bucket = parts.netloc
        if not bucket:
            raise _bad(url, "missing bucket name")
        if not _BUCKET.match(bucket):
            raise _bad(url, f"invalid bucket name {bucket!r}")
        prefix = unquote(parts.path).strip("/")
        if prefix:
            try:
                validate_key(prefix)
            except UsageError:
                raise _bad(url, f"invalid prefix {prefix!r}") from None
        from movers.aws import timeouts_within
        from movers.repo.store.s3 import S3Store

        connect, read = timeouts_within(retry_for)
        s3_options = {"connect_timeout": connect, "read_timeout": read, **s3_options}
        return RetryingStore(S3Store(bucket, prefix, **s3_options), retry_for)
    if not scheme:
        raise _bad(url, "missing scheme")
    raise _bad(url, f"unsupported scheme {scheme!r}")
