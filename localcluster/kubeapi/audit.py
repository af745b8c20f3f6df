"""The audit log: one JSON object per line and per request, appended to a file.

Fields:
- ``time``: RFC 3339 with microseconds;
- ``user``: the user name (``kubernetes-admin``, ``system:serviceaccount:NS:NAME``,
  ``system:anonymous``); ``groups``: the user's groups (``system:masters``,
  ``system:serviceaccounts``, ``system:serviceaccounts:NS``, ``system:authenticated`` ...);
- ``verb``: the authorization verb (get, list, watch, create, update, patch, delete,
  deletecollection; the lower-case HTTP method for non-resource paths);
- ``method``, ``path``, ``query`` (dict; a repeated parameter as a list), ``body`` (parsed JSON when
  it is JSON, else text, or null), ``code`` (the HTTP status; 200 for a watch that started);
- ``authz``: the authorization of the request, null when it was not authenticated (401):
  ``verb``, ``apiGroup``, ``resource``, ``subresource``, ``namespace``, ``name`` (for a list or watch
  with a ``metadata.name`` field selector, that name), ``path``, ``resourceRequest`` (false for
  non-resource paths such as /version or discovery), ``allowed`` and ``reason`` (the authorizer's:
  "RBAC: allowed by ..." or empty; members of system:masters are allowed with no reason), and
  ``also``: further checks the request needed, each with the same fields (the ``create`` check of
  a pods/exec, attach or portforward WebSocket request).

Replaying every entry's ``authz`` (verb, apiGroup, resource/subresource, namespace, name or path)
against a set of roles tells which calls those roles grant and which grants no call used.
Lines are written whole and flushed, under a lock.
"""

from __future__ import annotations

import datetime
import json
import threading
from pathlib import Path
from typing import Any


class AuditLog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8")

    def record(
        self,
        *,
        user: str,
        verb: str,
        method: str,
        path: str,
        query: dict[str, Any],
        body: Any,
        code: int,
        groups: list[str] | None = None,
        authz: dict[str, Any] | None = None,
    ) -> None:
        entry = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "user": user,
            "groups": list(groups or []),
            "verb": verb,
            "method": method,
            "path": path,
            "query": query,
            "body": body,
            "code": code,
            "authz": authz,
        }
        line = json.dumps(entry, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
