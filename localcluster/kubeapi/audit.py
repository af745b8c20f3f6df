"""The audit log: one JSON object per line and per request, appended to a file.

Fields: ``time`` (RFC 3339 with microseconds), ``user``, ``verb`` (get, list, watch, create, update,
patch, delete, deletecollection, or the HTTP method for non-resource paths), ``method``, ``path``,
``query`` (dict; a repeated parameter as a list), ``body`` (parsed JSON when it is JSON, else text,
or null), ``code`` (the HTTP status; 200 for a watch that started). Lines are written whole and flushed, under a lock.
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

    def record(self, *, user: str, verb: str, method: str, path: str, query: dict[str, Any], body: Any,
               code: int) -> None:  # fmt: skip
        entry = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "user": user, "verb": verb, "method": method, "path": path, "query": query, "body": body, "code": code,
        }  # fmt: skip
        line = json.dumps(entry, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
