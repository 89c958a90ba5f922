"""The reload loop against a recording stand-in for ``DevServer``: which saves are applied,
which are refused, and what is reported. Real projects, real file edits, a real watcher."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from reload_support import copy_project, edit_cell, edit_file

from peach_cli.checks.build import build_plan
from peach_cli.runtime.plan import ProjectPlan
from simulator.changes import PlanChange, Snapshot
from simulator.events import (
    Reloaded,
    ReloadFailed,
    ReloadRejected,
    ReloadSkipped,
    ReloadStarted,
    ReloadSuperseded,
    Watching,
    WatchStopped,
)
from simulator.reload import Reloader

DEADLINE_S = 10.0

pytestmark = pytest.mark.timeout(60)


class RecordingServer:
    """Has what the reloader uses of ``DevServer``: ``plan``, ``served`` (what it serves,
    the previous version of a component whose restart failed included), ``apply_plan``
    and ``adopt``."""

    def __init__(self, plan: ProjectPlan) -> None:
        self.plan = plan
        self.served = Snapshot.take(plan)
        self.timeout_override: float | None = None
        self.applied: list[ProjectPlan] = []
        self.fail: dict[str, str] = {}

    async def apply_plan(self, snapshot: Snapshot, **_: Any) -> PlanChange:
        self.applied.append(snapshot.plan)
        self.plan = snapshot.plan
        served = snapshot
        for key in self.fail:  # as DevServer: the previous version keeps serving
            served = served.replace(key, self.served)
        self.served = served
        return PlanChange(failed=dict(self.fail), seconds=0.01)

    def adopt(self, snapshot: Snapshot) -> None:
        self.plan = snapshot.plan
        self.served = snapshot

    async def wait_ready(self) -> None:
        return None


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project("reload_basic", tmp_path)


@pytest.fixture
def setup(project: Path) -> tuple[RecordingServer, Reloader, list[Any]]:
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    server = RecordingServer(plan)
    events: list[Any] = []
    return (
        server,
        Reloader(server, project, on_event=events.append, spares=0, mode="restart"),
        events,
    )  # type: ignore[arg-type]


def test_a_valid_save_is_applied_and_reported(project: Path, setup: Any) -> None:
    server, reloader, events = setup
    edit_cell(project, '"v1"', '"v2"')
    event = asyncio.run(reloader.reload({"notebooks/Endpoints.ipynb"}))
    assert isinstance(event, Reloaded)
    assert event.changes.restarted == ["hello/main"]
    assert len(server.applied) == 1
    assert [type(e) for e in events] == [ReloadStarted, Reloaded]
    assert events[0].restarting == ("hello/main",)
    assert event.message.startswith("restarted hello/main (code changed) in ")


def test_a_broken_save_is_refused_then_a_fix_back_to_the_served_code_recovers(
    project: Path, setup: Any
) -> None:
    server, reloader, events = setup
    edit_file(project, "peach.yaml", "method: hello}", "methd: hello}")
    event = asyncio.run(reloader.reload({"peach.yaml"}))
    assert isinstance(event, ReloadRejected)
    assert event.errors >= 1
    assert {d.code for d in event.diagnostics if d.severity == "error"} >= {"PC101"}
    assert server.applied == []
    assert reloader.filter.notebooks is None  # any notebook may be the fix

    edit_file(project, "peach.yaml", "methd: hello}", "method: hello}")
    event = asyncio.run(reloader.reload({"peach.yaml"}))
    assert isinstance(event, ReloadSkipped) and event.recovered
    assert "valid again" in event.message
    assert server.applied == []


def test_a_missing_conf_file_is_refused_with_a_message(project: Path, setup: Any) -> None:
    server, reloader, events = setup
    (project / "peach.yaml").unlink()
    event = asyncio.run(reloader.reload({"peach.yaml"}))
    assert isinstance(event, ReloadRejected)
    assert event.problem and "peach" in event.problem
    assert "still serving the previous version" in event.message
    assert server.applied == []


def test_a_timeout_change_under_the_timeout_option_changes_nothing(
    project: Path, setup: Any
) -> None:
    server, reloader, events = setup
    server.timeout_override = 0.3  # peach dev --timeout-s 0.3: the conf's value is not used
    edit_file(project, "peach.yaml", "codops: reload", "codops: reload\ntimeout_s: 5")
    event = asyncio.run(reloader.reload({"peach.yaml"}))
    assert isinstance(event, ReloadSkipped), event
    assert server.applied == []
    assert "timeout_s" not in event.message


def test_a_component_that_failed_to_start_is_retried_on_the_next_save(
    project: Path, setup: Any
) -> None:
    server, reloader, events = setup
    served = dict(reloader.served.fingerprints)
    server.fail = {"guarded/main": "init_guarded() raised RuntimeError: no"}
    edit_cell(project, 'return "ready"', 'raise RuntimeError("no")')
    event = asyncio.run(reloader.reload({"notebooks/Endpoints.ipynb"}))
    assert isinstance(event, Reloaded)
    assert event.failed == server.fail
    failed = [e for e in events if isinstance(e, ReloadFailed)]
    assert [e.key for e in failed] == ["guarded/main"]
    assert not event.applied
    assert not any(isinstance(e, Reloaded) for e in events)  # the failure is the one line
    assert "RuntimeError: no" in failed[0].message
    # What serves is still the previous version of guarded/main.
    assert reloader.served.fingerprints["guarded/main"] == served["guarded/main"]

    server.fail = {}
    edit_cell(project, 'raise RuntimeError("no")', 'return "steady"')
    event = asyncio.run(reloader.reload({"notebooks/Endpoints.ipynb"}))
    assert isinstance(event, Reloaded) and event.changes.restarted == ["guarded/main"]


async def until(events: list[Any], kind: type) -> None:
    """Poll the recorded events until one of ``kind`` arrives (callers bound the wait)."""
    while not any(isinstance(e, kind) for e in events):
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(reloader: Reloader, events: list[Any]) -> AsyncIterator[None]:
    """The reload loop, live (watching) for the body, stopped after it; all within DEADLINE_S."""
    stop = asyncio.Event()
    task = asyncio.create_task(reloader.run(stop))
    try:
        async with asyncio.timeout(DEADLINE_S):
            await until(events, Watching)
            yield
    finally:
        stop.set()
        await asyncio.wait_for(task, DEADLINE_S)


def test_the_loop_reloads_on_a_save_and_stops_on_its_event(project: Path, setup: Any) -> None:
    server, reloader, events = setup

    async def scenario() -> None:
        async with running(reloader, events):
            edit_file(project, "helpers.py", '+ "!"', '+ "?"')
            await until(events, Reloaded)

    asyncio.run(scenario())
    reloaded = [e for e in events if isinstance(e, Reloaded)]
    assert len(reloaded) == 1
    assert reloaded[0].files == ("helpers.py",)
    assert reloaded[0].changes.restarted == ["loud/main"]


def test_a_save_during_a_reload_supersedes_it_even_if_that_init_never_ends(
    project: Path, setup: Any
) -> None:
    server, reloader, events = setup
    original = server.apply_plan
    calls = 0

    async def first_apply_hangs(plan: ProjectPlan, **_: Any) -> PlanChange:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.Event().wait()  # an init that never returns
        return await original(plan)

    async def scenario() -> None:
        server.apply_plan = first_apply_hangs
        async with running(reloader, events):
            edit_cell(project, '"v1"', '"v2"')
            await until(events, ReloadStarted)
            edit_file(project, "helpers.py", '+ "!"', '+ "?"')
            await until(events, Reloaded)

    asyncio.run(scenario())
    assert any(isinstance(e, ReloadSuperseded) for e in events)
    reloaded = [e for e in events if isinstance(e, Reloaded)]
    assert [sorted(e.changes.restarted) for e in reloaded] == [["hello/main", "loud/main"]]


def test_a_watcher_that_cannot_start_says_so_and_the_loop_ends(tmp_path: Path, setup: Any) -> None:
    server, reloader, events = setup
    reloader.filter.root = tmp_path / "gone"  # watching a missing folder fails

    async def scenario() -> None:
        await asyncio.wait_for(reloader.run(asyncio.Event()), DEADLINE_S)

    asyncio.run(scenario())
    stopped = [e for e in events if isinstance(e, WatchStopped)]
    assert len(stopped) == 1
    assert stopped[0].message.startswith(f"hot reload is off: cannot watch {tmp_path / 'gone'}")


def test_half_a_save_is_not_reported_when_the_rest_lands_during_the_build(
    project: Path, setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor that writes a notebook in two steps: the build sees a truncated file, the
    second write lands meanwhile and is the next batch; the error in between is not shown."""
    import peach_cli.checks.build

    server, reloader, events = setup
    notebook = project / "notebooks" / "Endpoints.ipynb"
    edit_cell(project, '"v1"', '"v2"')
    complete = notebook.read_text()
    notebook.write_text(complete[: len(complete) // 2])
    real_build = peach_cli.checks.build.build_plan

    def build_while_the_save_finishes(path: Any) -> Any:
        result = real_build(path)
        notebook.write_text(complete)
        return result

    monkeypatch.setattr(peach_cli.checks.build, "build_plan", build_while_the_save_finishes)
    event = asyncio.run(reloader.reload({"notebooks/Endpoints.ipynb"}))
    assert isinstance(event, ReloadRejected)  # the truncated notebook was invalid...
    assert events == []  # ...but a newer save was on its way: nothing was shown

    monkeypatch.setattr(peach_cli.checks.build, "build_plan", real_build)
    event = asyncio.run(reloader.reload({"notebooks/Endpoints.ipynb"}))
    assert isinstance(event, Reloaded) and event.changes.restarted == ["hello/main"]
