"""`peach task list` and `peach task run`, as a user runs them: real processes, a real env.

Each test copies ``tests/projects/tasks`` (its tasks write files in the project folder, their
working directory) and runs the real CLI; the task runs in the project's isolated ``base``
env (no requirements: built once per session, in the session's env cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_support import PEACH, run_peach, run_peach_process
from projectkit import copy_assistant
from waiting import assert_gone

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tests" / "projects" / "tasks"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TASKS, tmp_path / "tasks"))


def runs(project: Path) -> list[dict]:
    path = project / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_task_list_shows_each_task(project: Path) -> None:
    result = run_peach("task", "list", str(project))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "record  notebooks/Tasks.ipynb:record  py_env base  timeout 3600 s" in lines
    assert "hang  notebooks/Tasks.ipynb:hang  py_env base  timeout 2 s" in lines
    data = json.loads(run_peach("task", "list", str(project), "--format", "json").stdout)
    assert [t["name"] for t in data["tasks"]] == ["record", "greet", "fail", "hang", "chain"]
    assert data["tasks"][3]["timeout_s"] == 2


@pytest.mark.slow
def test_a_run_with_a_payload_streams_its_lines_with_the_task_name(project: Path) -> None:
    result = run_peach("task", "run", "record", str(project), "--payload", '{"value": 1}')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ['record | recorded {"value": 1}']
    assert "task record run record#1 ok in" in result.stderr
    assert 'returned {"value": 1}' in result.stderr
    (run,) = runs(project)
    assert run["payload"] == {"value": 1}
    assert Path(run["cwd"]).resolve() == project.resolve()  # the project folder
    # in the py_env's isolated env (built in the session's env cache), not peach's Python
    assert (
        Path(run["prefix"]).resolve().is_relative_to(Path(os.environ["PEACH_ENV_CACHE"]).resolve())
    )


@pytest.mark.slow
def test_a_run_without_a_payload(project: Path) -> None:
    result = run_peach("task", "run", "record", str(project))
    assert result.returncode == 0, result.stderr
    assert runs(project)[0]["payload"] is None  # a function taking one gets None
    result = run_peach("task", "run", "greet", str(project))  # a function taking none
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["greet | hello from greet v1"]
    assert 'returned "greeted"' in result.stderr


@pytest.mark.slow
def test_the_payload_from_a_file_and_bad_payloads(project: Path, tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text('{"value": [1, 2]}')
    result = run_peach("task", "run", "record", str(project), "--payload", f"@{payload}")
    assert result.returncode == 0, result.stderr
    assert runs(project)[0]["payload"] == {"value": [1, 2]}

    result = run_peach("task", "run", "record", str(project), "--payload", "{nope")
    assert result.returncode == 2
    assert "--payload is not JSON" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_peach("task", "run", "record", str(project), "--payload", "@missing.json")
    assert result.returncode == 2
    assert "cannot read missing.json" in result.stderr
    assert len(runs(project)) == 1


@pytest.mark.slow
def test_a_raising_task_exits_1_with_its_traceback_in_the_notebook(project: Path) -> None:
    result = run_peach("task", "run", "fail", str(project), "--payload", '"x"')
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["fail | failing now"]
    err = result.stderr.splitlines()
    assert "fail | Traceback (most recent call last):" in err
    assert "fail |   File notebooks/Tasks.ipynb, cell 4, line 3, in fail" in err
    assert "fail | RuntimeError: bad data: x" in err
    assert "task fail run fail#1 failed in" in result.stderr


@pytest.mark.slow
def test_a_task_past_its_timeout_is_killed_with_its_children(project: Path) -> None:
    # real processes: the test counts and kills peach's process tree (the task and its child)
    began = time.monotonic()
    result = run_peach_process("task", "run", "hang", str(project))
    assert result.returncode == 1
    assert time.monotonic() - began < 30
    assert "timed out after 2 s (timeout_s): killed its process tree (2 processes)" in (
        result.stderr
    )
    first = started_child(result)
    assert_gone(first)

    result = run_peach_process("task", "run", "hang", str(project), "--timeout-s", "1")
    assert result.returncode == 1
    assert "timed out after 1 s (--timeout-s): killed its process tree" in result.stderr
    second = started_child(result)  # this run's child, not the file the first one left
    assert second != first
    assert_gone(second)


def started_child(result: subprocess.CompletedProcess[str]) -> int:
    """The pid of the child the ``hang`` task says it started in this run."""
    match = re.search(r"^hang \| started child (\d+)$", result.stdout, re.M)
    assert match, result.stdout
    return int(match.group(1))


@pytest.mark.slow
def test_an_unknown_task_is_a_usage_error_with_did_you_mean(project: Path) -> None:
    result = run_peach("task", "run", "recrod", str(project))
    assert result.returncode == 2
    assert "unknown task 'recrod': the project's tasks are record, greet, fail, hang, chain" in (
        result.stderr
    )
    assert "did you mean 'record'?" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_peach("task", "run", "record", str(project), "--timeout-s", "0")
    assert result.returncode == 2
    assert "--timeout-s must be a positive number" in result.stderr


def test_ctrl_c_stops_the_task_and_its_children_and_exits_130(project: Path) -> None:
    process = subprocess.Popen(
        # a real process: the test sends it SIGINT
        [*PEACH, "task", "run", "hang", str(project)] + ["--timeout-s", "120"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the task printed (or exited)
        assert line.startswith("hang | started child"), line
        child = int((project / "child.pid").read_text())
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "hang: interrupted; the task was stopped and its process tree killed" in err
    assert_gone(child)


@pytest.mark.slow
def test_a_task_triggers_another_that_runs_after_it(project: Path) -> None:
    result = run_peach("task", "run", "chain", str(project), "--payload", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "chain | triggered record#2",
        'record | recorded {"from": "chain", "payload": 5}',
    ]
    assert "task record triggered run record#2 ok" in result.stderr
    assert [r["payload"] for r in runs(project)] == [{"from": "chain", "payload": 5}]


@pytest.mark.slow
def test_a_project_with_errors_is_not_run(project: Path) -> None:
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("method: greet}", "method: greeet}"))
    result = run_peach("task", "run", "record", str(project))
    assert result.returncode == 1
    assert "error PC204 method 'greeet' is not defined" in result.stdout
    assert "not running" in result.stdout
    assert runs(project) == []


def test_a_long_output_line_is_cut_once_not_split_into_lines():
    import asyncio

    from simulator.tasks.run import MAX_LINE_BYTES, _pump

    async def pumped(*chunks: bytes) -> list[str]:
        reader = asyncio.StreamReader()
        for chunk in chunks:
            reader.feed_data(chunk)
        reader.feed_eof()
        lines: list[str] = []
        await _pump(reader, lines.append)
        return lines

    long = b"a" * 200_000  # longer than one read: it arrives in several
    lines = asyncio.run(pumped(long, b"\nshort\r\n", b"b" * 70_000))
    assert lines == [
        "a" * MAX_LINE_BYTES + f" … ({200_000 - MAX_LINE_BYTES} more bytes of this line not shown)",
        "short",
        "b" * MAX_LINE_BYTES + f" … ({70_000 - MAX_LINE_BYTES} more bytes of this line not shown)",
    ]


def test_the_assistant_examples_retrain_changes_no_tracked_file(tmp_path: Path) -> None:
    """The tutorial's `peach task run retrain examples/assistant`, in a clone: the version
    it writes is in its model folder (``ASSISTANT_MODEL_DIR``), not a tracked file, and the
    next run reads it."""
    repo = copy_assistant(tmp_path / "assistant")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "example"], check=True)
    for old, new in (("1", "2"), ("2", "3")):
        run = run_peach("task", "run", "retrain", str(repo), "--shared-env")
        assert run.returncode == 0, run.stderr
        assert f"knowledge version {old} -> {new}" in run.stdout
        status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
        assert status.stdout == "", status.stdout
