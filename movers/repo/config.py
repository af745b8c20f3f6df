"""The repository config object (key ``config``): written once by ``init``, never changed.

It fixes the parameters every backup of the repository shares (map page size, chunk grid)
and carries the format version and mandatory features, checked on every open. One of the features names
the hash of chunk ids and block digests (``movers.repo.contenthash``), and ``encrypted-v1`` that every other
object is sealed (``movers.repo.crypto``). The config itself stays plaintext: a reader learns from it whether
and how to unlock the repository. Its rule that an encrypted repository has keyed chunk ids (and only an
encrypted one) keeps an edited config from making a writer store unkeyed ids.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime

from movers.errors import IntegrityError, UsageError
from movers.repo import contenthash
from movers.repo.digests import DIGEST_BLOCK
from movers.repo.manifest import (
    ENCRYPTED,
    ENCRYPTED_FEATURES,
    FEATURES_OF_VERSION,
    FORMAT_VERSION,
    LOCATED_PAGES,
    MANDATORY_FEATURES,
    check_compatible,
)

CONFIG_KEY = "config"
MiB = 1 << 20


@dataclass(frozen=True)
class RepoConfig:
    repo_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    # Chunks never cross a multiple of chunk_max; pages hold page_size bytes of volume.
    chunk_max: int = 4 * MiB
    page_size: int = 64 * MiB
    pack_target: int = 16 * MiB
    format_version: int = FORMAT_VERSION
    mandatory_features: tuple[str, ...] = MANDATORY_FEATURES

    def __post_init__(self) -> None:
        if self.format_version in FEATURES_OF_VERSION and self.mandatory_features == MANDATORY_FEATURES:
            object.__setattr__(self, "mandatory_features", FEATURES_OF_VERSION[self.format_version])
        if self.chunk_max <= 0 or self.chunk_max % DIGEST_BLOCK or self.page_size % self.chunk_max:
            raise UsageError(f"page_size must be a multiple of chunk_max, itself a multiple of {DIGEST_BLOCK}")
        named = contenthash.of_features(self.mandatory_features, key=bytes(32))  # names at most one hash
        if self.encrypted and (self.format_version != 2 or named.name != contenthash.KEYED_BLAKE3):
            raise IntegrityError(
                f"an encrypted repository is format version 2 with {contenthash.KEYED_BLAKE3} chunk ids"
            )
        if not self.encrypted and named.name == contenthash.KEYED_BLAKE3:
            raise IntegrityError(f"{contenthash.KEYED_BLAKE3} chunk ids need an encrypted repository (its key)")

    @classmethod
    def new(cls, encrypted: bool = False) -> RepoConfig:
        """The config of a new repository: version 2, encrypted (``ENCRYPTED_FEATURES``) or not."""
        return cls(mandatory_features=ENCRYPTED_FEATURES) if encrypted else cls()

    @property
    def encrypted(self) -> bool:
        """Every object is sealed with the repository's key (``movers.repo.crypto``)."""
        return ENCRYPTED in self.mandatory_features

    @property
    def content_hash(self) -> contenthash.ContentHash:
        """The hash of chunk ids and block digests that the mandatory features name (SHA-256 if none does), of an
        unencrypted repository (an encrypted one's is keyed: ``Repository.content_hash``)."""
        return contenthash.of_features(self.mandatory_features)

    @property
    def located(self) -> bool:
        """Backups write located map pages (format version 2) and read no chunk index."""
        return LOCATED_PAGES in self.mandatory_features

    def encode(self) -> bytes:
        doc = asdict(self)
        doc["format"] = "cbt-mover-repository"
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> RepoConfig:
        try:
            doc = json.loads(data)
        except ValueError:
            raise IntegrityError("repository config is not valid JSON") from None
        if not isinstance(doc, dict) or doc.get("format") != "cbt-mover-repository":
            raise IntegrityError("this location holds something that is not a cbt-mover repository")
        check_compatible(doc.get("format_version"), doc.get("mandatory_features"), "repository")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in known}  # optional features we lack are ignored
        values["mandatory_features"] = tuple(values.get("mandatory_features", ()))
        try:
            return cls(**values)
        except TypeError as err:
            raise IntegrityError(f"repository config is malformed: {err}") from None
