"""Kubernetes Events about the objects a run touches: what ``kubectl describe pvc`` shows after a run.

The Events are core/v1 ones as client-go's ``tools/record`` makes them (the RBAC grants ``create`` on
``events`` of the core group, nothing of ``events.k8s.io``): named ``<object name>.<unix ns in hex>`` in
the object's namespace, ``involvedObject`` the object's full reference (kind, apiVersion, namespace, name,
uid, resourceVersion, read just before), ``firstTimestamp`` = ``lastTimestamp`` (RFC 3339, seconds),
``count`` 1, ``source.component`` = ``reportingComponent`` = ``cbt-mover``. ``reason`` is UpperCamelCase
(``REASONS``), ``type`` Normal or Warning, the message at most ``MESSAGE_LIMIT`` characters (the API's limit
for an Event's note).

Events are best effort: ``post`` never raises. It returns how many were recorded and the first problem, if
any; after a refusal (401/403: the identity may not create Events) it stops, every other one would be
refused the same way. An object that no longer exists gets no Event and is no problem.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from movers.errors import NotFoundError
from movers.kube import apply
from movers.values import human_bytes

COMPONENT = "cbt-mover"
NORMAL, WARNING = "Normal", "Warning"
MESSAGE_LIMIT = 1024
REASONS = {
    "backed-up": (NORMAL, "BackedUp"),
    "backup-failed": (WARNING, "BackupFailed"),
    "restored": (NORMAL, "Restored"),
    "restore-failed": (WARNING, "RestoreFailed"),
}


@dataclass(frozen=True)
class Note:
    """One Event to record: ``what`` (a key of ``REASONS``) about the PVC ``namespace/name``."""

    namespace: str
    name: str
    what: str
    message: str
    kind: str = "PersistentVolumeClaim"


def reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ObjectReference of ``obj`` as ``ref.GetReference`` makes it."""
    md = obj["metadata"]
    ref = {"kind": obj["kind"], "apiVersion": obj["apiVersion"], "name": md["name"], "uid": md.get("uid", "")}
    if md.get("namespace"):
        ref["namespace"] = md["namespace"]
    if md.get("resourceVersion"):
        ref["resourceVersion"] = md["resourceVersion"]
    return ref


def event(obj: Mapping[str, Any], what: str, message: str, now_ns: int) -> dict[str, Any]:
    """The core/v1 Event about ``obj`` (``what``: a key of ``REASONS``) at ``now_ns`` (Unix ns)."""
    type_, reason = REASONS[what]
    ref = reference(obj)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ns // 1_000_000_000))
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{ref['name']}.{now_ns:x}", "namespace": ref.get("namespace") or "default"},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def post(api_client, notes: Iterable[Note], clock: Callable[[], int] = time.time_ns) -> tuple[int, str | None]:
    """Record ``notes``; ``(recorded, first problem or None)``. Never raises."""
    recorded, problem = 0, None
    for note in notes:
        try:
            obj = apply.get(api_client, note.kind, note.namespace, note.name)
            obj = {**obj, "kind": note.kind, "apiVersion": obj.get("apiVersion") or "v1"}
            apply.create(api_client, event(obj, note.what, note.message, clock()))
            recorded += 1
        except NotFoundError:
            continue
        except Exception as err:  # noqa: BLE001  (an Event never fails a run)
            problem = problem or str(err) or type(err).__name__
            if isinstance(err, apply.ForbiddenError):
                break
    return recorded, problem


def _pvc(volume: str) -> tuple[str, str]:
    namespace, _, name = volume.partition("/")
    return namespace, name


def backed_up(run_id: str, repo: str, rows: Iterable[Mapping[str, Any]]) -> list[Note]:
    """A Normal ``BackedUp`` on each backed-up PVC (``rows``: the backup flow's summary rows)."""
    return [
        Note(
            *_pvc(r["volume"]),
            "backed-up",
            f"{r['mode']} backup {r['backup_id']} of {r['volume']} to {repo}"
            f" ({human_bytes(r.get('changed_bytes'))} changed, run {run_id})",
        )
        for r in rows
    ]


def backup_failed(namespace: str, pvcs: Iterable[str], run_id: str, repo: str, error: str) -> list[Note]:
    """A Warning ``BackupFailed`` on each PVC the failed run was to back up."""
    return [
        Note(namespace, pvc, "backup-failed", f"backup run {run_id} of {namespace}/{pvc} to {repo} failed: {error}")
        for pvc in pvcs
    ]


def restored(namespace: str, run_id: str, repo: str, rows: Iterable[Mapping[str, Any]]) -> list[Note]:
    """A Normal ``Restored`` on each restored claim (``rows``: the restore flow's rows: pvc, volume, backup_id)."""
    return [
        Note(
            namespace,
            r["pvc"],
            "restored",
            f"restored backup {r['backup_id']} of {r['volume']} from {repo}"
            f" ({human_bytes(r.get('written_bytes'))} written, run {run_id})",
        )
        for r in rows
    ]


def restore_failed(namespace: str, pvcs: Iterable[str], run_id: str, backup: str, error: str) -> list[Note]:
    """A Warning ``RestoreFailed`` on each claim of the failed restore that exists (e.g. one to overwrite)."""
    return [
        Note(
            namespace,
            pvc,
            "restore-failed",
            f"restore run {run_id} of backup {backup} into {namespace}/{pvc} failed: {error}",
        )
        for pvc in pvcs
    ]
