"""Helpers of the hot reload tests: copy a checked-in project, edit it as a user would."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

PROJECTS = Path(__file__).resolve().parent / "projects"
RELOAD_BASIC = PROJECTS / "reload_basic"
NOTEBOOK = "notebooks/Endpoints.ipynb"


def copy_project(name: str, destination: Path) -> Path:
    """A copy of ``tests/projects/<name>`` that a test may edit."""
    target = destination / name
    shutil.copytree(PROJECTS / name, target)
    return target


def cell_index(notebook: dict, marker: str) -> int:
    """The index of the one code cell whose source contains ``marker``."""
    found = [
        i
        for i, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and marker in "".join(cell["source"])
    ]
    assert len(found) == 1, f"{marker!r} is in cells {found}"
    return found[0]


def edit_cell(project: Path, old: str, new: str, *, notebook: str = NOTEBOOK) -> None:
    """Replace ``old`` by ``new`` in the cell that contains ``old``, saved as Jupyter does:
    the new file written under a temporary name, renamed over the notebook, then a
    checkpoint copy."""
    path = project / notebook
    data = json.loads(path.read_text())
    index = cell_index(data, old)
    source = "".join(data["cells"][index]["source"]).replace(old, new)
    data["cells"][index]["source"] = source.splitlines(True)
    text = json.dumps(data, indent=1) + "\n"
    temp = path.with_name(f".~{path.name}")
    temp.write_text(text)
    os.replace(temp, path)
    checkpoints = path.parent / ".ipynb_checkpoints"
    checkpoints.mkdir(exist_ok=True)
    (checkpoints / f"{path.stem}-checkpoint.ipynb").write_text(text)


def edit_file(project: Path, relative: str, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in a text file (it must be there)."""
    path = project / relative
    text = path.read_text()
    assert old in text, f"{old!r} not in {relative}"
    path.write_text(text.replace(old, new))


def append_file(project: Path, relative: str, text: str) -> None:
    with open(project / relative, "a") as handle:
        handle.write(text)
