"""Build small peach projects on disk for tests: a conf, notebooks from cell sources, files."""

from __future__ import annotations

import json
from pathlib import Path

from peach_cli.checks.validate import validate_project
from peach_cli.project.diagnostics import Diagnostic
from peach_cli.project.loader import load_project

BASE_CELLS = [
    ("markdown", "# Endpoints"),
    'def init_model():\n    return {"k": 1}\n',  # cell 2
    'def ask(model, q: str = ""):\n    return [q]\n',  # cell 3
    'def no_model(q: str = ""):\n    return [q]\n',  # cell 4
    "def init_needs(path, *args, flag=False, **kwargs):\n    return path\n",  # cell 5
    "async def streamer(n: int = 2):\n    for i in range(n):\n        yield str(i)\n",  # 6
    'def drifting(model):\n    yield 1\n    yield [], {"drift_detected": True}\n',  # cell 7
    "!pip install foo\nimport os\n\ndef with_magic():\n    return os.sep\n",  # cell 8
    "def broken(:\n    pass\n",  # cell 9
]


def notebook_json(cells: list) -> str:
    """nbformat 4 JSON; a cell is code text, or ("markdown", text)."""
    out = []
    for cell in cells:
        kind, text = cell if isinstance(cell, tuple) else ("code", cell)
        entry: dict = {"cell_type": kind, "metadata": {}, "source": text.splitlines(True)}
        if kind == "code":
            entry.update(execution_count=None, outputs=[])
        out.append(entry)
    return json.dumps({"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def write_project(
    root: Path,
    conf: str | bytes | None,
    notebooks: dict[str, list] | None = None,
    files: dict[str, str | bytes] | None = None,
) -> Path:
    """Write peach.yaml (when ``conf`` is given), notebooks and other files under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    everything: dict[str, str | bytes] = dict(files or {})
    if conf is not None:
        everything["peach.yaml"] = conf
    for name, cells in (notebooks or {}).items():
        everything[name] = notebook_json(cells)
    for name, content in everything.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def diagnose(path: Path) -> list[Diagnostic]:
    """Everything ``peach validate`` would report for the project at ``path``."""
    from peach_cli.commands.validate import check_case_files

    project, diagnostics = load_project(path)
    if project is not None:
        result = validate_project(project)
        diagnostics += result.diagnostics
        endpoints = result.endpoints.values()
        diagnostics += check_case_files(project.root, [e.url for e in endpoints], endpoints)
    return diagnostics


def many_endpoints_conf(count: int, component: str, codops: str = "many") -> str:
    """A peach.yaml of ``count`` endpoints ``/e0`` … each with one component, written as
    ``component`` (a flow mapping: ``{notebook: nb.ipynb, method: answer}``)."""
    lines = [f"codops: {codops}", "endpoints:"]
    for i in range(count):
        lines += [f"  e{i}:", f"    url: /e{i}", f"    components: {{main: {component}}}"]
    return "\n".join(lines) + "\n"


ASSISTANT_MODEL_DIR = "ASSISTANT_MODEL_DIR: /tmp/peach-assistant-model"
"""Where examples/assistant's conf puts the knowledge version (every replica reads it)."""


def copy_assistant(target: Path) -> Path:
    """examples/assistant copied to ``target``, its model folder ``target/../model`` (a test
    starts from version 1 and shares its folder with no other run)."""
    import shutil

    example = Path(__file__).resolve().parent.parent / "examples" / "assistant"
    project = Path(shutil.copytree(example, target))
    conf = project / "peach.yaml"
    text = conf.read_text()
    assert ASSISTANT_MODEL_DIR in text
    model = target.parent / "model"
    conf.write_text(text.replace(ASSISTANT_MODEL_DIR, f"ASSISTANT_MODEL_DIR: {model}"))
    return project
