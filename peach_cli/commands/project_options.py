"""The options of the commands that work on the project on this machine: `peach init`,
`validate`, `schema`, `openapi`, `dev`, `env *`, `task *` and `doctor`, each command's in
one ``Options`` class (``peach_cli.commands.options``), written once: ``peach_cli/cli.py``
hands it whole to the command's ``run_*`` function."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from peach_cli.commands.completion import complete_task
from peach_cli.commands.options import (
    FormatOption,
    InheritEnvOption,
    NoDebugOption,
    OfflineOption,
    OptionalProjectArg,
    Options,
    PdbOption,
    ProjectArg,
    SharedEnvOption,
    TaskIntervalOption,
    address_option,
    format_option,
    offline_option,
    port_option,
    value_option,
)


class InitOptions(Options):
    """`peach init`."""

    folder: Annotated[
        Path,
        typer.Argument(help="Where to create the project (created if missing). Default: here."),
    ] = Path(".")
    codops: Annotated[
        Optional[str],
        value_option(
            "--codops",
            help="The organisation id, \\[a-z0-9_-]+. Default: the folder's name made valid.",
        ),
    ] = None
    streaming: Annotated[
        bool, typer.Option("--streaming", help="Add an async-generator (streaming) endpoint.")
    ] = False
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the files peach init writes.")
    ] = False


class ValidateOptions(Options):
    """`peach validate`."""

    project: ProjectArg = Path(".")
    output_format: FormatOption = "text"
    strict: Annotated[bool, typer.Option("--strict", help="Fail on warnings too.")] = False


class SchemaOptions(Options):
    """`peach schema`."""

    tests: Annotated[
        bool, typer.Option("--tests", help="The schema of a *.peach-test.yaml case file instead.")
    ] = False


class OpenapiOptions(Options):
    """`peach openapi`."""

    project: ProjectArg = Path(".")
    output_format: Annotated[str, format_option("json or yaml")] = "json"


class DevOptions(Options):
    """`peach dev`."""

    project: ProjectArg = Path(".")
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1"
    port: Annotated[int, port_option("Port to bind; 0 picks a free one.")] = 8000
    no_reload: Annotated[
        bool, typer.Option("--no-reload", help="Do not watch files for changes.")
    ] = False
    reload_mode: Annotated[
        str,
        typer.Option(
            "--reload",
            metavar="patch|restart",
            help="patch: a save that changes only a method keeps the replicas and their init "
            "state; restart: every change starts new replicas.",
        ),
    ] = "patch"
    timeout_s: Annotated[
        Optional[float],
        typer.Option("--timeout-s", help="Override the conf's timeout_s for non-streaming calls."),
    ] = None
    shared_env: SharedEnvOption = False
    inherit_env: InheritEnvOption = False
    offline: OfflineOption = False
    tasks: Annotated[
        bool,
        typer.Option(
            "--tasks", help="Run the tasks loop too: every task once, a pause, again, forever."
        ),
    ] = False
    task_interval: TaskIntervalOption = 60.0
    allow_hosts: Annotated[
        Optional[list[str]],
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="Also answer requests whose Host is NAME (repeatable); loopback names and "
            "the bound address always are.",
        ),
    ] = None
    allow_origins: Annotated[
        Optional[list[str]],
        typer.Option(
            "--allow-origin",
            metavar="ORIGIN",
            help="Also answer browser requests from ORIGIN, like http://app.test:3000 "
            "(repeatable); loopback origins always are.",
        ),
    ] = None
    no_debug: NoDebugOption = False
    post_mortem: PdbOption = False
    record: Annotated[
        Optional[Path],
        typer.Option(
            "--record",
            metavar="FILE",
            help="Append one JSON line per answered request to FILE (for peach replay).",
            show_default=False,
        ),
    ] = None


class EnvListOptions(Options):
    """`peach env list`."""

    project: ProjectArg = Path(".")
    output_format: FormatOption = "text"


class EnvBuildOptions(Options):
    """`peach env build`."""

    project: ProjectArg = Path(".")
    offline: Annotated[bool, offline_option("Use only what is cached; never the network.")] = False
    refresh: Annotated[
        bool,
        typer.Option("--refresh", help="Resolve again (newer versions of unpinned requirements)."),
    ] = False


class EnvPruneOptions(Options):
    """`peach env prune`."""

    all_envs: Annotated[bool, typer.Option("--all", help="Remove every env, used or not.")] = False
    older_than_days: Annotated[
        float, typer.Option("--days", help="Remove envs no run has used for this many days.")
    ] = 30


class TaskListOptions(Options):
    """`peach task list`."""

    project: ProjectArg = Path(".")
    output_format: FormatOption = "text"


class TaskRunOptions(Options):
    """`peach task run`."""

    name: Annotated[
        str,
        typer.Argument(help="The task to run.", show_default=False, autocompletion=complete_task),
    ]
    project: ProjectArg = Path(".")
    payload: Annotated[
        Optional[str],
        value_option(
            "--payload", help="JSON passed as the function's first argument, or @FILE holding it."
        ),
    ] = None
    timeout_s: Annotated[
        Optional[float],
        value_option(
            "--timeout-s",
            help="Override the task's timeout_s (default 3600): past it the run is killed.",
        ),
    ] = None
    address: Annotated[
        Optional[str],
        address_option("Run it on this Ray cluster (the dashboard URL) as a Ray job."),
    ] = None
    shared_env: SharedEnvOption = False
    inherit_env: InheritEnvOption = False
    offline: OfflineOption = False
    no_debug: NoDebugOption = False
    post_mortem: PdbOption = False


class DoctorOptions(Options):
    """`peach doctor`."""

    project: OptionalProjectArg = None
    address: Annotated[
        Optional[str],
        address_option(
            "The Ray dashboard URL to check. Default: env PEACH_RAY_ADDRESS; "
            "without either, no cluster is checked."
        ),
    ] = None
    port: Annotated[int, port_option("The port peach dev will bind.")] = 8000
    offline: Annotated[
        bool, offline_option("Do not contact the package index: check the cache.")
    ] = False
    output_format: FormatOption = "text"
