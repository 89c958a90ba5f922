"""Where the checks put what they find: each problem once, at its file, line and column."""

from __future__ import annotations

from peach_cli.project import notebook as nb
from peach_cli.project.diagnostics import Diagnostic, Position
from peach_cli.project.loader import Path_, Project


class Findings:
    """The problems found in one project, in the order found, each once.

    ``at`` turns a conf path (``("endpoints", "greet", "url")``) into its position in the
    conf file; ``in_cell`` and ``at_def`` give positions inside a notebook's cells.
    """

    def __init__(self, project: Project) -> None:
        self.project = project
        self.diagnostics: list[Diagnostic] = []
        self.seen: set[Diagnostic] = set()
        self.reported: set[tuple[str, int, str]] = set()
        """(notebook, cell, code) already reported: a cell's problem is said once."""

    def report(self, code: str, message: str, position: Position, hint: str | None = None) -> None:
        self.add(Diagnostic(code, message, position, hint))

    def add(self, diagnostic: Diagnostic) -> None:
        """Record a problem once: a function shared by several components is reported once."""
        if diagnostic not in self.seen:
            self.seen.add(diagnostic)
            self.diagnostics.append(diagnostic)

    def at(self, path: Path_, *, key: bool = False) -> Position:
        return self.project.position(path, key=key)

    @staticmethod
    def in_cell(notebook: nb.Notebook, cell: nb.Cell, line: int, column: int | None) -> Position:
        return Position(notebook.path, line, column, cell.number, cell.line(line))

    def at_def(self, notebook: nb.Notebook, definition: nb.Definition) -> Position:
        return self.in_cell(notebook, definition.cell, definition.line, definition.column)
