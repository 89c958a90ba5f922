"""The HTTP side of `peach ask`: send an AskRequest, read the answer or its stream.

Everything httpx can raise is translated at one boundary (``translate_error``) into one of
the exceptions below, each with its own exit code; the CLI renders them::

    ClientError                 exit 3   (peach_cli.errors) `peach ask` could not get an answer
    ├── ServerUnreachable       exit 3   connection refused: nothing listens there
    ├── HostNotFound            exit 4   the host name does not resolve (DNS)
    ├── TLSFailed               exit 5   TLS handshake or certificate verification failed
    ├── RequestTimedOut         exit 6   no connection, or no data for longer than the timeout
    ├── ResponseCut               exit 7   the server closed the connection before the end
    ├── EndpointNotFound        exit 8   404: no endpoint at that url
    ├── BadResponse             exit 9   the answer is not valid HTTP, or the connection broke
    └── EndpointFailed          exit 1   the endpoint answered with an error (envelope or 4xx/5xx)

Timeouts are explicit: ``connect`` bounds the connection, ``read`` is the longest allowed
gap between two pieces of data — not a total, so a stream may run as long as it keeps
sending.
"""

from __future__ import annotations

import difflib
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from peach_cli.client.items import DEFAULT_TIMEOUT_S, AskRequest
from peach_cli.errors import ClientError
from peach_cli.internal import ROUTES_PATH

CONNECT_TIMEOUT_S = 10.0


class ServerUnreachable(ClientError):
    """Connection refused: nothing is listening at that address."""

    exit_code = 3


class HostNotFound(ClientError):
    """The host name does not resolve."""

    exit_code = 4


class TLSFailed(ClientError):
    """The TLS handshake or the certificate check failed."""

    exit_code = 5


class RequestTimedOut(ClientError):
    """No connection in time, or no data for longer than the allowed gap."""

    exit_code = 6


class ResponseCut(ClientError):
    """The server closed the connection before the response was complete."""

    exit_code = 7


class EndpointNotFound(ClientError):
    """404: there is no endpoint at that url."""

    exit_code = 8


class BadResponse(ClientError):
    """The server's answer is not valid HTTP, or the connection broke before it."""

    exit_code = 9


class EndpointFailed(ClientError):
    """The endpoint answered with an error: a peach error envelope or a 4xx/5xx status."""

    exit_code = 1

    def __init__(
        self, message: str, *, code: str | None = None, status: int = 0, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.code = code
        self.status = status


EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (1, "the endpoint answered with an error (its code and message are printed)"),
    (2, "bad command line"),
    (3, "cannot connect: nothing is listening there (is `peach dev` running?)"),
    (4, "the host name does not resolve"),
    (5, "TLS handshake or certificate verification failed"),
    (6, "timed out: no connection, or no data for longer than --timeout"),
    (7, "the server cut the stream before its end"),
    (8, "404: no endpoint at that url (peach dev lists its endpoints)"),
    (9, "the server's answer is not valid HTTP"),
    (130, "interrupted (Ctrl-C); what was printed is kept"),
)


# --------------------------------------------------------------------------- errors


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _address(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def translate_error(
    error: httpx.HTTPError | httpx.InvalidURL, *, url: str, timeout_s: float, in_body: bool
) -> ClientError:
    """The one place httpx exceptions become peach exceptions.

    ``in_body`` says the response had started: a broken connection then means the stream
    was cut, and a read timeout means a gap between chunks longer than allowed.
    """
    address = _address(url)
    if isinstance(error, httpx.TimeoutException):
        if isinstance(error, httpx.ConnectTimeout):
            return RequestTimedOut(
                f"could not connect to {address} within {min(timeout_s, CONNECT_TIMEOUT_S):g} s"
            )
        if in_body:
            return RequestTimedOut(
                f"no data from {address} for {timeout_s:g} s: the stream stalled",
                hint="--timeout S sets the longest allowed gap between chunks",
            )
        return RequestTimedOut(
            f"{address} sent no answer within {timeout_s:g} s",
            hint="--timeout S sets how long to wait for data",
        )
    if isinstance(error, httpx.ConnectError):
        for cause in _causes(error):
            if isinstance(cause, socket.gaierror):
                host = urlsplit(url).hostname
                return HostNotFound(f"cannot resolve host {host!r} ({cause.strerror})")
            if isinstance(cause, ssl.SSLError):
                return TLSFailed(
                    f"TLS with {address} failed: {_ssl_reason(cause)}",
                    hint="is it an http:// server? peach dev speaks plain http"
                    if "WRONG_VERSION_NUMBER" in str(cause)
                    else None,
                )
            if isinstance(cause, ConnectionRefusedError):
                break
            if isinstance(cause, OSError) and cause.strerror:
                return ServerUnreachable(f"cannot connect to {address}: {cause.strerror}")
        text = str(error)
        if "SSL" in text or "CERTIFICATE" in text:
            return TLSFailed(f"TLS with {address} failed: {text}")
        if "Name or service not known" in text or "nodename nor servname" in text:
            return HostNotFound(f"cannot resolve host {urlsplit(url).hostname!r} ({text})")
        server = "`peach dev`" if _is_local(url) else "the server"
        return ServerUnreachable(f"is {server} running on {address}? (connection refused)")
    if isinstance(error, httpx.ReadError | httpx.RemoteProtocolError | httpx.CloseError):
        if in_body:
            return ResponseCut(f"{address} closed the connection before the end of the response")
        if isinstance(error, httpx.RemoteProtocolError) and "disconnected" not in str(error):
            return BadResponse(f"{address} did not answer in HTTP ({error})")
        return BadResponse(f"{address} closed the connection without answering")
    if isinstance(error, httpx.WriteError):
        return BadResponse(f"{address} closed the connection while the request was sent")
    if isinstance(error, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return BadResponse(f"cannot send to {url!r}: {error}")
    if isinstance(error, httpx.ProxyError):
        return ServerUnreachable(f"the proxy refused the connection to {address}: {error}")
    if isinstance(error, httpx.DecodingError):
        return BadResponse(f"{address} sent a body that cannot be decoded: {error}")
    if isinstance(error, httpx.TooManyRedirects):
        return BadResponse(f"{address} redirected too many times")
    return BadResponse(f"request to {address} failed: {error}")


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _ssl_reason(error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {getattr(error, 'verify_message', None) or error}"
    return getattr(error, "reason", None) or str(error)


@contextmanager
def _mapped(url: str, timeout_s: float, state: dict[str, bool]) -> Iterator[None]:
    try:
        yield
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        raise translate_error(
            error, url=url, timeout_s=timeout_s, in_body=state.get("in_body", False)
        ) from error


# --------------------------------------------------------------------------- answers


@dataclass
class CompleteResponse:
    """A complete (non-streaming) response."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    latency_s: float

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> tuple[bool, Any]:
        """(True, value) when the body is JSON, else (False, None)."""
        try:
            return True, json.loads(self.body)
        except ValueError:
            return False, None


@dataclass
class StreamStats:
    """What the end-of-stream summary reports; times are ``time.perf_counter`` seconds."""

    started: float
    first_chunk: float | None = None
    last_chunk: float | None = None
    ended: float | None = None
    chunks: int = 0
    bytes: int = 0
    largest_gap: float = 0.0

    def record(self, size: int, now: float) -> None:
        if self.first_chunk is None:
            self.first_chunk = now
        else:
            assert self.last_chunk is not None
            self.largest_gap = max(self.largest_gap, now - self.last_chunk)
        self.last_chunk = now
        self.chunks += 1
        self.bytes += size


class _Watchdog:
    """Abandons a stream's body at a deadline from a timer thread (see ``Stream.chunks``)."""

    def __init__(self, stream: Stream, until: float) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.done = False
        self.timer = threading.Timer(max(0.0, until - time.perf_counter()), self.fire)
        self.timer.daemon = True
        self.timer.start()

    def fire(self) -> None:
        """The deadline: shut the connection (unless the body already ended)."""
        with self.lock:
            if self.done:
                return
            self.done = True
            self.stream.abandoned = True
            self.stream._shut()

    def stop(self) -> bool:
        """The body ended (or failed): no more firing — once this returns, the connection
        is never shut (it may go back to the pool). Whether the deadline had fired."""
        self.timer.cancel()
        with self.lock:
            self.done = True
            return self.stream.abandoned


@dataclass
class Stream:
    """An open streaming response: iterate ``chunks()`` for the raw bytes as they arrive."""

    status: int
    reason: str
    headers: dict[str, str]
    stats: StreamStats
    _response: httpx.Response
    _url: str
    _timeout_s: float
    _state: dict[str, bool] = field(default_factory=dict)
    abandoned: bool = False
    """``chunks(until=...)`` left the body at its deadline, before its end."""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def is_stream(self) -> bool:
        """False when the server answered with one complete JSON document (an envelope)."""
        return not (
            self.content_type.split(";")[0].strip() == "application/json"
            and "content-length" in self.headers
        )

    def chunks(self, *, until: float | None = None) -> Iterator[bytes]:
        """The body as it arrives, one piece per network read; records the stats.

        ``until`` (a ``time.perf_counter`` time) abandons the body then, whatever the server
        does: the connection is shut down, so a read waiting for a chunk returns at once, the
        iteration ends without error and ``abandoned`` is True. The server sees the client go
        away (the gateway closes the generator)."""
        self._state["in_body"] = True
        watchdog = _Watchdog(self, until) if until is not None else None
        try:
            with _mapped(self._url, self._timeout_s, self._state):
                for chunk in self._response.iter_bytes():
                    if chunk:
                        self.stats.record(len(chunk), time.perf_counter())
                        yield chunk
                    if watchdog is not None and time.perf_counter() >= until:  # type: ignore[operator]
                        watchdog.fire()
                        return
        except ClientError:
            if watchdog is None or not watchdog.stop():
                raise
            return  # the read ended because the deadline shut the connection
        finally:
            if watchdog is not None:
                watchdog.stop()
        self.stats.ended = time.perf_counter()

    def _shut(self) -> None:
        """Shut the connection down (any thread): a read blocked on it returns."""
        network = self._response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def read_all(self) -> CompleteResponse:
        """Read the rest of the body as one CompleteResponse (for a non-streaming answer)."""
        body = b"".join(self.chunks())
        return CompleteResponse(
            self.status, self.reason, self.headers, body, time.perf_counter() - self.stats.started
        )


class Client:
    """An httpx client with explicit timeouts; use as a context manager so it is closed."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, *, tls: bool = True) -> None:
        self.timeout_s = timeout_s
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
        # Loading the CA bundle costs ~0.1 s: only plain-http targets skip it, with a context
        # that still verifies (and so refuses) any TLS it would be asked to do.
        verify: bool | ssl.SSLContext = True if tls else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._http = httpx.Client(timeout=timeout, verify=verify, follow_redirects=False)

    @classmethod
    def for_request(cls, request: AskRequest) -> Client:
        return cls(request.timeout_s, tls=request.url.startswith("https:"))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _build(self, request: AskRequest) -> httpx.Request:
        state: dict[str, bool] = {}
        with _mapped(request.url, request.timeout_s, state):
            return self._http.build_request(
                request.method,
                request.url,
                params=list(request.params) or None,
                json=request.body,
                headers=list(request.headers),
            )

    def send(self, request: AskRequest) -> CompleteResponse:
        """Send and read the whole answer."""
        with self.stream(request) as stream:
            return stream.read_all()

    @contextmanager
    def stream(self, request: AskRequest) -> Iterator[Stream]:
        """Send and yield the open response; it is closed on exit, whatever happens.

        Closing before the end drops the connection, which is how the server learns the
        client went away (its generator is closed).
        """
        state: dict[str, bool] = {}
        started = time.perf_counter()
        http_request = self._build(request)
        with _mapped(request.url, request.timeout_s, state):
            response = self._http.send(http_request, stream=True)
        try:
            yield Stream(
                status=response.status_code,
                reason=response.reason_phrase,
                headers={k.lower(): v for k, v in response.headers.items()},
                stats=StreamStats(started=started),
                _response=response,
                _url=request.url,
                _timeout_s=request.timeout_s,
                _state=state,
            )
        finally:
            response.close()

    def fetch_routes(self, url: str) -> list[dict[str, Any]] | None:
        """The endpoints a peach gateway lists at ROUTES_PATH, or None for other servers.

        A gateway may serve under a route prefix (``http://host:8000/zzacc``): the folders
        of ``url``'s path are tried from the deepest up, and the first gateway that answers
        gives the list.
        """
        for routes_url in routes_urls(url):
            try:
                response = self._http.get(routes_url, timeout=min(self.timeout_s, 3.0))
                data = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None
            endpoints = data.get("endpoints") if isinstance(data, dict) else None
            if isinstance(endpoints, list):
                return [
                    e for e in endpoints if isinstance(e, dict) and isinstance(e.get("url"), str)
                ]
        return None


def routes_urls(url: str) -> list[str]:
    """Where a gateway serving ``url`` may list its routes, deepest prefix first.

    >>> routes_urls("http://h:8000/zzacc/recommend")
    ['http://h:8000/zzacc/_peach/routes', 'http://h:8000/_peach/routes']
    """
    parts = urlsplit(url)
    folders = [p for p in (parts.path or "/").split("/") if p][:-1]
    return [
        f"{parts.scheme}://{parts.netloc}" + "".join(f"/{f}" for f in folders[:depth]) + ROUTES_PATH
        for depth in range(len(folders), -1, -1)
    ]


# --------------------------------------------------------------------------- interpretation


def envelope_error(value: Any) -> tuple[str, str] | None:
    """(code, message) when ``value`` is a peach error envelope."""
    if isinstance(value, dict) and value.get("status") == "error":
        error = value.get("error")
        if isinstance(error, dict):
            return str(error.get("code", "error")), str(error.get("message", ""))
        return "error", str(error)
    return None


def is_ok_envelope(value: Any) -> bool:
    return isinstance(value, dict) and value.get("status") == "ok" and "result" in value


def not_found_error(url: str, routes: list[dict[str, Any]] | None) -> EndpointNotFound:
    """The 404 error, listing the dev server's endpoints and the closest url when known."""
    path = urlsplit(url).path or "/"
    if routes is None:
        return EndpointNotFound(f"404: nothing at {path} on {_address(url)}")
    if not routes:
        return EndpointNotFound(f"404: no endpoint at {path}; the server has no endpoints")
    urls = [route["url"] for route in routes]
    listing = ", ".join(
        f"{route['url']} ({route['name']})" if route.get("name") else route["url"]
        for route in routes
    )
    close = _closest_url(path, urls)
    message = f"404: no endpoint at {path}" + (f"; did you mean {close[0]}?" if close else "")
    return EndpointNotFound(message, hint=f"endpoints: {listing}")


def _closest_url(path: str, urls: list[str]) -> list[str]:
    """The endpoint url closest to ``path``, or below a route prefix to a tail of it.

    >>> _closest_url("/zzacc/tlak", ["/talk", "/drift"])
    ['/talk']
    >>> _closest_url("/qqqqqqqq", ["/ab", "/talk"])
    []
    """
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts)):  # never the bare "/": it is close to any short url
        tail = "/" + "/".join(parts[depth:])
        close = difflib.get_close_matches(tail, urls, n=1, cutoff=0.5)
        if close:
            return close
    return []


def check_answer(answer: CompleteResponse, client: Client, url: str) -> tuple[bool, Any]:
    """Raise for an error answer (404, error envelope, redirect, 4xx/5xx).

    Returns ``(is_json, value)`` of the body for a successful answer.
    """
    is_json, value = answer.json()
    if answer.status == 404:
        envelope = envelope_error(value) if is_json else None
        if envelope is None or envelope[0] == "not_found":
            raise not_found_error(url, client.fetch_routes(url))
    envelope = envelope_error(value) if is_json else None
    if envelope is not None:
        code, message = envelope
        hint = "add --stream to ask for the stream" if code == "stream_required" else None
        raise EndpointFailed(f"{code}: {message}", code=code, status=answer.status, hint=hint)
    if 300 <= answer.status < 400:
        location = answer.headers.get("location", "")
        raise EndpointFailed(
            f"HTTP {answer.status} {answer.reason}: redirected to {location or '(nowhere)'}",
            status=answer.status,
            hint="ask that URL instead" if location else None,
        )
    if answer.status >= 400:
        text = answer.body.decode("utf-8", "replace").strip()
        detail = f": {text[:500]}" if text else ""
        raise EndpointFailed(f"HTTP {answer.status} {answer.reason}{detail}", status=answer.status)
    return is_json, value
