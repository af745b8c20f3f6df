"""The repository key in the repository Secret (``repository.credentials_secret``): which of its keys hold key
material, and the credentials the flow itself opens the repository with.

The Secret may hold the passphrase (key ``password``) and/or a key file (key ``keyfile``), besides the storage
credentials (``manifests.REPO_SECRET_KEYS``). Mover and writer pods get them as files
(``manifests.mover_pod(..., repo=RepoAccess(secret, key_names(...)))``, or ``key_files`` of the key names a
backup's preflight read: ``secret_key_names``); the flow reads the same Secret through the API
(``read_credentials``): the key it checks before a run is the key its pods use.

Contract: key material is held in memory only (``movers.repo.keys.Secret`` hides it from reprs), never
logged, never in an error message (those name the Secret and its key, not the value); a passphrase read here
joins the redacted values (``movers.redaction.KNOWN``). The passphrase is taken as a passphrase FILE is (the
pods read it from one): trailing newlines are dropped (``kubectl create secret --from-file`` keeps the one an
editor adds).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

from movers.errors import NotFoundError, UsageError
from movers.kube import apply as k
from movers.kube.manifests import REPO_KEY_FILES
from movers.redaction import KNOWN
from movers.repo import keys

PASSWORD, KEYFILE = (key for key, _var in REPO_KEY_FILES)


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """The decoded ``data`` of a Secret as the API returns it; ``UsageError`` naming a key that is not base64."""
    out = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError):
            raise UsageError(f"the Secret's key {key} is not base64") from None
    return out


def secret_key_names(secret: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the keys a Secret holds (``data`` as read, or ``stringData`` as written), sorted; never their
    values."""
    return tuple(sorted(set(secret.get("data") or {}) | set(secret.get("stringData") or {})))


def key_files(names: Iterable[str]) -> list[str]:
    """The keys of ``REPO_KEY_FILES`` among ``names`` (a Secret's key names): the files a pod mounts."""
    present = set(names)
    return [key for key, _var in REPO_KEY_FILES if key in present]


def key_names(secret: Mapping[str, Any]) -> list[str]:
    """The keys of ``REPO_KEY_FILES`` the Secret holds (``key_files`` of its ``secret_key_names``)."""
    return key_files(secret_key_names(secret))


def credentials(data: Mapping[str, bytes], where: str) -> keys.Credentials | None:
    """The credentials in a Secret's decoded ``data`` (None: it holds no key material); ``where`` names the Secret
    in messages. ``UsageError`` for an empty passphrase or a key file shorter than ``keys.KEY_FILE_MIN`` bytes, as
    ``keys.Credentials.gather`` would refuse them from files."""
    found = []
    if PASSWORD in data:
        secret = keys.passphrase_file_secret(data[PASSWORD], f"Secret {where} key {PASSWORD}")
        found.append(secret)
        try:
            KNOWN.add(secret.value.decode())
        except UnicodeDecodeError:
            pass  # never printed as text either
    if KEYFILE in data:
        found.append(keys.key_file_secret(data[KEYFILE], f"Secret {where} key {KEYFILE}"))
    return keys.Credentials(tuple(found)) if found else None


def read_credentials(api, namespace: str, name: str) -> keys.Credentials | None:
    """The key material of Secret ``namespace/name`` (``credentials``; None: it holds none); ``NotFoundError``
    (exit code 3) when the Secret does not exist, ``KubeAccessDenied`` when the identity may not read it."""
    secret = k.find(api, "Secret", namespace, name)
    if secret is None:
        raise NotFoundError(
            f"the repository Secret {namespace}/{name} does not exist: create it (docs/real-cluster.md, step 4)"
        )
    return credentials(secret_data(secret), f"{namespace}/{name}")


def missing_key_message(url: str, namespace: str, name: str) -> str:
    """What to say when ``url`` is encrypted and Secret ``namespace/name`` holds no key."""
    return (
        f"{url} is encrypted and the repository Secret {namespace}/{name} holds no key: add its passphrase"
        f" (key {PASSWORD}) or key file (key {KEYFILE}) to the Secret (docs/real-cluster.md, step 4)"
    )
