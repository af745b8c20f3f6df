"""Typed errors of the engine.

Every error a user can meet is a ``MoverError``: it carries a one-line user message, the CLI
exit code it maps to and whether retrying the same operation may succeed. Messages never
contain credentials or tokens.

Exit codes (documented in the README, stable):

====  ==========================================================
0     success
1     unexpected internal error (a bug: please report it)
2     bad input: arguments, extents file, device path, target device too small or full, no filesystem ``files``
      reads on the volume (or several and none chosen), a name ``files cp`` would overwrite; ``mount``:
      no FUSE here (no /dev/fuse, libfuse 3 not loadable), a mount point missing, not a directory or not empty
3     not found: repository, volume or backup does not exist, or a path in a backup's filesystem (``files``)
4     integrity: stored data does not match its hash or fails authentication
5     storage unavailable: endpoint (S3, AWS KMS) unreachable, retries exhausted
6     access denied: missing or rejected credentials, a missing or wrong repository key, or a Kubernetes
      API call refused (401/403)
7     incompatible repository: unknown format version or feature
8     CBT service error: the SnapshotMetadata stream broke its contract
9     CBT unavailable: no changed block tracking for this snapshot/base
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
EXIT_CBT_PROTOCOL = 8
EXIT_CBT_UNAVAILABLE = 9


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


class DamagedData(IntegrityError):
    """Data a backup references cannot be restored: a chunk that does not match its hash, is in no
    pack, or whose pack is missing. ``offset`` and ``length``: the range of the volume it was to
    restore (its first use); ``key``: the object holding it (None when no object does)."""

    def __init__(self, message: str, *, offset: int, length: int, key: str | None = None) -> None:
        super().__init__(message)
        self.offset, self.length, self.key = offset, length, key


class RepositoryKeyError(MoverError):
    """An encrypted repository cannot be opened: no key was given, or none of its key slots opens with the
    one given. The message names how to give a key, never the key."""

    exit_code = EXIT_ACCESS


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


class BucketNotFoundError(PermanentStoreError):
    """The bucket (so the repository) does not exist: a configuration error, exit code 3 like any
    repository that is not there."""

    exit_code = EXIT_NOT_FOUND


class AccessDeniedError(PermanentStoreError):
    """Credentials are missing, invalid or lack permission."""

    exit_code = EXIT_ACCESS


class PruneLockedError(MoverError):
    """Another prune of the repository holds its prune lock (``movers.repo.prunelock``): this one did nothing.
    Exit code 5 like an unavailable store: the repository cannot be pruned now, a later try may."""

    exit_code = EXIT_UNAVAILABLE
    retriable = True


class KubeAccessDenied(MoverError):
    """The Kubernetes API refused a call with 401 (credentials rejected) or 403 (the identity lacks the
    permission). The message carries the API's own, which names the verb, the resource and the user."""

    exit_code = EXIT_ACCESS


class PreflightError(MoverError):
    """A backup's checks before its freeze found what would make the run fail (nothing was frozen or
    created yet). The message is one line: what is wrong and how to fix it; ``exit_code`` is the cause's
    (6 a permission, 3 something missing, 2 a setting)."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CbtError(MoverError):
    """Base of errors talking to a SnapshotMetadata (changed block tracking) service."""

    exit_code = EXIT_UNAVAILABLE


class CbtUnavailableError(CbtError):
    """CBT cannot answer for this snapshot or base (FAILED_PRECONDITION, UNIMPLEMENTED, base
    NOT_FOUND, no SnapshotMetadataService): callers fall back to a scan backup. ``snapshot``: the
    snapshot looked up before CBT turned out unavailable (a ``SnapshotRef``; None when not known), which
    that scan still records."""

    exit_code = EXIT_CBT_UNAVAILABLE
    snapshot = None


class CbtBaseRejectedError(CbtUnavailableError):
    """GetMetadataDelta refused the base snapshot: INVALID_ARGUMENT (e.g. "snapshots don't belong to the
    same Volume") or NOT_FOUND (the base is gone). A backup falls back to a full one from the allocated
    blocks (GetMetadataAllocated) instead of a scan."""


class CbtAuthError(CbtError):
    """The service rejected the token (UNAUTHENTICATED / PERMISSION_DENIED). Not retriable."""

    exit_code = EXIT_ACCESS


class CbtProtocolError(CbtError):
    """The stream violated the API contract (order, overlap, type or capacity changes)."""

    exit_code = EXIT_CBT_PROTOCOL


class CbtRequestError(CbtError):
    """The service rejected the request (INVALID_ARGUMENT, OUT_OF_RANGE)."""

    exit_code = EXIT_USAGE


class CbtTransientError(CbtError):
    """The stream kept failing with retriable errors until the retry budget ran out."""

    exit_code = EXIT_UNAVAILABLE
    retriable = True
