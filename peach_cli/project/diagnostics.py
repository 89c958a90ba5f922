"""Diagnostics: one problem found in a project, where it is, and the table of stable codes.

A ``Diagnostic`` is plain data (code, message, position, hint); its severity follows from its
code. Codes are stable: tests, editors and users' scripts match on them, so a code is never
reused for another meaning. ``CODES`` is the table of codes and ``MEANINGS`` says more of
each; the documentation's table of codes is generated from both (``scripts/docs_reference.py``).
Nothing here prints: ``peach_cli.views.console`` renders diagnostics.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pathlib import Path

    from peach_cli.errors import ProjectInvalid

Severity = Literal["error", "warning", "info"]

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}

CODES: dict[str, tuple[Severity, str]] = {
    "PC001": ("error", "YAML syntax error"),
    "PC002": ("error", "unreadable conf file"),
    "PC003": ("error", "conf file is not a mapping"),
    "PC004": ("error", "unsupported YAML construct"),
    "PC005": ("error", "duplicate YAML key"),
    "PC006": ("error", "conf or case file outside the project"),
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
    "PC120": ("error", "invalid requirement"),
    "PC121": ("error", "invalid name"),
    "PC122": ("error", "invalid url"),
    "PC201": ("error", "notebook not found"),
    "PC202": ("error", "notebook outside the project"),
    "PC203": ("error", "unreadable notebook"),
    "PC204": ("error", "function not defined"),
    "PC205": ("error", "init takes required parameters"),
    "PC206": ("error", "invalid Python in a code cell"),
    "PC207": ("error", "non-literal @endpoint argument"),
    "PC208": ("error", "invalid @endpoint call"),
    "PC209": ("error", "function rebound after its def"),
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
    "PC312": ("warning", "annotation the OpenAPI document cannot express"),
    "PC401": ("info", "streaming method"),
    "PC801": ("error", "case file is not a list"),
    "PC802": ("error", "case name used twice"),
    "PC803": ("error", "case url is not an endpoint"),
    "PC804": ("error", "stream expected without stream: true"),
}
"""code -> (severity, short title): the documented table above, as data."""


MEANINGS: dict[str, str] = {
    "PC001": "YAML syntax error",
    "PC002": "a conf file cannot be read (not UTF-8 text, binary, too large, unreadable)",
    "PC003": "a conf file's top level is not a mapping",
    "PC004": "a YAML tag or structure peach does not accept (`!!python/...`, huge aliases)",
    "PC005": "the same key twice in one YAML mapping",
    "PC006": (
        "a conf file or a `*.peach-test.yaml` case file whose real path (symlinks resolved) "
        "leaves the project; it is not read, so none of its lines is shown"
    ),
    "PC101": 'unknown key (with "did you mean")',
    "PC102": "missing required key",
    "PC103": "invalid value (wrong type, out of range, bad format)",
    "PC104": "`dependencies:` outside a py_environment",
    "PC110": "a name (endpoint, task, py_environment, decorator notebook) defined twice",
    "PC111": "two different values for `codops` (or `timeout_s`) in different files",
    "PC112": "two endpoints with the same url",
    "PC113": "an endpoint with several non-fallback components and none named `main`",
    "PC114": 'an undeclared `py_env` (with "did you mean")',
    "PC115": "an endpoint whose only component is `fallback`",
    "PC116": "a url under `/_peach`, which is reserved for the dev server",
    "PC117": (
        "an invalid `ab:` test: an unknown `by`, a percentage that is not a whole number from "
        "0 to 100, percentages that do not sum to 100, a split naming a component the "
        "endpoint lacks or the fallback"
    ),
    "PC118": (
        "a name in `env_vars` or `secrets` that is not a valid environment variable name "
        "(letters, digits and `_`, not starting with a digit)"
    ),
    "PC119": (
        "a secret that `env_vars` also gives a value: secret values come from the environment "
        "or `.env`, never from the conf"
    ),
    "PC120": (
        "a dependency that is not a PEP 508 requirement: unparsable, an option line (`-r`, "
        "`-e`, `--index-url`), a line break inside, a local path or `file:` url"
    ),
    "PC121": "an endpoint, component, task or py_environment name outside `[A-Za-z0-9_.-]+`",
    "PC122": (
        "a url with characters outside `[A-Za-z0-9._~/-]` (spaces, `?`, `%`, line breaks) "
        "or a `..` segment"
    ),
    "PC201": "a notebook named by the conf does not exist",
    "PC202": "a notebook path that leaves the project folder",
    "PC203": "a notebook that cannot be read (not JSON, not nbformat 4, too large)",
    "PC204": (
        "a function named by the conf (or by `init_fn`) is not defined in the notebook (for "
        "`init_fn`: not above its `@endpoint`)"
    ),
    "PC205": "`init` (or `init_fn`) takes required parameters",
    "PC206": "a code cell that is not valid Python (after dropping magics)",
    "PC207": "an `@endpoint(...)` argument that is not a literal",
    "PC208": (
        "an invalid `@endpoint(...)` call (no url, url twice, unknown keyword, extra "
        "argument, `endpoint` not imported above it)"
    ),
    "PC209": (
        "a function named by the conf is defined with `def`, then a later cell rebinds its "
        "name to a value that is not a function (`f = d * e`): the last binding wins, as when "
        "the notebook runs, so the replica would find no function"
    ),
    "PC301": "a component with `init` whose method declares no `model`/`init_state`",
    "PC302": "`stream` in `args`: the gateway decides before defaults apply",
    "PC303": "drift signalled from a generator method (streams cannot signal drift)",
    "PC304": "IPython magics or shell escapes dropped from a code cell",
    "PC305": "a decorator notebook without any `@endpoint` function",
    "PC306": "the project defines no endpoint",
    "PC307": (
        "the code that runs uses a name (an import, a helper) that only a cell which does not "
        "run defines"
    ),
    "PC308": (
        "the code that runs imports a module that is not the standard library, not a module "
        "of the project, not peach's runtime, and not provided by a declared dependency of "
        "its py_env"
    ),
    "PC309": (
        "a non-fallback component that is neither `main` nor in the `ab:` split: it can never "
        "answer"
    ),
    "PC310": (
        "a literal task name passed to `trigger_task_with_event` is not a task of the project "
        "(the call would raise `ValueError`)"
    ),
    "PC311": (
        "a conf value or a string literal in the code that runs looks like a credential "
        "(`sk-…`, `AKIA…`, `ghp_…`, a private key, a long random token): move it to `secrets:`"
    ),
    "PC312": (
        "a method parameter's annotation (or a part of it) that no JSON Schema expresses — a "
        "class that is not an `Enum` of str/int defined in the notebook, an imported type, "
        "`bytes`, a `dict` keyed by something else than `str`: `peach openapi` shows it as "
        "`{}`, any value"
    ),
    "PC401": "an async-generator method: callers must send `stream`",
    "PC801": "a `*.peach-test.yaml` case file whose top level is not a list of cases",
    "PC802": "two cases with the same name in one case file",
    "PC803": 'a case whose url is not an endpoint of the project (with "did you mean")',
    "PC804": (
        "a case that expects a stream (`text_contains`, `chunks_min`, `cut`) of an endpoint "
        "whose method streams, without `stream: true`"
    ),
}
"""code -> what it means, at more length: the documentation's table of codes (docs/reference/
codes.md) is generated from ``CODES`` and this."""


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


def invalid(
    project: Path, diagnostics: list[Diagnostic], doing: str | None = None
) -> ProjectInvalid:
    """The error for a project with errors: ``2 errors in examples/bad: not serving``."""
    from peach_cli.errors import ProjectInvalid
    from peach_cli.wording import count

    errors = sum(d.severity == "error" for d in diagnostics)
    summary = f"{count(errors, 'error')} in {project}"
    return ProjectInvalid(f"{summary}: not {doing}" if doing else summary, diagnostics)
