"""A `peach dev` left running all day: what reloads and re-inits leave behind.

Each save builds a new version of the project (its conf nodes, its notebooks' syntax trees,
a plan, a snapshot of fingerprints) and a restart or a re-init makes new replicas (pools,
rows in the live view, metrics series). Once a version is no longer served, all of it must
go: after reloads of both kinds and drift re-inits, the objects of the earlier versions are
gone (weak references dead, no more of each kind alive than after the first reloads), and
the live view and the metrics hold only the replicas that still serve. Nothing is timed.
"""

from __future__ import annotations

import ast
import asyncio
import gc
import io
import re
import sys
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import yaml
from reload_support import copy_project, edit_cell

from peach_cli.boundary import Output
from peach_cli.checks.build import build_plan
from peach_cli.project.notebook import Notebook, read_notebook
from peach_cli.runtime import aio
from peach_cli.runtime.plan import ComponentSpec, ProjectPlan
from peach_cli.views.dev import LATENCY_WINDOW, DevView
from simulator.changes import Snapshot
from simulator.events import ReplicaChanged
from simulator.pool import ReplicaPool
from simulator.reload import Reloader
from simulator.replica import Replica
from simulator.session import DevSession, SessionConfig

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

EDITED = "notebooks/Edited.ipynb"
PER_VERSION = (ast.Module, yaml.Node, Notebook, ProjectPlan, Snapshot, ComponentSpec)
"""What each save builds anew: a conf's nodes, a notebook and its cells' trees, a plan."""
PER_REPLICA = (ReplicaPool, Replica)
"""What each restart or re-init makes anew."""


def alive(kinds: tuple[type, ...]) -> Counter[str]:
    gc.collect()
    return Counter(
        next(k.__name__ for k in kinds if isinstance(o, k))
        for o in gc.get_objects()
        if isinstance(o, kinds)
    )


class Run:
    """A served copy of the soak project, its live view, and saves made to it."""

    def __init__(self, session: DevSession, project: Path, view: DevView) -> None:
        assert session.server is not None
        self.session = session
        self.server = session.server
        self.project = project
        self.view = view
        self.saves = 0
        self.method = '{"version": VERSION}'
        self.versions: list[weakref.ref[Any]] = []
        """The snapshots served so far, their plans and their replicas' pools."""
        self.reinitialized = asyncio.Event()

    def on_event(self, event: Any) -> None:
        self.view.handle(event)
        if isinstance(event, ReplicaChanged) and event.message == "re-init done":
            self.reinitialized.set()

    def remember(self) -> None:
        served = self.server.served
        self.versions += [weakref.ref(served), weakref.ref(served.plan)]
        self.versions += [weakref.ref(pool) for pool in self.server.all_pools()]
        self.versions += [weakref.ref(r) for p in self.server.all_pools() for r in p.replicas]

    async def save(self, mode: Literal["patch", "restart"]) -> None:
        """Edit the method of ``edited`` and reload it as a ``mode`` (patch or restart)."""
        self.saves += 1
        method = f'{{"version": VERSION, "save": {self.saves}}}'
        edit_cell(self.project, self.method, method, notebook=EDITED)
        self.method = method
        reloader = Reloader(self.server, self.project, on_event=self.on_event, spares=0, mode=mode)
        event = await reloader.reload([EDITED])
        assert type(event).__name__ == "Reloaded", event
        assert (mode == "patch") == bool(event.changes.patched), event.message  # type: ignore[attr-defined]
        self.remember()

    async def drift(self, client: httpx.AsyncClient) -> None:
        """A drift signal: the replica re-runs ``init`` in its process."""
        self.reinitialized.clear()
        answer = await client.get(f"{self.session.url}/drift", params={"signal": "true"})
        assert answer.status_code == 200, answer.text
        await asyncio.wait_for(self.reinitialized.wait(), 30)

    async def reinit(self) -> None:
        """``i`` in the terminal: new replicas for every component with an ``init``."""
        keys = [c.key for c in self.server.plan.components() if c.init]
        change = await self.server.reinit(keys)
        assert not change.failed, change.failed
        self.remember()

    async def traffic(self, client: httpx.AsyncClient) -> None:
        for path in ("/edited", "/recommend", "/drift", "/fallback"):
            answer = await client.get(f"{self.session.url}{path}")
            assert answer.status_code == 200, (path, answer.text)

    async def round(self, client: httpx.AsyncClient) -> None:
        """Saves of both kinds, drift re-inits and re-inits, with calls in between."""
        for step in (
            lambda: self.save("patch"),
            lambda: self.save("restart"),
            lambda: self.drift(client),
            lambda: self.save("patch"),
            self.reinit,
            lambda: self.drift(client),
        ):
            await step()
            await self.traffic(client)
        await self.server.wait_retired()


async def serve(project: Path, body: Callable[[Run, httpx.AsyncClient], Any]) -> None:
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    view = DevView(Output().new_console("terminal", io.StringIO(), width=120), live=False)
    view.set_plan(plan)
    runs: list[Run] = []
    config = SessionConfig(plan, project=project)
    session = DevSession(config, on_event=lambda event: runs[0].on_event(event))
    runs.append(Run(session, project, view))
    async with session, httpx.AsyncClient(timeout=30) as client:
        await session.wait_ready()
        await body(runs[0], client)


def test_versions_no_longer_served_are_gone_and_the_view_keeps_only_live_replicas(tmp_path):
    project = copy_project("faults/soak", tmp_path)

    async def body(run: Run, client: httpx.AsyncClient) -> None:
        await run.round(client)  # what is made once (caches, first series) is made now
        versions, replicas = alive(PER_VERSION), alive(PER_REPLICA)
        first = len(run.versions)
        for _ in range(4):  # 8 patch reloads, 4 restarts, 8 drift re-inits, 4 re-inits
            await run.round(client)
        gc.collect()

        # every version before the one served is gone, with the replicas it ran on
        served = {id(run.server.served), id(run.server.served.plan)}
        served |= {id(pool) for pool in run.server.all_pools()}
        served |= {id(r) for pool in run.server.all_pools() for r in pool.replicas}
        kept = [ref() for ref in run.versions[first:] if ref() is not None]
        assert [type(o).__name__ for o in kept if id(o) not in served] == []
        assert alive(PER_VERSION) <= versions, (alive(PER_VERSION), versions)
        assert alive(PER_REPLICA) <= replicas, (alive(PER_REPLICA), replicas)

        # the live view keeps a row per replica that serves, each with a bounded history
        serving = {r.id for pool in run.server.all_pools() for r in pool.replicas}
        assert set(run.view.replicas) == serving
        assert all(len(row.latencies) <= LATENCY_WINDOW for row in run.view.replicas.values())

        # and the metrics name only them
        metrics = (await client.get(f"{run.session.url}/_peach/metrics")).text
        named = set(re.findall(r'replica="([^"]+)"', metrics))
        assert named <= serving, sorted(named - serving)

    asyncio.run(serve(project, body))


CONNECTION_KINDS = (
    "BoundedHttpToolsProtocol",
    "RequestResponseCycle",
    "HeadWithBody",
    "TCPTransport",
    "_SelectorSocketTransport",
    "CancelledError",
)
"""What each connection (and each stream a client cuts) makes in the gateway."""

CALLS = {
    "plain call": b"GET /recommend?user=u1&size=3",
    "call that raises": b"GET /fails",
    "stream read to its end": b"GET /stream?stream=true&count=3",
    "stream cut by the client": b"GET /stream?stream=true&count=200&delay=0.01",
}


def connection_objects() -> Counter[str]:
    """The connection objects alive (no collection: what reference counting left)."""
    return Counter(n for o in gc.get_objects() if (n := type(o).__name__) in CONNECTION_KINDS)


async def call_and_hang_up(url: str, request: bytes) -> None:
    """One connection: ``request``, its answer's head and first bytes, then the client
    closes it (a stream of 200 chunks is cut after its first)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert head.split(b" ")[1] in (b"200", b"500"), head
    await asyncio.wait_for(reader.read(1), 30)
    writer.transport.abort()


def test_closed_connections_and_cut_streams_are_freed_without_the_collector(tmp_path):
    """A connection the client closes, and a stream it cuts, are freed at once by reference
    counting: objects in reference cycles wait for a full collection, which a busy gateway
    runs every minute or two, so its memory rose in steps by all that waited meanwhile."""
    project = copy_project("faults/soak", tmp_path)

    async def body(run: Run, client: httpx.AsyncClient) -> None:
        for request in CALLS.values():  # what is made once is made now
            await call_and_hang_up(run.session.url, request)
        await run.server.wait_retired()
        gc.collect()
        gc.disable()
        try:
            left: dict[str, Counter[str]] = {}
            for name, request in CALLS.items():
                before = connection_objects()
                for _ in range(8):
                    await call_and_hang_up(run.session.url, request)
                # a cut stream ends (with its connection) once the gateway sees the client left
                deadline = asyncio.get_running_loop().time() + 20
                while (
                    connection_objects() - before and asyncio.get_running_loop().time() < deadline
                ):
                    await asyncio.sleep(0.05)
                if connection_objects() - before:
                    left[name] = connection_objects() - before
            assert left == {}
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            cycles = Counter(n for o in gc.garbage if (n := type(o).__name__) in CONNECTION_KINDS)
            assert cycles == Counter()
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()

    aio.run(serve(project, body))


def test_a_save_s_checks_are_freed_without_the_collector(tmp_path):
    """What checking a version builds (its conf, notebooks and their trees, findings) goes
    as soon as the plan is made: held in a reference cycle, each reload's checks waited
    for a full garbage collection, and the gateway's memory rose in steps meanwhile."""
    project = copy_project("faults/soak", tmp_path)
    build_plan(project)  # what is made once is made now
    gc.collect()
    gc.disable()
    try:
        before = Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, PER_VERSION))
        for _ in range(3):
            plan, diagnostics = build_plan(project)
            assert plan is not None, diagnostics
            del plan, diagnostics
        after = Counter(type(o).__name__ for o in gc.get_objects() if isinstance(o, PER_VERSION))
        assert after - before == Counter()
    finally:
        gc.enable()


def test_a_stream_the_deployed_gateway_sends_is_freed_without_the_collector_when_cut():
    """The deployed gateway's stream reply, called as Ray Serve's replica calls it: in a
    task that Serve cancels when the client hangs up (``request_task.cancel()`` in Serve's
    replica). Nothing of a cut stream may wait for the collector: Starlette's
    ``StreamingResponse`` left each one in a reference cycle (anyio's ``CancelledError``,
    the frames its traceback holds)."""
    from peach_cli.deploy.app import _response
    from peach_cli.runtime import contract

    async def words() -> AsyncIterator[bytes]:
        for _ in range(200):
            yield b"word\n"
            await asyncio.sleep(0.01)

    async def body() -> None:
        requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        first_chunk = asyncio.Event()

        async def receive() -> dict[str, Any]:
            return await requests.get()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                first_chunk.set()

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}}

        async def cut_stream() -> None:
            first_chunk.clear()
            requests.put_nowait({"type": "http.request", "body": b"", "more_body": False})
            reply = contract.HttpReply(200, [(b"content-type", b"text/plain")], chunks=words())
            request = asyncio.ensure_future(_response(reply)(scope, receive, send))
            await asyncio.wait_for(first_chunk.wait(), 20)
            request.cancel()  # the client left: Serve cancels the request
            await asyncio.gather(request, return_exceptions=True)

        await cut_stream()  # what is made once is made now
        gc.collect()
        gc.disable()
        try:
            for _ in range(8):
                await cut_stream()
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = Counter(type(o).__name__ for o in gc.garbage)
            assert left == Counter(), left
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()

    asyncio.run(body())


def unheld(names: list[str]) -> list[str]:
    """Of ``names``, those no live string is the interned one of: interning such a name adds
    it to CPython's table anew (and takes a new slot in it)."""
    copies = ["".join(list(name)) for name in names]  # new strings, none interned
    return [copy for copy in copies if sys.intern(copy) is copy]


def test_a_reload_finds_the_names_of_the_code_it_parses_already_interned(tmp_path):
    """The parser interns every name the code uses (functions, variables, arguments...),
    and pathlib every part of a path (``Soak.ipynb``, ``os.py`` looked for by ``import os``).
    Were they let go with the syntax trees and paths, each reload would intern them again
    (the soak project: 32 strings a reload), and CPython's table of interned strings keeps
    a slot for each string ever added until it is rebuilt: the gateway's grew to twice its
    size (0.9 MiB more) after some hundred reloads. The version served holds them, so
    between reloads none of them is missing from the table."""
    project = copy_project("faults/soak", tmp_path)

    def names_of_the_code() -> list[str]:
        """Every name of the project's notebooks, as copies nothing interned."""
        found: set[str] = set()
        for notebook in (project / "notebooks").glob("*.ipynb"):
            for cell in read_notebook(project, f"notebooks/{notebook.name}").cells:
                if cell.tree is not None:
                    found |= {n for n in ast.walk(cell.tree) for n in _names(n)}
                    found |= {
                        f"{a.name}.py"
                        for n in ast.walk(cell.tree)
                        if isinstance(n, ast.Import)
                        for a in n.names
                    }
            found.add(notebook.name)
        return sorted("".join(list(name)) for name in found if len(name) > 1)  # not interned

    async def body(run: Run, client: httpx.AsyncClient) -> None:
        await run.save("patch")
        await run.save("restart")
        names = names_of_the_code()
        gc.collect()
        for mode in ("patch", "restart", "patch"):
            await run.save(mode)
            await run.traffic(client)
            gc.collect()
            assert unheld(names) == [], f"after a {mode} reload"

    asyncio.run(serve(project, body))


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    return []
