"""A payload is bounded (10 MiB) and its JSON nests at most 100 levels (SPEC §6).

`peach task run --payload @FILE` reads at most the limit and one byte more (``/dev/zero``
is refused, not read whole) and refuses a deep file with a message, never a traceback; the
scheduler's trigger socket answers an error for a deep or huge trigger, and
``trigger_task_with_event`` refuses a deep payload before sending it. (Request bodies of
the dev gateway: ``test_fuzz_http``.)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest
from cli_support import run_peach

from peach_cli.runtime.jsonlimits import MAX_DEPTH, PAYLOAD_LIMIT

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tests" / "projects" / "tasks"


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory) -> Path:
    return Path(shutil.copytree(TASKS, tmp_path_factory.mktemp("p") / "tasks"))


def task_run(project: Path, payload: str):
    return run_peach("task", "run", "record", str(project), "--payload", payload)


@pytest.mark.slow
def test_payload_from_dev_zero_is_refused_without_reading_it_whole(project_copy):
    result = task_run(project_copy, "@/dev/zero")
    assert result.returncode == 2, result.stderr
    assert "--payload @/dev/zero is over the limit of 10 MiB" in result.stderr
    assert "Traceback" not in result.stderr


def test_payload_file_over_the_limit_is_refused(project_copy, tmp_path: Path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps("x" * PAYLOAD_LIMIT))
    result = task_run(project_copy, f"@{big}")
    assert result.returncode == 2, result.stderr
    assert f"--payload @{big} is over the limit of 10 MiB" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 100_000])
def test_deep_payload_file_is_a_message_not_a_traceback(project_copy, tmp_path, levels):
    deep = tmp_path / "deep.json"
    deep.write_text(nested(levels))
    result = task_run(project_copy, f"@{deep}")
    assert result.returncode == 2, result.stderr
    assert f"--payload @{deep} is JSON nested deeper than 100 levels" in result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    inline = task_run(project_copy, nested(min(levels, 10_000)))  # an argument is at most 128 KiB
    assert inline.returncode == 2
    assert "--payload is JSON nested deeper than 100 levels" in inline.stderr


@pytest.fixture(scope="module")
def scheduler(project_copy):
    """A real TaskScheduler listening on its socket, in a thread's event loop."""
    from peach_cli.checks.build import build_plan
    from simulator.tasks.scheduler import TaskScheduler

    plan, diagnostics = build_plan(project_copy)
    assert plan is not None, diagnostics
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sched = TaskScheduler(plan, project=project_copy, loop=False, keep_warm=False)
    asyncio.run_coroutine_threadsafe(sched.start(run_loop=False), loop).result(30)
    yield sched
    asyncio.run_coroutine_threadsafe(sched.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def ask_socket(path: str, request: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(20)
        connection.connect(path)
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    assert received.endswith(b"\n"), received
    return json.loads(received)


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 100_000])
def test_trigger_socket_answers_an_error_for_a_deep_payload(scheduler, levels):
    request = b'{"task": "record", "payload": ' + nested(levels).encode() + b"}\n"
    reply = ask_socket(scheduler.socket_path, request)
    assert reply == {"error": "the trigger's payload is JSON nested deeper than 100 levels"}


def test_trigger_socket_answers_an_error_for_a_huge_trigger(scheduler):
    reply = ask_socket(scheduler.socket_path, b"x" * (PAYLOAD_LIMIT + 128 * 1024))
    assert reply == {"error": "the trigger is over the limit of 10 MiB"}
    assert ask_socket(scheduler.socket_path, b"nonsense\n") == {"error": "not a trigger request"}


def test_trigger_task_with_event_refuses_a_deep_payload(scheduler, monkeypatch):
    from peach_cli.runtime.triggers import SOCKET_ENV, TriggerPayloadError, trigger_task_with_event

    monkeypatch.setitem(os.environ, SOCKET_ENV, scheduler.socket_path)
    value: list = []
    for _ in range(MAX_DEPTH):  # 100 levels: taken
        value = [value]
    assert trigger_task_with_event("record", value[0]).startswith("record#")
    with pytest.raises(TriggerPayloadError, match="nested deeper than 100 levels"):
        trigger_task_with_event("record", value)


@pytest.mark.slow
def test_peach_ask_json_and_file_items_are_bounded(tmp_path: Path):
    from ask_support import ask

    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    url = "http://127.0.0.1:9/x"  # refused before anything is sent
    for args in ([f"--json=@{deep}"], [f"a:=@{deep}"]):
        result = ask(url, *args)
        assert result.code == 2, result.stderr
        assert "nested deeper than 100 levels" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    for args in (["--json=@/dev/zero"], ["a=@/dev/zero"], ["a:=@/dev/zero"]):
        result = ask(url, *args)
        assert result.code == 2 and "over the limit of 10 MiB" in result.stderr, result.stderr
