"""In-memory store, for tests and as the reference implementation of the Store contract."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from movers.errors import ObjectNotFound
from movers.repo.store.base import validate_key
from movers.repo.store.counting import RequestCounts, list_pages


class MemoryStore:
    """A thread-safe dict of immutable byte objects."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self._keys: list[str] = []
        self._lock = threading.Lock()
        self.requests = RequestCounts()

    def put(self, key: str, data: bytes) -> None:
        validate_key(key)
        self.requests.add("put")
        data = bytes(data)
        with self._lock:
            if key not in self._objects:
                bisect.insort(self._keys, key)
            self._objects[key] = data

    def put_new(self, key: str, data: bytes) -> bool:
        validate_key(key)
        self.requests.add("put")
        data = bytes(data)
        with self._lock:
            if key in self._objects:
                return False
            bisect.insort(self._keys, key)
            self._objects[key] = data
        return True

    def create(self, key: str, data: bytes) -> bool:
        """``put_new``: under the lock, it never rewrites a key."""
        return self.put_new(key, data)

    def get(self, key: str) -> bytes:
        self.requests.add("get")
        return self._get(key)

    def _get(self, key: str) -> bytes:
        with self._lock:
            try:
                return self._objects[key]
            except KeyError:
                raise ObjectNotFound(f"object {key} not found in memory store") from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.requests.add("range_get")
        return self._get(key)[offset : offset + length]

    def size(self, key: str) -> int:
        self.requests.add("head")
        return len(self._get(key))

    def exists(self, key: str) -> bool:
        self.requests.add("head")
        with self._lock:
            return key in self._objects

    def list(self, prefix: str = "") -> Iterator[str]:
        with self._lock:
            start = bisect.bisect_left(self._keys, prefix)
            keys = []
            for key in self._keys[start:]:
                if not key.startswith(prefix):
                    break
                keys.append(key)
        self.requests.add("list_pages", list_pages(len(keys)))
        yield from keys

    def delete(self, key: str) -> None:
        self.requests.add("delete")
        with self._lock:
            if self._objects.pop(key, None) is not None:
                self._keys.remove(key)

    def describe(self) -> str:
        return "memory://"

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._objects)} objects)"
