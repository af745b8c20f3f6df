"""``KubeAPI``: the Kubernetes API emulator, served over HTTP on loopback from a thread of this process.

    with KubeAPI(audit_log=tmp / "audit.jsonl") as api:
        api.write_kubeconfig(tmp / "kubeconfig")
        client = kubernetes.config.new_client_from_config(str(tmp / "kubeconfig"))

Constructor settings (all keyword-only):
- ``host`` / ``port``: where to listen (default 127.0.0.1 and a free port); ``url`` after start.
  The same API is also served over TLS on another free port: ``https_url``, its CA ``ca_pem``
  (what ``write_kubeconfig`` writes by default, since kubectl sends no credentials over HTTP).
- ``crd_dir``: the upstream CRD files giving the snapshot, group snapshot and
  SnapshotMetadataService kinds their schemas (validated strictly) and printer columns; "auto"
  (default) is ``crds.default_crd_dir()``; None or an absent directory: served unvalidated.
- ``served_versions``: ``{group: versions}`` overriding what a group serves (an empty sequence
  removes the group); ``group_snapshot_versions`` is the shortcut for groupsnapshot.storage.k8s.io
  (e.g. ``("v1beta1",)`` emulates a Kubernetes 1.32 cluster).
- ``extra_crds``: more CRDs (dicts, or paths of YAML files) to serve as custom resources;
  ``extra_types``: more ``ResourceType`` definitions.
- ``token``: the admin bearer token written to kubeconfigs (random by default; its user
  ``kubernetes-admin`` is in ``system:masters``); ``require_auth``: refuse requests without a token
  (401, kube-apiserver's ``--anonymous-auth=false``); otherwise they are ``system:anonymous``.
  RBAC is always enforced (``rbac.py``); the bootstrap roles (``rbac_policy.py``) exist from start.
- ``audit_log``: a path to append one JSON line per request to (see ``audit.py``).
- ``clock``: seconds since the epoch, for timestamps and token expiry (tests move it).
- ``namespaces``: created at start (each gets its ``default`` ServiceAccount).
- ``bookmark_interval``: seconds between BOOKMARK events on idle watches that allow them.
- ``watch_history``: how many changes are kept for watches to resume from (older: 410 Expired).

The server stops on ``stop()`` / leaving the ``with`` block, ending open watches first. ``store``,
``rest`` and ``registry`` are exposed for in-process collaborators (controllers, assertions), which
are the API server itself and bypass authorization; ``authorizer`` answers ``authorize(user, attrs)``;
``issue_token`` mints service-account tokens (projected volumes); ``add_subresource`` plugs in
handlers for ``pods/log``, ``pods/exec`` and the like.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from localcluster.kubeapi import rbac_policy
from localcluster.kubeapi.audit import AuditLog
from localcluster.kubeapi.authn import Authn
from localcluster.kubeapi.builtin import builtin_types
from localcluster.kubeapi.calls import SubHandler
from localcluster.kubeapi.crds import apply_crds, default_crd_dir, load_crds
from localcluster.kubeapi.rbac import Authorizer
from localcluster.kubeapi.resources import VGS_GROUP, Registry, ResourceType
from localcluster.kubeapi.rest import Rest
from localcluster.kubeapi.server import Server
from localcluster.kubeapi.store import Store
from localcluster.kubeapi.tokens import DEFAULT_EXPIRATION, TokenIssuer

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")


class KubeAPI:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        crd_dir: str | Path | None = "auto",
        served_versions: Mapping[str, Sequence[str]] | None = None,
        group_snapshot_versions: Sequence[str] | None = None,
        extra_crds: Iterable[dict[str, Any] | str | Path] = (),
        extra_types: Iterable[ResourceType] = (),
        token: str | None = None,
        require_auth: bool = False,
        audit_log: str | Path | None = None,
        clock: Callable[[], float] = time.time,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        bookmark_interval: float = 30.0,
        watch_history: int = 100_000,
    ) -> None:
        served = dict(served_versions or {})
        if group_snapshot_versions is not None:
            served[VGS_GROUP] = tuple(group_snapshot_versions)
        self.registry = Registry(builtin_types(), served)
        self.crd_dir = default_crd_dir() if crd_dir == "auto" else (Path(crd_dir) if crd_dir else None)
        apply_crds(self.registry, load_crds(self.crd_dir))
        apply_crds(self.registry, [_crd(c) for c in extra_crds])
        for rt in extra_types:
            self.registry.add(rt)
        self.clock = clock
        self.store = Store(watch_history)
        self.rest = Rest(self.registry, self.store, clock)
        self.tokens = TokenIssuer(clock)
        self.token = token or secrets.token_urlsafe(32)
        self.authn = Authn(self.rest, self.tokens, self.token)
        self.authorizer = Authorizer(self.store, self.registry)
        self.audit = AuditLog(audit_log) if audit_log is not None else None
        self.server = Server(
            self.rest,
            self.authn,
            self.authorizer,
            require_auth=require_auth,
            audit=self.audit,
            bookmark_interval=bookmark_interval,
        )
        self._host, self._port = host, port
        self._namespaces = tuple(namespaces)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.https_url = ""
        self.ca_pem = b""

    @property
    def validating(self) -> bool:
        """Whether the CRD kinds are validated (the CRD directory was found)."""
        return any(rt.schemas for rt in self.registry.types())

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> KubeAPI:
        if self._thread is not None:
            raise RuntimeError("KubeAPI already started")
        ns_type = self.registry.get("", "namespaces")
        for ns in self._namespaces:
            if self.store.find(ns_type, "", ns) is None:
                self.rest.create(ns_type, "v1", "", {"metadata": {"name": ns}})
        rbac_policy.bootstrap(self.rest)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kubeapi", daemon=True)
        self._thread.start()
        try:
            port, tls_port = asyncio.run_coroutine_threadsafe(self._astart(), self._loop).result(30)
        except BaseException:
            self.stop()
            raise
        self.url = f"http://{self._host}:{port}"
        self.https_url = f"https://{self._host}:{tls_port}"
        self.server.host = f"{self._host}:{port}"
        return self

    async def _astart(self) -> tuple[int, int]:
        self._runner = web.AppRunner(self.server.app(), access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        ports = []
        for port, context in ((self._port, None), (0, self._tls_context())):
            sock = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, port))
            await web.SockSite(self._runner, sock, ssl_context=context).start()
            ports.append(sock.getsockname()[1])
        return ports[0], ports[1]

    def _tls_context(self) -> ssl.SSLContext:
        """A throw-away CA and a serving certificate (127.0.0.1, localhost, kubernetes.default.svc ...)."""
        from localcluster.snapshot_metadata.tls import make_ca_and_cert

        material = make_ca_and_cert(SERVICE_NAMES)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory(prefix="kubeapi-tls-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(material.cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(material.key_pem)
            context.load_cert_chain(cert, key)
        self.ca_pem = material.ca_pem
        return context

    async def _astop(self) -> None:
        self.server.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(self._astop(), loop).result(30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()
            self._loop = self._thread = self._runner = None
            if self.audit is not None:
                self.audit.close()

    def __enter__(self) -> KubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- helpers for clients and collaborators -------------------------------------------------

    def write_kubeconfig(
        self, path: str | Path, token: str | None = None, namespace: str = "default", tls: bool = True
    ) -> Path:
        """A kubeconfig (context ``localcluster``) for the ``kubernetes`` client and kubectl: the HTTPS
        endpoint and its CA (kubectl sends no credentials over plain HTTP), or ``url`` with ``tls=False``."""
        if not self.url:
            raise RuntimeError("start the KubeAPI before writing a kubeconfig")
        cluster: dict[str, Any] = {"server": self.https_url if tls else self.url}
        if tls:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "localcluster", "cluster": cluster}],
            "users": [{"name": "localcluster-admin", "user": {"token": token or self.token}}],
            "contexts": [
                {
                    "name": "localcluster",
                    "context": {"cluster": "localcluster", "user": "localcluster-admin", "namespace": namespace},
                }
            ],
            "current-context": "localcluster",
            "preferences": {},
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def issue_token(
        self,
        namespace: str,
        service_account: str,
        audiences: Sequence[str] = (),
        expiration_seconds: int = DEFAULT_EXPIRATION,
        pod: str | None = None,
    ) -> str:
        """A token as TokenRequest would give (for projected service-account token volumes)."""
        body: dict[str, Any] = {"spec": {"audiences": list(audiences), "expirationSeconds": expiration_seconds}}
        if pod is not None:
            body["spec"]["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod}
        return self.authn.token_request(namespace, service_account, body)["status"]["token"]

    def add_subresource(self, plural: str, sub: str, handler: SubHandler) -> None:
        """Serve ``PLURAL/NAME/SUB`` (e.g. pods/log) with an aiohttp handler ``async (request, call)``."""
        self.server.subresources[(plural, sub)] = handler


def _crd(value: dict[str, Any] | str | Path) -> dict[str, Any]:
    return value if isinstance(value, dict) else yaml.safe_load(Path(value).read_text())
