"""The dev server is a local service (SPEC §6): who may send it requests at all.

``LocalService`` wraps the gateway (an ASGI app) and answers ``403`` before the gateway
sees a request when

- its ``Host`` is not an address the server listens on, a loopback name (``127.0.0.1``,
  ``localhost``, ``[::1]``) or a host given with ``--allow-host``: ``forbidden_host``. A
  web page on ``rebind.attacker.example`` whose name now resolves to 127.0.0.1 (DNS
  rebinding) sends its own name as Host, so it is refused;
- it has an ``Origin`` (a browser sends one with every cross-site POST, and with ``fetch``)
  that is not a loopback origin, nor one given with ``--allow-origin``, nor the origin of
  the request's own (allowed) ``Host`` — a page this server served, such as
  ``/_peach/docs`` opened under an ``--allow-host`` name: ``forbidden_origin``. A page of
  another site cannot drive endpoints or ``/_peach/*``, not even with a "simple"
  text/plain POST;
- it says, by Fetch Metadata, that a page of another origin sent it (``Sec-Fetch-Site:
  cross-site`` or ``same-site``: an ``<img>``, a ``<script>``, a no-cors ``fetch``, a
  navigation — which carry no ``Origin``) and neither its ``Origin`` nor, without one, its
  ``Referer``'s origin is allowed as above: ``forbidden_origin``. ``same-origin``,
  ``none`` (typed, bookmarked) and no such header (curl, scripts, peach's tools) pass;
- it is for ``/_peach/*`` from a peer that is not on loopback, whatever ``--host`` says:
  ``forbidden``.

The answer is the contract's error answer (its envelope), and the refusal is logged and
counted (``/_peach/metrics``) as any request is, by ``on_refusal`` (``DevGateway.log``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from peach_cli.addresses import is_loopback
from peach_cli.internal import is_internal
from peach_cli.runtime import contract
from peach_cli.runtime.contract import HttpReply

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARDS = ("0.0.0.0", "::", "")
OTHER_SITES = frozenset(("cross-site", "same-site"))
"""``Sec-Fetch-Site`` values of a request a page of another origin made."""


def host_name(value: str) -> str:
    """The host of a ``Host`` header (or ``--allow-host``) value, without port, lowercase.

    A value that is not ``host[:port]`` is kept whole, so that it names no host this server
    answers to (``[::1].evil.com`` is not ``::1``).

    >>> host_name("LocalHost:8000"), host_name("[::1]:8000"), host_name("::1"), host_name("a.")
    ('localhost', '::1', '::1', 'a')
    >>> host_name("[::1].evil.com"), host_name("[::1]x"), host_name("127.0.0.1:x")
    ('[::1].evil.com', '[::1]x', '127.0.0.1:x')
    >>> host_name("localhost:\N{SUPERSCRIPT TWO}"), host_name("localhost:"), host_name("[::1]:")
    ('localhost:²', 'localhost', '::1')
    """
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        port = text[end + 1 :]
        if end > 0 and (not port or _is_port(port)):
            return text[1:end]
        return text
    if text.count(":") == 1:
        name, port = text.split(":", 1)
        if not _is_port(":" + port):
            return text
        text = name
    return text.rstrip(".")


def _is_loopback_name(name: str) -> bool:
    """Whether ``name`` (from ``host_name``) is a loopback address; one still in brackets
    is a value ``host_name`` kept whole (``[[::1]]``), not an address."""
    return "[" not in name and is_loopback(name)


def _is_port(text: str) -> bool:
    """Whether ``text`` is ``:`` and a port (which may be empty, RFC 3986 §3.2.3)."""
    digits = text[1:]
    return text[:1] == ":" and (not digits or (digits.isascii() and digits.isdigit()))


def origin_key(value: str) -> str:
    """An origin as compared: ``scheme://host[:port]``, lowercase, no trailing slash."""
    return value.strip().lower().rstrip("/")


class FetchSite:
    """A request's ``Sec-Fetch-Site`` when it names another origin (``OTHER_SITES``), and
    its ``Referer``: what says which page sent a request that has no ``Origin``."""

    __slots__ = ("value", "referer")

    def __init__(self, value: str, referer: str | None) -> None:
        self.value = value
        self.referer = referer

    @classmethod
    def of(cls, value: bytes | None, referer: bytes | None) -> FetchSite | None:
        """The metadata of a request whose ``Sec-Fetch-Site`` is ``value``, or None when it
        names no other origin (``same-origin``, ``none``, absent).

        >>> FetchSite.of(b"same-origin", None), FetchSite.of(None, b"http://x/")
        (None, None)
        >>> FetchSite.of(b"Cross-Site", b"http://a.test:81/p?q").referer_origin()
        'http://a.test:81'
        """
        if value is None:
            return None
        text = value.decode("latin-1").strip().lower()
        if text not in OTHER_SITES:
            return None
        return cls(text, None if referer is None else referer.decode("latin-1"))

    def referer_origin(self) -> str | None:
        """The origin (``scheme://host[:port]``) of the ``Referer``, or None without one
        (or one that names no web origin)."""
        if self.referer is None:
            return None
        try:
            parts = urlsplit(self.referer.strip())
        except ValueError:
            return None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return None
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def request_sources(
    headers: Iterable[tuple[bytes, bytes]],
) -> tuple[str | None, str | None, FetchSite | None]:
    """A request's first ``Host``, first ``Origin`` and its Fetch Metadata (``FetchSite``):
    what ``LocalService.refusal_of`` judges, read from its headers the same way on every
    path (the fast lane reads them with this too)."""
    host = origin = None
    site = referer = None
    for name, value in headers:
        size = len(name)
        if size in (4, 6, 7, 14):
            name = name.lower()
            if name == b"host":
                if host is None:
                    host = value.decode("latin-1")
            elif name == b"origin":
                if origin is None:
                    origin = value.decode("latin-1")
            elif name == b"referer":
                if referer is None:
                    referer = value
            elif name == b"sec-fetch-site" and site is None:
                site = value
    return host, origin, FetchSite.of(site, referer)


class LocalService:
    """ASGI middleware: the Host, Origin and loopback-peer checks of SPEC §6."""

    def __init__(
        self,
        app: Any,
        *,
        listen_host: str,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
        on_refusal: Callable[[str, str, None, HttpReply, float], None] | None = None,
    ) -> None:
        self.app = app
        self.on_refusal = on_refusal
        """Logs and counts a refusal: ``(method, path, None, reply, started)`` (no
        endpoint took it), as ``DevGateway.log`` does any answered request."""
        hosts = {*LOOPBACK_NAMES, *(host_name(h) for h in allow_hosts)}
        if host_name(listen_host) not in _WILDCARDS:
            hosts.add(host_name(listen_host))
        self.hosts = frozenset(hosts)
        self.origins = frozenset(origin_key(o) for o in allow_origins)
        self._seen: dict[str, bool] = {}
        """``Host`` values already judged by ``host_allowed``."""

    def host_allowed(self, value: str | None) -> bool:
        if value is None:
            return False
        allowed = self._seen.get(value)
        if allowed is None:  # every request asks: the few values a server sees are kept
            name = host_name(value)
            allowed = name in self.hosts or _is_loopback_name(name)
            if len(self._seen) < 64:  # a flood of made-up names is not
                self._seen[value] = allowed
        return allowed

    def origin_allowed(self, value: str, host: str | None = None) -> bool:
        """Whether a request with the ``Origin`` ``value`` is answered; ``host`` is its
        ``Host``, already allowed: a page of this very server (same origin) is."""
        key = origin_key(value)
        if key in self.origins or (host is not None and key == f"http://{host.strip().lower()}"):
            return True
        try:
            parts = urlsplit(value.strip())
        except ValueError:
            return False
        authority = parts.netloc.rpartition("@")[2]  # read as a Host value is
        return parts.scheme in ("http", "https") and _is_loopback_name(host_name(authority))

    def refusal(self, scope: dict[str, Any]) -> tuple[str, str] | None:
        """``(code, message)`` of why this request is refused, or None."""
        host, origin, site = request_sources(scope.get("headers", ()))
        client = scope.get("client")
        return self.refusal_of(
            host, origin, scope.get("path", ""), client[0] if client else None, site
        )

    def refusal_of(
        self,
        host: str | None,
        origin: str | None,
        path: str,
        client: str | None,
        site: FetchSite | None = None,
    ) -> tuple[str, str] | None:
        """``refusal`` from the request's first ``Host`` and ``Origin``, its path, its
        peer's address and its Fetch Metadata (``site``, when it names another origin)."""
        if not self.host_allowed(host):
            shown = "no Host header" if host is None else f"Host {host!r}"
            return "forbidden_host", (
                f"{shown} is not an address of this server (start peach dev with "
                "--allow-host NAME to accept it)"
            )
        if origin is not None and not self.origin_allowed(origin, host):
            return "forbidden_origin", (
                f"requests from the web origin {origin!r} are refused (start peach dev with "
                "--allow-origin ORIGIN to accept it)"
            )
        if site is not None and origin is None:  # an allowed Origin was judged above
            sender = site.referer_origin()
            if sender is None or not self.origin_allowed(sender, host):
                shown = "a page of another origin" if sender is None else repr(sender)
                return "forbidden_origin", (
                    f"requests from {shown} (Sec-Fetch-Site: {site.value}) are refused "
                    "(start peach dev with --allow-origin ORIGIN to accept it)"
                )
        if is_internal(path):
            if not is_loopback(client):
                where = "/".join(path.split("/")[:3])
                return "forbidden", f"{where} is for loopback clients"
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        reply = contract.answer_reply(contract.error_answer(*refused))
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": reply.headers}
        )
        await send({"type": "http.response.body", "body": reply.body})
        if self.on_refusal is not None:
            self.on_refusal(scope.get("method", "?"), scope.get("path", ""), None, reply, started)
