"""The Store protocol: the only way the engine touches persistent bytes.

Guarantees every implementation gives (checked by ``tests/conformance/test_store_conformance.py``):

* Keys are ``/``-separated strings of ``[A-Za-z0-9._%-]`` segments; no leading ``/``,
  no empty segment, no segment starting with ``.tmp-`` (reserved for a local store's temporary
  files). ``validate_key`` enforces this.
* ``put`` is atomic: a reader sees either no object or the whole object, never a part.
  When ``put`` returns the object is durable and visible to ``get`` and ``list``.
  The engine never overwrites an existing key with different bytes (objects are immutable);
  ``put`` of an existing key replaces it.
* ``put_new`` writes like ``put`` but only if no object has the key: ``True`` when it wrote,
  ``False`` when the key already existed (that object is left as it was, never rewritten, as
  object-locked buckets need). Of concurrent ``put_new`` calls of one key at most one returns
  ``True``, except on an S3 endpoint without conditional writes, where ``S3Store`` falls back to
  HEAD then PUT and may rewrite a key a racing writer created: ``put_new`` is for keys whose racing
  writers write the same bytes (content-addressed or random ids: packs, index and map objects).
* ``create`` writes like ``put_new`` and never rewrites an object, on every store (S3 endpoints
  without conditional writes included, see ``s3.py``): of concurrent ``create`` calls of one key at
  most one returns ``True``, and the key then holds its bytes. It is how configs, key slots and
  manifests are written: one of them replaced would lose every backup it stands for.
* ``get`` / ``get_range`` raise ``ObjectNotFound`` for a missing key. ``get_range`` returns
  exactly ``length`` bytes unless the object ends earlier (then the available bytes).
* ``list(prefix)`` yields every key starting with ``prefix``, in ascending byte order,
  including objects put before the call started.
* ``delete`` of a missing key is not an error.
* Errors are ``ObjectNotFound``, ``TransientStoreError`` (retrying may help) or
  ``PermanentStoreError`` / ``AccessDeniedError``; vendor exceptions never escape.
* ``repr`` and error messages never contain credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from movers.errors import UsageError

_KEY_SEGMENT = re.compile(r"^[A-Za-z0-9._%-]+$")
TEMPORARY_PREFIX = ".tmp-"  # a segment starting with it is never a key (local stores' temporary files)
TEMPORARY_MAX_AGE_S = 3600.0  # a temporary file untouched this long was left by a killed writer
TEMPORARY_MIN_AGE_S = 60.0  # a temporary file is renamed moments after its last byte: younger ones may be live


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid store key, else raise ``UsageError``."""
    parts = key.split("/")
    if not key or any(not _KEY_SEGMENT.match(p) or p in (".", "..") or p.startswith(TEMPORARY_PREFIX) for p in parts):
        raise UsageError(f"invalid store key {key!r}")
    return key


@runtime_checkable
class Store(Protocol):
    """Immutable-object key/value storage (S3, a local folder, memory)."""

    def put(self, key: str, data: bytes) -> None: ...

    def put_new(self, key: str, data: bytes) -> bool: ...

    def create(self, key: str, data: bytes) -> bool: ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, offset: int, length: int) -> bytes: ...

    def size(self, key: str) -> int: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str = "") -> Iterator[str]: ...

    def delete(self, key: str) -> None: ...

    def describe(self) -> str:
        """A human-readable location (URL) without secrets."""
        ...


class StoreWrapper:
    """Base of the stores that wrap another (``inner``: retries, sealing, injected faults): what a wrapper does not
    change is the inner store's, its request counts and its description."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    @property
    def requests(self):
        """The inner store's request counts (``movers.repo.store.counting.RequestCounts``)."""
        return self.inner.requests

    def describe(self) -> str:
        return self.inner.describe()
