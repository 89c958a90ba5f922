"""How every command loads a project: the plan (or the conf alone), one wording for errors.

A project with errors raises ``ProjectInvalid`` carrying its diagnostics; the catch site
(``peach_cli.cli.main``) prints them as ``peach validate`` does, then one summary line,
``✗ 2 errors in examples/bad: not serving``, and exits 1. Warnings are the caller's choice:
shown as a block (``1 warning in examples/x: serving anyway``), as one stderr line each
(when stdout holds something else), or not at all.

    plan = load_plan(project, doing="serving", warnings="show")
    conf = load_conf(project)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from peach_cli.wording import count

if TYPE_CHECKING:
    from peach_cli.project.conf import PeachConf
    from peach_cli.project.diagnostics import Diagnostic
    from peach_cli.runtime.plan import ProjectPlan

Warnings = Literal["show", "lines", "hide"]


def load_plan(project: Path, *, doing: str, warnings: Warnings = "hide") -> ProjectPlan:
    """The project's plan, every notebook read and checked as ``peach validate`` does.

    ``doing`` is what the command does with it (``serving``, ``running``, ``deploying``):
    the summary says ``not serving`` on errors, ``serving anyway`` over warnings. Raises
    ``ProjectInvalid`` when the project has errors, ``DotenvError`` when the ``.env`` its
    secrets need cannot be read.
    """
    from peach_cli.checks.build import checked_plan
    from peach_cli.project.secrets import hide_declared

    plan, found = checked_plan(project, doing)
    show_warnings(project, found, doing, warnings)
    check_dotenv(plan)
    hide_declared(project, plan)  # masked in everything this command shows
    return plan


def load_plan_to_check(project: Path, *, doing: str) -> ProjectPlan:
    """``load_plan`` for a command that checks the project's endpoints (`peach test`, `peach
    fuzz`): a project with errors, or an unreadable ``.env``, is a usage error (exit 2),
    since nothing was checked."""
    from peach_cli.errors import ProjectInvalid
    from peach_cli.project.secrets import DotenvError

    try:
        return load_plan(project, doing=doing, warnings="hide")
    except (ProjectInvalid, DotenvError) as error:
        error.exit_code = 2
        raise


def check_dotenv(plan: ProjectPlan) -> None:
    """Read ``.env`` now when a secret of the plan is to come from it: a ``.env`` that
    cannot be read stops the command here (``DotenvError``, naming ``.env:LINE``) instead
    of failing every replica and task that reads a secret."""
    from peach_cli.project.secrets import missing_secrets

    names = [s for c in plan.components() for s in c.secrets]
    names += [s for t in plan.tasks.values() for s in t.secrets]
    missing_secrets(plan.root, names)


def project_root(project: Path, *, need_conf: bool) -> Path:
    """The root of the project at ``project``: where its conf is, else (``need_conf``
    false) the folder itself (a folder whose cases or endpoints are on another host)."""
    from peach_cli.errors import UsageError
    from peach_cli.project.filenames import find_conf_files

    if not need_conf and not project.exists():
        raise UsageError(f"{project} does not exist")
    try:
        return find_conf_files(project)[0]
    except UsageError:
        if need_conf:
            raise
        return project if project.is_dir() else project.parent


def masked_root(project: Path) -> Path:
    """``project_root`` of a project whose answers come from another host (``--url``),
    its conf read once: the values of the secrets it declares are masked from now on (a
    conf with errors is read as far as it goes; a folder with no conf declares none)."""
    from peach_cli.errors import UsageError
    from peach_cli.project.filenames import find_conf_files
    from peach_cli.project.loader import read_project
    from peach_cli.project.secrets import hide_declared

    if not project.exists():
        raise UsageError(f"{project} does not exist")
    try:
        root, files = find_conf_files(project)
    except UsageError:  # no conf here: the folder is its own root, and declares nothing
        return project if project.is_dir() else project.parent
    loaded, _ = read_project(root, files)
    if loaded is not None:  # else no conf file could be read: none is declared
        hide_declared(root, loaded.conf)
    return root


def load_conf(project: Path) -> PeachConf:
    """The project's conf alone (no notebook read); raises ``ProjectInvalid`` on errors."""
    from peach_cli.project.diagnostics import has_errors, invalid, sort_key
    from peach_cli.project.loader import load_project
    from peach_cli.project.secrets import hide_declared

    loaded, diagnostics = load_project(project)
    diagnostics.sort(key=sort_key)
    if loaded is None or has_errors(diagnostics):
        raise invalid(project, diagnostics)
    hide_declared(project, loaded.conf)
    return loaded.conf


def show_warnings(
    project: Path, warnings: list[Diagnostic], doing: str, how: Warnings = "show"
) -> None:
    if not warnings or how == "hide":
        return
    from peach_cli.views import console

    if how == "show":
        summary = f"{count(len(warnings), 'warning')} in {project}: {doing} anyway"
        console.print_diagnostics(warnings, summary=summary, ok=True)
    else:
        console.print_warning_lines(warnings)
