"""PC310: ``trigger_task_with_event("name", ...)`` names a task the project does not define.

The call would raise ``ValueError`` when it runs (under ``peach dev``, ``peach task run``
and on the platform); a literal name is checked here, by parsing the code that runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from peach_cli.project.diagnostics import Diagnostic, Position, did_you_mean
from peach_cli.project.notebook import walk

if TYPE_CHECKING:
    from peach_cli.checks.undeclared import Run
    from peach_cli.project import notebook as nb
    from peach_cli.project.conf import PeachConf

TRIGGER = "trigger_task_with_event"


def triggered_names(tree: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """Every literal task name passed to ``trigger_task_with_event`` in ``tree``.

    >>> [name for name, _ in triggered_names(ast.parse('trigger_task_with_event("a", {})'))]
    ['a']
    """
    for node in walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)
        if name != TRIGGER:
            continue
        argument: ast.expr | None = node.args[0] if node.args else None
        for keyword in node.keywords:
            if keyword.arg in ("task_name", "name", "task"):
                argument = keyword.value
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            yield argument.value, argument


def unknown_triggered_tasks(conf: PeachConf, runs: list[Run]) -> list[Diagnostic]:
    """A PC310 warning for each literal task name that is not a task of ``conf``."""
    tasks = sorted(conf.tasks)
    found: list[Diagnostic] = []
    visited: set[tuple[str, int]] = set()  # a cell shared by many components is read once
    for _where, notebook, extraction in runs:
        for cell in extraction.cells:
            if cell.tree is None or (notebook.path, cell.number) in visited:
                continue
            visited.add((notebook.path, cell.number))
            for name, node in triggered_names(cell.tree):
                if name in conf.tasks:
                    continue
                found.append(_diagnostic(notebook, cell, name, node, tasks))
    return found


def _diagnostic(
    notebook: nb.Notebook, cell: nb.Cell, name: str, node: ast.expr, tasks: list[str]
) -> Diagnostic:
    listed = ", ".join(tasks) if tasks else "none"
    return Diagnostic(
        "PC310",
        f"{TRIGGER}('{name}') names no task of the project (its tasks: {listed}): "
        "the call raises ValueError when it runs",
        Position(
            notebook.path, node.lineno, node.col_offset + 1, cell.number, cell.line(node.lineno)
        ),
        did_you_mean(name, tasks) or ("define it under tasks: in the conf" if not tasks else None),
    )
