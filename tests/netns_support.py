"""Another machine on a private link, for the tests of what a non-loopback client sees.

    with other_machine() as link:            # skips, saying why, where namespaces are not
        server binds link.host_address       # this machine's end of the link: not loopback
        link.python("import httpx; ...")     # runs in the namespace: from link.peer_address

A network namespace joined to this one by a veth pair, addresses in a /30 of 10.251/16
that exists only between the two ends, removed on exit. It needs root (CI runs as root)
and ``ip`` (iproute2).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Link:
    namespace: str
    host_address: str
    peer_address: str

    def python(self, code: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``python -c CODE`` inside the namespace (this Python, this environment)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def connect(self, port: int) -> str:
        """From the namespace, open a TCP connection to ``host_address:port``: "connected"
        or the error's name (``ConnectionRefusedError``, ``TimeoutError``...)."""
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(({self.host_address!r}, {port}), timeout=5).close()\n"
            "    print('connected')\n"
            "except OSError as error:\n"
            "    print(type(error).__name__)\n"
        )
        done = self.python(code)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@contextmanager
def other_machine() -> Iterator[Link]:
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2): cannot make a network namespace")
    tag = f"{os.getpid() % 100000}"
    namespace, host_end, peer_end = f"peach-t{tag}", f"pch{tag}", f"pcn{tag}"
    block = (os.getpid() % 16384) * 4  # one /30 per test process
    prefix = f"10.251.{block >> 8}."
    host_address, peer_address = f"{prefix}{(block & 255) + 1}", f"{prefix}{(block & 255) + 2}"
    _ip("link", "del", host_end)  # left by a killed run of a process with this pid
    _ip("netns", "del", namespace)
    made = _ip("netns", "add", namespace)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        steps = [
            ("link", "add", host_end, "type", "veth", "peer", "name", peer_end),
            ("link", "set", peer_end, "netns", namespace),
            ("addr", "add", f"{host_address}/30", "dev", host_end),
            ("link", "set", host_end, "up"),
            ("-n", namespace, "addr", "add", f"{peer_address}/30", "dev", peer_end),
            ("-n", namespace, "link", "set", peer_end, "up"),
            ("-n", namespace, "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot link a network namespace: ip {' '.join(step)}: {done.stderr}")
        link = Link(namespace, host_address, peer_address)
        _assert_the_link_carries_tcp(link)
        yield link
    finally:
        _ip("link", "del", host_end)  # deletes both ends
        _ip("netns", "del", namespace)


def _assert_the_link_carries_tcp(link: Link) -> None:
    """A refusal seen through the link means something only if the link works."""
    with socket.create_server((link.host_address, 0)) as listener:
        port = listener.getsockname()[1]
        accepted: list[str] = []

        def accept() -> None:
            listener.settimeout(20)
            try:
                accepted.append(listener.accept()[1][0])
            except OSError:
                pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        assert link.connect(port) == "connected"
        thread.join(20)
    assert accepted == [link.peer_address], accepted
