"""Key slots of an encrypted repository, and the credentials a user gives to open one.

An encrypted repository's master key (32 random bytes, made by ``init``) is never stored in the clear: each
key slot ``keys/<slot id>`` (16 random hex characters) wraps it for one credential. A slot is plaintext JSON::

    {"format": "cbt-mover-key-slot", "slot": id, "kind": "passphrase" | "keyfile" | "kms", "created": iso time,
     "kdf": {"name": "scrypt", "n": 65536, "r": 8, "p": 1, "salt": base64},     (passphrase slots only)
     "kms": {"key": key ARN},                                                   (kms slots only)
     "wrapped": base64(nonce(12) | AES-256-GCM(KEK, master key, ad = repository id "\\0" slot id))
                (kms slots: base64 of the KMS ciphertext blob of the master key)}

KEK: scrypt of the passphrase with the slot's own parameters and salt; HKDF-SHA256 (info ``cbt-mover key
file``) of a key file's bytes (at least 32 random bytes: ``head -c 32 /dev/urandom > FILE``). A kms slot is
wrapped by AWS KMS Encrypt with the EncryptionContext of the repository id and slot id and opened by Decrypt
with the key the user names (``movers.repo.kms``). Opening tries every slot of a kind the user gave a
credential for, local kinds first (no network); the first that unwraps wins. None: exit code 6, one line naming
the credentials' sources (and why KMS refused), never their content; KMS unreachable (and nothing else opens):
exit code 5. A slot that is not well-formed is skipped with a warning, and is damage (exit code 4) only when no
other slot opens. Adding, removing and changing slots never touches data: the master key stays.

Credentials (``Credentials.gather``): the passphrase from ``CBT_MOVER_PASSWORD`` or a passphrase file
(``--password-file``, default ``CBT_MOVER_PASSWORD_FILE``; trailing newlines dropped), a key file
(``--key-file``, default ``CBT_MOVER_KEY_FILE``), an AWS KMS key (``--kms-key``, default
``CBT_MOVER_KMS_KEY``). New passphrase slots cost ``CBT_MOVER_KDF_COST`` (log2 of scrypt's N; default 16: 64 MiB
and ~0.15 s on one core), lower only for tests; each slot records its own.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from movers.errors import IntegrityError, NotFoundError, RepositoryKeyError, TransientStoreError, UsageError
from movers.repo import kms
from movers.repo.crypto import KEY_LEN, hkdf, seal, unseal
from movers.repo.kms import KMS_KEY_ENV, KmsKey
from movers.repo.store.base import Store
from movers.repo.store.retry import DEFAULT_RETRY_FOR

log = logging.getLogger(__name__)

PASSWORD_ENV = "CBT_MOVER_PASSWORD"
PASSWORD_FILE_ENV = "CBT_MOVER_PASSWORD_FILE"
KEY_FILE_ENV = "CBT_MOVER_KEY_FILE"
NEW_PASSWORD_ENV = "CBT_MOVER_NEW_PASSWORD"
KDF_COST_ENV = "CBT_MOVER_KDF_COST"
HOW_TO_GIVE = f"set {PASSWORD_ENV}, or give --password-file FILE, --key-file FILE or --kms-key KEY"
SLOT_PREFIX = "keys/"
SLOT_FORMAT = "cbt-mover-key-slot"
PASSPHRASE, KEYFILE, KMS = "passphrase", "keyfile", KmsKey.kind
DEFAULT_KDF_COST = 16
KDF_COSTS = range(10, 21)  # log2 N a new slot may use; an existing slot's N is accepted in the same range
_MAX_SCRYPT_R, _MAX_SCRYPT_P = 16, 4
_MAX_SCRYPT_MEMORY = 1 << 30  # 128 * N * r bytes: a slot asking for more is damaged (not a way to exhaust memory)
KEY_FILE_MIN, KEY_FILE_MAX = 32, 64 * 1024


@dataclass(frozen=True)
class Secret:
    """One credential: its kind (``PASSPHRASE`` or ``KEYFILE``), where it came from (for messages) and its bytes."""

    kind: str
    source: str
    value: bytes = field(repr=False)


@dataclass(frozen=True)
class Credentials:
    """The credentials a user gave (at most one passphrase, one key file, one KMS key)."""

    secrets: tuple[Secret | KmsKey, ...]

    @property
    def sources(self) -> str:
        return ", ".join(s.source for s in self.secrets)

    @classmethod
    def gather(
        cls,
        password_file: str | None = None,
        key_file: str | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        kms_key: str | None = None,
        aws_profile: str | None = None,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> Credentials | None:
        """The credentials that open a repository (None: none given): the passphrase from ``CBT_MOVER_PASSWORD``
        or ``password_file`` (default ``CBT_MOVER_PASSWORD_FILE``), the key file ``key_file`` (default
        ``CBT_MOVER_KEY_FILE``), the KMS key ``kms_key`` (default ``CBT_MOVER_KMS_KEY``; called with the AWS
        profile ``aws_profile`` and the retry budget ``retry_for``). The CLI's options and tasks (``environ``
        alone) take them the same way.

        ``UsageError`` for a file that cannot be read, an empty passphrase, a passphrase given twice (the
        variable and a file), a key file shorter than ``KEY_FILE_MIN`` bytes or a KMS key of no KMS form.
        """
        environ = os.environ if environ is None else environ
        password_source = "--password-file" if password_file else PASSWORD_FILE_ENV
        key_source = "--key-file" if key_file else KEY_FILE_ENV
        kms_source = "--kms-key" if kms_key else KMS_KEY_ENV
        return cls._collect(
            (PASSWORD_ENV, environ.get(PASSWORD_ENV)),
            (password_source, password_file or environ.get(PASSWORD_FILE_ENV)),
            (key_source, key_file or environ.get(KEY_FILE_ENV)),
            (kms_source, kms_key or environ.get(KMS_KEY_ENV)),
            {"profile": aws_profile, "retry_for": retry_for},
        )

    @classmethod
    def gather_new(
        cls,
        password_file: str | None = None,
        key_file: str | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        kms_key: str | None = None,
        aws_profile: str | None = None,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> Credentials | None:
        """The credentials of a new key slot (``key add``, ``key passwd``): ``CBT_MOVER_NEW_PASSWORD``,
        ``--new-password-file``, ``--new-key-file`` or ``--new-kms-key`` (checked as ``gather`` checks its own)."""
        environ = os.environ if environ is None else environ
        return cls._collect(
            (NEW_PASSWORD_ENV, environ.get(NEW_PASSWORD_ENV)),
            ("--new-password-file", password_file),
            ("--new-key-file", key_file),
            ("--new-kms-key", kms_key),
            {"profile": aws_profile, "retry_for": retry_for},
        )

    @classmethod
    def _collect(
        cls,
        env: tuple[str, str | None],
        password_file: tuple[str, str | None],
        key_file: tuple[str, str | None],
        kms_key: tuple[str, str | None],
        aws: dict,
    ) -> Credentials | None:
        secrets: list[Secret | KmsKey] = []
        if env[1] is not None and password_file[1]:
            raise UsageError(f"give the passphrase once: {env[0]} or {password_file[0]}, not both")
        if env[1] is not None:
            secrets.append(Secret(PASSPHRASE, env[0], _passphrase(os.fsencode(env[1]), env[0])))
        if password_file[1]:
            source = f"{password_file[0]} {password_file[1]}"
            secrets.append(passphrase_file_secret(_read(password_file[1], source), source))
        if key_file[1]:
            source = f"{key_file[0]} {key_file[1]}"
            secrets.append(key_file_secret(_read(key_file[1], source), source))
        if kms_key[1]:
            secrets.append(KmsKey(kms_key[1], kms_key[0], **aws))
        return cls(tuple(secrets)) if secrets else None


def passphrase_file_secret(content: bytes, source: str) -> Secret:
    """The passphrase a file (or a Secret's key) holds: its content without trailing newlines; ``UsageError``
    when that is empty."""
    return Secret(PASSPHRASE, source, _passphrase(content.rstrip(b"\r\n"), source))


def key_file_secret(content: bytes, source: str) -> Secret:
    """The key a key file (or a Secret's key) holds; ``UsageError`` when it is shorter than ``KEY_FILE_MIN``."""
    if len(content) < KEY_FILE_MIN:
        raise UsageError(
            f"{source} holds {len(content)} bytes: a key file holds at least {KEY_FILE_MIN} random bytes"
            f" (head -c {KEY_FILE_MIN} /dev/urandom > FILE)"
        )
    return Secret(KEYFILE, source, content)


def _passphrase(value: bytes, source: str) -> bytes:
    if not value:
        raise UsageError(f"the passphrase from {source} is empty")
    return value


def _read(path: str, source: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(KEY_FILE_MAX + 1)
    except OSError as err:
        raise UsageError(f"cannot read {source}: {err.strerror}") from None
    if len(data) > KEY_FILE_MAX:
        raise UsageError(f"{source} is larger than {KEY_FILE_MAX} bytes: not a passphrase or key file")
    return data


def kdf_cost(environ: Mapping[str, str] | None = None) -> int:
    """log2 of scrypt's N for new passphrase slots: ``CBT_MOVER_KDF_COST`` or ``DEFAULT_KDF_COST``."""
    text = (os.environ if environ is None else environ).get(KDF_COST_ENV)
    if text is None:
        return DEFAULT_KDF_COST
    if not text.strip().isdigit() or int(text) not in KDF_COSTS:
        raise UsageError(f"{KDF_COST_ENV} must be an integer from {KDF_COSTS.start} to {KDF_COSTS.stop - 1}")
    return int(text)


@dataclass(frozen=True)
class Slot:
    """One well-formed key slot."""

    id: str
    kind: str
    created: str
    kdf: dict | None
    wrapped: bytes = field(repr=False)
    kms_key: str | None = None  # the key ARN of a kms slot

    @property
    def key(self) -> str:
        return SLOT_PREFIX + self.id

    def describe(self) -> dict:
        """What ``cbt-mover key list`` shows (no key material)."""
        kdf = None if self.kdf is None else {k: v for k, v in self.kdf.items() if k != "salt"}
        return {"slot": self.id, "kind": self.kind, "created": self.created, "kdf": kdf, "kms_key": self.kms_key}


def _kek(kind: str, kdf: dict | None, value: bytes) -> bytes:
    if kind == KEYFILE:
        return hkdf(value, b"cbt-mover key file")
    assert kdf is not None
    salt = base64.b64decode(kdf["salt"])
    return Scrypt(salt=salt, length=KEY_LEN, n=kdf["n"], r=kdf["r"], p=kdf["p"]).derive(value)


def _ad(repo_id: str, slot_id: str) -> bytes:
    return f"{repo_id}\0{slot_id}".encode()


def first_slot_id(repo_id: str) -> str:
    """The id of a repository's first key slot, which ``init`` writes: one per repository id, so that two writers
    of a first slot (an ``init`` and one completing it) cannot both write one."""
    return hashlib.sha256(f"cbt-mover first key slot\0{repo_id}".encode()).hexdigest()[:16]


def new_slot(
    repo_id: str, master: bytes, secret: Secret | KmsKey, cost: int = DEFAULT_KDF_COST, slot_id: str | None = None
) -> tuple[str, bytes]:
    """``(slot id, slot object)`` wrapping ``master`` for ``secret``, checked to open with it: a KMS key that
    encrypts but does not decrypt for this identity fails here (``RepositoryKeyError``), before anything is
    written. ``slot_id``: 64 random bits unless given (``first_slot_id``)."""
    slot_id = slot_id or os.urandom(8).hex()
    doc: dict = {"format": SLOT_FORMAT, "slot": slot_id, "kind": secret.kind, "created": datetime.now(UTC).isoformat()}
    if isinstance(secret, KmsKey):
        wrapped, arn = secret.wrap(master, kms.context(repo_id, slot_id))
        doc["kms"] = {"key": arn}
    else:
        if secret.kind == PASSPHRASE:
            salt = base64.b64encode(os.urandom(16)).decode()
            doc["kdf"] = {"name": "scrypt", "n": 1 << cost, "r": 8, "p": 1, "salt": salt}
        wrapped = seal(_kek(secret.kind, doc.get("kdf"), secret.value), master, _ad(repo_id, slot_id))
    doc["wrapped"] = base64.b64encode(wrapped).decode()
    data = json.dumps(doc, indent=1, sort_keys=True).encode()
    if _unwrap(parse_slot(SLOT_PREFIX + slot_id, data), secret, repo_id) != master:
        raise IntegrityError(f"the new key slot {SLOT_PREFIX}{slot_id} does not open with its key")
    return slot_id, data


def parse_slot(key: str, data: bytes) -> Slot:
    """The slot stored at ``key``; ``IntegrityError`` naming it when it is not a well-formed slot."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != SLOT_FORMAT or SLOT_PREFIX + doc["slot"] != key:
            raise ValueError("not a key slot of this name")
        kind, kdf, kms_key = doc["kind"], doc.get("kdf"), None
        if kind == PASSPHRASE:
            _check_scrypt(kdf)
        elif kind == KMS:
            kms_key = doc["kms"]["key"]
            if not isinstance(kms_key, str) or not kms.KEY_ARN.fullmatch(kms_key):
                raise ValueError(f"{kms_key!r} is not an AWS KMS key ARN")
        elif kind != KEYFILE:
            raise ValueError(f"unknown kind {kind!r}")
        wrapped = base64.b64decode(doc["wrapped"], validate=True)
        return Slot(doc["slot"], kind, str(doc.get("created", "")), kdf, wrapped, kms_key)
    except (ValueError, KeyError, TypeError, binascii.Error) as err:
        raise IntegrityError(f"key slot {key} is damaged: {err}") from None


def _check_scrypt(kdf: object) -> None:
    if not isinstance(kdf, dict) or kdf.get("name") != "scrypt":
        raise ValueError("a passphrase slot needs scrypt parameters")
    n, r, p = kdf.get("n"), kdf.get("r"), kdf.get("p")
    if not all(isinstance(x, int) for x in (n, r, p)):
        raise ValueError("scrypt parameters must be integers")
    if n not in {1 << c for c in KDF_COSTS} or not 1 <= r <= _MAX_SCRYPT_R or not 1 <= p <= _MAX_SCRYPT_P:
        raise ValueError(f"scrypt parameters n={n} r={r} p={p} are out of range")
    if 128 * n * r > _MAX_SCRYPT_MEMORY:
        raise ValueError(f"scrypt parameters n={n} r={r} need more than {_MAX_SCRYPT_MEMORY >> 20} MiB")
    if len(base64.b64decode(kdf.get("salt", ""), validate=True)) < 16:
        raise ValueError("scrypt salt is shorter than 16 bytes")


def read_slots(store: Store) -> tuple[list[Slot], list[tuple[str, str]]]:
    """The well-formed slots, and ``(key, why)`` of the damaged ones (slots that vanish while read are left out)."""
    slots, damaged = [], []
    for key in store.list(SLOT_PREFIX):
        try:
            slots.append(parse_slot(key, store.get(key)))
        except NotFoundError:
            continue
        except IntegrityError as err:
            damaged.append((key, str(err)))
    return slots, damaged


def _unwrap(slot: Slot, secret: Secret | KmsKey, repo_id: str) -> bytes | None:
    """The master key ``slot`` wraps for ``secret``; None when it does not open with it (KMS: ``RepositoryKeyError``
    saying why, ``TransientStoreError`` when KMS cannot be reached)."""
    if isinstance(secret, KmsKey):
        assert slot.kms_key is not None
        master = secret.unwrap(slot.wrapped, kms.context(repo_id, slot.id), slot.kms_key, slot.key)
    else:
        try:
            master = unseal(_kek(slot.kind, slot.kdf, secret.value), slot.wrapped, _ad(repo_id, slot.id), slot.key)
        except IntegrityError:
            return None
    return master if len(master) == KEY_LEN else None


def unlock(store: Store, repo_id: str, credentials: Credentials, where: str) -> tuple[bytes, str]:
    """``(master key, id of the slot that opened)`` for ``credentials``.

    ``RepositoryKeyError`` (exit code 6) when no slot opens with them (with why KMS refused, if it did);
    ``TransientStoreError`` (exit code 5) when none opens and KMS could not be reached within the retry budget
    (further kms slots are not tried then); ``IntegrityError`` when the repository has no slot at all, or no slot
    opens and some are damaged (naming those).
    """
    slots, damaged = read_slots(store)
    refusals: list[str] = []
    unreachable: TransientStoreError | None = None
    for secret in sorted(credentials.secrets, key=lambda s: s.kind == KMS):  # local kinds first: no network
        for slot in slots:
            if slot.kind != secret.kind or (secret.kind == KMS and unreachable is not None):
                continue
            try:
                master = _unwrap(slot, secret, repo_id)
            except RepositoryKeyError as err:
                refusals.append(str(err))
                continue
            except TransientStoreError as err:
                unreachable = err
                continue
            if master is not None:
                for _key, why in damaged:
                    log.warning("ignoring %s", why)
                return master, slot.id
    if unreachable is not None:
        raise unreachable
    if damaged:
        raise IntegrityError(
            f"no key slot of {where} opens with the given key ({credentials.sources}); damaged key slot(s):"
            f" {', '.join(key for key, _why in damaged)}"
        )
    if not slots:
        raise IntegrityError(
            f"{where} is encrypted but has no key slot ({SLOT_PREFIX}): its init did not finish;"
            " run cbt-mover init on it again to complete it"
        )
    given = {secret.kind for secret in credentials.secrets}
    if not given & {slot.kind for slot in slots}:
        why = f": it has no {' or '.join(sorted(given))} slot"
    else:
        why = f": {'; '.join(refusals)}" if refusals else ""
    raise RepositoryKeyError(f"no key slot of {where} opens with the given key ({credentials.sources}){why}")


def add_slot(store: Store, repo_id: str, master: bytes, secret: Secret | KmsKey, cost: int = DEFAULT_KDF_COST) -> str:
    """Write a new slot for ``secret`` (``new_slot``: checked to open) and read it back; its id."""
    slot_id, data = new_slot(repo_id, master, secret, cost)
    write_slot(store, slot_id, data)
    return slot_id


def write_slot(store: Store, slot_id: str, data: bytes) -> None:
    """Store a slot ``new_slot`` made and check it reads back unchanged."""
    if not store.create(SLOT_PREFIX + slot_id, data):  # random: never in practice; a first slot: a racing init
        raise IntegrityError(f"key slot {SLOT_PREFIX}{slot_id} exists already")
    if store.get(SLOT_PREFIX + slot_id) != data:
        raise IntegrityError(f"the new key slot {SLOT_PREFIX}{slot_id} reads back changed after writing it")


def remove_slot(store: Store, slot_id: str, opened_by: str) -> None:
    """Delete slot ``slot_id``: ``NotFoundError`` if there is none, ``UsageError`` if it is the last well-formed
    slot or the one that opened the repository (open with another key to remove it, or use ``key passwd``).
    A damaged slot is always removed."""
    if not re.fullmatch(r"[0-9a-f]{16}", slot_id):
        raise UsageError(f"{slot_id!r} is not a key slot id (16 hex characters, see: cbt-mover key list)")
    slots, damaged = read_slots(store)
    if SLOT_PREFIX + slot_id in {key for key, _why in damaged}:
        store.delete(SLOT_PREFIX + slot_id)  # opens nothing: removing it loses nothing
        return
    if slot_id not in {s.id for s in slots}:
        raise NotFoundError(f"the repository has no key slot {slot_id}")
    if len(slots) == 1:
        raise UsageError(f"key slot {slot_id} is the repository's last: add another before removing it")
    if slot_id == opened_by:
        raise UsageError(
            f"key slot {slot_id} opened the repository: open it with another key to remove this slot,"
            " or replace it with: cbt-mover key passwd"
        )
    store.delete(SLOT_PREFIX + slot_id)


def replace_slot(store: Store, repo_id: str, master: bytes, old_slot: str, secret: Secret | KmsKey, cost: int) -> str:
    """Add a slot for ``secret`` (checked to open), then delete ``old_slot``; the new slot's id. Interrupted in
    between, both slots open the repository."""
    new = add_slot(store, repo_id, master, secret, cost)
    store.delete(SLOT_PREFIX + old_slot)
    return new
