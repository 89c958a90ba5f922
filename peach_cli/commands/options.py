"""The options and arguments more than one command takes, each declared once.

A flag's spelling, short form, metavar and whether its default is shown live here; a
command whose help says something of its own about it (``peach test --url`` starts no
simulator, ``peach fuzz --url`` fuzzes that host) passes that help and nothing else.
``peach_cli/cli.py`` assembles the commands from these and from the options only one
command has. ``tests/test_help_golden.py`` holds every `--help` as it reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

# ----------------------------------------------------------------------------- the project

PROJECT_HELP = "The project folder (or one YAML file). Default: the current folder."

ProjectArg = Annotated[Path, typer.Argument(help=PROJECT_HELP)]
"""``[PROJECT]``: the folder (or one YAML file) a command reads, the current one by default."""

OptionalProjectArg = Annotated[Optional[Path], typer.Argument(help=PROJECT_HELP, show_default=False)]  # fmt: skip
"""``[PROJECT]`` for a command that also runs without any project (``peach doctor``)."""


def project_option(help: str) -> Any:
    """``--project/-p PATH``: the project of a command whose arguments are something else."""
    return typer.Option("--project", "-p", help=help, show_default=False)


# ----------------------------------------------------------------------------- output


def format_option(help: str = "text or json") -> Any:
    """``--format``: how the command prints what it found."""
    return typer.Option("--format", help=help)


FormatOption = Annotated[str, format_option()]
"""``--format text|json``, the default of every command that prints a report."""

# ----------------------------------------------------------------------------- hosts

BASE_URL_HELP = "Base URL for paths. Default: env PEACH_URL, else http://127.0.0.1:8000."


def url_option(help: str = BASE_URL_HELP) -> Any:
    """``--url``: the host a command sends its requests to."""
    return typer.Option("--url", help=help, show_default=False)


UrlOption = Annotated[Optional[str], url_option()]
"""``--url`` as the base of an endpoint path (``peach ask``, ``bench``, ``profile``)."""

ADDRESS_HELP = "The Ray dashboard URL. Default: env PEACH_RAY_ADDRESS, else http://127.0.0.1:8265."


def address_option(help: str = ADDRESS_HELP) -> Any:
    """``--address``: the Ray cluster's dashboard."""
    return typer.Option("--address", help=help, show_default=False)


AddressOption = Annotated[Optional[str], address_option()]
"""``--address`` of the commands that manage a cluster."""

HeaderOption = Annotated[
    Optional[list[str]],
    typer.Option("--header", "-H", help="An extra header NAME:VALUE (repeatable)."),
]


def timeout_option(help: str) -> Any:
    """``--timeout`` in seconds: how long a command waits for what it asked."""
    return typer.Option("--timeout", help=help)


ANSWER_TIMEOUT_HELP = "Seconds to wait for each answer."

RequestTimeoutOption = Annotated[
    float, timeout_option("Seconds a request may go without an answer.")
]
"""``--timeout`` of the commands that load an endpoint."""

# ----------------------------------------------------------------------------- load


def stream_option(help: str) -> Any:
    """``--stream/-s``: ask for streams (sends stream=true)."""
    return typer.Option("--stream", "-s", help=help)


def rate_option(help: str) -> Any:
    """``--rate``: an open loop's requests a second."""
    return typer.Option("--rate", help=help, show_default=False)


def duration_option(help: str) -> Any:
    """``--duration/-d``: seconds of load."""
    return typer.Option("--duration", "-d", help=help, show_default=False)


ENDPOINT_TARGET_HELP = "An endpoint path like /greet (joined to --url), or a full URL."

LoadItemsArg = Annotated[
    Optional[list[str]],
    typer.Argument(help="Parameters, as `peach ask` takes them.", show_default=False),
]
ConcurrencyOption = Annotated[
    Optional[int],
    typer.Option(
        "--concurrency",
        "-c",
        help="Closed loop: keep this many requests in flight (default 8).",
        show_default=False,
    ),
]

# ----------------------------------------------------------------------------- running code


def offline_option(help: str = "Build py_environments from the cache only.") -> Any:
    """``--offline``: never the package index."""
    return typer.Option("--offline", help=help)


OfflineOption = Annotated[bool, offline_option()]
SharedEnvOption = Annotated[
    bool,
    typer.Option(
        "--shared-env",
        help="Run in peach's own Python instead of each py_environment's env (fast; imports "
        "are not checked).",
    ),
]
InheritEnvOption = Annotated[
    bool,
    typer.Option(
        "--inherit-env",
        help="Give replicas and tasks peach's whole environment instead of the minimal one "
        "plus their env_vars and secrets (a quick look; the cluster gives them only those).",
    ),
]
NoDebugOption = Annotated[
    bool,
    typer.Option(
        "--no-debug",
        help="breakpoint() does nothing (as without a terminal); the log says it was skipped.",
    ),
]
PdbOption = Annotated[
    bool,
    typer.Option(
        "--pdb",
        help="An exception escaping a method, init or task opens pdb at the raising frame first.",
    ),
]
TaskIntervalOption = Annotated[
    float,
    typer.Option("--task-interval", help="Seconds the tasks loop pauses between rounds."),
]


def port_option(help: str) -> Any:
    """``--port``: the port `peach dev` binds."""
    return typer.Option("--port", help=help)
