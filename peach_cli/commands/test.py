"""`peach test`: run the project's case files against its own simulator, or a URL.

Exit codes: 0 every case passed, 1 a case failed, 2 the command line is wrong, a case file
has errors, or no case was found (``UsageError`` and ``ProjectInvalid`` are rendered by
``peach_cli.cli.main``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError
from peach_cli.project.filenames import CASE_SUFFIX

if TYPE_CHECKING:
    from peach_cli.commands.host_options import TestOptions

FORMATS = ("text", "json", "junit")


def split_paths(paths: Sequence[Path]) -> tuple[Path, list[Path]]:
    """PROJECT and FILES from the arguments: a first argument that is no case file is the
    project (default: the current folder)."""
    if paths and not paths[0].name.endswith(CASE_SUFFIX):
        project, files = paths[0], list(paths[1:])
    else:
        project, files = Path("."), list(paths)
    for file in files:
        if not file.name.endswith(CASE_SUFFIX):
            raise UsageError(f"{file} is not a case file", hint=f"case files end in {CASE_SUFFIX}")
        if not file.is_file():
            raise UsageError(f"{file} does not exist")
    return project, files


def run_test(options: TestOptions) -> int:
    """Run the selected cases; print one line per case (or JSON, or JUnit XML)."""
    url, output_format, timeout_s = options.url, options.output_format, options.timeout_s
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    began = time.perf_counter()
    project, files = split_paths(options.paths or ())
    from peach_cli.testing.cases import select_cases
    from peach_cli.testing.host import FoundProject, Hosts
    from peach_cli.testing.run import DEFAULT_TIMEOUT_S, run_cases

    found = FoundProject.at(project, need_conf=url is None)  # its conf found and read once
    plan = found.to_check(url, "testing")  # None with --url: its secrets masked
    urls = [e.url for e in plan.endpoints.values()] if plan is not None else None
    selected = select_cases(found.root, files, options.keyword, urls)
    shown: dict[str, Any] = {}
    if output_format == "text":  # each outcome as it comes
        from peach_cli.views.testing import print_file, print_outcome

        shown = {"on_file": print_file, "on_outcome": print_outcome}
    with Hosts(url, timeout_s=timeout_s or DEFAULT_TIMEOUT_S) as hosts:
        base = url if url is not None else hosts.simulator_url(found.root, plan)
        outcomes = run_cases(selected, hosts.client, base, hosts.timeout_s, **shown)
    seconds = time.perf_counter() - began
    from peach_cli.testing.report import rendered, summary_counts

    passed, failed = summary_counts(outcomes)
    document = rendered(outcomes, seconds, output_format)
    if output_format == "json":
        from peach_cli.views.console import print_json

        print_json(document, channel="test-json")
    elif output_format == "junit":
        from peach_cli.boundary import write_report

        write_report(document, channel="test-junit")
    else:
        from peach_cli.views.testing import print_test_summary

        print_test_summary(passed, failed, seconds)
    return 1 if failed else 0
