"""A project's plan: its conf files found and read, checked with its notebooks, planned.

``build_plan`` is what every command that serves or deploys starts from (`peach dev` and its
hot reload, `peach deploy`, `peach test`, `peach profile`, ...); ``checked_plan`` is the same
for a command that stops on an error (``ProjectInvalid``) and shows the warnings::

    plan, diagnostics = build_plan("examples/quickstart")   # plan None: an error among them
    plan, warnings = checked_plan(Path("examples/quickstart"), doing="serving")

Each step is another module's, taken once and in order: the files are found
(``peach_cli.project.filenames``), read (``peach_cli.project.loader``), checked
(``peach_cli.checks.validate``), and the plan is the validation's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.checks.validate import validate_project
from peach_cli.project.diagnostics import Diagnostic, has_errors, invalid, sort_key
from peach_cli.project.filenames import find_conf_files
from peach_cli.project.loader import Project, read_project
from peach_cli.project.notebook import fewer_collections
from peach_cli.runtime.plan import ProjectPlan

if TYPE_CHECKING:
    from peach_cli.boundary import Secrets


def build_plan(path: Path | str) -> tuple[ProjectPlan | None, list[Diagnostic]]:
    """Load, validate and plan a project (what `peach dev` and `peach deploy` serve).

    The plan is None when any diagnostic is an error.
    """
    with fewer_collections():
        root, files = find_conf_files(Path(path))
        return plan_read(*read_project(root, files))


def plan_read(
    project: Project | None, diagnostics: list[Diagnostic]
) -> tuple[ProjectPlan | None, list[Diagnostic]]:
    """``build_plan`` of a project already read (``read_project``'s answer): validated and
    planned, its conf not read again."""
    if project is None:
        return None, diagnostics
    with fewer_collections():
        result = validate_project(project)
    diagnostics = diagnostics + result.diagnostics
    if has_errors(diagnostics):
        return None, diagnostics
    return result.plan(), diagnostics


def checked_plan(project: Path, doing: str) -> tuple[ProjectPlan, list[Diagnostic]]:
    """The plan and its warnings, sorted; ``ProjectInvalid`` when the project has errors
    (its message says ``2 errors in examples/bad: not serving`` for ``doing="serving"``)."""
    with fewer_collections():
        root, files = find_conf_files(Path(project))
        read = read_project(root, files)
    return checked_read(project, read, doing)


def checked_read(
    project: Path, read: tuple[Project | None, list[Diagnostic]], doing: str
) -> tuple[ProjectPlan, list[Diagnostic]]:
    """``checked_plan`` of a project already read (``read_project``'s answer), its conf not
    read again."""
    plan, diagnostics = plan_read(*read)
    diagnostics.sort(key=sort_key)
    if plan is None or has_errors(diagnostics):
        raise invalid(project, diagnostics, doing)
    return plan, [d for d in diagnostics if d.severity == "warning"]


def plan_to_check(
    project: Path,
    root: Path,
    read: tuple[Project | None, list[Diagnostic]],
    doing: str,
    *,
    usage: bool = True,
    secrets: Secrets,
) -> ProjectPlan:
    """The plan of a project already read, for a command that runs its endpoints (`peach
    test`, `peach fuzz`, `peach profile`): ``checked_read``, and its ``.env`` read; with
    ``usage``, errors or a ``.env`` that cannot be read are a usage error (exit 2: a command
    that checks the endpoints). The secrets it declares (the project at ``root``) are masked
    in everything the run of ``secrets`` shows from now on."""
    from peach_cli.errors import ProjectInvalid
    from peach_cli.project.secrets import DotenvError, hide_declared

    try:
        plan = checked_read(project, read, doing)[0]
        hide_declared(root, plan, secrets, check_dotenv=True)
    except (ProjectInvalid, DotenvError) as error:
        if usage:
            error.exit_code = 2
        raise
    return plan
