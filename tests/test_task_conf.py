"""Tasks in the conf: ``timeout_s`` in the model, the JSON Schema and validate; PC310; the
plan's task specs (code extracted like a component's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_peach
from projectkit import diagnose, write_project

from peach_cli.checks.build import build_plan
from peach_cli.project.conf import json_schema

TASKS = Path(__file__).resolve().parent / "projects" / "tasks"

CELLS = [
    "def retrain(payload):\n    return payload\n",  # cell 1
    "def helper():\n    return 1\n",  # cell 2
]


def conf(tasks: str, endpoints: str = "") -> str:
    return (
        "codops: t\n"
        "endpoints:\n"
        "  e: {url: /e, components: {main: {notebook: E.ipynb, method: handle}}}\n"
        f"{endpoints}"
        f"tasks:\n{tasks}"
    )


def test_timeout_s_defaults_to_an_hour_and_is_in_the_plan(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        conf(
            "  retrain: {notebook: T.ipynb, method: retrain}\n"
            "  quick: {notebook: T.ipynb, method: helper, timeout_s: 2.5}\n"
        ),
        {"E.ipynb": ["def handle():\n    return 1\n"], "T.ipynb": CELLS},
    )
    plan, diagnostics = build_plan(root)
    assert plan is not None, diagnostics
    assert plan.tasks["retrain"].timeout_s == 3600
    assert plan.tasks["quick"].timeout_s == 2.5
    # the defining cell only, as for a component
    assert plan.tasks["retrain"].source.strip() == CELLS[0].strip()
    assert plan.tasks["retrain"].line_map == ((1, 1, 1),)


def test_an_invalid_timeout_s_is_an_error_at_its_line(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        conf(
            "  retrain: {notebook: T.ipynb, method: retrain, timeout_s: 0}\n"
            "  other: {notebook: T.ipynb, method: helper, timeuot_s: 3}\n"
        ),
        {"E.ipynb": ["def handle():\n    return 1\n"], "T.ipynb": CELLS},
    )
    found = [(d.code, str(d.position), d.message, d.hint) for d in diagnose(root)]
    assert found == [
        (
            "PC103",
            "peach.yaml:5:60",
            "invalid tasks.retrain.timeout_s: input should be greater than 0",
            None,
        ),
        (
            "PC101",
            "peach.yaml:6:46",
            "unknown key 'timeuot_s' in tasks.other",
            "did you mean 'timeout_s'?",
        ),
    ]


def test_the_json_schema_knows_timeout_s() -> None:
    task = json_schema()["$defs"]["Task"]["properties"]["timeout_s"]
    assert task["default"] == 3600
    assert task["exclusiveMinimum"] == 0


def test_pc309_warns_of_a_literal_task_name_that_is_not_a_task(tmp_path: Path) -> None:
    endpoint = (
        "from pipe_algorithms_lib.task_helpers import trigger_task_with_event\n"
        "import pipe_algorithms_lib.task_helpers as helpers\n\n"
        "def handle(name: str = 'retrain'):\n"
        "    trigger_task_with_event('retrian', {'a': 1})\n"
        "    helpers.trigger_task_with_event(task_name='nothing')\n"
        "    trigger_task_with_event('retrain')\n"
        "    return trigger_task_with_event(name)\n"
    )
    root = write_project(
        tmp_path,
        conf("  retrain: {notebook: T.ipynb, method: retrain}\n"),
        {"E.ipynb": [endpoint], "T.ipynb": CELLS},
    )
    found = [d for d in diagnose(root) if d.code == "PC310"]
    assert [(d.position.cell, d.position.line, d.severity) for d in found] == [
        (1, 5, "warning"),
        (1, 6, "warning"),
    ]
    assert found[0].message == (
        "trigger_task_with_event('retrian') names no task of the project (its tasks: "
        "retrain): the call raises ValueError when it runs"
    )
    assert found[0].hint == "did you mean 'retrain'?"
    # no PC308 for the module peach provides
    assert not [d for d in diagnose(root) if d.code == "PC308"]


@pytest.mark.slow
def test_peach_validate_prints_pc309_and_strict_fails_on_it(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        conf("  retrain: {notebook: T.ipynb, method: retrain}\n"),
        {
            "E.ipynb": [
                "from pipe_algorithms_lib.task_helpers import trigger_task_with_event\n\n"
                "def handle():\n    return trigger_task_with_event('train')\n"
            ],
            "T.ipynb": CELLS,
        },
    )
    result = run_peach("validate", str(root), "--strict")
    assert result.returncode == 1
    assert "E.ipynb:cell 1:line 4:" in result.stdout
    assert "warning PC310 trigger_task_with_event('train') names no task" in result.stdout


def test_the_tasks_test_project_is_clean() -> None:
    assert [d for d in diagnose(TASKS) if d.severity != "info"] == []
