"""The content hash of a repository: what names its chunks (chunk ids) and fingerprints its 64 KiB blocks.

One hash per repository, fixed by ``init``: the repository's ``config`` (and every manifest) names it by a
mandatory feature, ``<name>-chunks``. ``sha256-chunks`` is what format version 1 and the first version 2
repositories record; ``blake3-chunks`` what version 2 repositories get now (4 to 5x faster than SHA-256 on
one core, docs/scaling-benchmarks.md). A list naming no hash means SHA-256 (version 1 had only it), one naming
a hash this reader lacks is refused with exit code 7 like any unknown mandatory feature (``check_compatible``).

This module is the one owner of the choice: everything that hashes volume data (the backup engine, chunk
decoding, restores, read-back, verify) takes a ``ContentHash`` from ``Repository.content_hash``. A keyed
variant (BLAKE3's keyed mode, feature ``blake3-keyed-chunks``, which every encrypted repository records) is another
``ContentHash`` built here from the repository's "chunk ids" subkey (``movers.repo.crypto``), so ids and digests
reveal nothing about content to whoever lacks the key.
Object names (version 1 pack ids, map and index objects) are not volume data: they stay SHA-256, owned by
their modules.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import blake3

from movers.errors import IntegrityError
from movers.repo.digests import DIGEST_BLOCK, DIGEST_LEN

ID_LEN = 32  # bytes of a chunk id; a block digest is its first DIGEST_LEN bytes
Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class ContentHash:
    """A 32-byte hash of volume data and the two things a repository derives from it.

    ``new(data)`` returns an object whose ``digest()`` is the 32-byte hash (hashlib's interface). Thread-safe.
    """

    name: str
    new: Callable[[Buffer], Any] = field(repr=False)
    _zeros: dict[int, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def feature(self) -> str:
        """The mandatory feature that records this hash in a config and in manifests."""
        return f"{self.name}-chunks"

    def chunk_id(self, data: Buffer) -> bytes:
        """The content address of a chunk's raw bytes."""
        return self.new(data).digest()

    def block_digest(self, data: Buffer) -> bytes:
        """The digest of one block of a map page (``movers.repo.digests``)."""
        return self.new(data).digest()[:DIGEST_LEN]

    def zero_digest(self, length: int = DIGEST_BLOCK) -> bytes:
        """``block_digest`` of ``length`` zero bytes (cached)."""
        digest = self._zeros.get(length)
        if digest is None:
            digest = self._zeros[length] = self.block_digest(bytes(length))
        return digest


SHA256 = ContentHash("sha256", hashlib.sha256)
BLAKE3 = ContentHash("blake3", blake3.blake3)
BY_FEATURE = {h.feature: h for h in (SHA256, BLAKE3)}
KEYED_BLAKE3 = "blake3-keyed"  # BLAKE3's keyed mode; the key is the repository's "chunk ids" subkey
KEYED_FEATURES = frozenset({f"{KEYED_BLAKE3}-chunks"})
HASH_FEATURES = frozenset(BY_FEATURE) | KEYED_FEATURES
NEW_REPOSITORIES = BLAKE3  # what ``init`` records in an unencrypted version 2 repository


def keyed_blake3(key: bytes) -> ContentHash:
    """BLAKE3 keyed with ``key`` (32 bytes): without the key, ids and digests say nothing about the data."""
    return ContentHash(KEYED_BLAKE3, functools.partial(blake3.blake3, key=key))


def of_features(features: Iterable[str], key: bytes | None = None) -> ContentHash:
    """The content hash ``features`` (a config's mandatory features) name: SHA-256 when they name none.

    A keyed hash is built from ``key`` (``ValueError`` without one: the caller had to unlock the repository).
    Unknown features are the caller's to refuse (``movers.repo.manifest.check_compatible``); naming two hashes is
    a malformed config (``IntegrityError``).
    """
    named = sorted({f for f in features if f in HASH_FEATURES})
    if len(named) > 1:
        raise IntegrityError(f"repository config names more than one chunk hash: {', '.join(named)}")
    if named and named[0] in KEYED_FEATURES:
        if key is None:
            raise ValueError(f"the chunk hash {named[0]} needs the repository's key")
        return keyed_blake3(key)
    return BY_FEATURE[named[0]] if named else SHA256
