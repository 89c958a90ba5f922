"""`peach deploy`, `peach status`, `peach delete`: options in, one core call, render, exit code.

The work is in ``peach_cli.deploy.deployer``; this module only validates the project,
renders progress (a live table on a terminal, one line per change otherwise) and results.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.deploy.progress import ApplicationState
    from peach_cli.deploy.uploads import Selection
    from peach_cli.runtime.plan import ProjectPlan

CONFIG_FORMATS = ("json", "yaml")
STATUS_FORMATS = ("text", "json")


def load_plan(project: Path, *, quiet_warnings: bool = False) -> ProjectPlan:
    """Build the plan as `peach validate` checks it; errors are shown and stop here."""
    from peach_cli.checks.diagnostics import has_errors, sort_key
    from peach_cli.checks.validate import build_plan
    from peach_cli.errors import ProjectInvalid
    from peach_cli.views import console

    plan, diagnostics = build_plan(project)
    diagnostics.sort(key=sort_key)
    if plan is None or has_errors(diagnostics):
        errors = sum(d.severity == "error" for d in diagnostics)
        console.print_diagnostics(
            diagnostics, summary=f"{errors} error(s) in {project}: not deployed", ok=False
        )
        raise ProjectInvalid(f"{project} has errors: fix them and deploy again", diagnostics)
    warnings = [d for d in diagnostics if d.severity == "warning"]
    if warnings and not quiet_warnings:
        console.print_diagnostics(
            warnings, summary=f"{len(warnings)} warning(s) in {project}", ok=True
        )
    elif warnings:
        for warning in warnings:
            console.stderr().print(
                f"[yellow]warning[/] {warning.position}: {warning.message}",
                soft_wrap=True,
                markup=True,
                highlight=False,
            )
    return plan


def run_deploy(
    project: Path,
    *,
    address: str | None = None,
    http_host: str | None = None,
    http_port: int | None = None,
    route_prefix: str = "/",
    dry_run: bool = False,
    output_format: str = "json",
    timeout_s: float = 300.0,
) -> int:
    """Deploy the project (or print its Serve config with ``--dry-run``); return the exit code."""
    from peach_cli.deploy.config import check_route_prefix

    route_prefix = check_route_prefix(route_prefix)
    if output_format not in CONFIG_FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(CONFIG_FORMATS)}"
        )
    if timeout_s <= 0:
        raise UsageError("--timeout must be more than 0 seconds")
    if not dry_run:
        from peach_cli.deploy.dashboard import resolve_address

        resolve_address(address)  # a bad address fails before any other work
    plan = load_plan(project, quiet_warnings=dry_run)
    if dry_run:
        from peach_cli.deploy.deployer import dry_run_config, upload_selection

        print_uploads(upload_selection(plan))
        _warn_missing_secrets(plan)
        config = dry_run_config(
            plan, http_host=http_host, http_port=http_port, route_prefix=route_prefix
        )
        print_config(config, output_format)
        return 0
    from peach_cli.deploy.deployer import deploy

    view = ProgressView()
    try:
        result = deploy(
            plan,
            address=address,
            http_host=http_host,
            http_port=http_port,
            route_prefix=route_prefix,
            timeout_s=timeout_s,
            reporter=view.reporter(),
        )
    finally:
        view.stop()
    from rich.markup import escape

    from peach_cli.views import console

    replicas = sum(d.running for d in result.app.deployments)
    console.stderr().print(
        f"[bold green]✓[/] {escape(result.app.name)} is running: {replicas} replica(s) in "
        f"{len(result.app.deployments)} deployment(s), {result.elapsed_s:.1f} s",
        soft_wrap=True,
    )
    for endpoint in plan.endpoints.values():
        console.stdout().print(f"{endpoint.url}  {result.url}{endpoint.url}", soft_wrap=True)
    if plan.endpoints:
        first = next(iter(plan.endpoints.values())).url
        console.stderr().print(
            f"[dim]ask it:[/] peach ask {escape(first)} --url {escape(result.url)}",
            soft_wrap=True,
        )
    return 0


def _warn_missing_secrets(plan: ProjectPlan) -> None:
    """``--dry-run``: the secrets a deploy would need that are set nowhere."""
    from peach_cli.project.secrets import missing_message, missing_secrets

    names = [s for c in plan.components() for s in c.secrets]
    missing = missing_secrets(plan.root, names)
    if missing:
        _warn(f"{missing_message(missing)} (a deploy would fail)")


def print_uploads(selection: Selection) -> None:
    """The files a deploy uploads with each component, on stderr (stdout holds the config)."""
    from rich.markup import escape

    from peach_cli.deploy.uploads import format_size
    from peach_cli.views import console

    err = console.stderr()
    count = len(selection.files)
    err.print(
        f"[bold]{count} file(s), {format_size(selection.total_bytes)}[/] uploaded with each "
        "component (notebooks, conf, dot-files, .gitignore/.rayignore matches, virtualenvs "
        "and caches left out):",
        soft_wrap=True,
    )
    for item in selection.files:
        err.print(f"  {escape(item.path)}  [dim]{format_size(item.size)}[/]", soft_wrap=True)


def print_config(config: dict[str, Any], output_format: str) -> None:
    import sys

    if output_format == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(config, sort_keys=False))
    else:
        from peach_cli.views import console

        console.print_json(config)


def run_status(*, address: str | None = None, output_format: str = "text") -> int:
    """Show every application, its deployments and replicas."""
    if output_format not in STATUS_FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(STATUS_FORMATS)}"
        )
    from peach_cli.deploy.deployer import Reporter, status
    from peach_cli.views import console

    applications = status(address, reporter=Reporter(warn=_warn))
    if output_format == "json":
        console.print_json({"applications": [a.to_dict() for a in applications]})
        return 0
    if not applications:
        console.stdout().print("no applications are deployed on this cluster")
        return 0
    for app in applications:
        console.stdout().print(application_table(app))
    return 0


def run_delete(app_name: str, *, address: str | None = None) -> int:
    """Remove one application; the others keep running."""
    from rich.markup import escape

    from peach_cli.deploy.deployer import Reporter, delete
    from peach_cli.views import console

    remaining = delete(app_name, address=address, reporter=Reporter(note=_note, warn=_warn))
    left = ", ".join(remaining) if remaining else "none"
    console.stderr().print(
        f"[bold green]✓[/] deleted {escape(app_name)} (still running: {escape(left)})",
        soft_wrap=True,
    )
    return 0


# -- rendering -------------------------------------------------------------------------

_STATE_STYLE = {
    "RUNNING": "green",
    "HEALTHY": "green",
    "STARTING": "yellow",
    "UPDATING": "yellow",
    "DEPLOYING": "yellow",
    "PENDING_MIGRATION": "yellow",
    "STOPPING": "dim",
    "DEPLOY_FAILED": "bold red",
    "UNHEALTHY": "bold red",
}


def _styled(state: str) -> str:
    style = _STATE_STYLE.get(state, "")
    return f"[{style}]{state}[/]" if style else state


def application_table(app: ApplicationState, elapsed_s: float | None = None) -> Any:
    """A Rich table: one row per deployment (replicas running/target, state, message)."""
    from rich.markup import escape
    from rich.table import Table

    from peach_cli.deploy.progress import user_error

    title = f"{escape(app.name)}  {_styled(app.status)}"
    if app.route_prefix:
        title += f"  [dim]route {escape(app.route_prefix)}[/]"
    if elapsed_s is not None:
        title += f"  [dim]{elapsed_s:.1f} s[/]"
    table = Table(title=title, title_justify="left", expand=False, show_edge=False)
    table.add_column("deployment")
    table.add_column("replicas", justify="right")
    table.add_column("status")
    table.add_column("replica states")
    table.add_column("message", overflow="fold", max_width=60)
    for deployment in app.deployments:
        target = "?" if deployment.target is None else str(deployment.target)
        states = ", ".join(
            f"{escape(r.replica_id)} {_styled(r.state)}"
            + (f" [red]({escape(r.last_error)})[/]" if r.last_error else "")
            for r in deployment.replicas
        )
        message = deployment.message
        if any(marker in message for marker in ("failed to start", "RuntimeEnvSetupError")):
            message = user_error(message)  # the user's exception, not Ray's retry notice
        message = message.splitlines()[0] if message else ""
        table.add_row(
            escape(deployment.name),
            f"{deployment.running}/{target}",
            _styled(deployment.status),
            states,
            escape(message),
        )
    return table


def _note(message: str) -> None:
    from rich.markup import escape

    from peach_cli.project.secrets import mask
    from peach_cli.views import console

    console.stderr().print(f"[dim]·[/] {escape(mask(message))}", soft_wrap=True)


def _warn(message: str) -> None:
    from rich.markup import escape

    from peach_cli.project.secrets import mask
    from peach_cli.views import console

    console.stderr().print(f"[yellow]warning:[/] {escape(mask(message))}", soft_wrap=True)


class ProgressView:
    """Deploy progress on stderr: a live table on a terminal, changed lines otherwise."""

    def __init__(self) -> None:
        from peach_cli.views import console

        self.console = console.stderr()
        self.live: Any = None
        self.last: dict[str, str] = {}

    def reporter(self) -> Any:
        from peach_cli.deploy.deployer import Reporter

        return Reporter(note=_note, warn=_warn, progress=self.progress)

    def progress(self, app: ApplicationState, elapsed_s: float) -> None:
        if self.console.is_terminal:
            from rich.live import Live

            if self.live is None:
                self.live = Live(console=self.console, auto_refresh=False, transient=False)
                self.live.start()
            self.live.update(application_table(app, elapsed_s), refresh=True)
            return
        from rich.markup import escape

        for deployment in app.deployments:
            target = "?" if deployment.target is None else deployment.target
            line = f"{deployment.name}: {deployment.running}/{target} running, {deployment.status}"
            if self.last.get(deployment.name) != line:
                self.last[deployment.name] = line
                self.console.print(f"[dim]{elapsed_s:5.1f}s[/] {escape(line)}", soft_wrap=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
