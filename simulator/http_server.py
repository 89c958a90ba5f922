"""``peach dev``'s HTTP side: its socket, uvicorn, the protocol, the app they serve.

``HttpServer`` assembles what answers a connection — uvicorn with the bounded protocol
(``simulator.http_protocol``), ``LocalService`` (SPEC §6) over the gateway, and the fast
lane — and owns its start-up and shut-down. It knows nothing of plans, pools or reloads
(``simulator.server.DevServer`` does, and hands it the gateway). What it refuses — a
foreign Host or Origin (``LocalService``), a stalled or oversized head, a stalled body
(``simulator.http_protocol``) — the gateway logs and counts (``/_peach/metrics``).

    http = HttpServer("127.0.0.1", 0)
    http.bind()                   # ServeError when the address cannot be bound
    await http.serve(gateway)     # returns once uvicorn has started
    print(http.url)
    http.begin_stop()             # no new connection; the caller ends its streams, then
    await http.stop()             # connections finished (or cut), socket closed
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

from peach_cli.errors import PeachError
from peach_cli.runtime.contract import StreamCut

if TYPE_CHECKING:
    from simulator.fastlane import FastLane
    from simulator.gateway import DevGateway

UVICORN_SHUTDOWN_S = 2


class ServeError(PeachError):
    """The server could not start (the port is taken, the address is wrong)."""


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ServeError(
            f"cannot listen on {host}:{port}: {error.strerror or error}",
            hint="use --port 0 to pick a free port" if port else None,
        ) from None
    sock.setblocking(False)
    return sock


class HttpServer:
    """The socket and uvicorn serving one gateway behind its ``LocalService`` checks."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        allow_hosts: Collection[str] = (),
        allow_origins: Collection[str] = (),
        head_timeout_s: float | None = None,
        fast_lane: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.allow_hosts = tuple(allow_hosts)
        self.allow_origins = tuple(allow_origins)
        self.head_timeout_s = head_timeout_s
        """A request head incomplete for this long closes its connection (None: the
        default of ``simulator.http_protocol``)."""
        self.use_fast_lane = fast_lane
        """False: every request takes the gateway's general path (``simulator.fastlane``
        says which ones the fast lane takes), for comparing the two."""
        self.fast_lane: FastLane | None = None
        """Answers plain calls without an ASGI cycle (unless ``use_fast_lane`` is False or
        every request is recorded)."""
        self._cut_filter = _CutStreamFilter()
        self._socket: socket.socket | None = None
        self._uvicorn: Any = None
        self._serve_task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        assert self._socket is not None, "bind() first"
        host, port = self._socket.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def bind(self) -> None:
        """Listen on ``host:port`` (port 0 picks one); ``ServeError`` when it cannot."""
        self._socket = _bind(self.host, self.port)
        logging.getLogger("uvicorn.error").addFilter(self._cut_filter)  # until ``stop``

    async def serve(self, gateway: DevGateway) -> None:
        """Serve ``gateway`` on the bound socket; return once uvicorn has started."""
        assert self._socket is not None, "bind() first"
        import uvicorn

        from simulator.fastlane import FastLane
        from simulator.http_protocol import protocol_with
        from simulator.local_service import LocalService

        app = LocalService(
            gateway,
            listen_host=self.host,
            allow_hosts=self.allow_hosts,
            allow_origins=self.allow_origins,
            on_refusal=gateway.log,
        )
        if self.use_fast_lane and gateway.recorder is None:
            self.fast_lane = FastLane(gateway, app)  # --record sees every request whole
        config = uvicorn.Config(
            app,
            http=protocol_with(self.head_timeout_s, self.fast_lane, gateway.log_refused),
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=UVICORN_SHUTDOWN_S,
            timeout_keep_alive=30,
        )
        server = _QuietServer(config)
        self._uvicorn = server
        self._serve_task = asyncio.ensure_future(server.serve(sockets=[self._socket]))
        while not server.started:
            if self._serve_task.done():
                self._serve_task.result()
                raise ServeError(f"the server on {self.host}:{self.port} stopped at startup")
            await asyncio.sleep(0.002)

    async def wait_closed(self) -> None:
        """Wait until uvicorn stops (it stops only through ``begin_stop``)."""
        if self._serve_task is not None:
            await asyncio.shield(self._serve_task)

    def begin_stop(self) -> None:
        """Take no new connection; those open finish their requests (``stop`` waits)."""
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True

    async def stop(self) -> None:
        """Wait for uvicorn to finish (cut after ``UVICORN_SHUTDOWN_S``), close the socket."""
        self.begin_stop()
        server = self._uvicorn
        if self._serve_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._serve_task), UVICORN_SHUTDOWN_S + 2)
            except (TimeoutError, asyncio.CancelledError):
                if server is not None:
                    server.force_exit = True
                self._serve_task.cancel()
                with contextlib.suppress(BaseException):
                    await self._serve_task
        if self._socket is not None:
            self._socket.close()
        logging.getLogger("uvicorn.error").removeFilter(self._cut_filter)


class _CutStreamFilter(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" for a stream the gateway cut on
    purpose (``StreamCut``): the cut is the answer, and the request line reports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, StreamCut)


def _QuietServer(config: Any) -> Any:  # noqa: N802 - a class factory, named as the class
    """uvicorn's server without its own signal handling: the caller decides when to stop."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietServer(config)
