"""The project check: does it validate, as `peach validate` would report it, and what it uses.

Example::

    checked = check_project(Path("shop"), explicit=True)
    checked.check          # ok / warn (warnings) / fail (errors) / skip (no project here)
    checked.plan           # the serving plan when there is no error, for the cluster checks
    checked.environments   # each py_env the project uses → its requirements
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.doctor import Check
from peach_cli.errors import UsageError
from peach_cli.wording import count

if TYPE_CHECKING:
    from peach_cli.project.conf import PeachConf
    from peach_cli.runtime.plan import ProjectPlan


@dataclass(frozen=True)
class CheckedProject:
    check: Check
    plan: ProjectPlan | None = None
    environments: dict[str, tuple[str, ...]] | None = None
    """Each py_env the project's endpoints and tasks use → base's and its own requirements."""
    secrets: Check | None = None
    """Whether every secret the conf names is set (None: no project, or no secret)."""


def check_project(path: Path, *, explicit: bool = True) -> CheckedProject:
    """Validate the project at ``path`` (by parsing; nothing runs).

    A PROJECT given on the command line that does not exist is a ``UsageError``; the
    current folder without a conf is a skipped check that suggests `peach init`.
    """
    from peach_cli.checks.validate import validate_project
    from peach_cli.project.diagnostics import has_errors
    from peach_cli.project.loader import load_project

    command = "peach validate" if not explicit else f"peach validate {path}"
    if explicit and not path.exists():
        raise UsageError(f"{path} does not exist", hint="give the project folder")
    try:
        project, diagnostics = load_project(path)
    except UsageError as error:
        if explicit:
            return CheckedProject(Check("project", "fail", error.message, "create one: peach init"))
        return CheckedProject(
            Check("project", "skip", "no peach project in this folder", "create one: peach init")
        )
    endpoints = 0
    plan = None
    if project is not None:
        result = validate_project(project)
        diagnostics += result.diagnostics
        endpoints = len(result.endpoints)
        if not has_errors(diagnostics):
            plan = result.plan()
    counts = {s: sum(d.severity == s for d in diagnostics) for s in ("error", "warning", "info")}
    details = {**counts, "endpoints": endpoints, "path": str(path)}
    environments = used_environments(project.conf) if project is not None else None
    secrets = check_secrets(project.root, project.conf) if project is not None else None
    if counts["error"]:
        summary = f"{path}: {count(counts['error'], 'error')}"
        if counts["warning"]:
            summary += f", {count(counts['warning'], 'warning')}"
        check = Check("project", "fail", summary, f"run `{command}` to see them", details)
        return CheckedProject(check, None, environments, secrets)
    if counts["warning"]:
        summary = f"{path} is valid, with {count(counts['warning'], 'warning')}"
        check = Check("project", "warn", summary, f"run `{command}` to see them", details)
        return CheckedProject(check, plan, environments, secrets)
    summary = f"{path} is valid: {count(endpoints, 'endpoint')}"
    check = Check("project", "ok", summary, details=details)
    return CheckedProject(check, plan, environments, secrets)


def used_environments(conf: PeachConf) -> dict[str, tuple[str, ...]]:
    """The py_envs the endpoints, decorator endpoints and tasks run in → their requirements."""
    from peach_cli.envs.spec import used_envs

    return {name: conf.environment(name) for name in used_envs(conf)}


def check_secrets(root: Path, conf: PeachConf) -> Check | None:
    """The secrets the conf names that are set neither in the environment nor in ``.env``,
    with who needs each (SPEC §10); None when the conf names none."""
    from peach_cli.project.secrets import DotenvError, missing_message, missing_secrets

    users: dict[str, list[str]] = {}
    for name, endpoint in conf.endpoints.items():
        for component_name, component in endpoint.components.items():
            for secret in conf.variables(component.env_vars, component.secrets)[1]:
                users.setdefault(secret, []).append(f"{name}/{component_name}")
    for name, task in conf.tasks.items():
        for secret in conf.variables(task.env_vars, task.secrets)[1]:
            users.setdefault(secret, []).append(f"task {name}")
    for secret in conf.secrets:
        users.setdefault(secret, [])
    if not users:
        return None
    try:
        missing = missing_secrets(root, users)
    except DotenvError as error:
        return Check(
            "secrets",
            "fail",
            error.message,
            "make .env NAME=value lines of UTF-8 text under 1 MiB, or export the secrets",
            {"secrets": sorted(users)},
        )
    details = {"secrets": sorted(users), "missing": {s: users[s] for s in missing}}
    if not missing:
        summary = f"{count(len(users), 'secret')} set ({', '.join(sorted(users))})"
        return Check("secrets", "ok", summary, details=details)
    needed = [
        f"{s} ({'needed by ' + ', '.join(users[s]) if users[s] else 'unused'})" for s in missing
    ]
    return Check(
        "secrets",
        "warn",
        missing_message(needed),
        "export them, or add NAME=value lines to the project's .env (never commit it)",
        details,
    )
