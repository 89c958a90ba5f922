"""The options and arguments more than one command takes, each declared once.

A flag's spelling, short form, metavar and whether its default is shown live here; a
command whose help says something of its own about it (``peach test --url`` starts no
simulator, ``peach fuzz --url`` fuzzes that host) passes that help and nothing else.
``peach_cli/cli.py`` assembles the commands from these and from the options only one
command has. ``tests/test_help_golden.py`` holds every `--help` as it reads.

Each command's options are one ``Options`` class (``peach_cli.commands.host_options``,
``project_options``, ``cluster_options``): its fields, each with its Typer declaration and
its default, are the command's parameters; ``takes`` hands the command's function the
options whole, so an option is written once, where it is declared::

    class ReplayOptions(Options):
        file: Annotated[Path, typer.Argument(help="A recording.", show_default=False)]
        output_format: FormatOption = "text"

    @app.command()
    @takes(ReplayOptions)
    def replay(output: Output, options: ReplayOptions) -> None: ...

A command's ``run_*`` takes the run's ``Output`` (its secrets, its consoles) first and its
options object second: ``run_replay(output, options)``.

No ``from __future__ import annotations`` in these modules: Typer reads the annotations at
each start, and strings would be evaluated again (``peach_cli/cli.py`` says why).
"""

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar, dataclass_transform

import typer

if TYPE_CHECKING:
    from peach_cli.boundary import Output

# ----------------------------------------------------------------------------- options objects

_NO_DEFAULT = inspect.Parameter.empty


@dataclass_transform(kw_only_default=True, frozen_default=True)
class Options:
    """A command's options, as the command line gave them: one keyword a field, the fields
    read-only. A field without a default is required.

    A plain class, not a dataclass: a dataclass is compiled when it is defined, and every
    command's class is defined at each start of `peach` (``benchmarks/cli_startup.py``)."""

    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        cls._fields = tuple(name for name in cls.__annotations__ if not name.startswith("_"))

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no option {', '.join(sorted(unknown))}")
        for name in self._fields:
            if name in values:
                value = values[name]
            elif name in vars(type(self)):
                value = getattr(type(self), name)
            else:
                raise TypeError(f"{type(self).__name__} needs {name}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash(tuple(vars(self).values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({shown})"

    @classmethod
    def parameters(cls) -> list[inspect.Parameter]:
        """The fields as the parameters Typer reads: each with its annotation (its Typer
        declaration) and its default."""
        return [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=vars(cls).get(name, _NO_DEFAULT),
                annotation=cls.__annotations__[name],
            )
            for name in cls._fields
        ]


OptionsT = TypeVar("OptionsT", bound=Options)


def takes(
    options: type[OptionsT],
) -> Callable[[Callable[["Output", OptionsT], None]], Callable[..., None]]:
    """The command that hands the run's output and ``options``, built from the command
    line, to ``command``: Typer reads ``options``' fields as the command's parameters, and
    ``command``'s name and docstring as its name and help. The output is the one
    ``cli.main`` made for the run (Typer's context object); a command run without ``main``
    (by a test's runner) gets one of its own."""
    declared = options.parameters()
    context = inspect.Parameter(
        "_context", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )

    def command_of(command: Callable[["Output", OptionsT], None]) -> Callable[..., None]:
        def parsed(_context: typer.Context, **values: Any) -> None:
            from peach_cli.boundary import Output

            command(_context.ensure_object(Output), options(**values))

        parsed.__name__ = parsed.__qualname__ = command.__name__
        parsed.__doc__ = command.__doc__
        parsed.__module__ = command.__module__
        parsed.__signature__ = inspect.Signature([context, *declared])  # type: ignore[attr-defined]
        parsed.__annotations__ = {p.name: p.annotation for p in (context, *declared)}
        return parsed

    return command_of


# ----------------------------------------------------------------------------- one option


def value_option(*names: str, help: str) -> Any:
    """An option that takes a value and has none unless given: its help shows no default."""
    return typer.Option(*names, help=help, show_default=False)


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
