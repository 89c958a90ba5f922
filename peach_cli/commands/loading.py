"""How every command loads a project: the plan (or the conf alone), one wording for errors.

A project with errors raises ``ProjectInvalid`` carrying its diagnostics; the catch site
(``peach_cli.cli.main``) prints them as ``peach validate`` does, then one summary line,
``✗ 2 errors in examples/bad: not serving``, and exits 1. Warnings are the caller's choice:
shown as a block (``1 warning in examples/x: serving anyway``), as one stderr line each
(when stdout holds something else), or not at all.

    plan = load_plan(output, project, doing="serving", warnings="show")
    conf = load_conf(output, project)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from peach_cli.wording import count

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.project.conf import PeachConf
    from peach_cli.project.diagnostics import Diagnostic
    from peach_cli.runtime.plan import ProjectPlan

Warnings = Literal["show", "lines", "hide"]


def load_plan(
    output: Output, project: Path, *, doing: str, warnings: Warnings = "hide"
) -> ProjectPlan:
    """The project's plan, every notebook read and checked as ``peach validate`` does.

    ``doing`` is what the command does with it (``serving``, ``running``, ``deploying``):
    the summary says ``not serving`` on errors, ``serving anyway`` over warnings. Raises
    ``ProjectInvalid`` when the project has errors, ``DotenvError`` when the ``.env`` its
    secrets need cannot be read. The values of its secrets are masked in what ``output``
    shows from then on.
    """
    from peach_cli.checks.build import checked_plan
    from peach_cli.project.secrets import hide_declared

    plan, found = checked_plan(project, doing)
    show_warnings(output, project, found, doing, warnings)
    # masked in everything this command shows; a .env that cannot be read stops it here
    hide_declared(plan.root, plan, output.secrets, check_dotenv=True)
    return plan


def load_conf(output: Output, project: Path) -> PeachConf:
    """The project's conf alone (no notebook read); raises ``ProjectInvalid`` on errors."""
    from peach_cli.project.diagnostics import has_errors, invalid, sort_key
    from peach_cli.project.loader import load_project
    from peach_cli.project.secrets import hide_declared

    loaded, diagnostics = load_project(project)
    diagnostics.sort(key=sort_key)
    if loaded is None or has_errors(diagnostics):
        raise invalid(project, diagnostics)
    hide_declared(project, loaded.conf, output.secrets)
    return loaded.conf


def show_warnings(
    output: Output, project: Path, warnings: list[Diagnostic], doing: str, how: Warnings = "show"
) -> None:
    if not warnings or how == "hide":
        return
    from peach_cli.views import console

    if how == "show":
        summary = f"{count(len(warnings), 'warning')} in {project}: {doing} anyway"
        console.print_diagnostics(output, warnings, summary=summary, ok=True)
    else:
        console.print_warning_lines(output, warnings)
