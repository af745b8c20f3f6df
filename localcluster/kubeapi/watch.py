"""Watch streams: ``?watch=true`` answered as one JSON event per line.

With no ``resourceVersion`` (or "0") the current objects come first as ADDED, then the changes;
with one, the changes after it (an ERROR event carrying a 410 Status when it is older than the
store's history). A label/field-selected watch sees an object that stops matching as DELETED and
one that starts matching as ADDED, as upstream. ``timeoutSeconds`` ends the stream (default 30
minutes); ``allowWatchBookmarks`` adds BOOKMARK events every ``bookmark_interval`` idle seconds,
carrying the resourceVersion up to which every event was handled. ``close_all`` ends every
stream (server shutdown).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from localcluster.kubeapi.calls import Call
from localcluster.kubeapi.errors import ApiError, bad_request
from localcluster.kubeapi.resources import Obj
from localcluster.kubeapi.rest import Rest
from localcluster.kubeapi.selectors import parse_field_selector, parse_label_selector
from localcluster.kubeapi.store import Event

DEFAULT_TIMEOUT = 1800.0


def truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


class Watcher:
    def __init__(self, rest: Rest, bookmark_interval: float = 30.0) -> None:
        self.rest = rest
        self.bookmark_interval = bookmark_interval
        self.open: set[asyncio.Queue] = set()

    def close_all(self) -> None:
        """End every open stream (call on the server's loop)."""
        for queue in list(self.open):
            queue.put_nowait(None)

    async def serve(self, request: web.Request, call: Call) -> web.StreamResponse:
        rt, q, store = call.rt, call.query, self.rest.store
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"), rt.field_labels)
        rv_text = q.get("resourceVersion") or ""
        try:
            since = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError:
            raise bad_request(f"invalid resource version: {rv_text}") from None
        timeout = float(q.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        bookmarks = truthy(q.get("allowWatchBookmarks"))

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if call.namespace is not None and obj["metadata"].get("namespace") != call.namespace:
                return False
            return labels(obj) and fields(obj)

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        initial: list[tuple[str, Obj]] = []
        error: ApiError | None = None
        seen = [0]  # the resourceVersion up to which this watch has handled every event (for bookmarks)

        def deliver(event: Event) -> None:  # runs in the writer's thread, under the store lock
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the server's loop is closed: the watch is over
                pass

        with store.lock:
            seen[0] = since if since is not None else store.resource_version
            try:
                backlog, sub = store.subscribe(rt.key, since, deliver)
            except ApiError as err:
                error, backlog, sub = err, [], None
            if since is None and sub is not None:
                initial = [("ADDED", o) for o in store.items(rt, call.namespace) if matches(o)]
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if error is not None:
            await resp.write(json.dumps({"type": "ERROR", "object": error.status()}).encode() + b"\n")
            await resp.write_eof()
            return resp
        self.open.add(queue)
        try:
            for kind, obj in initial:
                await self._send(resp, call, kind, obj)
            for event in backlog:
                await self._send_event(resp, call, event, matches)
                seen[0] = event.rv
            deadline = loop.time() + timeout
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    wait = min(left, self.bookmark_interval) if bookmarks else left
                    event = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    if bookmarks and deadline - loop.time() > 0:
                        await self._bookmark(resp, call, seen[0])
                    continue
                if event is None:
                    break
                await self._send_event(resp, call, event, matches)
                seen[0] = event.rv
            await resp.write_eof()
        except ConnectionResetError:  # the client went away
            pass
        finally:
            self.open.discard(queue)
            if sub is not None:
                sub.close()
        return resp

    async def _send_event(self, resp: web.StreamResponse, call: Call, event: Event, matches) -> None:
        now, before = matches(event.obj), matches(event.old)
        if event.type == "ADDED":
            kind = "ADDED" if now else None
        elif event.type == "DELETED":
            kind = "DELETED" if now or before else None
        else:
            kind = "MODIFIED" if now and before else "ADDED" if now else "DELETED" if before else None
        if kind is not None:
            await self._send(resp, call, kind, event.obj)

    async def _send(self, resp: web.StreamResponse, call: Call, kind: str, obj: Obj) -> None:
        out = self.rest.to_version(call.rt, obj, call.version)
        await resp.write(json.dumps({"type": kind, "object": out}, separators=(",", ":")).encode() + b"\n")

    async def _bookmark(self, resp: web.StreamResponse, call: Call, rv: int) -> None:
        obj = {
            "kind": call.rt.kind,
            "apiVersion": call.rt.api_version(call.version),
            "metadata": {"resourceVersion": str(rv)},
        }
        await resp.write(json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n")
