"""The uvicorn internals ``simulator/http_protocol.py`` relies on still have their shape.

The protocol subclasses uvicorn's httptools protocol, stands in for its request cycle while
the fast lane answers (``LaneConnection``), swaps a cycle's transport (``HeadWithBody``),
and writes response heads as uvicorn's cycle does. None of that is uvicorn's public API:
``pyproject.toml`` pins the minor version tested, and these checks say, in plain words,
what moved when another version is tried.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
from collections import deque

import httptools
import pytest
from uvicorn import Config
from uvicorn.protocols.http import flow_control, httptools_impl
from uvicorn.server import Server, ServerState

from simulator.http_protocol import BoundedHttpToolsProtocol, LaneConnection

PROTOCOL = httptools_impl.HttpToolsProtocol
CYCLE = httptools_impl.RequestResponseCycle

OVERRIDDEN = {
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_message_begin": ["self"],
    "on_headers_complete": ["self"],
    "on_body": ["self", "body"],
    "on_message_complete": ["self"],
}
"""``HttpToolsProtocol``'s methods ``BoundedHttpToolsProtocol`` overrides (and calls)."""
CALLED = {"on_response_complete": ["self"], "shutdown": ["self"]}
"""Methods the lane's connection calls, or that read the cycle it stands in for."""
BYPASSED = {"on_body", "on_message_complete", "on_headers_complete", "send_400_response"}
"""Methods that never meet a ``LaneConnection``: the protocol does not call uvicorn's own
for a request the lane takes (and a 400 comes before any cycle)."""


def _shape_problem(what: str, found: object, expected: object) -> str:
    return f"uvicorn's {what} changed: expected {expected}, found {found}"


def test_the_protocol_methods_overridden_and_called_keep_their_signatures() -> None:
    problems = []
    for name, parameters in {**OVERRIDDEN, **CALLED}.items():
        method = getattr(PROTOCOL, name, None)
        if method is None:
            problems.append(f"HttpToolsProtocol.{name} is gone")
            continue
        found = list(inspect.signature(method).parameters)
        if found != parameters:
            problems.append(_shape_problem(f"HttpToolsProtocol.{name}", found, parameters))
    assert problems == [], "; ".join(problems)


def test_the_status_lines_are_a_table_of_bytes() -> None:
    status_line = getattr(httptools_impl, "STATUS_LINE", None)
    assert isinstance(status_line, dict), "uvicorn's httptools_impl.STATUS_LINE is gone"
    assert status_line.get(200) == b"HTTP/1.1 200 OK\r\n", _shape_problem(
        "STATUS_LINE[200]", status_line.get(200), b"HTTP/1.1 200 OK\r\n"
    )
    assert set(range(100, 600)) <= set(status_line), "STATUS_LINE lacks some statuses"


def _cycle_attributes_read() -> set[str]:
    """What ``HttpToolsProtocol`` reads or sets of ``self.cycle`` outside ``BYPASSED``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(PROTOCOL)))
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name in BYPASSED:
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "cycle"
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "self"
            ):
                found.add(node.attr)
    return found


def test_the_lane_connection_has_everything_uvicorn_reads_of_a_cycle() -> None:
    read = _cycle_attributes_read()
    assert read, "HttpToolsProtocol no longer reads self.cycle: the imitation needs a look"
    missing = sorted(read - set(LaneConnection.__slots__))
    assert missing == [], (
        f"uvicorn's protocol now reads {missing} of its cycle, which LaneConnection lacks"
    )
    expected = {"response_complete", "disconnected", "keep_alive", "message_event"}
    gone = sorted(expected - _cycle_fields())
    assert gone == [], f"uvicorn's RequestResponseCycle no longer has {gone}"


def _cycle_fields() -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(CYCLE.__init__)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def test_the_cycle_writes_through_its_transport_attribute() -> None:
    """``HeadWithBody`` is swapped in as a new cycle's ``transport``."""
    fields = _cycle_fields()
    for name in ("transport", "body", "response_complete", "more_body"):
        assert name in fields, f"uvicorn's RequestResponseCycle has no {name!r} any more"
    assert "transport" in inspect.signature(CYCLE).parameters


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)


async def _app(scope: object, receive: object, send: object) -> None:
    pass


def test_a_connection_has_the_state_the_protocol_reads() -> None:
    async def check() -> None:
        config = Config(app=_app, http="httptools", lifespan="off")
        state = ServerState()
        protocol = BoundedHttpToolsProtocol(config, state, {}, _loop=asyncio.get_running_loop())
        transport = _Transport()
        protocol.connection_made(transport)
        try:
            expected = {
                "loop": asyncio.AbstractEventLoop,
                "transport": asyncio.Transport,
                "flow": flow_control.FlowControl,
                "parser": httptools.HttpRequestParser,
                "pipeline": deque,
                "client": tuple,
                "server_state": ServerState,
            }
            for name, kind in expected.items():
                value = getattr(protocol, name, None)
                assert isinstance(value, kind), _shape_problem(
                    f"HttpToolsProtocol.{name}", type(value).__name__, kind.__name__
                )
            assert protocol.cycle is None, "a new connection's cycle is no longer None"
            assert isinstance(state.default_headers, list), "ServerState.default_headers moved"
            for name in ("get_method", "get_http_version", "should_keep_alive"):
                assert hasattr(protocol.parser, name), f"httptools' parser has no {name}()"
            flow = protocol.flow
            assert isinstance(flow.read_paused, bool), "FlowControl.read_paused moved"
            assert callable(flow.resume_reading), "FlowControl.resume_reading moved"
            # a request's head, as the lane's claim reads it
            protocol.data_received(b"GET /x?a=1 HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n")
            assert protocol.url == b"/x?a=1", _shape_problem("url", protocol.url, b"/x?a=1")
            headers = protocol.headers[:1]  # (a header is handed over when the next begins)
            assert headers == [(b"host", b"h")], _shape_problem("headers", headers, "(name, value)")
        finally:
            protocol.connection_lost(None)

    asyncio.run(check())


def test_the_server_replaces_its_default_headers_rather_than_editing_them() -> None:
    """The lane writes uvicorn's default headers (``date``, ``server``) once each time they
    change, noticing the change by the list being another one (``_DefaultHead``): uvicorn
    must assign a new list (each second, in ``Server.on_tick``), never edit it in place."""

    async def check() -> None:
        config = Config(app=_app, http="httptools", lifespan="off")
        config.load()
        server = Server(config)
        before = server.server_state.default_headers
        await server.on_tick(0)  # its once-a-second update of the default headers
        after = server.server_state.default_headers
        assert after is not before, "uvicorn now edits ServerState.default_headers in place"
        assert [name for name, _ in after][:1] == [b"date"], after

    asyncio.run(check())


def test_the_server_still_captures_signals_in_a_context_manager() -> None:
    """``simulator.server`` replaces ``Server.capture_signals`` (peach handles Ctrl-C)."""
    method = getattr(Server, "capture_signals", None)
    assert method is not None, "uvicorn's Server.capture_signals is gone"
    assert list(inspect.signature(method).parameters) == ["self"]


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_each_override_calls_uvicorns_own(name: str) -> None:
    """Each override defers to uvicorn's method (``super()``): that one must exist."""
    assert name in vars(PROTOCOL), f"HttpToolsProtocol.{name} is no longer its own"
