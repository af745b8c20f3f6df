"""The HTTP face of the emulator: an aiohttp application routing Kubernetes REST paths to ``Rest``.

Paths: ``/version``, ``/healthz``/``/livez``/``/readyz``, discovery (``discovery.py``),
``/openapi/v3`` (``openapi.py``), and
``/api/v1/...`` or ``/apis/GROUP/VERSION/...`` followed by ``[namespaces/NS/]PLURAL[/NAME[/SUB]]``.
Methods map to verbs as upstream (GET get/list/watch, POST create, PUT update, PATCH patch,
DELETE delete/deletecollection); a verb the type does not have is 405, an unknown path 404, and
every error is a ``Status`` body with its code.

Watches (``?watch=true``, or a ``/watch/`` segment after the version, where a trailing NAME watches
that object) are served by ``watch.py``.

Every request is authenticated, then authorized, before anything else (so 401 and 403 come
before 400, 404 and 405, as upstream): a bearer token the emulator does not know is 401; no token
is the anonymous user (``system:anonymous``, group ``system:unauthenticated``), or 401 with
``require_auth`` (kube-apiserver's ``--anonymous-auth=false``). The request's attributes
(``rbac.request_attributes``) go to ``rbac.Authorizer``; a refusal is the upstream 403 ``Status``.
Creates, updates and patches of RBAC objects pass the escalation checks (``rbac_escalation.py``);
pods/exec, attach and portforward requested with GET (the WebSocket upgrade) also need ``create``.

Subresources served by other parts of the local cluster (``pods/log``, ``pods/exec`` ...) are
registered with ``Server.subresources[(plural, sub)] = handler``: an aiohttp handler
``async (request, call: Call) -> StreamResponse``; unregistered ones answer 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from localcluster.kubeapi import apps, discovery, openapi, rbac_escalation, tables
from localcluster.kubeapi.audit import AuditLog
from localcluster.kubeapi.authn import ANONYMOUS, Authn
from localcluster.kubeapi.calls import Call, SubHandler
from localcluster.kubeapi.errors import ApiError, bad_request, method_not_allowed, path_not_found, unauthorized
from localcluster.kubeapi.rbac import Attributes, Authorizer, Decision, forbidden, forbidden_error, request_attributes
from localcluster.kubeapi.resources import Obj, ResourceType
from localcluster.kubeapi.rest import Admit, Rest
from localcluster.kubeapi.reviews import Reviews
from localcluster.kubeapi.watch import Watcher, truthy

_NS_SUBRESOURCES = ("status", "finalize")
_CONNECT = (("pods", "exec"), ("pods", "attach"), ("pods", "portforward"))


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(obj, separators=(",", ":")).encode(), content_type="application/json"
    )


class Server:
    def __init__(
        self,
        rest: Rest,
        authn: Authn,
        authorizer: Authorizer,
        *,
        require_auth: bool = False,
        audit: AuditLog | None = None,
        bookmark_interval: float = 30.0,
    ) -> None:
        self.rest = rest
        self.authn = authn
        self.authorizer = authorizer
        self.reviews = Reviews(authorizer)
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
        bad_body = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
                bad_body = request.method in ("POST", "PUT", "PATCH")
        attrs = request_attributes(request.method, request.path, request.query)
        request_ = _Request(dict(ANONYMOUS), attrs)
        code = 500
        try:
            bearer = request.headers.get("Authorization", "")
            token = bearer[7:].strip() if bearer.lower().startswith("bearer ") else None
            user = self.authn.user(token)
            if user is None and (self.require_auth or token):
                raise unauthorized()
            request_.user = user or dict(ANONYMOUS)
            request_.decision = self.authorizer.authorize(request_.user, attrs)
            if not request_.decision.allowed:
                raise forbidden(request_.user, attrs, request_.decision.reason)
            if bad_body:
                raise bad_request("the request body is not JSON (the local cluster speaks JSON only)")
            resp = await self._route(request, query, body, request_)
            code = resp.status
            return resp
        except ApiError as err:
            code = err.code
            return _json(err.status(), err.code)
        finally:
            if self.audit is not None:
                self._record(request, query, body, code, request_)

    def _record(self, request: web.Request, query: dict[str, str], body: Any, code: int, req: _Request) -> None:
        multi = {k: request.query.getall(k) for k in query if len(request.query.getall(k)) > 1}
        authz = None
        if req.decision is not None:
            authz = {**req.attrs.record(), "allowed": req.decision.allowed, "reason": req.decision.reason}
            if req.also:
                authz["also"] = req.also
        self.audit.record(
            user=req.user["username"],
            groups=list(req.user.get("groups") or []),
            verb=req.attrs.verb,
            method=request.method,
            path=request.path,
            query={**query, **multi},
            body=body,
            code=code,
            authz=authz,
        )

    async def _route(self, request: web.Request, query: dict[str, str], body: Any, req: _Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        registry = self.rest.registry
        if not parts or parts[0] not in ("api", "apis"):
            if parts == ["version"]:
                return _json(discovery.VERSION)
            if len(parts) == 1 and parts[0] in ("healthz", "livez", "readyz"):
                return web.Response(text="ok")
            if parts[:2] == ["openapi", "v3"]:
                return self._openapi(request.path, parts[2:])
            raise path_not_found(request.path)
        if parts[0] == "api":
            if len(parts) == 1:
                return _json(discovery.api_versions(self.host))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return _json(discovery.api_group_list(registry))
            if len(parts) == 2:
                doc = discovery.api_group(registry, parts[1])
                if doc is None:
                    raise path_not_found(request.path)
                return _json(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = discovery.resource_list(registry, group, version)
            if doc is None:
                raise path_not_found(request.path)
            return _json(doc)
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
            if not rest:
                raise path_not_found(request.path)
        call = self._parse(request.path, group, version, rest, query, req.user, body)
        if watch_path:
            if call.sub is not None:
                raise path_not_found(request.path)
            if request.method != "GET":
                raise method_not_allowed()
            if call.name is not None:  # /watch/.../NAME: one object, as a metadata.name field selector
                call.query = {**call.query, "fieldSelector": f"metadata.name={call.name}"}
                call.name = None
        return await self._dispatch(request, request.method, call, req)

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

    def _parse(
        self, path: str, group: str, version: str, segs: list[str], query: dict[str, str], user: dict, body: Any
    ) -> Call:
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

    async def _dispatch(self, request: web.Request, method: str, call: Call, req: _Request) -> web.StreamResponse:
        rt, q, rest = call.rt, call.query, self.rest
        ns = call.namespace or ""
        dry_run = q.get("dryRun") == "All"
        if call.sub not in (None, "status"):
            return await self._subresource(request, method, call, req)
        admit = rbac_escalation.admit_for(self.authorizer, req.user, req.attrs, rt)
        if method == "GET" and call.name is None:
            if req.attrs.verb == "watch":
                self._allow(rt, "watch")
                return await self.watcher.serve(request, call)
            self._allow(rt, "list")
            listed = rest.list(rt, call.version, call.namespace, q)
            if tables.wants_table(request.headers.get("Accept", "")):
                items = [rest.to_version(rt, i, call.version) for i in listed["items"]]
                return _json(tables.table(rt, items, listed["metadata"]["resourceVersion"], rest.clock()))
            return _json(listed)
        if method == "GET":
            self._allow(rt, "get")
            obj = rest.get(rt, call.version, ns, call.name)
            if tables.wants_table(request.headers.get("Accept", "")):
                return _json(tables.table(rt, [obj], obj["metadata"]["resourceVersion"], rest.clock()))
            return _json(obj)
        if method == "POST" and call.name is None:
            self._allow(rt, "create")
            return _json(self._create(call, dry_run, admit), 201)
        if method == "PUT" and call.name is not None:
            self._allow(rt, "update")
            return _json(rest.update(rt, call.version, ns, call.name, call.body, call.sub, dry_run, admit))
        if method == "PATCH" and call.name is not None:
            self._allow(rt, "patch")
            ctype = request.headers.get("Content-Type", "")
            return _json(rest.patch(rt, call.version, ns, call.name, ctype, call.body, call.sub, dry_run, admit))
        if method == "DELETE" and call.sub is None:
            options = dict(call.body) if isinstance(call.body, dict) else {}
            for key in ("propagationPolicy", "gracePeriodSeconds"):
                if key in q:
                    options.setdefault(key, q[key])
            if "orphanDependents" in q:
                options.setdefault("orphanDependents", truthy(q["orphanDependents"]))
            if call.name is None:
                self._allow(rt, "deletecollection")
                return _json(rest.delete_collection(rt, call.version, call.namespace, q, options))
            self._allow(rt, "delete")
            return _json(rest.delete(rt, call.version, ns, call.name, options, dry_run))
        raise method_not_allowed()

    @staticmethod
    def _allow(rt: ResourceType, verb: str) -> None:
        if verb not in rt.verbs:
            raise method_not_allowed(
                f"the server does not allow this method on the requested resource ({verb} {rt.plural}.{rt.group})"
            )

    def _create(self, call: Call, dry_run: bool, admit: Admit | None) -> Obj:
        key = call.rt.key
        if key == ("authentication.k8s.io", "tokenreviews"):
            return self.authn.token_review(call.body)
        if key == ("authentication.k8s.io", "selfsubjectreviews"):
            return self.authn.self_subject_review(call.user)
        if key == ("authorization.k8s.io", "subjectaccessreviews"):
            return self.reviews.subject_access_review(call.body)
        if key == ("authorization.k8s.io", "selfsubjectaccessreviews"):
            return self.reviews.self_subject_access_review(call.user, call.body)
        if key == ("authorization.k8s.io", "selfsubjectrulesreviews"):
            return self.reviews.self_subject_rules_review(call.user, call.body)
        return self.rest.create(call.rt, call.version, call.namespace or "", call.body, dry_run, admit)

    async def _subresource(self, request: web.Request, method: str, call: Call, req: _Request) -> web.StreamResponse:
        key = (call.rt.plural, call.sub or "")
        if key == ("serviceaccounts", "token") and method == "POST":
            return _json(self.authn.token_request(call.namespace or "", call.name or "", call.body), 201)
        if key == ("pods", "binding") and method == "POST":
            return _json(self.rest.bind(call.namespace or "", call.name or "", call.body), 201)
        if key == ("namespaces", "finalize") and method == "PUT":
            return _json(self.rest.update(call.rt, call.version, "", call.name or "", call.body))
        if call.sub == "scale" and call.rt.key in apps.SCALABLE:
            ns, name, dry_run = call.namespace or "", call.name or "", call.query.get("dryRun") == "All"
            if method == "GET":
                return _json(self.rest.get_scale(call.rt, call.version, ns, name))
            if method == "PUT":
                return _json(self.rest.update_scale(call.rt, call.version, ns, name, call.body, None, dry_run))
            if method == "PATCH":
                ctype = request.headers.get("Content-Type", "")
                return _json(self.rest.update_scale(call.rt, call.version, ns, name, call.body, ctype, dry_run))
            raise method_not_allowed()
        if key in _CONNECT and req.attrs.verb != "create":
            self._authorize_create(req, call)
        handler = self.subresources.get(key)
        if handler is None:
            raise bad_request(
                f"{call.rt.plural}/{call.sub} is not served: nothing in the local cluster provides it"
                " (no kubelet attached)"
            )
        return await handler(request, call)

    def _authorize_create(self, req: _Request, call: Call) -> None:
        """pods/exec, attach, portforward over a WebSocket (GET) also need ``create`` (Kubernetes 1.35,
        AuthorizePodWebsocketUpgradeCreatePermission): a refusal names the pod with the authorizer's reason."""
        check = req.attrs.with_verb("create")
        decision = self.authorizer.authorize(req.user, check)
        req.also.append({**check.record(), "allowed": decision.allowed, "reason": decision.reason})
        if not decision.allowed:
            raise forbidden_error(req.attrs.api_group, req.attrs.resource, req.attrs.name, decision.reason)


@dataclass
class _Request:
    """Who asks what: the user, the request's authorization attributes and the decisions taken."""

    user: dict[str, Any]
    attrs: Attributes
    decision: Decision | None = None
    also: list[dict[str, Any]] = field(default_factory=list)
