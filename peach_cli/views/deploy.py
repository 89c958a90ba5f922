"""What ``peach deploy``, ``peach status``, ``peach delete`` and ``peach logs`` show.

Progress and notes go to stderr (a live table on a terminal, one line per change
otherwise); what a script reads — the Serve config, the endpoint URLs, log lines — to stdout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from peach_cli.views import console
from peach_cli.wording import count, human_size

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.deploy.deployer import DeployResult
    from peach_cli.deploy.logs import LogLine
    from peach_cli.deploy.packaging import Package
    from peach_cli.deploy.progress import ApplicationState
    from peach_cli.deploy.release import Changes
    from peach_cli.deploy.uploads import Selection
    from peach_cli.runtime.plan import ProjectPlan


def print_deployed(output: Output, plan: ProjectPlan, result: DeployResult) -> None:
    """The deployed application: a summary on stderr, each endpoint's URL on stdout."""
    from peach_cli.boundary import markup

    replicas = sum(d.running for d in result.app.deployments)
    version = result.app.release.get("version") if result.app.release else None
    at = f" at {markup(version)}" if version else ""
    output.stderr.print(
        f"[bold green]✓[/] {markup(result.app.name)}{at} is running: "
        f"{count(replicas, 'replica')} in "
        f"{count(len(result.app.deployments), 'deployment')}, {result.elapsed_s:.1f} s",
        soft_wrap=True,
    )
    for endpoint in plan.endpoints.values():
        output.stdout.print(f"{endpoint.url}  {result.url}{endpoint.url}", soft_wrap=True)
    if plan.endpoints:
        first = next(iter(plan.endpoints.values())).url
        output.stderr.print(
            f"[dim]ask it:[/] peach ask {markup(first)} --url {markup(result.url)}",
            soft_wrap=True,
        )


def print_uploads(output: Output, selection: Selection, packages: Sequence[Package]) -> None:
    """``--dry-run``, on stderr (stdout holds the config): the project's files, which go once
    in the project package, then every package a deploy sends and their total."""
    from peach_cli.boundary import markup

    err = output.stderr
    files = count(len(selection.files), "file")
    left_out = (
        "notebooks, conf, dot-files, .gitignore/.rayignore matches, virtualenvs and caches left out"
    )
    shared = "in the project package, uploaded once and shared by every component and task"
    if not selection.files:  # nothing to list after a colon
        err.print(
            f"[bold]no other file, 0 B[/] {shared} ({left_out}): the extracted code and "
            "peach's runtime are all it needs",
            soft_wrap=True,
        )
    else:
        err.print(
            f"[bold]{files}, {human_size(selection.total_bytes)}[/] {shared} ({left_out}):",
            soft_wrap=True,
        )
    for item in selection.files:
        err.print(f"  {markup(item.path)}  [dim]{human_size(item.size)}[/]", soft_wrap=True)
    if selection.skipped:
        err.print(f"[bold]{len(selection.skipped)} skipped[/] (never uploaded):", soft_wrap=True)
    for path, why in selection.skipped:
        err.print(f"  {markup(path)}  [yellow]skipped: {markup(why)}[/]", soft_wrap=True)
    total = sum(len(p.data) for p in packages)
    err.print(
        f"[bold]{human_size(total)} in {count(len(packages), 'package')}[/] sent by a deploy "
        "to a cluster that has none of them (those already there are not sent again):",
        soft_wrap=True,
    )
    for sent in packages:
        size = human_size(len(sent.data))
        err.print(f"  - {markup(sent.name)}  [dim]{size}, {markup(sent.about)}[/]", soft_wrap=True)


def print_config(output: Output, config: dict[str, Any], output_format: str) -> None:
    """``peach deploy --dry-run``'s Serve config (secret values as ``***``)."""
    if output_format == "yaml":
        import yaml

        text = yaml.safe_dump(output.secrets.shown_value(config), sort_keys=False)
        output.write_report(text, channel="deploy-dry-run")
    else:
        console.print_json(output, config, channel="deploy-dry-run")


def print_applications(output: Output, applications: list[ApplicationState]) -> None:
    """``peach status``: one table per application."""
    if not applications:
        output.stdout.print("no applications are deployed on this cluster")
    for app in applications:
        output.stdout.print(application_table(app))
        if app.tasks:
            output.stdout.print(tasks_table(app.tasks))


_CHANGE_STYLE = {"new": "green", "removed": "red", "unchanged": "dim"}


def print_changes(output: Output, changes: Changes) -> None:
    """``peach deploy --diff``: one line per deployment and task on stdout (``gateway
    unchanged``, ``component hello.main  restarts (code)``), what runs and a summary on
    stderr."""
    from peach_cli.boundary import markup

    err = output.stderr
    if not changes.deployed:
        err.print(
            f"{markup(changes.app)} is not deployed on this cluster: a deploy creates it all",
            soft_wrap=True,
        )
    elif changes.running is not None:
        text = release_text(changes.running.to_dict())
        err.print(f"{markup(changes.app)} runs {markup(text)}", soft_wrap=True)
    else:
        err.print(f"{markup(changes.app)} runs a version with no release record", soft_wrap=True)
    labels = [
        f"{c.kind} {c.name}" if c.kind in ("component", "task") else c.kind for c in changes.lines
    ]
    width = max((len(label) for label in labels), default=0)
    out = output.stdout
    for label, line in zip(labels, changes.lines, strict=True):
        style = "yellow" if line.restarts else _CHANGE_STYLE.get(line.what, "")
        what = f"[{style}]{line.what}[/]" if style else line.what
        before, after = line.replicas
        if before is not None and after is not None and before != after:
            what += f" [dim](replicas {before} → {after})[/]"
        out.print(f"{markup(label.ljust(width))}  {what}", soft_wrap=True)
    tally: dict[str, int] = {}
    for line in changes.lines:
        key = "restart" if line.restarts else line.what
        tally[key] = tally.get(key, 0) + 1
    parts = [
        f"{tally[key]} {key}" if key != "restart" else count(tally[key], "restart")
        for key in ("restart", "new", "removed", "unchanged")
        if tally.get(key)
    ]
    err.print(
        f"{', '.join(parts) or 'nothing to deploy'}; nothing was changed "
        "([bold]peach deploy[/] applies it)",
        soft_wrap=True,
    )


def print_deleted(output: Output, app_name: str, remaining: list[str]) -> None:
    from peach_cli.boundary import markup

    left = ", ".join(remaining) if remaining else "none"
    output.stderr.print(
        f"[bold green]✓[/] deleted {markup(app_name)} (still running: {markup(left)})",
        soft_wrap=True,
    )


def print_log_line(output: Output, line: LogLine) -> None:
    """``peach logs``: a line with its ``deployment#replica`` prefix (dim on a terminal,
    plain text when piped, so grep works)."""
    from peach_cli.boundary import markup, shown

    out = output.stdout
    if out.is_terminal:
        style = "red" if line.stream == "err" else "dim"
        out.print(f"[{style}]{markup(line.prefix)} |[/] {markup(line.text)}", soft_wrap=True)
    else:
        output.write_report(f"{shown(line.prefix)} | {shown(line.text)}\n", channel="cluster-logs")


def print_note(output: Output, message: str) -> None:
    output.stderr.print(message, soft_wrap=True)


# -- progress --------------------------------------------------------------------------

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
    """The application's name, state and route, what runs (its release), and a table: one
    row per deployment (replicas running/target, state, message)."""
    from rich.console import Group
    from rich.table import Table

    from peach_cli.boundary import markup
    from peach_cli.deploy.progress import user_error

    title = f"{markup(app.name)}  {_styled(app.status)}"
    if app.route_prefix:
        title += f"  [dim]route {markup(app.route_prefix)}[/]"
    if elapsed_s is not None:
        title += f"  [dim]{elapsed_s:.1f} s[/]"
    table = Table(expand=False, show_edge=False)
    table.add_column("deployment")
    table.add_column("replicas", justify="right")
    table.add_column("status")
    table.add_column("replica states")
    table.add_column("message", overflow="fold", max_width=60)
    for deployment in app.deployments:
        target = "?" if deployment.target is None else str(deployment.target)
        states = ", ".join(
            f"{markup(r.replica_id)} {_styled(r.state)}"
            + (f" [red]({markup(r.last_error)})[/]" if r.last_error else "")
            for r in deployment.replicas
        )
        message = deployment.message
        if any(marker in message for marker in ("failed to start", "RuntimeEnvSetupError")):
            message = user_error(message)  # the user's exception, not Ray's retry notice
        message = message.splitlines()[0] if message else ""
        table.add_row(
            markup(deployment.name),
            f"{deployment.running}/{target}",
            _styled(deployment.status),
            states,
            markup(message),
        )
    lines: list[Any] = [title]
    if app.release:  # what runs, on a line of its own (a title would wrap to the table)
        lines.append(f"[dim]{markup(release_text(app.release))}[/]")
    return Group(*lines, table)


def release_text(release: dict[str, Any]) -> str:
    """``version abc1234+dirty, deployed 2026-12-07 15:02:11 UTC by Ada, peach 0.1.0``.

    >>> release_text({"version": "abc1234", "ref": "HEAD~1", "deployed_at": "2026-12-07T15:02:11Z",
    ...               "deployed_by": "Ada", "peach_version": "0.1.0"})
    'version abc1234 (--ref HEAD~1), deployed 2026-12-07 15:02:11 UTC by Ada, peach 0.1.0'
    """
    at = str(release.get("deployed_at") or "?").replace("T", " ").replace("Z", " UTC")
    ref = f" (--ref {release['ref']})" if release.get("ref") else ""
    return (
        f"version {release.get('version') or '?'}{ref}, deployed {at} by "
        f"{release.get('deployed_by') or '?'}, peach {release.get('peach_version') or '?'}"
    )


def tasks_table(rows: Sequence[dict[str, Any]]) -> Any:
    """The application's tasks as the ``peach dev`` view shows them (state, runs ok and
    failed, last run, last error; the queue's length beside a queued state)."""
    from peach_cli.runtime.taskloop import TaskChanged
    from peach_cli.views.task import TasksTable

    table = TasksTable()
    for row in rows:
        table.update(TaskChanged.from_dict(row))
    return table.render()


def note(output: Output, message: str) -> None:
    from peach_cli.boundary import markup

    output.stderr.print(f"[dim]·[/] {markup(message)}", soft_wrap=True)


def warn(output: Output, message: str) -> None:
    from peach_cli.boundary import markup

    output.stderr.print(f"[yellow]warning:[/] {markup(message)}", soft_wrap=True)


def reporter(output: Output, **steps: Any) -> Any:
    """A deploy ``Reporter`` whose notes and warnings go to ``output``'s stderr and whose
    secrets are masked in everything ``output`` writes (``steps``: more callbacks)."""
    from functools import partial

    from peach_cli.deploy.deployer import Reporter

    return Reporter(
        note=partial(note, output), warn=partial(warn, output), hide=output.secrets.hide, **steps
    )


class ProgressView:
    """Deploy progress on stderr: a live table on a terminal, changed lines otherwise."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.console = output.stderr
        self.live: Any = None
        self.last: dict[str, str] = {}

    def reporter(self) -> Any:
        return reporter(self.output, progress=self.progress)

    def progress(self, app: ApplicationState, elapsed_s: float) -> None:
        if self.console.is_terminal:
            from rich.live import Live

            if self.live is None:
                self.live = Live(console=self.console, auto_refresh=False, transient=False)
                self.live.start()
            self.live.update(application_table(app, elapsed_s), refresh=True)
            return
        from peach_cli.boundary import markup

        for deployment in app.deployments:
            target = "?" if deployment.target is None else deployment.target
            line = f"{deployment.name}: {deployment.running}/{target} running, {deployment.status}"
            if self.last.get(deployment.name) != line:
                self.last[deployment.name] = line
                self.console.print(f"[dim]{elapsed_s:5.1f}s[/] {markup(line)}", soft_wrap=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
