"""Loopback HTTP servers that stand between a store and S3, for tests of what a store sends and how it
copes with answers moto never gives.

* ``S3Proxy(upstream, answer)``: forwards every request to ``upstream`` (the moto server) and records
  it in ``requests``; ``answer(request)`` may instead return ``(status, error code)``, which the
  proxy sends as an S3 XML error without forwarding (as a JSON protocol error to a request naming its
  operation in ``X-Amz-Target``, such as AWS KMS's ``TrentService.Decrypt``: ``Request.target``).
  ``ignore_conditions=True`` makes it an S3 without conditional writes (as s3rver is): it drops the
  ``If-None-Match`` header before forwarding, so a conditional write overwrites like a plain one.
* ``SilentServer()``: accepts connections and never answers a byte (a hung endpoint); ``accepted``
  counts the connections.

Both are context managers that stop their thread and close every socket on exit.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "upgrade", "proxy-connection"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-case names

    @property
    def target(self) -> str | None:
        """The operation of a JSON protocol request (KMS: ``TrentService.Decrypt``), else None."""
        return self.headers.get("x-amz-target")

    @property
    def conditional(self) -> bool:
        return self.headers.get("if-none-match") == "*"


class S3Proxy:
    def __init__(
        self,
        upstream: str,
        answer: Callable[[Request], tuple[int, str] | None] = lambda _r: None,
        ignore_conditions: bool = False,
    ) -> None:
        self.upstream = urlsplit(upstream)
        self.answer = answer
        self.dropped = _HOP_BY_HOP | ({"if-none-match"} if ignore_conditions else set())
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3proxy", daemon=True)
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> S3Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def seen(self, method: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == method]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and "100 Continue" for botocore's Expect header

            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
                with proxy._lock:
                    proxy.requests.append(request)
                canned = proxy.answer(request)
                if canned is not None:
                    status, code = canned
                    if request.target:
                        doc = json.dumps({"__type": code, "message": "from the test proxy"}).encode()
                        self._reply(status, [("Content-Type", "application/x-amz-json-1.1")], doc)
                        return
                    xml = f"<Error><Code>{code}</Code><Message>from the test proxy</Message></Error>".encode()
                    self._reply(status, [("Content-Type", "application/xml")], xml)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in proxy.dropped}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP | {"content-length"}]
                    length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                    self._reply(resp.status, kept, data, length)
                finally:
                    conn.close()

            def _reply(self, status: int, headers, body: bytes, length: str | None = None) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", length if length is not None else str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        return Handler


class SilentServer:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.endpoint_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _addr = self._listener.accept()
            except TimeoutError:
                continue
            self._held.append(conn)  # read nothing, answer nothing

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()
        for conn in self._held:
            conn.close()
