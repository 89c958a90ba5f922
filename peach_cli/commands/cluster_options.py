"""The options of the commands that manage a Ray cluster: `peach deploy`, `status`, `delete`
and `logs`, each command's in one ``Options`` class (``peach_cli.commands.options``),
written once: ``peach_cli/cli.py`` hands it whole to the command's ``run_*`` function."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from peach_cli.commands.options import (
    AddressOption,
    FormatOption,
    Options,
    ProjectArg,
    TaskIntervalOption,
    format_option,
    timeout_option,
    value_option,
)


class DeployOptions(Options):
    """`peach deploy`."""

    project: ProjectArg = Path(".")
    address: AddressOption = None
    http_port: Annotated[
        Optional[int],
        value_option(
            "--http-port", help="Serve's HTTP port when Serve is not running yet (default 8000)."
        ),
    ] = None
    http_host: Annotated[
        Optional[str],
        value_option(
            "--http-host",
            help="Serve's HTTP host when Serve is not running yet (default 127.0.0.1).",
        ),
    ] = None
    route_prefix: Annotated[
        str,
        typer.Option(
            "--route-prefix",
            help="Serve the project under this path (/PREFIX), beside the cluster's other projects.",
        ),
    ] = "/"
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the Serve config and list the files to upload; do not contact a cluster.",
        ),
    ] = False
    output_format: Annotated[str, format_option("The --dry-run config as json or yaml.")] = "json"
    timeout_s: Annotated[float, timeout_option("Seconds to wait for every replica to run.")] = 300.0
    task_interval: TaskIntervalOption = 60.0
    no_tasks: Annotated[
        bool,
        typer.Option(
            "--no-tasks",
            help="Leave the tasks loop out (triggered runs still go through the scheduler).",
        ),
    ] = False
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Print what a deploy would change (new, removed, restarts, unchanged) for "
            "each component and task, the gateway and the scheduler; change nothing.",
        ),
    ] = False
    ref: Annotated[
        Optional[str],
        typer.Option(
            "--ref",
            metavar="REV",
            help="Deploy the project as committed at this git revision (rolling back: the "
            "previous commit); the working tree is not touched.",
            show_default=False,
        ),
    ] = None


class StatusOptions(Options):
    """`peach status`."""

    address: AddressOption = None
    output_format: FormatOption = "text"


class DeleteOptions(Options):
    """`peach delete`."""

    app_name: Annotated[
        str, typer.Argument(help="The application (a codops) to remove.", show_default=False)
    ]
    address: AddressOption = None


class LogsOptions(Options):
    """`peach logs`."""

    app_name: Annotated[
        Optional[str],
        typer.Argument(
            help="The application (a codops). Default: the cluster's only application.",
            show_default=False,
        ),
    ] = None
    address: AddressOption = None
    deployment: Annotated[
        Optional[str],
        value_option("--deployment", "-d", help="Only this deployment (hello.main)."),
    ] = None
    tail: Annotated[int, typer.Option("--tail", "-n", help="Lines per replica log.")] = 100
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until Ctrl-C.")
    ] = False
