"""A headless Chromium for tests, driven through the DevTools protocol over a pipe.

``--remote-debugging-pipe``: the browser reads commands on its file descriptor 3 and writes
replies and events on 4, each one JSON message ended by a NUL byte. No port is opened (no
other process on the machine can drive the browser), no driver binary sits in between, and
nothing beyond the standard library is needed — the lightest way to a real browser.

    with Browser.start(tmp_path) as browser:
        page = browser.open(url)
        page.wait_for("document.title", "a title")
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from waiting import poll

NAMES = ("chromium", "chromium-browser")
"""Debian's package installs ``chromium`` (`.ci/run` installs it)."""
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
COMMAND_TIMEOUT_S = 30.0
ON_3_AND_4 = """
import fcntl, os, sys
ends = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3]]
for fd in sys.argv[1:3]:
    os.close(int(fd))
os.dup2(ends[0], 3)
os.dup2(ends[1], 4)
os.closerange(5, 1 << 16)
os.execv(sys.argv[3], sys.argv[3:])
"""
"""Exec the browser with the two pipe ends given as arguments on 3 and 4 (a small Python
trampoline: no ``preexec_fn``, which is unsafe in a process with threads, and no shell,
whose redirections stop at fd 9)."""


def find_chromium() -> str | None:
    """The path of a Chromium on this machine, or None."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(AssertionError):
    """The browser answered a command with an error, or a page's script threw."""


class Browser:
    """A running headless Chromium and its pipe."""

    def __init__(self, process: subprocess.Popen[bytes], to_browser: int, from_browser: int):
        self.process = process
        self._out = to_browser
        self._in = from_browser
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        """Every event received, in order (``method``, ``params``, ``sessionId``)."""

    @classmethod
    def start(cls, binary: str, profile: Path, log: Path, *flags: str) -> Browser:
        """Start ``binary`` headless with a new profile in ``profile`` (and ``flags``); its
        stderr goes to ``log``."""
        commands_r, commands_w = os.pipe()
        replies_r, replies_w = os.pipe()
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-c", ON_3_AND_4, str(commands_r), str(replies_w)]
                + [binary, *FLAGS, *flags, f"--user-data-dir={profile}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(commands_r, replies_w),
                start_new_session=True,
            )
        os.close(commands_r)
        os.close(replies_w)
        return cls(process, commands_w, replies_r)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.command("Browser.close", timeout_s=5)
            except (BrowserError, OSError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its session: every process
                self.process.wait()
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass

    def command(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Send one command and return its result (events that come first are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _receive(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._in], [], [], max(left, 0))
            if not ready:
                raise BrowserError(f"no answer to {waiting_for} in time")
            data = os.read(self._in, 1 << 16)
            if not data:
                raise BrowserError(f"the browser exited (exit code {self.process.poll()})")
            self._buffer += data
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def open(self, url: str) -> Page:
        """A new tab at ``url``, its scripts' exceptions recorded."""
        target = self.command("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.command("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, attached["sessionId"])
        page.command("Runtime.enable")
        page.command("Page.enable")
        page.goto(url)
        return page


class Page:
    """One tab: navigate, evaluate, wait, type."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def command(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.command(method, params, session=self.session)

    def goto(self, url: str) -> None:
        """Load ``url`` and wait until its document and deferred scripts have run."""
        self.command("Page.navigate", {"url": url})
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'",
            f"{url} to load",
        )

    def reload(self) -> None:
        """Reload the page and wait until the new document's deferred scripts have run."""
        self.evaluate("window.__before_reload = true")
        self.command("Page.reload", {"ignoreCache": True})
        self.wait_for(
            "!window.__before_reload && document.readyState === 'complete'", "the page to reload"
        )

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.command(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float = 20.0) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        return poll(lambda: self.evaluate(expression), what, timeout_s, tolerate=())

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element ``selector`` and type ``text`` as the keyboard does."""
        focused = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.focus(); return document.activeElement === e; })()"
        )
        assert focused, f"nothing to type into at {selector}"
        self.command("Input.insertText", {"text": text})

    def press_enter(self) -> None:
        """Enter on the focused element (a form's input submits its form)."""
        key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        self.command("Input.dispatchKeyEvent", {"type": "keyDown", "text": "\r", **key})
        self.command("Input.dispatchKeyEvent", {"type": "keyUp", **key})

    def exceptions(self) -> list[str]:
        """What the page's scripts threw (and did not catch) so far."""
        return [
            event["params"]["exceptionDetails"].get("text", "")
            + " "
            + str(event["params"]["exceptionDetails"].get("exception", {}).get("description", ""))
            for event in self.browser.events
            if event.get("method") == "Runtime.exceptionThrown"
            and event.get("sessionId") == self.session
        ]
