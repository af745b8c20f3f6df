"""Typed errors of the engine.

Every error a user can meet is a ``MoverError``: it carries a one-line user message, the CLI
exit code it maps to and whether retrying the same operation may succeed. Messages never
contain credentials or tokens.

Exit codes (documented in the README, stable):

====  ==========================================================
0     success
1     unexpected internal error (a bug: please report it)
2     bad input: arguments, extents file, target device too small
3     not found: repository, volume or backup does not exist
4     integrity: stored data does not match its hash
5     storage unavailable: endpoint unreachable, retries exhausted
6     access denied: missing or rejected credentials
7     incompatible repository: unknown format version or feature
====  ==========================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_INTEGRITY = 4
EXIT_UNAVAILABLE = 5
EXIT_ACCESS = 6
EXIT_INCOMPATIBLE = 7


class MoverError(Exception):
    """Base of all expected errors. ``str(err)`` is the one-line user message."""

    exit_code = EXIT_INTERNAL
    retriable = False


class UsageError(MoverError):
    """The caller gave input that cannot work (bad arguments, bad extents, small device)."""

    exit_code = EXIT_USAGE


class NotFoundError(MoverError):
    """A repository, volume, backup or object that was asked for does not exist."""

    exit_code = EXIT_NOT_FOUND


class IntegrityError(MoverError):
    """Stored bytes do not match their recorded hash or structure."""

    exit_code = EXIT_INTEGRITY


class IncompatibleError(MoverError):
    """The repository uses a format version or mandatory feature this reader does not know."""

    exit_code = EXIT_INCOMPATIBLE


class StoreError(MoverError):
    """Base of storage errors; stores translate vendor errors into the three below."""

    exit_code = EXIT_UNAVAILABLE


class ObjectNotFound(StoreError, NotFoundError):
    """The key does not exist in the store."""

    exit_code = EXIT_NOT_FOUND


class TransientStoreError(StoreError):
    """A failure that may go away when retried (timeouts, throttling, 5xx, connection resets)."""

    exit_code = EXIT_UNAVAILABLE
    retriable = True


class PermanentStoreError(StoreError):
    """A failure that retrying will not fix (bad bucket, malformed request, ...)."""

    exit_code = EXIT_UNAVAILABLE


class AccessDeniedError(PermanentStoreError):
    """Credentials are missing, invalid or lack permission."""

    exit_code = EXIT_ACCESS
