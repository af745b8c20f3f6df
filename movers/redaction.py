"""Keeping credentials out of what the mover prints: log records, error lines, reprs.

Contract:

* ``Redactor(*secrets)`` replaces, in any text, each known secret value (4 characters or more; also
  its URL-encoded and base64 forms) with ``***``, and masks whatever the text carries without the
  values being known: the value of an ``Authorization`` header, of credential headers and query
  parameters (``X-Amz-Security-Token``, ``X-Amz-Credential``, ``X-Amz-Signature``, ``Credential=``,
  ``Signature=``, session tokens, secret and access keys, passwords) and the userinfo of URLs
  (``scheme://user:pass@host`` -> ``scheme://***@host``). Its repr shows no value.
* ``KNOWN`` is the process's redactor: whoever resolves a credential adds it (the S3 store adds the
  keys and token the AWS chain found; ``movers.logsetup`` adds ``SECRET_ENV_VARS``' values).
* ``RedactingFilter(redactor)`` on a handler rewrites every record it passes (message with its
  arguments, traceback text, stack) through the redactor.
* ``has_userinfo(url)`` is the one rule for URLs the user gives (``--repo``, ``--s3-endpoint``,
  ``AWS_ENDPOINT_URL``): credentials in a URL are refused (they would be in argv, logs and errors),
  and ``hide_userinfo`` is how such a URL is shown in the refusal.
"""

from __future__ import annotations

import base64
import logging
import re
from urllib.parse import quote, quote_plus, urlsplit

SECRET_ENV_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "CBT_MOVER_PASSWORD",
    "CBT_MOVER_NEW_PASSWORD",
)
MIN_SECRET_LENGTH = 4  # shorter values are skipped: replacing them would garble text, not protect anything

_USERINFO = re.compile(r"//[^/\s'\"]*@")
_AUTHORIZATION = re.compile(r"(authorization['\"]?\s*[:=]\s*(?-i:b)?['\"]?)[^'\"\n]*", re.I)
_FIELD_NAME = (
    r"(?:security[-_]token|session[-_]token|credential|signature|secret[-_]access[-_]key|access[-_]key[-_]id"
    r"|password|passphrase)"
)
# a quoted value after the name (dict reprs, protobuf text), or a bare one glued to it (headers in a
# canonical request, query parameters); prose such as "no password: set ..." matches neither
_QUOTED_FIELD = re.compile("(" + _FIELD_NAME + r"""['"]?\s*[:=]\s*(?-i:b)?['"])[^'"\n]*""", re.I)
_BARE_FIELD = re.compile("(" + _FIELD_NAME + r"""[:=]\n?)[^\s'",&;})>]+""", re.I)


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries ``user[:password]@`` before its host."""
    try:
        return "@" in urlsplit(url.strip()).netloc
    except (ValueError, AttributeError):
        return bool(_USERINFO.search(str(url)))


def hide_userinfo(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub("//***@", text)


class Redactor:
    """Replaces known secret values and credential-carrying fields in text (see the module's contract)."""

    __slots__ = ("_values",)

    def __init__(self, *secrets: str | None) -> None:
        self._values: tuple[str, ...] = ()
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        """Also redact these values (None and short ones are ignored); safe to call from any thread."""
        new = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET_LENGTH:
                new |= {secret, quote(secret), quote(secret, safe=""), quote_plus(secret)}
                new.add(base64.b64encode(secret.encode()).decode())
        self._values = tuple(sorted(new | set(self._values), key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, "***")
        text = _AUTHORIZATION.sub(r"\1***", text)
        text = _QUOTED_FIELD.sub(r"\1***", text)
        text = _BARE_FIELD.sub(r"\1***", text)
        return hide_userinfo(text)

    def __repr__(self) -> str:
        return "<redacted>"


KNOWN = Redactor()


class RedactingFilter(logging.Filter):
    """A handler filter: each record leaves with its message (arguments merged in), traceback and
    stack redacted; it drops nothing."""

    _formatter = logging.Formatter()

    def __init__(self, redactor: Redactor = KNOWN) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001  (arguments that do not fit the format: never print them)
            message = f"{record.msg} (with arguments that do not fit it)"
        record.msg, record.args = self.redactor(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        return True
