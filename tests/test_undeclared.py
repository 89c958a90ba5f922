"""PC308: an import that the code's py_env does not provide, found by parsing only."""

from __future__ import annotations

from pathlib import Path

import pytest
from env_support import SMALL
from projectkit import diagnose, write_project

from peach_cli.envs import EnvSpec, find_built

CELL = """import json
import tomli_w
import websocket
from yaml import safe_load
import numpy as np
from sklearn.linear_model import Ridge
import helpers
from peach_cli import endpoint
from pipe_algorithms_lib.task_helpers import trigger_task_with_event
try:
    import orjson
except ImportError:
    orjson = None
try:
    import ujson
except (ModuleNotFoundError, AttributeError):
    ujson = None
from . import nothing

def ask(q: str = ""):
    import requests
    return q
"""

CONF = """codops: shop
py_environments:
  base: {dependencies: [tomli-w, "websocket-client>=1"]}  # never built by a test
  ml: {dependencies: ["scikit-learn>=1.5", numpy]}
endpoints:
  plain: {url: /plain, components: {main: {notebook: nb.ipynb, method: ask}}}
  ml: {url: /ml, py_env: ml, components: {main: {notebook: nb.ipynb, method: ask}}}
tasks:
  t: {notebook: nb.ipynb, method: ask, py_env: ml}
"""


def flagged(root: Path) -> dict[tuple[str, str], str]:
    """(py_env, module) → position, for every PC308."""
    found = {}
    for d in diagnose(root):
        if d.code == "PC308":
            module = d.message.split("'")[1]
            env = d.message.split("py_env '")[1].split("'")[0]
            found[(env, module)] = f"{d.position}:{d.position.column}"
            assert d.severity == "warning"
            assert d.hint.startswith("add '")
    return found


def test_undeclared_imports_are_flagged_at_their_line(tmp_path):
    write_project(tmp_path, CONF, {"nb.ipynb": [("markdown", "# e"), CELL]}, {"helpers.py": ""})
    found = flagged(tmp_path)
    assert set(found) == {
        # base declares tomli-w and websocket-client: no numpy, yaml, sklearn, requests
        ("base", "yaml"),
        ("base", "numpy"),
        ("base", "sklearn"),
        ("base", "requests"),
        # websocket-client's module is `websocket`, which only its metadata says: the env
        # is not built, so neither the table nor normalisation finds it
        ("base", "websocket"),
        ("ml", "websocket"),
        ("ml", "yaml"),
        ("ml", "requests"),
    }
    assert found[("base", "yaml")] == "nb.ipynb:cell 2:line 4:6"
    assert found[("base", "numpy")] == "nb.ipynb:cell 2:line 5:8"
    assert found[("ml", "requests")] == "nb.ipynb:cell 2:line 21:12"
    hints = {
        d.message.split("'")[1]: d.hint
        for d in diagnose(tmp_path)
        if d.code == "PC308" and "py_env 'base'" in d.message
    }
    assert hints["yaml"] == "add 'pyyaml' to py_environments.base.dependencies"
    assert hints["sklearn"] == "add 'scikit-learn' to py_environments.base.dependencies"


def test_a_built_env_is_read_from_its_metadata(tmp_path, small_env):
    conf = "codops: shop\npy_environments:\n  base: {dependencies: [tomli-w, websocket-client]}\n"
    conf += "endpoints:\n  e: {url: /e, components: {main: {notebook: nb.ipynb, method: ask}}}\n"
    cell = "import websocket\nimport tomli_w\n\ndef ask():\n    return 1\n"
    write_project(tmp_path, conf, {"nb.ipynb": [cell]})
    assert find_built(EnvSpec("base", SMALL)) is not None
    assert flagged(tmp_path) == {}  # websocket-client's RECORD names `websocket`


def test_decorator_notebooks_run_in_base(tmp_path):
    conf = "codops: shop\ndecorator_endpoints: [D.ipynb]\n"
    cell = 'from peach_cli import endpoint\nimport PIL\n\n@endpoint("/d")\ndef d():\n    return 1\n'
    write_project(tmp_path, conf, {"D.ipynb": [cell]})
    diagnostics = [d for d in diagnose(tmp_path) if d.code == "PC308"]
    assert [str(d.position) for d in diagnostics] == ["D.ipynb:cell 1:line 2"]
    assert diagnostics[0].hint == "add 'pillow' to py_environments.base.dependencies"


def test_only_the_cells_that_run_are_checked(tmp_path):
    conf = "codops: shop\nendpoints:\n"
    conf += "  e: {url: /e, components: {main: {notebook: nb.ipynb, method: ask}}}\n"
    cells = ["import pandas\n", "def ask():\n    return 1\n"]
    write_project(tmp_path, conf, {"nb.ipynb": cells})
    assert flagged(tmp_path) == {}
    full = conf.replace("method: ask}", "method: ask, full_notebook: true}")
    write_project(tmp_path, full, {"nb.ipynb": cells})
    assert set(flagged(tmp_path)) == {("base", "pandas")}


@pytest.mark.slow
def test_the_cli_shows_pc308_as_a_warning(tmp_path):
    from cli_support import run_peach

    conf = "codops: shop\nendpoints:\n"
    conf += "  e: {url: /e, components: {main: {notebook: nb.ipynb, method: ask}}}\n"
    write_project(tmp_path, conf, {"nb.ipynb": ["import yaml\n\ndef ask():\n    return 1\n"]})
    result = run_peach("validate", str(tmp_path))
    assert result.returncode == 0  # a warning
    assert "nb.ipynb:cell 1:line 1: warning PC308 'yaml' is imported" in result.stdout
    assert "hint: add 'pyyaml'" in result.stdout
    assert run_peach("validate", str(tmp_path), "--strict").returncode == 1
