"""The HTTP face of the emulator: an aiohttp application routing Kubernetes REST paths to ``Rest``.

Paths: ``/version``, ``/healthz``/``/livez``/``/readyz``, discovery (``discovery.py``),
``/openapi/v3`` (``openapi.py``), and
``/api/v1/...`` or ``/apis/GROUP/VERSION/...`` followed by ``[namespaces/NS/]PLURAL[/NAME[/SUB]]``.
Methods map to verbs as upstream (GET get/list/watch, POST create, PUT update, PATCH patch,
DELETE delete/deletecollection); a verb the type does not have is 405, an unknown path 404, and
every error is a ``Status`` body with its code.

Watches (``?watch=true``) are served by ``watch.py``.

Subresources served by other parts of the local cluster (``pods/log``, ``pods/exec`` ...) are
registered with ``Server.subresources[(plural, sub)] = handler``: an aiohttp handler
``async (request, call: Call) -> StreamResponse``; unregistered ones answer 400.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from localcluster.kubeapi import discovery, openapi, tables
from localcluster.kubeapi.audit import AuditLog
from localcluster.kubeapi.authn import ANONYMOUS, Authn
from localcluster.kubeapi.calls import Call, SubHandler
from localcluster.kubeapi.errors import ApiError, bad_request, method_not_allowed, path_not_found, unauthorized
from localcluster.kubeapi.resources import Obj, ResourceType
from localcluster.kubeapi.rest import Rest
from localcluster.kubeapi.watch import Watcher, truthy

_NS_SUBRESOURCES = ("status", "finalize")


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(obj, separators=(",", ":")).encode(),
                        content_type="application/json")  # fmt: skip


class Server:
    def __init__(self, rest: Rest, authn: Authn, *, require_auth: bool = False, audit: AuditLog | None = None,
                 bookmark_interval: float = 30.0) -> None:  # fmt: skip
        self.rest = rest
        self.authn = authn
        self.require_auth = require_auth
        self.audit = audit
        self.watcher = Watcher(rest, bookmark_interval)
        self.subresources: dict[tuple[str, str], SubHandler] = {}
        self.host = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def close_watches(self) -> None:
        """End every open watch stream (called on the server's loop before shutdown)."""
        self.watcher.close_all()

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
                multi = {k: request.query.getall(k) for k in query if len(request.query.getall(k)) > 1}
                self.audit.record(user=user_name, verb=verb, method=request.method, path=request.path,
                                  query={**query, **multi}, body=body, code=code)  # fmt: skip

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
            if truthy(q.get("watch")):
                self._allow(rt, "watch")
                return "watch", await self.watcher.serve(request, call)
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
                options.setdefault("orphanDependents", truthy(q["orphanDependents"]))
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
