"""An AWS KMS key that wraps a repository's master key in a key slot of kind ``kms`` (``movers.repo.keys``); the
only module that calls KMS.

Contract:

* ``KmsKey(key, source)``: the key the user named (``--kms-key``, ``CBT_MOVER_KMS_KEY``): a key id, key ARN,
  alias name (``alias/NAME``) or alias ARN; checked for its form only (``UsageError``). Nothing is called and
  boto3 is not imported until the first ``wrap`` or ``unwrap``.
* ``wrap(master, context)``: KMS ``Encrypt`` in the key's region (the ARN's; for a key id or alias the AWS
  chain's, ``AWS_REGION`` or the profile's: none is ``UsageError``); ``(ciphertext blob, key ARN)``.
* ``unwrap(blob, context, slot_key, slot)``: KMS ``Decrypt`` with ``KeyId`` = the key the user named, so KMS decrypts
  only what that key wrapped: a slot in the bucket cannot pick which key is trusted. Called in the region of the
  user's ARN, else of the slot's recorded ARN (the only region that can decrypt it).
* ``context`` (the EncryptionContext) binds the blob to its repository and slot: a slot copied to another
  repository or slot does not decrypt (KMS: InvalidCiphertextException). CloudTrail records it with each call.
* Credentials and endpoint: the AWS chain (``movers.aws``; ``AWS_ENDPOINT_URL_KMS`` or ``AWS_ENDPOINT_URL`` for
  another endpoint: a non-AWS S3 named by ``AWS_ENDPOINT_URL`` gets the KMS calls too, so name it with
  ``AWS_ENDPOINT_URL_S3`` then), with the profile the store uses; an endpoint URL with userinfo is ``UsageError``;
  a refusal from an endpoint that is not AWS's names it.
* Errors: KMS refusing (access denied, key disabled or pending deletion, not found, another key's or another
  slot's ciphertext, no or rejected credentials) is ``RepositoryKeyError`` (exit code 6); KMS unreachable,
  throttling or failing (5xx) is ``TransientStoreError`` (exit code 5), retried within ``retry_for`` seconds
  (``movers.repo.store.retry.retrying``; botocore's own retries are off). Messages name the key, the slot and
  KMS's error code and message, never a plaintext, a ciphertext or a credential.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from movers.errors import RepositoryKeyError, TransientStoreError, UsageError
from movers.redaction import has_userinfo, hide_userinfo
from movers.repo.store.retry import DEFAULT_RETRY_FOR, retrying

KMS_KEY_ENV = "CBT_MOVER_KMS_KEY"
CONTEXT_REPOSITORY, CONTEXT_SLOT = "cbt-mover-repository", "cbt-mover-key-slot"
_PARTITION_REGION = r"arn:aws[a-z-]*:kms:(?P<region>[a-z]{2}(?:-[a-z0-9]+)+):\d{12}"
KEY_ARN = re.compile(_PARTITION_REGION + r":key/(?P<id>(?:mrk-)?[0-9a-fA-F-]{32,36})")
_ALIAS_ARN = re.compile(_PARTITION_REGION + r":alias/[A-Za-z0-9/_-]{1,250}")
_KEY_ID = re.compile(r"(?:mrk-)?[0-9a-fA-F-]{32,36}|alias/[A-Za-z0-9/_-]{1,250}")
_TRANSIENT_CODES = {
    "ThrottlingException",
    "KMSInternalException",
    "DependencyTimeoutException",
    "KeyUnavailableException",
    "ServiceUnavailable",
    "InternalFailure",
    "RequestTimeout",
    "RequestTimeoutException",
}
_WHY = {
    "AccessDeniedException": "the identity may not use the key for this (it needs kms:{operation} on it)",
    "DisabledException": "the key is disabled",
    "KMSInvalidStateException": "the key is not usable in its state (pending deletion?)",
    "NotFoundException": "no such key",
    "IncorrectKeyException": "the slot was wrapped by another key",
    "InvalidCiphertextException": "the slot was not wrapped for this repository and slot (copied, or damaged)",
}


def region_of(arn: str) -> str | None:
    """The region of a KMS key or alias ARN; None for a key id or alias name."""
    found = KEY_ARN.fullmatch(arn) or _ALIAS_ARN.fullmatch(arn)
    return found["region"] if found else None


def context(repo_id: str, slot_id: str) -> dict[str, str]:
    """The EncryptionContext of a repository's key slot."""
    return {CONTEXT_REPOSITORY: repo_id, CONTEXT_SLOT: slot_id}


class KmsKey:
    """A KMS key named by the user, and the clients that call it (see the module docstring). Thread-safe."""

    kind = "kms"

    def __init__(
        self,
        key: str,
        source: str,
        *,
        profile: str | None = None,
        retry_for: float = DEFAULT_RETRY_FOR,
        connect_timeout: float = 10.0,
        read_timeout: float = 30.0,
    ) -> None:
        key = key.strip()
        if not (KEY_ARN.fullmatch(key) or _ALIAS_ARN.fullmatch(key) or _KEY_ID.fullmatch(key)):
            raise UsageError(
                f"{source} {key!r} is not an AWS KMS key: give a key id, a key ARN, alias/NAME or an alias ARN"
            )
        self.key = key
        self.source = f"{source} {key}"
        self._profile = profile
        self._retry_for = retry_for
        self._timeouts = (connect_timeout, read_timeout)  # at most: timeouts_within the retry budget
        self._lock = threading.Lock()
        self._session: Any = None
        self._clients: dict[str | None, Any] = {}

    def __repr__(self) -> str:
        return f"KmsKey({self.key!r})"

    def wrap(self, plaintext: bytes, encryption_context: dict[str, str]) -> tuple[bytes, str]:
        """``(ciphertext blob, key ARN)`` of KMS Encrypt of ``plaintext`` under this key."""
        region = region_of(self.key) or self._chain_region()
        answer = self._call(
            "Encrypt",
            region,
            f"of a new key slot with key {self.key}",
            KeyId=self.key,
            Plaintext=plaintext,
            EncryptionContext=encryption_context,
        )
        arn = str(answer["KeyId"])
        if not KEY_ARN.fullmatch(arn):
            raise RepositoryKeyError(f"AWS KMS answered Encrypt with key {self.key} by an unexpected key id {arn!r}")
        return answer["CiphertextBlob"], arn

    def unwrap(self, blob: bytes, encryption_context: dict[str, str], slot_key: str, slot: str) -> bytes:
        """The plaintext KMS Decrypt gives for ``blob`` with this key; ``slot_key``: the key ARN the slot
        records (its region), ``slot``: the slot's name for messages."""
        region = region_of(self.key) or region_of(slot_key)
        answer = self._call(
            "Decrypt",
            region,
            f"of key slot {slot} (wrapped by {slot_key}) with key {self.key}",
            KeyId=self.key,
            CiphertextBlob=blob,
            EncryptionContext=encryption_context,
        )
        return answer["Plaintext"]

    # -- clients and errors ---------------------------------------------------------------------------------

    def _chain_region(self) -> str:
        region = self._boto_session().region_name
        if not region:
            raise UsageError(f"{self.source} names no region: give the key's ARN, or set AWS_REGION")
        return region

    def _boto_session(self):
        import boto3
        import botocore.exceptions as bce

        from movers.aws import hide_credentials

        with self._lock:
            if self._session is None:
                try:
                    self._session = boto3.session.Session(profile_name=self._profile)
                except bce.ProfileNotFound:
                    raise RepositoryKeyError(
                        f"AWS profile {self._profile!r} not found in ~/.aws/config or ~/.aws/credentials"
                        f" (needed for {self.source})"
                    ) from None
                hide_credentials(self._session)
            return self._session

    def _client(self, region: str | None):
        from movers.aws import client_config, timeouts_within

        session = self._boto_session()
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                try:
                    client = session.client(
                        "kms",
                        region_name=region,
                        config=client_config(*timeouts_within(self._retry_for, *self._timeouts)),
                    )
                except ValueError as err:  # a malformed endpoint URL
                    raise UsageError(f"cannot set up an AWS KMS client for {self.source}: {err}") from None
                if has_userinfo(client.meta.endpoint_url):
                    raise UsageError(
                        f"bad AWS KMS endpoint URL {hide_userinfo(client.meta.endpoint_url)!r} (AWS_ENDPOINT_URL_KMS,"
                        " AWS_ENDPOINT_URL or the AWS config): credentials do not belong in a URL"
                    )
                self._clients[region] = client
            return client

    def _call(self, operation: str, region: str | None, doing: str, **params: Any) -> dict:
        import botocore.exceptions as bce
        from urllib3.exceptions import HTTPError as Urllib3HTTPError

        client = self._client(region)
        method = getattr(client, "encrypt" if operation == "Encrypt" else "decrypt")

        def attempt() -> dict:
            try:
                return method(**params)
            except bce.ParamValidationError:
                raise  # a bug, not a refusal
            except (bce.BotoCoreError, bce.ClientError, Urllib3HTTPError, OSError) as err:
                raise _translate(err, operation, client.meta.endpoint_url, doing) from None

        return retrying(attempt, self._retry_for)


def _translate(err: Exception, operation: str, endpoint: str, doing: str) -> Exception:
    import botocore.exceptions as bce

    from movers.aws import CREDENTIALS_HINT, error_code, error_message, is_aws_endpoint

    if isinstance(err, bce.ClientError):
        code, status = error_code(err)
        why = _WHY.get(code, "").format(operation=operation)
        detail = "; ".join(part for part in (why, error_message(err)) if part)
        said = f"{code or status}{f': {detail}' if detail else ''}"
        if code in _TRANSIENT_CODES or status >= 500 or status == 429:
            return TransientStoreError(f"AWS KMS {operation} {doing} failed at {endpoint}: {said}")
        at = "" if is_aws_endpoint(endpoint) else f" at {endpoint}"  # a custom endpoint may be the wrong service
        return RepositoryKeyError(f"AWS KMS{at} refused {operation} {doing}: {said}")
    if isinstance(err, bce.NoCredentialsError | bce.PartialCredentialsError):
        return RepositoryKeyError(f"no usable AWS credentials for AWS KMS {operation} {doing}: {CREDENTIALS_HINT}")
    return TransientStoreError(f"cannot reach AWS KMS at {endpoint} ({operation} {doing}): {type(err).__name__}: {err}")
