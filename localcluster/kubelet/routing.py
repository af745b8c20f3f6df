"""pods/log and pods/exec with several kubelets: each request goes to the kubelet of the pod's node.

The API server reaches the kubelet of ``spec.nodeName`` for these subresources. One emulator
serves one handler per subresource, so the first kubelet installs a ``NodeRouter`` and every
kubelet adds its handler under its node's name (``attach``) and removes it when it stops
(``detach``; the router goes with the last one). A pod on a node without a kubelet here, or on no
node yet, is answered by any kubelet's handler (which reports the container as waiting to start).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SubHandler = Callable[..., Any]


class NodeRouter:
    def __init__(self, api: Any) -> None:
        self.api = api
        self.handlers: dict[str, SubHandler] = {}

    def _node_of(self, namespace: str, name: str) -> str:
        pods = self.api.rest.registry.get("", "pods")
        with self.api.store.lock:
            pod = self.api.store.find(pods, namespace, name)
            return ((pod or {}).get("spec") or {}).get("nodeName") or ""

    async def __call__(self, request, call):
        handler = self.handlers.get(self._node_of(call.namespace or "", call.name or ""))
        if handler is None:
            handler = next(iter(self.handlers.values()))
        return await handler(request, call)


def attach(api: Any, sub: str, node: str, handler: SubHandler) -> None:
    current = api.server.subresources.get(("pods", sub))
    if not isinstance(current, NodeRouter):
        current = NodeRouter(api)
        api.add_subresource("pods", sub, current)
    current.handlers[node] = handler


def detach(api: Any, sub: str, node: str, handler: SubHandler) -> None:
    current = api.server.subresources.get(("pods", sub))
    if isinstance(current, NodeRouter) and current.handlers.get(node) is handler:
        del current.handlers[node]
        if not current.handlers:
            del api.server.subresources[("pods", sub)]
