"""`peach fuzz`: generated requests to every endpoint (or the named ones) of the project's
simulator, or of a URL; each finding shrunk to a minimal request (SPEC §11).

Exit codes: 0 nothing found, 1 something found, 2 the command line is wrong, the project
has errors, or Hypothesis (the ``fuzz`` extra) is not installed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError
from peach_cli.internal import OPENAPI_PATH

if TYPE_CHECKING:
    from peach_cli.commands.host_options import FuzzOptions
    from peach_cli.fuzz.margin import Margin
    from peach_cli.fuzz.run import Explored
    from peach_cli.fuzz.targets import Target
    from peach_cli.testing.host import FoundProject

FORMATS = ("text", "json")
DEFAULT_EXAMPLES = 50
"""Where a host serves its OpenAPI document (``peach_cli.testing.host.openapi_document``)."""
URL_READ_TIMEOUT_S = 60.0
"""The longest gap between two pieces of an answer from a ``--url`` host."""
LOCAL_READ_SLACK_S = 30.0
"""Past ``timeout_s``, how long the simulator's answer may take before it counts as none."""
MISSING_EXTRA = "peach fuzz needs Hypothesis, which is not installed: pip install 'peach-cli[fuzz]'"


def require_hypothesis() -> None:
    """``UsageError`` (one line: what to install) when Hypothesis cannot be imported."""
    try:
        import hypothesis  # noqa: F401
    except ImportError:
        raise UsageError(MISSING_EXTRA) from None


def split_arguments(arguments: Sequence[str]) -> tuple[Path, list[str]]:
    """PROJECT and TARGETS: a first argument that is an existing folder or file is the
    project (default: the current folder); the rest name endpoints (name or url)."""
    if arguments and Path(arguments[0]).exists():
        return Path(arguments[0]), list(arguments[1:])
    return Path("."), list(arguments)


def _document_of(plan: Any) -> dict[str, Any]:
    from peach_cli.openapi.document import build_document

    return build_document(plan)


def _check_options(output_format: str, examples: int, seed: int | None) -> None:
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    if examples < 1:
        raise UsageError(f"--examples must be 1 or more, not {examples}")
    if seed is not None and seed < 0:
        raise UsageError(f"--seed must be 0 or more, not {seed}")


def run_fuzz(options: FuzzOptions) -> int:
    """Fuzz the selected endpoints; print the findings (or JSON). Returns the exit code."""
    url, examples, seed, output_format = (
        options.url, options.examples, options.seed, options.output_format
    )  # fmt: skip
    arguments = [
        *([options.project] if options.project is not None else []),
        *(options.targets or []),
    ]
    _check_options(output_format, examples, seed)
    require_hypothesis()
    began = time.perf_counter()
    if seed is None:
        seed = random.randrange(2**32)
    path, names = split_arguments(arguments)
    from peach_cli.fuzz.targets import select, targets_of
    from peach_cli.testing.host import FoundProject

    found = FoundProject.at(path, need_conf=url is None)  # its conf found and read once
    plan = found.to_check(url, "fuzzing")  # None with --url: its secrets masked
    timeout_s = plan.timeout_s if plan is not None else None
    document = _document_of(plan) if plan is not None else _served_document(url, found)
    targets = select(targets_of(document), names)
    if not targets:
        raise UsageError("the project has no endpoint to fuzz")
    explored = _explore(targets, plan, found.root, url, examples, seed, timeout_s, output_format)
    seconds = time.perf_counter() - began
    findings = [f for e in explored for f in e.findings]
    if output_format == "json":
        from peach_cli.views.console import print_json

        data = {"seed": seed, "examples": examples, "findings": [f.to_json() for f in findings]}
        print_json(data, channel="fuzz")
    else:
        from peach_cli.views.fuzz import print_findings

        print_findings(findings, explored, seed=seed, seconds=seconds)
    return 1 if findings else 0


def _served_document(url: str | None, found: FoundProject) -> dict[str, Any]:
    """The OpenAPI document the host at ``url`` serves, else the one of the project here
    (``UsageError`` when there is neither)."""
    from peach_cli.testing.host import openapi_document, reach

    assert url is not None  # no plan: the project's endpoints are at --url
    base = reach(url)
    document = openapi_document(base, tool="fuzz", timeout_s=URL_READ_TIMEOUT_S)
    if document is None and found.read is not None:  # the project here says what it serves
        document = _document_of(found.load_to_check("fuzzing"))
    if document is None:
        raise UsageError(
            f"{base} serves no OpenAPI document at {OPENAPI_PATH}, and {found.given} "
            "holds no peach project to read one from",
            hint="point --url at a peach dev or a deployed app, or give the project",
        )
    return document


def _explore(
    targets: list[Target],
    plan: Any,
    project: Path,
    url: str | None,
    examples: int,
    seed: int,
    timeout_s: float | None,
    output_format: str,
) -> list[Explored]:
    from peach_cli.client.send import Client
    from peach_cli.fuzz.run import (
        fuzz_targets,
        restarting_busy_replicas,
        waiting_for_restarts,
    )
    from peach_cli.views.fuzz import Progress

    on_explored: Any = lambda _explored: None  # noqa: E731
    on_answer: Any = lambda _explored: None  # noqa: E731
    progress: Progress | None = None
    if output_format == "text":
        from peach_cli.views.fuzz import print_explored, print_start

        print_start(len(targets), examples, seed, url)
        on_explored = print_explored
        if Progress.wanted():
            shown = progress = Progress()
            on_answer = shown.tick

            def on_explored(explored: Explored) -> None:
                shown.clear()
                print_explored(explored)

    read_timeout_s = URL_READ_TIMEOUT_S if timeout_s is None else timeout_s + LOCAL_READ_SLACK_S
    options: dict[str, Any] = dict(
        examples=examples,
        seed=seed,
        timeout_s=timeout_s,
        read_timeout_s=read_timeout_s,
        on_explored=on_explored,
        on_answer=on_answer,
    )
    try:
        if url is not None:
            base = (url if "://" in url else "http://" + url).rstrip("/")
            with Client(read_timeout_s, tls=base.startswith("https:")) as client:
                recover = waiting_for_restarts(base)
                return fuzz_targets(targets, client, base, recover=recover, **options)
        from peach_cli.fuzz.watch import Watch
        from peach_cli.testing.host import local_host

        watch = Watch()
        with ExitStack() as stack:
            served = stack.enter_context(local_host(project, plan, on_event=watch.on_event))
            client = stack.enter_context(Client(read_timeout_s))
            margin = _margin(stack, project, plan) if timeout_s else None
            recover = restarting_busy_replicas(served, watch)
            return fuzz_targets(
                targets, client, served, watch=watch, margin=margin, recover=recover, **options
            )
    finally:
        if progress is not None:
            progress.clear()  # an interrupted run leaves no half line


def _margin(stack: ExitStack, project: Path, plan: Any) -> Margin:
    """The ``Margin`` of timeouts, measured on a second simulator of the project whose
    timeout is ``timeout_s`` plus the margin: started at the first timeout finding, stopped
    with the run."""
    from peach_cli.client.send import Client
    from peach_cli.fuzz.margin import READ_SLACK_S, Margin, margin_s
    from peach_cli.fuzz.run import restarting_busy_replicas
    from peach_cli.fuzz.watch import Watch
    from peach_cli.testing.host import local_host

    bound_s = plan.timeout_s + margin_s(plan.timeout_s)
    watch = Watch()
    urls: list[str] = []

    def host() -> str:
        if not urls:
            served = local_host(project, plan, on_event=watch.on_event, timeout_s=bound_s)
            urls.append(stack.enter_context(served))
        return urls[0]

    def recover(observed: Any, finding: None) -> None:
        if urls:
            restarting_busy_replicas(urls[0], watch)(observed, finding)

    client = stack.enter_context(Client(bound_s + READ_SLACK_S))
    return Margin(host, client, timeout_s=plan.timeout_s, recover=recover)
