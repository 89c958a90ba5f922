"""The `peach` command line: parse options, call one core function, render, exit.

Command functions stay thin: each imports its implementation lazily (so `peach --help`
never pays for ray, uvicorn or httpx) and returns an exit code. ``main`` is the one place
that turns a ``PeachError`` into a message and an exit code (and any other exception into
one line saying it is a defect of peach, exit 70). ``main`` makes the run's ``Output`` (its
secrets, its consoles: ``peach_cli.boundary``); each command gets it beside its options,
declared once (``peach_cli.commands.options.takes``), and hands both to its ``run_*``::

    @app.command()
    @takes(ValidateOptions)
    def validate(output: "Output", options: ValidateOptions) -> None:
        raise typer.Exit(run_validate(output, options))

No ``from __future__ import annotations`` here: Typer reads the annotations of every command
at each start, and as strings each one is compiled and evaluated again (a third of the time
Typer took to build the commands, about 30 ms of `peach --help`).
"""

import os
import sys

if "_PEACH_COMPLETE" in os.environ:  # a <TAB>: the common ones are answered before Typer loads
    from peach_cli.commands.completion import answer_fast

    answer_fast()

from typing import TYPE_CHECKING, Annotated  # noqa: E402

import typer  # noqa: E402

from peach_cli.commands import coercion, completion, fasthelp, metavars
from peach_cli.commands.cluster_options import (
    DeleteOptions,
    DeployOptions,
    LogsOptions,
    StatusOptions,
)
from peach_cli.commands.host_options import (
    AskOptions,
    BenchOptions,
    FuzzOptions,
    ProfileOptions,
    ReplayOptions,
    TestOptions,
)
from peach_cli.commands.options import takes
from peach_cli.commands.project_options import (
    DevOptions,
    DoctorOptions,
    EnvBuildOptions,
    EnvListOptions,
    EnvPruneOptions,
    InitOptions,
    OpenapiOptions,
    SchemaOptions,
    TaskListOptions,
    TaskRunOptions,
    ValidateOptions,
)
from peach_cli.errors import PeachError

if TYPE_CHECKING:
    from peach_cli.boundary import Output

fasthelp.install()  # `peach --help` without markdown-it and pygments
metavars.install()  # TEXT and PATH in `--help`, not <str> and <path>; nothing beside a flag
coercion.install()  # words to str, int, float, Path without building pydantic adapters
completion.install_scripts()  # bash passes the whole line; zsh completes on its first <TAB>

app = typer.Typer(
    name="peach",
    help="Validate, run, stream and deploy PEACH endpoints from the terminal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from peach_cli import __version__

        typer.echo(f"peach {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print peach's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Validate, run, stream and deploy PEACH endpoints from the terminal."""


@app.command()
@takes(InitOptions)
def init(output: "Output", options: InitOptions) -> None:
    """Create a new project that validates clean and serves at once.

    Writes peach.yaml (with peach.schema.json beside it for editors), notebooks/Endpoints.ipynb with an endpoint, its init and its fallback, a .gitignore and a README with the next commands. Existing files are never overwritten without --force.
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.init import run_init

    raise typer.Exit(run_init(output, options))


@app.command()
@takes(ValidateOptions)
def validate(output: "Output", options: ValidateOptions) -> None:
    """Check peach.conf and the notebooks it names, without running any code.

    Every problem is printed as file:line:col (or notebook:cell N:line M) with a stable code; the codes are listed in the docs (docs/reference/codes.md).

    [bold]Exit codes[/]: 0 no error (warnings and info allowed) · 1 errors, or warnings with --strict · 2 bad command line (no such folder, no peach.yaml, bad option).
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.validate import run_validate

    raise typer.Exit(run_validate(output, options))


@app.command()
@takes(SchemaOptions)
def schema(output: "Output", options: SchemaOptions) -> None:
    """Print the JSON Schema of peach.conf (for yaml-language-server and editors)."""
    from peach_cli.commands.validate import run_schema

    raise typer.Exit(run_schema(output, options))


@app.command()
@takes(OpenapiOptions)
def openapi(output: "Output", options: OpenapiOptions) -> None:
    """Print the project's OpenAPI 3.1 document: every endpoint's parameters, answers and errors.

    Built from peach.conf and the notebooks' code without running it, as [bold]peach validate[/] reads them; the same document is served at GET /_peach/openapi.json by peach dev and by the deployed app. An annotation no JSON Schema expresses becomes {} (peach validate warns: PC312).

    [bold]Exit codes[/]: 0 printed · 1 the project has errors · 2 bad command line.
    """
    from peach_cli.commands.openapi import run_openapi

    raise typer.Exit(run_openapi(output, options))


@app.command()
@takes(DevOptions)
def dev(output: "Output", options: DevOptions) -> None:
    """Serve every endpoint locally with the platform's semantics, reloading on save.

    Each py_environment is an isolated env (built with uv, cached): an import the conf does not declare fails here as it does on the platform.
    """
    from peach_cli.commands.dev import run_dev

    raise typer.Exit(run_dev(output, options))


@app.command(no_args_is_help=True)
@takes(AskOptions)
def ask(output: "Output", options: AskOptions) -> None:
    """Call an endpoint and print its answer, or render its stream as it arrives.

    On a terminal the result is pretty-printed; piped, stdout gets the result JSON, or the stream's bytes exactly as they arrive. Streams end with a summary on stderr: time to first chunk, chunks, bytes, total time and the largest gap; a stream the server cut says "cut after N chunks" and exits 7. Ctrl-C closes the connection and keeps what was printed.

    [bold]Exit codes[/]: 0 ok · 1 the endpoint answered with an error · 2 bad command line · 3 cannot connect (is `peach dev` running?) · 4 host name does not resolve · 5 TLS failed · 6 timed out · 7 the server cut the stream · 8 404, no endpoint at that url · 9 invalid HTTP answer · 130 interrupted (Ctrl-C).
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.ask import run_ask

    raise typer.Exit(run_ask(output, options))


@app.command()
@takes(TestOptions)
def test(output: "Output", options: TestOptions) -> None:
    """Run the endpoint tests of *.peach-test.yaml files against the project's simulator, or --url.

    Without --url the simulator starts quietly on a free port (as peach dev --no-reload), every case runs in file order, and it stops. One line per case; a failure shows expected against observed as a diff; --format junit writes JUnit XML for CI.

    [bold]Exit codes[/]: 0 every case passed · 1 a case failed · 2 bad command line, a case file with errors, or no case found.
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.test import run_test

    raise typer.Exit(run_test(output, options))


@app.command()
@takes(FuzzOptions)
def fuzz(output: "Output", options: FuzzOptions) -> None:
    """Send generated requests to every endpoint and report what breaks, each shrunk to a minimal request.

    Values come from each parameter's JSON Schema (as peach openapi writes it), edge values included: empty strings, 0, negatives, huge ints, NaN, unicode, empty and long lists. It reports a method_error of any component (also one the fallback covered, when it runs the simulator itself), an answer past timeout_s, a 5xx that is no documented error envelope, and a replica that died; each with its error and a ready case for a *.peach-test.yaml file. Without --url the simulator starts quietly on a free port and stops at the end. Needs the fuzz extra: pip install 'peach-cli\\[fuzz]'.

    [bold]Exit codes[/]: 0 nothing found · 1 something found · 2 bad command line, a project with errors, or Hypothesis not installed.
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.fuzz import run_fuzz

    raise typer.Exit(run_fuzz(output, options))


@app.command(no_args_is_help=True)
@takes(ReplayOptions)
def replay(output: "Output", options: ReplayOptions) -> None:
    """Send every recorded request again, in order, and compare the answers: what changes if I push this?

    Each answer's status, error code, component, result (as JSON) and stream text are compared with the recorded answer, or with the --against host's answer. Prints how many are the same, differ and failed, and the first differences as JSON diffs.

    [bold]Exit codes[/]: 0 every answer is the same · 1 an answer differs or a request failed · 2 bad command line, or FILE is not a recording · 3 a host refused the connection (the replay stops at the first refusal).
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.replay import run_replay

    raise typer.Exit(run_replay(output, options))


@app.command()
@takes(BenchOptions)
def bench(output: "Output", options: BenchOptions) -> None:
    """Load an endpoint and report latency, throughput, status and error counts, the fallback's share, each replica's share, stream figures and, against `peach dev`, each replica's peak memory and CPU.

    [bold]Exit codes[/]: 0 the run finished · 2 bad command line · 3 no request got an answer · 130 interrupted (Ctrl-C; the figures measured so far are printed).
    """
    from peach_cli.commands.bench import run_bench

    raise typer.Exit(run_bench(output, options))


@app.command()
@takes(ProfileOptions)
def profile(output: "Output", options: ProfileOptions) -> None:
    """Load an endpoint as `peach bench` does while every replica of its components samples itself, then show the hottest lines by self and total time as notebook positions (`notebooks/X.ipynb, cell N, line L · function`); peach's own frames are one `peach` entry.

    Without --url it starts the project's simulator; with --url it profiles a running `peach dev` on this machine, or a deployed app's replicas through the Ray dashboard's CPU profiling (py-spy on their nodes; --address names the dashboard, the project folder names the cells). When the dashboard cannot profile, it exits 2 saying why; --init is not offered there.

    [bold]Exit codes[/]: 0 profiled · 2 bad command line, or a host that cannot be profiled · 3 no request got an answer · 130 interrupted.
    """
    from peach_cli.commands.profile import run_profile

    raise typer.Exit(run_profile(output, options))


@app.command()
@takes(DeployOptions)
def deploy(output: "Output", options: DeployOptions) -> None:
    """Deploy the project to a Ray Serve cluster and wait until every replica runs.

    The application records what runs (git commit, +dirty for uncommitted changes, time, who, peach's version): [bold]peach status[/] shows it.

    [bold]Exit codes[/]: 0 deployed (--diff: compared) · 1 the project has errors, the cluster cannot be reached or the deploy failed · 2 bad command line (an unknown --ref, a project outside git with --ref).
    """
    from peach_cli.commands.deploy import run_deploy

    raise typer.Exit(run_deploy(output, options))


@app.command()
@takes(StatusOptions)
def status(output: "Output", options: StatusOptions) -> None:
    """Show the cluster's Serve applications, what each runs (version, when, who), their deployments and replica states."""
    from peach_cli.commands.deploy import run_status

    raise typer.Exit(run_status(output, options))


@app.command(no_args_is_help=True)
@takes(DeleteOptions)
def delete(output: "Output", options: DeleteOptions) -> None:
    """Remove one application from the cluster; the others keep running."""
    from peach_cli.commands.deploy import run_delete

    raise typer.Exit(run_delete(output, options))


@app.command()
@takes(LogsOptions)
def logs(output: "Output", options: LogsOptions) -> None:
    """Print the replicas' logs of an application: prints, init errors, failed re-inits.

    Each line is prefixed with its deployment and replica (deployment#replica); replicas that stopped (an init that failed, a version replaced) are marked (stopped).
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.logs import run_logs

    raise typer.Exit(run_logs(output, options))


env_app = typer.Typer(
    name="env",
    help="The project's environments: list them, build them ahead of time, prune the cache.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(env_app)


@env_app.command("list")
@takes(EnvListOptions)
def env_list(output: "Output", options: EnvListOptions) -> None:
    """Show each env of the project: its requirements, what uses it, whether it is built, its size and path."""
    from peach_cli.commands.env import run_env_list

    raise typer.Exit(run_env_list(output, options))


@env_app.command("build")
@takes(EnvBuildOptions)
def env_build(output: "Output", options: EnvBuildOptions) -> None:
    """Build every env of the project ahead of time (for CI, or before going offline).

    [bold]Exit codes[/]: 0 every env built · 1 a build failed (uv's reason names the env and the requirement) or the conf has errors · 2 bad command line.
    """
    from peach_cli.commands.env import run_env_build

    raise typer.Exit(run_env_build(output, options))


@env_app.command("prune")
@takes(EnvPruneOptions)
def env_prune(output: "Output", options: EnvPruneOptions) -> None:
    """Remove cached envs that no run has used for 30 days (--all: every env)."""
    from peach_cli.commands.env import run_env_prune

    raise typer.Exit(run_env_prune(output, options))


task_app = typer.Typer(
    name="task",
    help="The project's tasks: list them, run one (locally in its env, or on Ray).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(task_app)


@task_app.command("list")
@takes(TaskListOptions)
def task_list(output: "Output", options: TaskListOptions) -> None:
    """Show each task of the project: its notebook, method, py_env and timeout."""
    from peach_cli.commands.task import run_task_list

    raise typer.Exit(run_task_list(output, options))


@task_app.command("run", no_args_is_help=True)
@takes(TaskRunOptions)
def task_run(output: "Output", options: TaskRunOptions) -> None:
    """Run one task once, in its py_environment, streaming its output line by line.

    The payload reaches the function as its first positional argument when it takes one. Runs it triggers with trigger_task_with_event run after it, one at a time.

    [bold]Exit codes[/]: 0 it returned · 1 it raised (its traceback names the notebook cell and line) or ran past its timeout (its whole process tree is killed) · 2 bad command line or unknown task · 130 interrupted (Ctrl-C stops the task).
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.task import run_task_run

    raise typer.Exit(run_task_run(output, options))


@app.command()
@takes(DoctorOptions)
def doctor(output: "Output", options: DoctorOptions) -> None:
    """Check the machine, the project and a cluster, and say what to fix. Changes nothing.

    Python against requires-python, uv, the package index (or with --offline the env cache), the cache folder, the dev port, the project validating; with --address (or PEACH_RAY_ADDRESS) the dashboard, its token, its Ray version and its CPUs and memory.

    [bold]Exit codes[/]: 0 no check failed (warnings allowed) · 1 a check failed · 2 bad command line.
    """  # one line per paragraph: Rich keeps line breaks, and wraps to the terminal
    from peach_cli.commands.doctor import run_doctor

    raise typer.Exit(run_doctor(output, options))


EXIT_DEFECT = 70
"""An exception peach did not expect: a defect of peach (``EX_SOFTWARE``)."""


def main() -> None:
    """Entry point of the `peach` console script: the one catch site for PeachError, and
    for any other exception (one masked, escaped line saying where to report it: no raw
    traceback, no locals)."""
    from peach_cli.boundary import Output

    output = Output()  # this run's: its secrets, its consoles
    with output.logging():  # uvicorn's and peach's loggers through the run's output
        try:
            app(prog_name="peach", obj=output)  # `python -m peach_cli.cli`, a test in-process
        except PeachError as error:
            from peach_cli.views.console import print_error

            print_error(output, error)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as error:  # noqa: BLE001 - the last catch site: a defect of peach
            from peach_cli import __version__
            from peach_cli.views.console import print_defect

            print_defect(output, error, __version__)
            sys.exit(EXIT_DEFECT)


if __name__ == "__main__":  # pragma: no cover
    main()
