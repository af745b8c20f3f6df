"""``GET pods/NAME/log``: a container's log, as the API server relays the kubelet's.

Query: ``container`` (required when the pod has several), ``follow`` (stream until the container
instance ends or the client leaves), ``previous`` (the instance before a restart), ``tailLines``,
``timestamps`` (each line prefixed with its RFC3339Nano time), ``sinceSeconds``/``sinceTime``,
``limitBytes``. Errors are the API server's: 404 for no pod, 400 for a container that is not in
the pod, has not started, or has no previous instance.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from localcluster.kubeapi.calls import Call
from localcluster.kubeapi.errors import bad_request, not_found
from localcluster.kubelet.runtime import Record, parse_record, parse_time

if TYPE_CHECKING:
    from localcluster.kubelet.cluster import Cluster
    from localcluster.kubelet.pods import PodWorker

_POLL = 0.05


class PodLookup(Protocol):
    """What the log handler needs from the kubelet (``LocalKubelet`` is one; this module does not import it): the
    API view of its pods, the worker of a pod it runs, and whether it is stopping."""

    cluster: Cluster
    stopping: bool

    def worker(self, namespace: str, name: str, uid: str | None = None) -> PodWorker | None: ...


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def pick_container(pod: dict, requested: str | None) -> str:
    """The container a log/exec request means (the API server's rules and messages)."""
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    name = pod["metadata"]["name"]
    if not requested:
        if len(names) == 1:
            return names[0]
        extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
        raise bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]{extra}"
        )
    if requested not in names + inits:
        raise bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def handler(kubelet: PodLookup):
    async def serve(request: web.Request, call: Call) -> web.StreamResponse:
        if request.method != "GET":
            raise bad_request("pods/log supports GET only")
        ns, name, q = call.namespace or "", call.name or "", call.query
        pod = kubelet.cluster.get("pods", ns, name)
        if pod is None:
            raise not_found("pods", "", name)
        cname = pick_container(pod, q.get("container"))
        worker = kubelet.worker(ns, name, pod["metadata"]["uid"])
        c = worker.container(cname) if worker is not None else None
        if worker is None or c is None:
            raise bad_request(f'container "{cname}" in pod "{name}" is waiting to start: ContainerCreating')
        with worker.lock:
            paths = list(c.logs)
            waiting = (c.state.get("waiting") or {}).get("reason", "ContainerCreating")
        previous = _truthy(q.get("previous"))
        if previous:
            if len(paths) < 2:
                raise bad_request(f'previous terminated container "{cname}" in pod "{name}" not found')
            path = paths[-2]
        elif not paths:
            raise bad_request(f'container "{cname}" in pod "{name}" is waiting to start: {waiting}')
        else:
            path = paths[-1]
        follow = _truthy(q.get("follow")) and not previous
        timestamps = _truthy(q.get("timestamps"))
        since = None
        if q.get("sinceSeconds"):
            since = time.time() - int(q["sinceSeconds"])
        elif q.get("sinceTime"):
            since = parse_time(q["sinceTime"])
        tail = int(q["tailLines"]) if q.get("tailLines") not in (None, "") else None
        limit = int(q["limitBytes"]) if q.get("limitBytes") not in (None, "") else None

        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent = 0

        def render(records: list[Record]) -> bytes:
            out = []
            for r in records:
                if since is not None and parse_time(r.time) < since:
                    continue
                out.append((r.time.encode() + b" " if timestamps else b"") + r.text())
            return b"".join(out)

        async def send(data: bytes) -> bool:
            nonlocal sent
            if limit is not None:
                data = data[: max(limit - sent, 0)]
            if data:
                await resp.write(data)
                sent += len(data)
            return limit is None or sent < limit

        try:
            with open(path, "rb") as f:
                records, rest = _complete(f.read())
                if rest:
                    f.seek(-len(rest), 1)
                if tail is not None:
                    records = _tail(records, tail)
                more = await send(render(records))
                while follow and more and not kubelet.stopping:
                    chunk = f.read()
                    if chunk:
                        records, rest = _complete(chunk)
                        if rest:
                            f.seek(-len(rest), 1)
                        more = await send(render(records))
                        continue
                    with worker.lock:
                        live = c.logs and c.logs[-1] == path and c.running
                    if not live:
                        chunk = f.read()  # what was written before the end
                        more = await send(render(_complete(chunk)[0])) if chunk else more
                        break
                    await asyncio.sleep(_POLL)
        except FileNotFoundError:  # the pod was deleted meanwhile
            pass
        except (ConnectionResetError, asyncio.CancelledError):
            return resp
        await resp.write_eof()
        return resp

    return serve


def _complete(data: bytes) -> tuple[list[Record], bytes]:
    """The records of the complete lines in ``data``, and the incomplete rest."""
    *lines, rest = data.split(b"\n")
    records = [r for r in (parse_record(line) for line in lines) if r is not None]
    return records, rest


def _tail(records: list[Record], lines: int) -> list[Record]:
    """The records of the last ``lines`` lines (a line ends with a full record, or the last record)."""
    if lines <= 0:
        return []
    ends = 0
    for i in range(len(records) - 1, -1, -1):
        if not records[i].partial or i == len(records) - 1:
            ends += 1
            if ends > lines:
                return records[i + 1 :]
    return records
