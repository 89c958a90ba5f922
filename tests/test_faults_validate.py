"""Hostile projects through `peach validate` (and `peach dev`, which loads them the same way).

What tests/test_validate_fuzz.py does not cover: notebook paths that leave the project
(``..``, absolute, symlinked files and folders, NUL bytes, symlink loops, FIFOs), YAML tags
that would construct objects, alias bombs, and damage to the notebook files themselves (their
JSON structure, encodings) and to the conf's bytes, checked through the command's exit code:
never a traceback, the exit code 0 or 1.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from cli_support import run_peach
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projectkit import BASE_CELLS, diagnose, notebook_json, write_project

from peach_cli.checks.build import build_plan

CONF = """\
codops: sec
endpoints:
  ok:
    url: /ok
    components:
      main: {notebook: nb.ipynb, method: ask}
"""
CELLS = ['def ask(q: str = ""):\n    return [q]\n']


def run_validate(*args: str) -> tuple[int, str]:
    """`peach validate ARGS` in this process: (exit code, standard output then error)."""
    result = run_peach("validate", *args)
    return result.returncode, result.stdout + result.stderr


def conf_with(notebook: str, *, decorator: str | None = None) -> str:
    text = (
        CONF
        + f"  evil:\n    url: /evil\n    components:\n      main: {{notebook: {json.dumps(notebook)}, method: ask}}\n"
    )
    if decorator is not None:
        text += f"decorator_endpoints:\n  - {json.dumps(decorator)}\n"
    return text


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A valid notebook and a folder holding one, both outside the project."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "Out.ipynb").write_text(notebook_json(CELLS))
    return folder


# -- paths that leave the project -----------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["dotdot", "absolute", "dotdot-inside", "symlinked-file", "symlinked-folder", "decorator"],
)
def test_notebook_paths_leaving_the_project_are_rejected(tmp_path, outside, name):
    project = write_project(tmp_path / "project", None, {"nb.ipynb": CELLS})
    (project / "notebooks").mkdir()
    os.symlink(outside / "Out.ipynb", project / "notebooks" / "Link.ipynb")
    os.symlink(outside, project / "linked")
    notebook, decorator = {
        "dotdot": ("../outside/Out.ipynb", None),
        "absolute": (str(outside / "Out.ipynb"), None),
        "dotdot-inside": ("notebooks/../../outside/Out.ipynb", None),
        "symlinked-file": ("notebooks/Link.ipynb", None),
        "symlinked-folder": ("linked/Out.ipynb", None),
        "decorator": ("nb.ipynb", "linked/Out.ipynb"),
    }[name]
    (project / "peach.yaml").write_text(conf_with(notebook, decorator=decorator))
    code, output = run_validate(str(project))
    assert code == 1, output
    assert "PC202" in output and "is outside the project folder" in output
    plan, diagnostics = build_plan(project)  # what `peach dev` and `peach deploy` load
    assert plan is None
    assert any(d.code == "PC202" for d in diagnostics)


@pytest.mark.parametrize("name", ["nul-byte", "symlink-loop", "fifo", "long-name", "folder"])
def test_notebook_paths_that_are_not_files_are_errors_not_tracebacks(tmp_path, name):
    project = write_project(tmp_path / "project", None, {"nb.ipynb": CELLS})
    if name == "symlink-loop":
        os.symlink("b.ipynb", project / "a.ipynb")
        os.symlink("a.ipynb", project / "b.ipynb")
    if name == "fifo":
        os.mkfifo(project / "fifo.ipynb")  # reading it would block forever
    if name == "folder":
        (project / "dir.ipynb").mkdir()
    notebook = {
        "nul-byte": "nb\x00.ipynb",
        "symlink-loop": "a.ipynb",
        "fifo": "fifo.ipynb",
        "long-name": "x" * 5000 + ".ipynb",
        "folder": "dir.ipynb",
    }[name]
    (project / "peach.yaml").write_text(conf_with(notebook))
    began = time.monotonic()
    code, output = run_validate(str(project))
    assert time.monotonic() - began < 30
    assert code == 1, output
    assert "error PC2" in output
    plan, _ = build_plan(project)
    assert plan is None


# -- YAML that would construct objects ------------------------------------------------------


@pytest.mark.parametrize(
    "tagged",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
        "!!python/name:os.system",
        "!!python/module:os",
        "!!python/object:builtins.object {{}}",
        "!Ref {marker}",
        "!!binary aGVsbG8=",
    ],
)
def test_yaml_tags_never_construct_objects(tmp_path, tagged):
    marker = tmp_path / "constructed"
    project = write_project(
        tmp_path / "project", f"codops: {tagged.format(marker=marker)}\n" + CONF.split("\n", 1)[1]
    )
    write_project(project, None, {"nb.ipynb": CELLS})
    code, output = run_validate(str(project))
    assert code == 1, output
    assert "error PC" in output
    assert not marker.exists()
    assert build_plan(project)[0] is None


@pytest.mark.slow
def test_an_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["codops: x", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        refs = ", ".join([f"*a{level - 1}"] * 8)
        lines.append(f"a{level}: &a{level} [{refs}]")
    project = write_project(tmp_path / "project", "\n".join(lines) + "\n")
    began = time.monotonic()
    code, output = run_validate(str(project))
    assert code == 1, output
    assert "too many values" in output
    assert time.monotonic() - began < 30


# -- damaged notebooks and conf bytes, through the command ----------------------------------

GOOD_NOTEBOOK = json.loads(notebook_json(BASE_CELLS[:4]))
GOOD_CONF = CONF.replace("method: ask", "method: ask, init: init_model")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def damaged_notebooks(draw) -> bytes:
    notebook = json.loads(json.dumps(GOOD_NOTEBOOK))
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(["top", "cell", "source", "bytes"]))
        if target == "top":
            key = draw(st.sampled_from(["cells", "nbformat", "metadata", "worksheets", "x"]))
            notebook[key] = draw(json_values)
        elif target == "cell" and isinstance(notebook.get("cells"), list) and notebook["cells"]:
            index = draw(st.integers(0, len(notebook["cells"]) - 1))
            key = draw(st.sampled_from(["cell_type", "source", "outputs", "metadata", "id"]))
            if isinstance(notebook["cells"][index], dict):
                notebook["cells"][index][key] = draw(json_values)
            else:
                notebook["cells"][index] = draw(json_values)
        elif target == "source" and isinstance(notebook.get("cells"), list) and notebook["cells"]:
            cell = notebook["cells"][-1]
            if isinstance(cell, dict):
                cell["source"] = draw(
                    st.sampled_from(["def ask(:\n", "\x00", "def ask(q):\n\treturn q\n", ""])
                    | st.lists(st.text(max_size=20), max_size=3)
                )
    text = json.dumps(notebook).encode()
    damage = draw(st.sampled_from(["none", "cut", "bom", "utf16", "binary", "nested"]))
    if damage == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif damage == "bom":
        text = b"\xef\xbb\xbf" + text
    elif damage == "utf16":
        text = text.decode().encode("utf-16")
    elif damage == "binary":
        text = draw(st.binary(max_size=200))
    elif damage == "nested":
        depth = draw(st.integers(100, 100_000))
        text = b'{"cells": ' + b"[" * depth + b"]" * depth + b"}"
    return text


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebook=damaged_notebooks(), output_format=st.sampled_from(["text", "json"]))
def test_damaged_notebooks_never_crash_validate(notebook, output_format):
    with tempfile.TemporaryDirectory() as folder:
        project = write_project(Path(folder), GOOD_CONF, files={"nb.ipynb": notebook})
        code, output = run_validate(str(project), "--format", output_format)
        assert code in (0, 1), output
        if output_format == "json":
            json.loads(output)
        for diagnostic in diagnose(project):
            assert diagnostic.position.file in ("peach.yaml", "nb.ipynb"), diagnostic


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conf=st.one_of(
        st.binary(max_size=300),
        st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b"\t", b"---\n...\n---\n"]).map(
            lambda prefix: prefix + GOOD_CONF.encode()
        ),
        st.integers(0, len(GOOD_CONF)).map(lambda cut: GOOD_CONF.encode()[:cut]),
        st.just(GOOD_CONF.encode("utf-16")),
    )
)
def test_conf_bytes_of_any_kind_never_crash_validate(conf):
    with tempfile.TemporaryDirectory() as folder:
        project = write_project(Path(folder), conf, {"nb.ipynb": BASE_CELLS[:4]})
        code, output = run_validate(str(project))
        assert code in (0, 1), output
        assert "Traceback" not in output
