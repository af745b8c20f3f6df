"""``pods/NAME/exec``: run a command in a running container over the websocket channel protocol.

What ``kubernetes.stream.stream(core.connect_get_namespaced_pod_exec, ...)`` and kubectl speak:
subprotocol ``v5.channel.k8s.io`` (preferred) or ``v4.channel.k8s.io``; every binary message
starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 the error channel, which carries one
``Status`` at the end: ``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the exit
code as the message of the ``ExitCode`` cause, or ``InternalError`` when the command could not
start (as the kubelet answers). v5 adds channel 255 (close): ``[255, 0]`` closes the command's
stdin. Query: ``command`` (repeated), ``container``, ``stdin``, ``stdout``, ``stderr``, ``tty``
(accepted, no terminal is allocated).

The command runs in the container's context: its mount namespace and working directory (nsenter)
under ``namespace`` isolation, the same environment and rewritten paths under ``rewrite``. It is
killed when the client goes away, after the kubelet's ``exec_timeout`` (reported as exit code 137
with a note on stderr), when the container stops, and when the kubelet stops. Before the upgrade,
errors are the API server's: 404 no pod, 400 no command, no stream, completed pod, unknown or
not running container.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from typing import TYPE_CHECKING, Protocol

from aiohttp import WSMsgType, web

from localcluster.kubeapi.calls import Call
from localcluster.kubeapi.errors import bad_request, not_found
from localcluster.kubelet.logs import PodLookup, pick_container
from localcluster.kubelet.runtime import kill_group

if TYPE_CHECKING:
    from localcluster.kubelet.sandbox import Sandbox

V4, V5 = "v4.channel.k8s.io", "v5.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


class ExecHost(PodLookup, Protocol):
    """What the exec handler needs from the kubelet (``LocalKubelet`` is one; this module does not import it): what
    the log handler needs, the sandbox that launches the command, the longest an exec may run, and the bookkeeping
    of process groups."""

    sandbox: Sandbox
    exec_timeout: float

    def track(self, pgid: int) -> None: ...

    def untrack(self, pgid: int) -> None: ...


def _flag(query, name: str) -> bool:
    value = query.get(name)
    return value is not None and value.lower() in ("1", "true", "yes")


def exit_status(code: int, argv: list[str]) -> dict:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {argv}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_error(message: str) -> dict:
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


def handler(kubelet: ExecHost):
    async def serve(request: web.Request, call: Call) -> web.StreamResponse:
        ns, name = call.namespace or "", call.name or ""
        if request.method not in ("GET", "POST"):
            raise bad_request("pods/exec supports GET and POST only")
        pod = kubelet.cluster.get("pods", ns, name)
        if pod is None:
            raise not_found("pods", "", name)
        query = request.query
        argv = query.getall("command", [])
        if not argv:
            raise bad_request("you must specify at least one command for the container")
        want_stdin, want_stdout, want_stderr = (_flag(query, k) for k in ("stdin", "stdout", "stderr"))
        if not (want_stdin or want_stdout or want_stderr):
            raise bad_request("you must specify at least 1 of stdin, stdout, stderr")
        cname = pick_container(pod, query.get("container"))
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            raise bad_request(f"cannot exec into a container in a completed pod; current phase is {phase}")
        worker = kubelet.worker(ns, name, pod["metadata"]["uid"])
        c = worker.container(cname) if worker is not None else None
        if worker is None or c is None:
            raise bad_request(f'unable to upgrade connection: container not found ("{cname}")')
        with worker.lock:
            running = c.running
            pid = c.process.pid if running and c.process is not None else 0
            env, working_dir, mapping = dict(c.env), c.working_dir, dict(c.mapping)
        if not running:
            raise bad_request(f'unable to upgrade connection: container not found ("{cname}")')
        ws = web.WebSocketResponse(protocols=(V5, V4), max_msg_size=0)
        if not ws.can_prepare(request).ok:
            raise bad_request("the local kubelet serves exec over websockets only (v4/v5.channel.k8s.io)")
        await ws.prepare(request)
        v5 = ws.ws_protocol == V5
        send_lock = asyncio.Lock()

        async def send(channel: int, data: bytes) -> None:
            if ws.closed:
                return
            async with send_lock:
                with contextlib.suppress(ConnectionResetError, RuntimeError):
                    await ws.send_bytes(bytes([channel]) + data)

        error_file = c.dir / f"exec-{uuid.uuid4().hex[:12]}.err"
        launch = kubelet.sandbox.exec(pid, error_file, argv, env, working_dir, mapping, c.user)
        proc = None
        try:
            proc = await asyncio.create_subprocess_exec(
                *launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as err:
            await send(ERROR, json.dumps(internal_error(str(err))).encode())
            await ws.close()
            return ws
        kubelet.track(proc.pid)
        c.exec_groups.add(proc.pid)

        async def pump(reader: asyncio.StreamReader, channel: int, wanted: bool) -> None:
            while chunk := await reader.read(32768):
                if wanted:
                    await send(channel, chunk)

        async def feed() -> None:
            """The client's messages: stdin data, v5 close of stdin; the end of the connection."""
            stdin = proc.stdin
            async for msg in ws:
                if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                    continue
                data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                if not data:
                    continue
                if data[0] == STDIN and stdin is not None and len(data) > 1:
                    with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                        stdin.write(data[1:])
                        await stdin.drain()
                elif data[0] == CLOSE and v5 and data[1:2] == bytes([STDIN]) and stdin is not None:
                    stdin.close()
            # the client went away: nothing will read what the command writes
            kill_group(proc.pid, signal.SIGKILL)

        assert proc.stdout is not None and proc.stderr is not None
        pumps = [
            asyncio.create_task(pump(proc.stdout, STDOUT, want_stdout)),
            asyncio.create_task(pump(proc.stderr, STDERR, want_stderr)),
        ]
        feeder = asyncio.create_task(feed())
        timed_out = False
        try:
            try:
                code = await asyncio.wait_for(proc.wait(), kubelet.exec_timeout)
            except TimeoutError:
                timed_out = True
                kill_group(proc.pid, signal.SIGKILL)
                code = await proc.wait()
            kill_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pumps, return_exceptions=True), 2.0)
            code = code if code >= 0 else 128 - code
            if timed_out:
                await send(STDERR, f"exec timed out after {kubelet.exec_timeout:g}s: killed\n".encode())
            start_error = error_file.read_text() if error_file.exists() else ""
            status = internal_error(start_error) if start_error else exit_status(code, argv)
            await send(ERROR, json.dumps(status).encode())
            await ws.close()
        finally:
            for task in [*pumps, feeder]:
                task.cancel()
            if proc.returncode is None:
                kill_group(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await proc.wait()
            kubelet.untrack(proc.pid)
            c.exec_groups.discard(proc.pid)
            error_file.unlink(missing_ok=True)
        return ws

    return serve
