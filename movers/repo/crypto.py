"""The keys of an encrypted repository and the two ways its bytes are sealed (AES-256-GCM).

A repository's master key (32 random bytes, ``movers.repo.keys`` wraps it in key slots) gives four subkeys
(HKDF-SHA256, info ``cbt-mover <label>``): ``objects`` and ``packs`` (AEAD), ``chunk ids`` (the keyed chunk
hash, ``movers.repo.contenthash``) and ``names`` (HMAC of volume ids, which name manifest prefixes).

* **Envelope** (every object but ``config``, ``keys/*`` and packs; ``movers.repo.sealed`` applies it):
  ``b"CBTENC\\x01" | nonce(12) | AES-GCM(k, nonce, plaintext, ad = repository id "\\0" object key)`` with
  ``k = HKDF-Expand(objects key, "object\\0" object key)``: an object copied to another key or from another
  repository fails its tag, and each key's subkey seals one object (random nonces stay far from GCM's limit).
* **Pack seal** (``movers.repo.pack``): each stored chunk is ``nonce(12) | AES-GCM(k_pack, nonce, stored
  bytes, ad = chunk id)`` and the trailer ``nonce(12) | AES-GCM(k_pack, nonce, trailer, ad = "trailer")``,
  ``k_pack = HKDF-Expand(packs key, "pack\\0" pack id)``: chunks stay individually readable by range.

Any failure to open is an ``IntegrityError`` naming what failed; key material never appears in a repr,
a message or a log.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from movers.errors import IntegrityError

KEY_LEN = 32
NONCE_LEN = 12
TAG_LEN = 16
SEAL_OVERHEAD = NONCE_LEN + TAG_LEN  # bytes a sealed chunk or trailer adds to what it seals
ENVELOPE_MAGIC = b"CBTENC\x01"
ENVELOPE_OVERHEAD = len(ENVELOPE_MAGIC) + SEAL_OVERHEAD
NAME_LEN = 32  # hex characters of a volume's name segment (128 bits of the HMAC)
_TRAILER_AD = b"trailer"


def hkdf(secret: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (no salt) of ``secret``: 32 bytes for ``info``."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_LEN, salt=None, info=info).derive(secret)


def _expand(prk: bytes, info: bytes) -> bytes:
    """HKDF-Expand (RFC 5869) of a 32-byte pseudorandom key to 32 bytes: one HMAC-SHA256 block."""
    return hmac.digest(prk, info + b"\x01", hashlib.sha256)


def seal(key: bytes, plaintext: bytes | memoryview, ad: bytes) -> bytes:
    """``nonce | AES-GCM(key, nonce, plaintext, ad)`` with a random nonce."""
    nonce = os.urandom(NONCE_LEN)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, ad)


def unseal(key: bytes, sealed: bytes | memoryview, ad: bytes, what: str) -> bytes:
    """The plaintext of ``seal(key, plaintext, ad)``; ``IntegrityError`` ("``what`` fails authentication")."""
    if len(sealed) < SEAL_OVERHEAD:
        raise IntegrityError(f"{what} is truncated")
    sealed = memoryview(sealed)  # slices without copying
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_LEN], sealed[NONCE_LEN:], ad)
    except InvalidTag:
        raise IntegrityError(
            f"{what} fails authentication (damaged, or not written there by this repository)"
        ) from None


class PackSeal:
    """Seals and opens the chunks and the trailer of one pack (its own key). Thread-safe."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def seal_chunk_into(self, chunk_id: bytes, stored: bytes | memoryview, out: memoryview) -> None:
        """Write the sealed chunk into ``out`` (exactly ``len(stored) + SEAL_OVERHEAD`` bytes of the pack being
        built: no buffer per chunk, whose fresh pages cost ten times the encryption)."""
        nonce = os.urandom(NONCE_LEN)
        out[:NONCE_LEN] = nonce
        AESGCM(self._key).encrypt_into(nonce, stored, chunk_id, out[NONCE_LEN:])

    def open_chunk(self, chunk_id: bytes, sealed: bytes | memoryview) -> bytes:
        return unseal(self._key, sealed, chunk_id, f"chunk {chunk_id.hex()[:16]}")

    def seal_trailer(self, trailer: bytes) -> bytes:
        return seal(self._key, trailer, _TRAILER_AD)

    def open_trailer(self, sealed: bytes | memoryview) -> bytes:
        return unseal(self._key, sealed, _TRAILER_AD, "pack trailer")

    def __repr__(self) -> str:
        return "PackSeal(<key hidden>)"


class RepoKeys:
    """The subkeys of one repository's master key, bound to its id."""

    def __init__(self, master: bytes, repo_id: str) -> None:
        if len(master) != KEY_LEN:
            raise ValueError("a master key is 32 bytes")
        self.master = master
        self.repo_id = repo_id
        self._objects = hkdf(master, b"cbt-mover objects")
        self._packs = hkdf(master, b"cbt-mover packs")
        self.chunk_ids = hkdf(master, b"cbt-mover chunk ids")
        self._names = hkdf(master, b"cbt-mover names")

    def __repr__(self) -> str:
        return f"RepoKeys(repo_id={self.repo_id!r}, <keys hidden>)"

    def seal_object(self, key: str, plaintext: bytes) -> bytes:
        """The envelope of object ``key`` (see the module docstring)."""
        return ENVELOPE_MAGIC + seal(self._object_key(key), plaintext, self._object_ad(key))

    def open_object(self, key: str, data: bytes) -> bytes:
        """The plaintext of object ``key``'s envelope; ``IntegrityError`` naming ``key`` when it does not open."""
        if not data.startswith(ENVELOPE_MAGIC):
            raise IntegrityError(f"object {key} is not sealed (an encrypted repository seals every object)")
        return unseal(
            self._object_key(key), memoryview(data)[len(ENVELOPE_MAGIC) :], self._object_ad(key), f"object {key}"
        )

    def pack_seal(self, pack_id: bytes) -> PackSeal:
        return PackSeal(_expand(self._packs, b"pack\0" + pack_id))

    def volume_name(self, volume_id: str) -> str:
        """The key segment naming a volume's manifests: hex of HMAC-SHA256(names key, volume id), 128 bits."""
        return hmac.digest(self._names, volume_id.encode(), hashlib.sha256).hex()[:NAME_LEN]

    def _object_key(self, key: str) -> bytes:
        return _expand(self._objects, b"object\0" + key.encode())

    def _object_ad(self, key: str) -> bytes:
        return f"{self.repo_id}\0{key}".encode()
