"""The HTTP face of the emulator: an aiohttp application routing Kubernetes REST paths to ``Rest``.

Paths: ``/version``, ``/healthz``/``/livez``/``/readyz``, discovery (``discovery.py``),
``/openapi/v3`` (``openapi.py``), and
``/api/v1/...`` or ``/apis/GROUP/VERSION/...`` followed by ``[namespaces/NS/]PLURAL[/NAME[/SUB]]``.
Methods map to verbs as upstream (GET get/list/watch, POST create, PUT update, PATCH patch,
DELETE delete/deletecollection); a verb the type does not have is 405, an unknown path 404, and
every error is a ``Status`` body with its code.

Watch (``?watch=true``) streams one JSON event per line: with no ``resourceVersion`` (or "0") the
current objects first as ADDED, else the events after that version (an ERROR event with a 410
Status when it is too old); a label/field-selected watch sees an object that stops matching as
DELETED and one that starts matching as ADDED; ``timeoutSeconds`` ends the stream,
``allowWatchBookmarks`` adds BOOKMARK events when idle.

Subresources served by other parts of the local cluster (``pods/log``, ``pods/exec`` ...) are
registered with ``Server.subresources[(plural, sub)] = handler``: an aiohttp handler
``async (request, call: Call) -> StreamResponse``; unregistered ones answer 400.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from localcluster.kubeapi import discovery, openapi, tables
from localcluster.kubeapi.audit import AuditLog
from localcluster.kubeapi.authn import ANONYMOUS, Authn
from localcluster.kubeapi.errors import ApiError, bad_request, method_not_allowed, path_not_found, unauthorized
from localcluster.kubeapi.resources import Obj, ResourceType
from localcluster.kubeapi.rest import Rest
from localcluster.kubeapi.selectors import parse_field_selector, parse_label_selector
from localcluster.kubeapi.store import Event

DEFAULT_WATCH_TIMEOUT = 1800.0
_NS_SUBRESOURCES = ("status", "finalize")


@dataclass
class Call:
    """One resource request, parsed."""

    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    sub: str | None
    query: dict[str, str]
    user: dict[str, Any]
    body: Any


SubHandler = Callable[[web.Request, Call], Awaitable[web.StreamResponse]]


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(obj, separators=(",", ":")).encode(),
                        content_type="application/json")  # fmt: skip


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


class Server:
    def __init__(self, rest: Rest, authn: Authn, *, require_auth: bool = False, audit: AuditLog | None = None,
                 bookmark_interval: float = 30.0) -> None:  # fmt: skip
        self.rest = rest
        self.authn = authn
        self.require_auth = require_auth
        self.audit = audit
        self.bookmark_interval = bookmark_interval
        self.subresources: dict[tuple[str, str], SubHandler] = {}
        self._watches: set[asyncio.Queue] = set()
        self.host = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def close_watches(self) -> None:
        """End every open watch stream (called on the server's loop before shutdown)."""
        for queue in list(self._watches):
            queue.put_nowait(None)

    # ---- entry ---------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        raw = await request.read()
        body: Any = None
        verb = request.method.lower()
        user_name = ANONYMOUS["username"]
        code = 500
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                    if request.method in ("POST", "PUT", "PATCH"):
                        raise bad_request("the request body is not JSON (the local cluster speaks JSON only)") from None
            bearer = request.headers.get("Authorization", "")
            token = bearer[7:].strip() if bearer.lower().startswith("bearer ") else None
            user = self.authn.user(token)
            if user is None and (self.require_auth or token):
                raise unauthorized()
            user = user or dict(ANONYMOUS)
            user_name = user["username"]
            verb, resp = await self._route(request, query, body, user)
            code = resp.status
            return resp
        except ApiError as err:
            code = err.code
            return _json(err.status(), err.code)
        finally:
            if self.audit is not None:
                self.audit.record(user=user_name, verb=verb, method=request.method, path=request.path,
                                  query=query, body=body, code=code)  # fmt: skip

    async def _route(self, request: web.Request, query: dict[str, str], body: Any, user: dict) -> tuple[str, Any]:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        registry = self.rest.registry
        if not parts or parts[0] not in ("api", "apis"):
            if parts == ["version"]:
                return "get", _json(discovery.VERSION)
            if len(parts) == 1 and parts[0] in ("healthz", "livez", "readyz"):
                return "get", web.Response(text="ok")
            if parts[:2] == ["openapi", "v3"]:
                return "get", self._openapi(request.path, parts[2:])
            raise path_not_found(request.path)
        if parts[0] == "api":
            if len(parts) == 1:
                return "get", _json(discovery.api_versions(self.host))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return "get", _json(discovery.api_group_list(registry))
            if len(parts) == 2:
                doc = discovery.api_group(registry, parts[1])
                if doc is None:
                    raise path_not_found(request.path)
                return "get", _json(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = discovery.resource_list(registry, group, version)
            if doc is None:
                raise path_not_found(request.path)
            return "get", _json(doc)
        call = self._parse(request.path, group, version, rest, query, user, body)
        return await self._dispatch(request, method, call)

    def _openapi(self, path: str, gv: list[str]) -> web.Response:
        registry = self.rest.registry
        if not gv:
            return _json(openapi.root(registry))
        doc = None
        if gv[0] == "api" and len(gv) == 2:
            doc = openapi.document(registry, "", gv[1])
        elif gv[0] == "apis" and len(gv) == 3:
            doc = openapi.document(registry, gv[1], gv[2])
        if doc is None:
            raise path_not_found(path)
        return _json(doc)

    def _parse(self, path: str, group: str, version: str, segs: list[str], query: dict[str, str], user: dict,
               body: Any) -> Call:  # fmt: skip
        namespace = None
        if len(segs) >= 3 and segs[0] == "namespaces" and segs[2] not in _NS_SUBRESOURCES:
            namespace, segs = segs[1], segs[2:]
        if len(segs) > 3:
            raise path_not_found(path)
        rt = self.rest.registry.lookup(group, version, segs[0])
        if rt is None:
            raise path_not_found(path)
        name = segs[1] if len(segs) > 1 else None
        sub = segs[2] if len(segs) > 2 else None
        if (namespace is not None and not rt.namespaced) or (rt.namespaced and name is not None and namespace is None):
            raise path_not_found(path)
        if sub is not None and sub not in rt.subresources:
            raise path_not_found(path)
        return Call(rt, version, namespace, name, sub, query, user, body)

    # ---- verbs ---------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request, method: str, call: Call) -> tuple[str, web.StreamResponse]:
        rt, q, rest = call.rt, call.query, self.rest
        ns = call.namespace or ""
        dry_run = q.get("dryRun") == "All"
        if call.sub not in (None, "status"):
            return "create" if method == "POST" else method.lower(), await self._subresource(request, method, call)
        if method == "GET" and call.name is None:
            if _truthy(q.get("watch")):
                self._allow(rt, "watch")
                return "watch", await self._watch(request, call)
            self._allow(rt, "list")
            listed = rest.list(rt, call.version, call.namespace, q)
            if tables.wants_table(request.headers.get("Accept", "")):
                items = [rest.to_version(rt, i, call.version) for i in listed["items"]]
                return "list", _json(tables.table(rt, items, listed["metadata"]["resourceVersion"], rest.clock()))
            return "list", _json(listed)
        if method == "GET":
            self._allow(rt, "get")
            obj = rest.get(rt, call.version, ns, call.name)
            if tables.wants_table(request.headers.get("Accept", "")):
                return "get", _json(tables.table(rt, [obj], obj["metadata"]["resourceVersion"], rest.clock()))
            return "get", _json(obj)
        if method == "POST" and call.name is None:
            self._allow(rt, "create")
            return "create", _json(self._create(call, dry_run), 201)
        if method == "PUT" and call.name is not None:
            self._allow(rt, "update")
            return "update", _json(rest.update(rt, call.version, ns, call.name, call.body, call.sub, dry_run))
        if method == "PATCH" and call.name is not None:
            self._allow(rt, "patch")
            ctype = request.headers.get("Content-Type", "")
            return "patch", _json(rest.patch(rt, call.version, ns, call.name, ctype, call.body, call.sub, dry_run))
        if method == "DELETE" and call.sub is None:
            options = dict(call.body) if isinstance(call.body, dict) else {}
            for key in ("propagationPolicy", "gracePeriodSeconds"):
                if key in q:
                    options.setdefault(key, q[key])
            if "orphanDependents" in q:
                options.setdefault("orphanDependents", _truthy(q["orphanDependents"]))
            if call.name is None:
                self._allow(rt, "deletecollection")
                return "deletecollection", _json(rest.delete_collection(rt, call.version, call.namespace, q, options))
            self._allow(rt, "delete")
            return "delete", _json(rest.delete(rt, call.version, ns, call.name, options, dry_run))
        raise method_not_allowed()

    @staticmethod
    def _allow(rt: ResourceType, verb: str) -> None:
        if verb not in rt.verbs:
            raise method_not_allowed(f"the server does not allow this method on the requested resource"
                                     f" ({verb} {rt.plural}.{rt.group})")  # fmt: skip

    def _create(self, call: Call, dry_run: bool) -> Obj:
        key = call.rt.key
        if key == ("authentication.k8s.io", "tokenreviews"):
            return self.authn.token_review(call.body)
        if key == ("authentication.k8s.io", "selfsubjectreviews"):
            return self.authn.self_subject_review(call.user)
        if call.rt.group == "authorization.k8s.io":
            return self.authn.access_review(call.rt.kind, call.body)
        return self.rest.create(call.rt, call.version, call.namespace or "", call.body, dry_run)

    async def _subresource(self, request: web.Request, method: str, call: Call) -> web.StreamResponse:
        key = (call.rt.plural, call.sub or "")
        if key == ("serviceaccounts", "token") and method == "POST":
            return _json(self.authn.token_request(call.namespace or "", call.name or "", call.body), 201)
        if key == ("pods", "binding") and method == "POST":
            return _json(self.rest.bind(call.namespace or "", call.name or "", call.body), 201)
        if key == ("namespaces", "finalize") and method == "PUT":
            return _json(self.rest.update(call.rt, call.version, "", call.name or "", call.body))
        handler = self.subresources.get(key)
        if handler is None:
            raise bad_request(f"{call.rt.plural}/{call.sub} is not served: nothing in the local cluster provides it"
                              " (no kubelet attached)")  # fmt: skip
        return await handler(request, call)

    # ---- watch ---------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, call: Call) -> web.StreamResponse:
        rt, q, store = call.rt, call.query, self.rest.store
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"), rt.field_labels)
        rv_text = q.get("resourceVersion") or ""
        try:
            since = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError:
            raise bad_request(f"invalid resource version: {rv_text}") from None
        timeout = float(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        bookmarks = _truthy(q.get("allowWatchBookmarks"))

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
        self._watches.add(queue)
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
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watches.discard(queue)
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
        obj = {"kind": call.rt.kind, "apiVersion": call.rt.api_version(call.version),
               "metadata": {"resourceVersion": str(rv)}}  # fmt: skip
        await resp.write(json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n")
