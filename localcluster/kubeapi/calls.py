"""One parsed resource request (``Call``), and the type of pluggable subresource handlers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from localcluster.kubeapi.resources import ResourceType


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
