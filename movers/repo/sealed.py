"""``SealedStore``: the one place an encrypted repository's objects are sealed and opened.

Wraps the repository's store; every module above it reads and writes plaintext as in an unencrypted
repository. Each object is put as its envelope and opened on get (``movers.repo.crypto.RepoKeys``), except:

* ``config`` and ``keys/*``: plaintext (a reader needs them to learn how to unlock the repository);
* ``packs/*``: passed through as they are; a pack seals its chunks and trailer itself
  (``movers.repo.pack``), so ranged reads of one chunk keep working.

An envelope that does not open (modified, truncated, moved to another key, copied from another repository)
raises ``IntegrityError`` naming the object. ``size`` and ``get_range`` of a sealed object are of its
plaintext (a range is read as the whole object). Listing, deletes and request counts are the inner store's.

It wraps a ``movers.repo.store`` with the repository's keys (``movers.repo.crypto``), so it lives beside
those, above the store package (which imports nothing of ``movers.repo``).
"""

from __future__ import annotations

from collections.abc import Iterator

from movers.repo.crypto import ENVELOPE_OVERHEAD, RepoKeys
from movers.repo.store.base import Store, StoreWrapper

PLAINTEXT_KEYS = ("config",)
PASSED_PREFIXES = ("keys/", "packs/")


def sealed(key: str) -> bool:
    """Whether ``key`` is stored as an envelope in an encrypted repository."""
    return key not in PLAINTEXT_KEYS and not key.startswith(PASSED_PREFIXES)


class SealedStore(StoreWrapper):
    """A ``Store`` that seals what it puts and opens what it gets (see the module docstring)."""

    def __init__(self, inner: Store, keys: RepoKeys) -> None:
        super().__init__(inner)
        self._keys = keys

    def _seal(self, key: str, data: bytes) -> bytes:
        return self._keys.seal_object(key, data) if sealed(key) else data

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, self._seal(key, data))

    def put_new(self, key: str, data: bytes) -> bool:
        return self.inner.put_new(key, self._seal(key, data))

    def create(self, key: str, data: bytes) -> bool:
        return self.inner.create(key, self._seal(key, data))

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        return self._keys.open_object(key, data) if sealed(key) else data

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if not sealed(key):
            return self.inner.get_range(key, offset, length)
        return self.get(key)[offset : offset + length]

    def size(self, key: str) -> int:
        size = self.inner.size(key)
        return max(0, size - ENVELOPE_OVERHEAD) if sealed(key) else size

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def check(self) -> None:
        check = getattr(self.inner, "check", None)
        if check is not None:
            check()

    def sweep_temporaries(self, *args: float) -> tuple[int, int]:
        sweep = getattr(self.inner, "sweep_temporaries", None)
        return sweep(*args) if sweep is not None else (0, 0)

    def __repr__(self) -> str:
        return f"SealedStore({self.inner!r})"
