"""The `peach` command line: parse options, call one core function, render, exit.

Command functions stay thin: each imports its implementation lazily (so `peach --help`
never pays for ray, uvicorn or httpx) and returns an exit code. ``main`` is the one place
that turns a ``PeachError`` into a message and an exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from peach_cli.errors import PeachError

app = typer.Typer(
    name="peach",
    help="Validate, run, stream and deploy PEACH endpoints from the terminal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

ProjectArg = Annotated[
    Path,
    typer.Argument(help="The project folder (or one YAML file). Default: the current folder."),
]


@app.command()
def validate(
    project: ProjectArg = Path("."),
    format: Annotated[str, typer.Option("--format", help="text or json")] = "text",
    strict: Annotated[bool, typer.Option("--strict", help="Fail on warnings too.")] = False,
) -> None:
    """Check peach.conf and the notebooks it names, without running any code."""
    from peach_cli.cmd_validate import run_validate

    raise typer.Exit(run_validate(project, output_format=format, strict=strict))


@app.command()
def schema() -> None:
    """Print the JSON Schema of peach.conf (for yaml-language-server and editors)."""
    from peach_cli.cmd_validate import run_schema

    raise typer.Exit(run_schema())


@app.command()
def dev(
    project: ProjectArg = Path("."),
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free one.")] = 8000,
    no_reload: Annotated[
        bool, typer.Option("--no-reload", help="Do not watch files for changes.")
    ] = False,
    timeout_s: Annotated[
        Optional[float],
        typer.Option("--timeout-s", help="Override the conf's timeout_s for non-streaming calls."),
    ] = None,
) -> None:
    """Serve every endpoint locally with the platform's semantics, reloading on save."""
    from peach_cli.cmd_dev import run_dev

    raise typer.Exit(
        run_dev(project, host=host, port=port, reload=not no_reload, timeout_s=timeout_s)
    )


def main() -> None:
    """Entry point of the `peach` console script: the one catch site for PeachError."""
    try:
        app()
    except PeachError as error:
        from peach_cli.console import print_error

        print_error(error)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
