"""How a task's function is called (SPEC §5), through both of its entries, as a user runs them.

The payload goes as first positional argument when the function takes one, else none;
``args`` and the state ``init`` returned go by name; a coroutine is awaited; ``exit(0)`` is a
normal end. Each case runs the real task process on a real notebook: the Ray job's
entrypoint (``python -m peach_cli.runtime.task .peach/task.json``, the spec written as
``peach task run --address`` uploads it) and ``peach task run`` (the local task worker).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import run_peach
from projectkit import write_project

from peach_cli.checks.build import build_plan

CONF = """\
codops: binding
tasks:
  train: {notebook: Tasks.ipynb, method: train, init: load, args: {lr: 0.5, unknown: 1}}
  bare: {notebook: Tasks.ipynb, method: bare}
  later: {notebook: Tasks.ipynb, method: later}
  starred: {notebook: Tasks.ipynb, method: starred, args: {flag: true}}
  quits: {notebook: Tasks.ipynb, method: quits}
  exits3: {notebook: Tasks.ipynb, method: exits3}
  bad_init: {notebook: Tasks.ipynb, method: bare, init: broken}
  raw: {notebook: Tasks.ipynb, method: raw}
"""
CELLS = [
    ("markdown", "# Tasks"),
    'def load():\n    return {"w": 2}\n',  # cell 2
    "def train(payload, model, lr=0.1):\n    return (payload, model, lr)\n",  # cell 3
    'def bare():\n    return "no payload"\n',  # cell 4
    "async def later(payload):\n    return ['awaited', payload]\n",  # cell 5
    "def starred(*args, flag=False, **kwargs):\n    return (args, flag, sorted(kwargs))\n",
    "def quits():\n    print('bye')\n    raise SystemExit(0)\n",  # cell 7
    "def exits3():\n    raise SystemExit(3)\n",  # cell 8
    "def broken():\n    x = 1\n    raise ValueError(f'no state {x}')\n",  # cell 9
    "def raw():\n    return bytearray(b'garbage')\n",  # cell 10
]

CASES = [
    # (task, payload JSON or None, exit code, a line of what it prints)
    ("train", '{"a": 1}', 0, 'returned [{"a": 1}, {"w": 2}, 0.5]'),
    ("train", None, 0, 'returned [null, {"w": 2}, 0.5]'),
    ("bare", '"ignored"', 0, 'returned "no payload"'),
    ("later", "[1, 2]", 0, 'returned ["awaited", [1, 2]]'),
    ("starred", "7", 0, "returned [[7], true, []]"),
    ("quits", None, 0, "task quits returned in"),
    ("exits3", None, 1, "SystemExit: 3"),
    ("bad_init", None, 1, "ValueError: no state 1"),
    ("raw", None, 0, 'returned "garbage" (7 bytes)'),  # never a repr: bytearray(b'...')
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("binding") / "binding"
    return write_project(root, CONF, {"Tasks.ipynb": CELLS})


def run_ray_entry(project: Path, task: str, payload: str | None) -> subprocess.CompletedProcess:
    """The Ray job's entrypoint, in the project folder, on the spec ``jobs.py`` uploads."""
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    spec_file = project / ".peach" / f"{task}.json"
    spec_file.parent.mkdir(exist_ok=True)
    spec_file.write_text(json.dumps(dataclasses.asdict(plan.tasks[task])))
    env = {**os.environ, "PEACH_TASK_PAYLOAD": payload or ""}
    return subprocess.run(
        [sys.executable, "-m", "peach_cli.runtime.task", str(spec_file)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize(("task", "payload", "code", "shown"), CASES)
def test_the_ray_entry_binds_and_exits_as_the_spec_says(
    project: Path, task: str, payload: str | None, code: int, shown: str
) -> None:
    result = run_ray_entry(project, task, payload)
    assert result.returncode == code, result.stderr
    assert shown in result.stdout + result.stderr


def test_a_failing_init_shows_its_notebook_position(project: Path) -> None:
    result = run_ray_entry(project, "bad_init", None)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "  File Tasks.ipynb, cell 9, line 3, in broken" in lines
    assert lines[-1] == "ValueError: no state 1"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "payload", "code", "shown"),
    [CASES[0], CASES[3], CASES[4], CASES[6], CASES[7]],
)
def test_peach_task_run_binds_as_the_ray_entry_does(
    project: Path, task: str, payload: str | None, code: int, shown: str
) -> None:
    args = ["task", "run", task, str(project), "--shared-env"]
    result = run_peach(*args, *(["--payload", payload] if payload else []))
    assert result.returncode == code, result.stderr
    assert shown in result.stderr
