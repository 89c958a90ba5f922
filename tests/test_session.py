"""``DevSession`` (``simulator.session``): its parts start and stop in order, and nothing
outlives it — real replica and task processes, in peach's own interpreter."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import psutil
import pytest
from projectkit import write_project
from waiting import assert_gone

from peach_cli.checks.build import build_plan
from peach_cli.runtime import aio
from simulator.events import ReplicaChanged, ReplicaState
from simulator.session import DevSession, SessionConfig
from simulator.tasks.events import RunStatus, TaskOutput, TaskRunEnded

TASKS = Path(__file__).resolve().parent / "projects" / "tasks"

BLOCKED_CONF = """\
codops: blocked
endpoints:
  hello:
    url: /hello
    components:
      main: {notebook: nb.ipynb, init: wait_forever, method: hello, replicas: 2}
"""
BLOCKED_CELLS = [
    "import time\n\ndef wait_forever():\n    time.sleep(600)\n",
    "def hello():\n    return 'hi'\n",
]


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def new_children(before: set[int]) -> set[int]:
    """This process's descendants that are not (nor descend from) one of ``before``: in a
    whole-suite run, other tests' servers and Ray nodes are children of pytest too."""
    me = psutil.Process()
    found = set()
    for child in me.children(recursive=True):
        try:
            lineage = {child.pid} | {parent.pid for parent in child.parents()}
        except psutil.NoSuchProcess:
            continue
        if not lineage & before:
            found.add(child.pid)
    return found


async def until(check, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``check`` in the event loop until it is true (fails after ``timeout_s``)."""
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.02)


@pytest.mark.slow
def test_a_running_task_is_stopped_before_the_replicas_and_nothing_outlives_the_session(
    tmp_path: Path,
) -> None:
    project = Path(shutil.copytree(TASKS, tmp_path / "tasks"))
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    events: list[object] = []
    config = SessionConfig(plan, project=project, shared_env=True, task_timeout_s=300)
    before = children()  # other tests' servers and clusters of this pytest process

    async def scenario() -> tuple[set[int], Path]:
        async with DevSession(config, on_event=events.append) as session:
            await session.wait_ready()
            async with httpx.AsyncClient(base_url=session.url, timeout=20) as client:
                assert (await client.get("/kick", params={"task": "greet"})).status_code == 200
            session.scheduler.trigger("hang")  # it starts a child, then never returns
            await until(
                lambda: any(
                    isinstance(e, TaskOutput) and "started child" in e.line for e in events
                ),
                "the hanging task's child",
            )
            await until(lambda: bool(session.spawner.spare_pids()), "a warm task worker")
            pids = new_children(before)
            assert pids, "the session started no process"
            socket_folder = Path(session.scheduler.socket_path).parent
            assert socket_folder.is_dir()
        return pids, socket_folder

    pids, socket_folder = aio.run(scenario())
    assert not socket_folder.exists()
    stopped_task = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, TaskRunEnded) and e.task == "hang" and e.status is RunStatus.STOPPED
    )
    stopped_replicas = [
        i
        for i, e in enumerate(events)
        if isinstance(e, ReplicaChanged) and e.state is ReplicaState.STOPPED
    ]
    assert len(stopped_replicas) == len(plan.components())
    assert stopped_task < min(stopped_replicas)  # the task went first, while replicas served
    for pid in pids:  # replicas, the task's worker and its child, the warm spare
        assert_gone(pid)
    assert not new_children(before)


@pytest.mark.slow
@pytest.mark.parametrize("stop_at", ["the first replica event", "the first replica process"])
def test_stopping_while_the_replicas_start_stops_them_and_nothing_outlives_the_session(
    tmp_path: Path, stop_at: str
) -> None:
    """``stop`` at the first replica event (``start`` has not returned: it is cancelled) or
    once the first replica process exists (its ``init`` blocks): every replica is stopped,
    none is left, the port is free."""
    project = write_project(tmp_path / "blocked", BLOCKED_CONF, {"nb.ipynb": BLOCKED_CELLS})
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    seen: list[int] = []
    before = children()  # other tests' servers and clusters of this pytest process

    async def scenario() -> tuple[str, list[int]]:
        stopping: list[asyncio.Task[None]] = []

        def on_event(event: object) -> None:
            if isinstance(event, ReplicaChanged):
                if event.pid is not None:
                    seen.append(event.pid)
                if not stopping and (event.pid is not None or stop_at.endswith("event")):
                    stopping.append(asyncio.get_running_loop().create_task(session.stop()))

        session = DevSession(SessionConfig(plan, shared_env=True), on_event=on_event)
        address = ""
        try:
            await session.start()
            address = session.url
        except asyncio.CancelledError:  # stop() came first: start was cancelled
            pass
        await until(lambda: bool(stopping), "a replica process")
        await stopping[0]
        return address, sorted(set(seen))

    address, pids = aio.run(scenario())
    assert pids or stop_at.endswith("event")
    for pid in pids:
        assert_gone(pid)
    assert not new_children(before)
    if address:  # the server had bound: its port is closed again
        port = int(address.rsplit(":", 1)[1])
        try:
            httpx.get(f"http://127.0.0.1:{port}/hello", timeout=5)
        except httpx.ConnectError:
            pass
        else:
            raise AssertionError("the server still answers after stop()")


@pytest.mark.slow
def test_a_knob_set_after_import_is_used_by_the_next_session(tmp_path: Path, monkeypatch) -> None:
    """``PEACH_*`` knobs are read when a session is configured, not when the simulator is
    imported: set in this process afterwards, the next session goes by it."""
    monkeypatch.setenv("PEACH_INIT_STUCK_S", "0.2")
    project = write_project(tmp_path / "blocked", BLOCKED_CONF, {"nb.ipynb": BLOCKED_CELLS})
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    messages: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, ReplicaChanged) and event.message:
            messages.append(event.message)

    async def scenario() -> None:
        async with DevSession(SessionConfig(plan, shared_env=True), on_event=on_event):
            await until(
                lambda: any("init has not returned after 0.2 s" in m for m in messages),
                "the init reported stuck",
                timeout_s=30,
            )

    aio.run(scenario())
