"""`peach task list|run`: the project's tasks, and one run of one of them.

``peach task run`` runs the task in its own process, in its py_env's env, with the project
folder as working directory (a ``simulator.session.DevSession`` without a server), or on a
Ray cluster as a job with ``--address`` (``peach_cli.deploy.jobs``). Runs it triggers (``trigger_task_with_event``)
run after it, one at a time, in order.

Exit codes: 0 every run returned; 1 a run raised or ran past its timeout (its process tree
killed), or the project has errors; 2 the command line is wrong (an unknown task gets
"did you mean"); 130 Ctrl-C (the task is stopped with its process tree).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.project_options import TaskListOptions, TaskRunOptions
    from peach_cli.runtime.plan import ProjectPlan

FORMATS = ("text", "json")
EXIT_INTERRUPTED = 130


def run_task_list(output: Output, options: TaskListOptions) -> int:
    """Print the project's tasks (from the conf alone: no notebook is read)."""
    project, output_format = options.project, options.output_format
    if output_format not in FORMATS:
        raise UsageError(f"--format must be text or json, not {output_format!r}")
    from peach_cli.commands.loading import load_conf
    from peach_cli.views import console
    from peach_cli.views.task import print_task_list

    conf = load_conf(output, project)
    rows = [
        {
            "name": name,
            "notebook": task.notebook,
            "method": task.method,
            "py_env": task.py_env,
            "timeout_s": float(task.timeout_s),
            "full_notebook": task.full_notebook,
        }
        for name, task in conf.tasks.items()
    ]
    if output_format == "json":
        console.print_json(output, {"tasks": rows})
    else:
        print_task_list(output, rows)
    return 0


def read_payload(payload: str | None) -> str | None:
    """``--payload``: JSON text, or ``@FILE`` holding it; normalised JSON text, or None.

    Raises ``UsageError`` when the file cannot be read, is over 10 MiB (at most that and one
    byte more is read: ``@/dev/zero`` is refused, not read whole), is not JSON, or nests
    deeper than 100 levels (SPEC §6).
    """
    from peach_cli.runtime.jsonlimits import PayloadError, loads_bounded, read_bounded

    if payload is None:
        return None
    text: str | bytes = payload
    origin = "--payload"
    if payload.startswith("@"):
        path = Path(payload[1:])
        origin = f"--payload {payload}"
        try:
            text = read_bounded(str(path), what=origin)
        except OSError as error:
            raise UsageError(f"{origin}: cannot read {path}: {error.strerror or error}") from None
        except PayloadError as error:
            raise UsageError(str(error)) from None
    try:
        value = loads_bounded(text, what=origin)
    except PayloadError as error:
        hint = None
        if "is not JSON" in str(error):
            hint = """quote it for the shell: --payload '{"reason": "drift"}', or use @file.json"""
        raise UsageError(str(error), hint=hint) from None
    return json.dumps(value)


def plan_with_task(output: Output, project: Path, name: str) -> ProjectPlan:
    """The project's plan, after checking that ``name`` is one of its tasks.

    ``ProjectInvalid`` when the project has errors; ``UsageError`` with a "did you mean"
    for an unknown task.
    """
    from peach_cli.commands.loading import load_plan
    from peach_cli.project.diagnostics import did_you_mean

    plan = load_plan(output, project, doing="running")
    if name not in plan.tasks:
        from peach_cli.runtime.triggers import unknown_task_message

        raise UsageError(
            unknown_task_message(name, list(plan.tasks)),
            hint=did_you_mean(name, plan.tasks) or "`peach task list` shows them",
        )
    return plan


def run_task_run(output: Output, options: TaskRunOptions) -> int:
    """Run the task ``options.name`` once (and what it triggers); the exit code."""
    name, timeout_s, address = options.name, options.timeout_s, options.address
    if timeout_s is not None and not timeout_s > 0:
        raise UsageError(f"--timeout-s must be a positive number of seconds, not {timeout_s:g}")
    payload_text = read_payload(options.payload)
    plan = plan_with_task(output, options.project, name)
    if address is not None:
        return run_task_on_ray(
            output, plan, name, payload_text, address=address, timeout_s=timeout_s
        )
    from peach_cli.runtime import aio
    from peach_cli.runtime.linux import become_subreaper

    become_subreaper()  # what the task orphans is adopted here, not by init

    return aio.run(_run_local(output, plan, payload_text, options))


async def _run_local(
    output: Output, plan: ProjectPlan, payload: str | None, options: TaskRunOptions
) -> int:
    import asyncio
    import signal

    from peach_cli.views.task import TaskRunView
    from simulator.debug import terminal_reason
    from simulator.session import DevSession, SessionConfig

    view = TaskRunView(output)
    name = options.name
    no_debug = "--no-debug" if options.no_debug else terminal_reason()
    config = SessionConfig(
        plan,
        debug=no_debug is None,
        debug_skipped=no_debug or "",
        post_mortem=options.post_mortem,
        project=options.project,
        serve=False,
        shared_env=options.shared_env,
        inherit_env=options.inherit_env,
        offline=options.offline,
        task_timeout_s=options.timeout_s,
        keep_warm=False,
    )
    if options.inherit_env:
        view.note(
            "--inherit-env: the task gets peach's whole environment, not only its env_vars "
            "and secrets; on the cluster it gets only those"
        )
    session = DevSession(config, on_event=view.handle, secrets=output.secrets)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        if main is not None:
            main.cancel()

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(number, on_signal)
    ended: list[Any] | None = None
    try:
        await session.start()
        ended = await session.run_task(name, payload)
    except asyncio.CancelledError:
        if not interrupted:
            raise
        if main is not None:
            main.uncancel()
    finally:
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(number)
        await session.stop()
    if ended is None:
        view.note(f"{name}: interrupted; the task was stopped and its process tree killed")
        return EXIT_INTERRUPTED
    return 0 if all(run.ok for run in ended) else 1


def run_task_on_ray(
    output: Output,
    plan: ProjectPlan,
    name: str,
    payload: str | None,
    *,
    address: str | None,
    timeout_s: float | None = None,
) -> int:
    """`peach task run NAME --address URL`: the exit code (0, 1, or 130 on Ctrl-C)."""
    from peach_cli.deploy.jobs import run_task_job
    from peach_cli.views.task import TaskRunView

    view = TaskRunView(output)
    try:
        outcome = run_task_job(
            plan,
            name,
            payload,
            address=address,
            timeout_s=timeout_s,
            on_line=lambda line: view.handle_line(name, line),
            on_note=view.note,
            on_secrets=output.secrets.hide,
        )
    except KeyboardInterrupt:
        view.note(f"{name}: interrupted; the Ray job was stopped")
        return EXIT_INTERRUPTED
    job = f"Ray job {outcome.submission_id}"
    if outcome.status == "SUCCEEDED":  # seconds from the submission (not the upload) to the end
        view.note(f"task {name} {job} ok in {outcome.seconds:.2f} s")
        return 0
    if outcome.status == "TIMED_OUT":
        view.note(
            f"task {name} {job} {outcome.message} "
            f"({'timeout_s' if timeout_s is None else '--timeout-s'}): the job was stopped "
            "(Ray kills its process group)"
        )
        return 1
    # Ray's message repeats the whole log, already shown: keep its first line
    first = outcome.message.strip().splitlines()[0] if outcome.message.strip() else ""
    first = first.split(", last available logs")[0]
    detail = f": {first}" if first else ""
    view.note(f"task {name} {job} {outcome.status.lower()} in {outcome.seconds:.2f} s{detail}")
    return 1
