"""Tasks under `peach dev`: the loop of `--tasks`, and triggers from endpoints.

Real `peach dev` processes on loopback serve a copy of ``tests/projects/tasks`` in its
isolated ``base`` env; the tasks write ``runs.jsonl`` in the project folder, which the tests
poll with a deadline.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import DevProcess, start_peach_dev

TASKS = Path(__file__).resolve().parent / "projects" / "tasks"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TASKS, tmp_path / "tasks"))


@pytest.fixture(scope="module")
def trigger_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(shutil.copytree(TASKS, tmp_path_factory.mktemp("triggers") / "tasks"))


@pytest.fixture(scope="module")
def trigger_dev(trigger_project: Path) -> Iterator[DevProcess]:
    """One `peach dev` of the tasks project (no ``--tasks``: triggered runs only) for the
    tests that trigger runs from its endpoints."""
    dev = start_peach_dev(trigger_project, trigger_project.parent / "peach-dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


@pytest.fixture
def triggers(trigger_dev: DevProcess, trigger_project: Path) -> tuple[DevProcess, Path]:
    """``trigger_dev`` and its project, with no run recorded yet (an earlier test's runs
    have all ended: each test waits for its own)."""
    (trigger_project / "runs.jsonl").unlink(missing_ok=True)
    return trigger_dev, trigger_project


def runs(project: Path) -> list[dict]:
    path = project / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_the_loop_goes_on_past_a_failing_and_a_hanging_task(project: Path, peach_dev) -> None:
    dev = peach_dev(project, "--tasks", "--task-interval", "0.2")
    # every task once, one after another: the failing one and the one killed at its
    # timeout are counted, and the next round runs them all again
    dev.wait_for_output(r"task fail run fail#\d+ failed in [\d.]+ s: RuntimeError: bad data: None")
    dev.wait_for_output(r"task hang run hang#\d+ timed out after 2 s \(timeout_s\): killed its")
    wait_for(lambda: dev.output().count("task greet run greet#") >= 2, "a second round")
    output = dev.output()
    assert "fail | failing now" in output
    assert "fail |   File notebooks/Tasks.ipynb, cell 4, line 3, in fail" in output
    assert output.index("task record run record#1 ok") < output.index("task greet run greet#2")
    # the endpoints kept serving
    assert httpx.get(f"{dev.url}/kick", params={"task": "greet"}, timeout=10).status_code == 200


@pytest.mark.slow
def test_a_trigger_from_an_endpoint_reaches_the_task_with_its_payload(
    triggers: tuple[DevProcess, Path],
) -> None:
    dev, project = triggers
    answer = httpx.get(f"{dev.url}/kick", params={"value": 42}, timeout=10).json()
    run_id = answer["result"]["run_id"]
    assert run_id.startswith("record#")
    wait_for(lambda: len(runs(project)) == 1, "the triggered run")
    assert runs(project)[0]["payload"] == {"value": 42}
    dev.wait_for_output(rf"task record triggered run {run_id} ok in [\d.]+ s: returned")
    assert 'record | recorded {"value": 42}' in dev.output_since_mark()

    unknown = httpx.get(f"{dev.url}/kick", params={"task": "nope"}, timeout=10)
    assert unknown.status_code == 500
    assert unknown.json()["error"]["message"] == (
        "kick() raised ValueError: unknown task 'nope': the project's tasks are "
        "record, greet, fail, hang, chain"
    )
    not_json = httpx.get(f"{dev.url}/bad_payload", timeout=10).json()["error"]["message"]
    assert "TriggerPayloadError: the payload for task 'record' must be JSON" in not_json
    assert len(runs(project)) == 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_burst_of_100_triggers_runs_each_once_in_order(
    triggers: tuple[DevProcess, Path],
) -> None:
    dev, project = triggers
    run_ids = httpx.get(f"{dev.url}/burst", params={"n": 100}, timeout=30).json()["result"]
    assert len(set(run_ids)) == 100
    wait_for(lambda: len(runs(project)) >= 100, "100 runs", timeout_s=200)
    done = runs(project)
    assert [r["payload"]["value"] for r in done] == list(range(100))  # once each, in order
    assert len({r["pid"] for r in done}) == 100  # each in its own process


@pytest.mark.slow
def test_an_edited_task_notebook_applies_from_the_next_run(project: Path, peach_dev) -> None:
    dev = peach_dev(project, reload=True)  # hot reload on, as a user runs it
    dev.wait_ready()
    httpx.get(f"{dev.url}/kick", params={"task": "greet"}, timeout=10).raise_for_status()
    dev.wait_for_output(r"greet \| hello from greet v1")
    notebook = project / "notebooks" / "Tasks.ipynb"
    notebook.write_text(notebook.read_text().replace("greet v1", "greet v2"))
    httpx.get(f"{dev.url}/kick", params={"task": "greet"}, timeout=10).raise_for_status()
    dev.wait_for_output(r"greet \| hello from greet v2")
    assert dev.stop() == 0
    assert "Traceback" not in dev.output()


@pytest.mark.slow
def test_ctrl_c_stops_a_running_task_with_its_children(project: Path, peach_dev) -> None:
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("timeout_s: 2}", "timeout_s: 120}"))
    dev = peach_dev(project, "--tasks", "--task-interval", "60")
    dev.wait_for_output(r"hang \| started child \d+")
    child = int((project / "child.pid").read_text())
    assert dev.stop() == 0
    assert re.search(
        r"stopping: closing streams and replicas\n(.*\n)*task hang run hang#\d+ stopped after "
        r"[\d.]+ s: its process tree was killed",
        dev.output(),
    ), dev.output()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the task's child outlived peach dev"
        time.sleep(0.05)


def test_the_dev_view_shows_a_tasks_table() -> None:
    from rich.console import Console

    from peach_cli.views.dev import DevView
    from simulator.tasks.events import TaskChanged, TaskState

    console = Console(width=120, no_color=True, force_terminal=True, record=True)
    view = DevView(console, live=True)
    view.handle(TaskChanged("retrain", TaskState.RUNNING, 3, 1, 0, 0.52, "RuntimeError: bad"))
    view.handle(TaskChanged("greet", TaskState.QUEUED, 1, 0, 2))
    console.print(view.render())
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert "task     state       ok  failed  last run  last error" in lines
    assert "retrain  running      3       1  0.52 s    RuntimeError: bad" in lines
    assert "greet    queued (2)   1       0  -" in lines


@pytest.mark.slow
def test_triggered_runs_go_before_the_loops_next_task_and_during_its_pause(
    project: Path,
) -> None:
    """The scheduler itself, with real task processes (peach's own interpreter)."""
    import asyncio

    from peach_cli.checks.build import build_plan
    from simulator.tasks.events import TaskRunEnded
    from simulator.tasks.scheduler import TaskScheduler

    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics

    async def scenario() -> list[tuple[str, bool]]:
        ended: list[TaskRunEnded] = []
        got_one = asyncio.Event()

        def collect(event: object) -> None:
            if isinstance(event, TaskRunEnded):
                ended.append(event)
                got_one.set()

        scheduler = TaskScheduler(
            plan, project=project, loop=True, interval_s=60, keep_warm=False, on_event=collect
        )
        scheduler.trigger("greet")  # queued before the loop starts: it runs first
        await scheduler.start()
        try:
            async with asyncio.timeout(60):
                while len(ended) < 7:  # greet, then the round of 5 (chain triggers record)
                    got_one.clear()
                    await got_one.wait()
                scheduler.trigger("record", '{"value": "in the pause"}')
                began = asyncio.get_running_loop().time()
                while len(ended) < 8:
                    got_one.clear()
                    await got_one.wait()
                assert asyncio.get_running_loop().time() - began < 30  # not after the pause
        finally:
            await scheduler.stop()
        return [(e.task, e.triggered) for e in ended]

    order = asyncio.run(scenario())
    assert order == [
        ("greet", True),
        ("record", False),
        ("greet", False),
        ("fail", False),
        ("hang", False),
        ("chain", False),
        ("record", True),  # triggered by chain: before the next round
        ("record", True),  # triggered during the pause: at once
    ]
    assert runs(project)[-1]["payload"] == {"value": "in the pause"}


@pytest.mark.slow
def test_a_conf_missing_mid_save_does_not_stop_the_scheduler(project):
    """An editor that saves by renaming leaves no peach.yaml for a moment: the scheduler
    says so, keeps its last good tasks, and runs the next trigger."""
    import asyncio

    from peach_cli.checks.build import build_plan
    from simulator.events import ServerNote
    from simulator.tasks.events import TaskRunEnded
    from simulator.tasks.scheduler import TaskScheduler

    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    conf = project / "peach.yaml"
    text = conf.read_text()

    async def scenario() -> tuple[list[str], list[TaskRunEnded]]:
        notes: list[str] = []
        ended: list[TaskRunEnded] = []
        got_one = asyncio.Event()

        def collect(event: object) -> None:
            if isinstance(event, ServerNote):
                notes.append(event.message)
            elif isinstance(event, TaskRunEnded):
                ended.append(event)
                got_one.set()

        scheduler = TaskScheduler(plan, project=project, keep_warm=False, on_event=collect)
        await scheduler.start()
        try:
            conf.unlink()
            scheduler.trigger("greet")
            async with asyncio.timeout(60):
                await got_one.wait()
            conf.write_text(text)
            got_one.clear()
            scheduler.trigger("greet")
            async with asyncio.timeout(60):
                await got_one.wait()
        finally:
            await scheduler.stop()
        return notes, ended

    notes, ended = asyncio.run(scenario())
    assert [e.task for e in ended] == ["greet", "greet"] and all(e.ok for e in ended)
    assert any("running the last good version" in note for note in notes), notes
