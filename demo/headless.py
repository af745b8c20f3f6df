"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol on a pipe: open a page of a
single-page app, wait until it shows what is expected, read its text, click, take a PNG screenshot.

No Playwright and no WebDriver: Chromium's ``--remote-debugging-pipe`` (JSON messages ending in NUL on file
descriptors 3 and 4) and the standard library. Each ``Browser`` has its own empty profile directory, removed
with the process when it is closed. CSS transitions and animations are switched off in every page, so that a
screenshot never catches a page half faded in.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "chromium"
Strings = tuple[str, ...]
# Running as root needs --no-sandbox; the background-networking flags keep Chromium from calling home (a
# closed network refuses those connections and Chromium then delays the pages).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
NO_MOTION = """
document.addEventListener('DOMContentLoaded', () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { transition: none !important; animation: none !important; }';
  document.head.appendChild(style);
});
"""

# resolves once the web fonts are loaded and two frames were painted after that
PAINTED = "document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))))"


class BrowserError(RuntimeError):
    """Chromium is missing, died, answered with an error, or a page never showed what was expected."""


def chromium_path() -> str:
    """The ``chromium`` executable on PATH; ``BrowserError`` saying how to install it if there is none."""
    path = shutil.which(CHROMIUM)
    if path is None:
        raise BrowserError("no `chromium` on PATH: install Debian's package (apt-get install chromium)")
    return path


class Browser:
    """One headless Chromium with one page (tab) of ``width`` x ``height`` CSS pixels.

    Use as a context manager: the process and its profile directory are gone after ``close``."""

    def __init__(self, width: int = 1400, height: int = 1000, timeout: float = 30.0):
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="cbt-mover-chromium-")
        low_in, self._to_child = os.pipe()
        self._from_child, low_out = os.pipe()
        # Chromium reads commands on fd 3 and answers on fd 4. bash puts the pipes' child ends there and execs it
        # (a preexec_fn is not safe in a process with threads); the ends are moved above 9 first, so that placing
        # one cannot close the other (and dash cannot redirect fds above 9: bash, not sh)
        to_child, from_child = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (low_in, low_out))
        os.close(low_in)
        os.close(low_out)
        place = f'exec "$0" "$@" 3<&{to_child} 4>&{from_child} {to_child}<&- {from_child}>&-'
        try:
            self._proc = subprocess.Popen(
                ["/bin/bash", "-c", place, chromium_path(), *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # Chromium complains about the missing D-Bus on every start
                pass_fds=(to_child, from_child),
                start_new_session=True,
            )
        except BaseException:
            self._close_fds()
            shutil.rmtree(self._profile, ignore_errors=True)
            raise
        finally:
            os.close(to_child)
            os.close(from_child)
        self._next_id = 0
        self._buffer = b""
        self._session = None
        self._inflight: set[str] = set()
        self._last_network = time.monotonic()
        try:
            target = self.send("Target.createTarget", url="about:blank")["targetId"]
            self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            self.send("Page.enable")
            self.send("Network.enable")  # its events tell when the page's requests are done
            self.send("Page.addScriptToEvaluateOnNewDocument", source=NO_MOTION)
            self.send(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command (to the page once it is attached); its result, or ``BrowserError``."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if "method" in reply:
                self._on_event(reply)
            elif reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium exited (status {self._proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def text(self) -> str:
        """The page's visible text (``document.body.innerText``)."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def open(self, url: str, expect: Strings = (), timeout: float | None = None, absent: Strings = ()) -> str:
        """Load ``url`` and wait as ``wait_for`` does; the page's text. ``BrowserError`` naming what is missing (or
        still there) if the page does not get there within ``timeout``."""
        self._inflight.clear()  # requests of the page before are never finished now
        self.send("Page.navigate", url=url)
        return self.wait_for(expect, timeout, what=url, absent=absent)

    def wait_for(
        self, expect: Strings = (), timeout: float | None = None, what: str = "the page", absent: Strings = ()
    ) -> str:
        """Wait until the page's text contains every string of ``expect``, none of ``absent`` (placeholders such
        as "Loading") and is the same twice 0.3 s apart."""
        deadline = time.monotonic() + (timeout or self.timeout)
        before = None
        while True:
            text = self.text()
            wrong = [s for s in expect if s not in text] + [f"no {s!r}" for s in absent if s in text]
            if not wrong and text.strip() and text == before:
                return text
            if time.monotonic() > deadline:
                raise BrowserError(f"{what} never showed {wrong or 'a settled page'}; it shows: {text[:2000]!r}")
            before = text if not wrong else None
            time.sleep(0.3)

    def click(self, label: str, expect: Strings = (), timeout: float | None = None, absent: Strings = ()) -> str:
        """Click the first button, tab or link whose own text is ``label``, then wait as ``wait_for`` does."""
        clicked = self.evaluate(
            "(() => { const el = [...document.querySelectorAll('button, a, [role=tab], [tabindex]')]"
            f".find(e => e.innerText.trim() === {json.dumps(label)}); if (el) el.click(); return !!el; }})()"
        )
        if not clicked:
            raise BrowserError(f"nothing to click labelled {label!r}; the page shows: {self.text()[:2000]!r}")
        return self.wait_for(expect, timeout, what=f"the page after clicking {label!r}", absent=absent)

    def screenshot(self, path: Path, timeout: float | None = None) -> Path:
        """Write the window as PNG to ``path`` once the page is quiet: no request in flight for 0.5 s and the same
        image twice 0.3 s apart (graphs are drawn on a canvas after their data arrives, with no text to wait
        for). After ``timeout`` it writes what it has: a page that never settles is not an error here."""
        deadline = time.monotonic() + (timeout or self.timeout)
        self.wait_network_idle(deadline)
        before = None
        while True:
            self.evaluate(PAINTED)
            data = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
            if data == before or time.monotonic() > deadline:
                path.write_bytes(data)
                return path
            before = data
            time.sleep(0.3)

    def wait_network_idle(self, deadline: float, quiet: float = 0.5) -> None:
        """Wait until no request of the page has been in flight for ``quiet`` seconds (or ``deadline`` passed)."""
        while time.monotonic() < deadline:
            self._pump(min(0.1, quiet))
            if not self._inflight and time.monotonic() - self._last_network >= quiet:
                return

    def _pump(self, seconds: float) -> None:
        """Read the events Chromium sends during ``seconds``."""
        end = time.monotonic() + seconds
        while True:
            try:
                self._on_event(self._read(end))
            except BrowserError:
                if self._proc.poll() is not None:
                    raise
                return

    def _on_event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if method == "Network.requestWillBeSent":
            if params["request"]["url"].startswith(("http:", "https:")):  # blob: and data: never report finishing
                self._inflight.add(params["requestId"])
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            self._inflight.discard(params.get("requestId"))
        else:
            return
        self._last_network = time.monotonic()

    def close(self) -> None:
        """Stop Chromium (its whole process group) and remove its profile directory."""
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            try:
                self._session = None
                self.send("Browser.close")
                proc.wait(10)
            except (BrowserError, OSError, subprocess.TimeoutExpired):
                pass
        if proc is not None:
            try:
                os.killpg(proc.pid, 9)  # its renderer and zygote children too
            except ProcessLookupError:
                pass
            proc.wait()
        self._close_fds()
        shutil.rmtree(self._profile, ignore_errors=True)

    def _close_fds(self) -> None:
        for name in ("_to_child", "_from_child"):
            fd = getattr(self, name, None)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)
