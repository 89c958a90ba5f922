"""What `peach dev` says when something goes wrong, as a new user reads it: each thing said
once, in the order it happens, and nothing claimed that did not happen."""

from __future__ import annotations

import pytest
from projectkit import BASE_CELLS, write_project

ONE = (
    "codops: shop\nendpoints:\n  e:\n    url: /e\n"
    "    components:\n      main: {notebook: nb.ipynb, method: ask}\n"
)
BROKEN_ENV = (
    "codops: shop\npy_environments:\n  other: {dependencies: [peach-no-such-package-zz]}\n"
    "endpoints:\n  e:\n    url: /e\n    components:\n      main: {notebook: nb.ipynb, method: ask}\n"
    "  f:\n    url: /f\n    py_env: other\n"
    "    components:\n      main: {notebook: nb.ipynb, method: no_model}\n"
)
UV_SAYS = "peach-no-such-package-zz was not found"


def test_an_env_that_cannot_be_built_is_said_once_at_start(tmp_path, peach_dev):
    write_project(tmp_path, BROKEN_ENV, {"nb.ipynb": BASE_CELLS})
    dev = peach_dev(tmp_path, "--offline")
    dev.wait_for_output(r"replicas healthy in")
    output = dev.output()
    assert output.count(UV_SAYS) == 1, output
    assert "f/main#1 unhealthy: py_env 'other' could not be built (the error above)" in output


def test_a_reload_whose_env_cannot_be_built_does_not_say_started(tmp_path, peach_dev):
    write_project(tmp_path, ONE, {"nb.ipynb": BASE_CELLS})
    dev = peach_dev(tmp_path, "--offline", reload=True)
    dev.wait_for_output(r"1/1 replicas healthy in")
    dev.mark()
    (tmp_path / "peach.yaml").write_text(BROKEN_ENV)
    dev.wait_for_output(r"f/main did not start \(unhealthy, see above\) in [\d.]+ m?s")
    after = dev.output_since_mark()
    assert "started f/main" not in after, after
    assert after.count(UV_SAYS) == 1, after
    lines = after.splitlines()
    unhealthy = next(i for i, line in enumerate(lines) if "f/main#1 unhealthy" in line)
    done = next(i for i, line in enumerate(lines) if "did not start" in line)
    assert unhealthy < done
    assert dev.process.poll() is None  # still serving /e


WITH_TASK = ONE + "tasks:\n  retrain: {notebook: t.ipynb, method: retrain}\n"
TASK_CELLS = ["def retrain():\n    return {'done': True}\n"]


def test_editing_a_task_notebook_says_it_applies_from_the_next_run(tmp_path, peach_dev):
    write_project(tmp_path, WITH_TASK, {"nb.ipynb": BASE_CELLS, "t.ipynb": TASK_CELLS})
    dev = peach_dev(tmp_path, "--tasks", "--task-interval", "3600", reload=True)
    dev.wait_for_output(r"1/1 replicas healthy in")
    dev.mark()
    changed = ["def retrain():\n    return {'done': 2}\n"]
    write_project(tmp_path, None, {"t.ipynb": changed})
    dev.wait_for_output(r"t\.ipynb changed: task retrain will use it from the next run")
    assert "nothing to reload" not in dev.output_since_mark()


@pytest.mark.slow
def test_outside_a_project_dev_and_validate_hint_at_peach_init(tmp_path):
    from cli_support import run_peach

    for command in ("dev", "validate"):
        result = run_peach(command, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "hint: create one here with `peach init`" in result.stderr
        assert "examples/quickstart" not in result.stderr


def test_a_component_without_init_slow_to_load_says_its_code_is_loading(
    tmp_path, peach_dev, monkeypatch
):
    monkeypatch.setenv("PEACH_INIT_STUCK_S", "0.3")
    cells = ["import time\n\ndef ask(q: str = ''):\n    return [q]\n\ntime.sleep(30)\n"]
    write_project(tmp_path, ONE, {"nb.ipynb": cells})
    dev = peach_dev(tmp_path)
    line = dev.wait_for_output(r"e/main#1 starting: .*")
    assert "its code is still loading after 0.3 s" in line.group(0)
    assert "init" not in line.group(0)
