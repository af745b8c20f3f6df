"""Store requests counted by kind: what one command (a backup, a restore) cost in object-store requests.

Kinds (``KINDS``): ``get`` (a whole object), ``range_get``, ``put`` (PutObject, and each call of a
multipart upload), ``head`` (an object's or the bucket's), ``list_pages`` (one LIST request, up to
1000 keys) and ``delete`` (DeleteObject, AbortMultipartUpload).

Every store of this package has a ``requests`` attribute (``RequestCounts``): ``S3Store`` counts the
HTTP requests it sends, each attempt of a retried call included; ``LocalStore`` and ``MemoryStore``
count their calls the same way (a ``put_new`` is one ``put``, a listing the pages S3 would return),
so the figures compare across stores. Wrappers hand out their inner store's counts.
"""

from __future__ import annotations

import threading

KINDS = ("get", "range_get", "put", "head", "list_pages", "delete")
LIST_PAGE_KEYS = 1000  # S3 ListObjectsV2 returns at most this many keys per request


def list_pages(keys: int) -> int:
    """LIST requests S3 needs for a listing of ``keys`` keys (an empty listing is one request)."""
    return max(1, -(-keys // LIST_PAGE_KEYS))


class RequestCounts:
    """Thread-safe counters, one per kind in ``KINDS``."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()

    def add(self, kind: str, n: int = 1) -> None:
        if kind not in self._counts:
            raise ValueError(f"unknown request kind {kind!r}; expected one of {KINDS}")
        with self._lock:
            self._counts[kind] += n

    def as_dict(self) -> dict[str, int]:
        """The counts so far, every kind present (a copy)."""
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"RequestCounts({self.as_dict()})"
