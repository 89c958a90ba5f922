"""Diagnostics: one problem found in a project, where it is, and the table of stable codes.

A ``Diagnostic`` is plain data (code, message, position, hint); its severity follows from its
code. Codes are stable: tests, editors and users' scripts match on them, so a code is never
reused for another meaning. ``CODES`` is the table of codes; README.md ("Check a project")
documents the same table for users, and ``tests/test_validate.py`` keeps the two in step.
Nothing here prints: ``peach_cli.views.console`` renders diagnostics.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}

CODES: dict[str, tuple[Severity, str]] = {
    "PC001": ("error", "YAML syntax error"),
    "PC002": ("error", "unreadable conf file"),
    "PC003": ("error", "conf file is not a mapping"),
    "PC004": ("error", "unsupported YAML construct"),
    "PC005": ("error", "duplicate YAML key"),
    "PC101": ("error", "unknown key"),
    "PC102": ("error", "missing required key"),
    "PC103": ("error", "invalid value"),
    "PC104": ("error", "dependencies outside py_environments"),
    "PC110": ("error", "name defined twice"),
    "PC111": ("error", "conflicting project-wide value"),
    "PC112": ("error", "duplicate url"),
    "PC113": ("error", "no main component"),
    "PC114": ("error", "undeclared py_env"),
    "PC115": ("error", "fallback without primary"),
    "PC116": ("error", "reserved url"),
    "PC117": ("error", "invalid A/B test"),
    "PC118": ("error", "invalid environment variable name"),
    "PC119": ("error", "secret given a value in env_vars"),
    "PC201": ("error", "notebook not found"),
    "PC202": ("error", "notebook outside the project"),
    "PC203": ("error", "unreadable notebook"),
    "PC204": ("error", "function not defined"),
    "PC205": ("error", "init takes required parameters"),
    "PC206": ("error", "invalid Python in a code cell"),
    "PC207": ("error", "non-literal @endpoint argument"),
    "PC208": ("error", "invalid @endpoint call"),
    "PC301": ("warning", "init state never received"),
    "PC302": ("warning", "stream in args"),
    "PC303": ("warning", "drift from a generator"),
    "PC304": ("warning", "magics dropped"),
    "PC305": ("warning", "no @endpoint in decorator notebook"),
    "PC306": ("warning", "no endpoints"),
    "PC307": ("warning", "name from a cell that does not run"),
    "PC308": ("warning", "import its py_env does not provide"),
    "PC309": ("warning", "component that never answers"),
    "PC310": ("warning", "trigger_task_with_event names an unknown task"),
    "PC311": ("warning", "value that looks like a credential"),
    "PC401": ("info", "streaming method"),
}
"""code -> (severity, short title): the documented table above, as data."""


@dataclass(frozen=True)
class Position:
    """A place in a project file: 1-based line and column, and the text of that line.

    For notebooks ``cell`` is the cell's 1-based number among all the notebook's cells
    (markdown included, as Jupyter shows them) and ``line`` the line inside that cell.
    """

    file: str
    line: int = 1
    column: int | None = 1
    cell: int | None = None
    excerpt: str | None = None

    def __str__(self) -> str:
        if self.cell is not None:
            return f"{self.file}:cell {self.cell}:line {self.line}"
        if self.column is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    """One problem: a stable code, a message, where it is, and an optional hint."""

    code: str
    message: str
    position: Position
    hint: str | None = None

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]

    @property
    def file(self) -> str:
        return self.position.file

    @property
    def line(self) -> int:
        return self.position.line

    @property
    def column(self) -> int | None:
        return self.position.column

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``peach validate --format json``."""
        return {
            "file": self.position.file,
            "line": self.position.line,
            "column": self.position.column,
            "cell": self.position.cell,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
        }

    def __str__(self) -> str:
        return f"{self.position}: {self.severity} {self.code} {self.message}"


def sort_key(diagnostic: Diagnostic) -> tuple[Any, ...]:
    """By file, then cell/line/column, then severity: how a reader walks a project."""
    p = diagnostic.position
    return (p.file, p.cell or 0, p.line, p.column or 0, SEVERITY_RANK[diagnostic.severity])


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """``"did you mean 'url'?"`` for the closest choice, or None when nothing is close."""
    matches = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)
