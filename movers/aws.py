"""What every AWS client of the mover shares (the S3 store, the AWS KMS key slots): one attempt per call (the
retry budget of ``movers.repo.store.retry`` is where failures are retried), timeouts, how to read a service
error, and what to tell a user whose credentials are missing.

Credentials, region and endpoint come from the standard AWS chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``AWS_REGION``, ``AWS_ENDPOINT_URL_<SERVICE>``
/ ``AWS_ENDPOINT_URL``, ``~/.aws/config`` and ``~/.aws/credentials``); whoever builds a client adds the
credentials the chain found to ``movers.redaction.KNOWN`` (``hide_credentials``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import botocore.exceptions as bce
from botocore.config import Config

from movers.redaction import KNOWN

CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary "
    "credentials), or AWS_PROFILE naming a profile in ~/.aws/credentials or ~/.aws/config"
)


CONNECT_TIMEOUT_S = 10.0  # an attempt's longest wait for a connection, with a budget of minutes or none
READ_TIMEOUT_S = 60.0  # an attempt's longest wait for an answer, likewise


def timeouts_within(
    retry_for: float, connect: float = CONNECT_TIMEOUT_S, read: float = READ_TIMEOUT_S
) -> tuple[float, float]:
    """``(connect, read)`` timeouts of one attempt under the retry budget ``retry_for``: a quarter of the budget (at
    least 1 s), at most ``connect`` and ``read``; ``retry_for=0`` (no retries): ``connect`` and ``read``. An attempt
    begun as the budget ends then overruns it by a quarter at most (``movers.repo.store.retry``)."""
    if retry_for <= 0:
        return connect, read
    share = max(1.0, retry_for / 4)
    return min(connect, share), min(read, share)


def client_config(connect_timeout: float, read_timeout: float, **options: Any) -> Config:
    """A botocore ``Config`` with botocore's own retries off (one attempt per call) and these timeouts."""
    return Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": 1, "mode": "standard"},
        **options,
    )


def is_aws_endpoint(url: str) -> bool:
    """Whether ``url`` is an AWS endpoint (else one the user configured: MinIO, moto, a proxy)."""
    host = (urlsplit(url).hostname or "").lower()
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn", ".api.aws"))


def error_code(err: bce.ClientError) -> tuple[str, int]:
    """``(error code, HTTP status)`` of a service error."""
    code = str(err.response.get("Error", {}).get("Code", ""))
    return code, int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def error_message(err: bce.ClientError) -> str:
    """The service's message of an error (``""`` when it sent none)."""
    return " ".join(str(err.response.get("Error", {}).get("Message") or "").split())


def hide_credentials(session) -> None:
    """Add the credentials ``session`` resolved (env, profile, ...) to ``KNOWN``: no log line or error shows them."""
    creds = session.get_credentials()
    if creds is not None:
        KNOWN.add(creds.access_key, creds.secret_key, creds.token)
