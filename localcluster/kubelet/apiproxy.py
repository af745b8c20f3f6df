"""The in-cluster API endpoint pods see: a TLS front on loopback relaying to the emulator.

Real pods reach the API server at ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``
and trust the ``ca.crt`` of their kube-api-access volume; ``kubernetes.config.load_incluster_config()``
insists on https. The emulator speaks plain HTTP, so the kubelet terminates TLS here (a
throw-away CA and a certificate for 127.0.0.1, localhost and kubernetes.default.svc) and relays
the bytes both ways to the emulator (HTTP, watches and websocket upgrades alike). Pods get the
endpoint in their KUBERNETES_SERVICE_* variables and the CA as ``ca.crt`` (unless a
kube-root-ca.crt config map exists in their namespace: then that is what they get, as upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path
from urllib.parse import urlsplit

SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")


class ApiTlsFront:
    def __init__(self, api_url: str, directory: Path) -> None:
        target = urlsplit(api_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.directory = directory
        self.ca_pem = b""
        self.host, self.port = "127.0.0.1", 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        from localcluster.snapshot_metadata.tls import make_ca_and_cert

        material = make_ca_and_cert(SERVICE_NAMES)
        self.directory.mkdir(parents=True, exist_ok=True)
        cert, key = self.directory / "apiserver.crt", self.directory / "apiserver.key"
        cert.write_bytes(material.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(material.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.ca_pem = material.ca_pem
        self._server = await asyncio.start_server(self._relay, self.host, 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream = await asyncio.open_connection(*self.target)
            self._writers.add(upstream)
            # client -> emulator ends with the client's close (passed on as end of file); the
            # connection is over when emulator -> client ends (the emulator closed, the client vanished)
            requests = asyncio.create_task(_pipe(reader, upstream))
            try:
                await _pipe(up_reader, writer)
            finally:
                requests.cancel()
        except (OSError, ssl.SSLError):
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    w.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
