"""`peach test`: run the project's case files against its own simulator, or a URL.

Exit codes: 0 every case passed, 1 a case failed, 2 the command line is wrong, a case file
has errors, or no case was found (``UsageError`` and ``ProjectInvalid`` are rendered by
``peach_cli.cli.main``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError
from peach_cli.project.filenames import CASE_SUFFIX

if TYPE_CHECKING:
    from peach_cli.boundary import Output
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


def run_test(output: Output, options: TestOptions) -> int:
    """Run the selected cases; print one line per case (or JSON, or JUnit XML)."""
    if options.output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {options.output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    began = time.perf_counter()
    project, files = split_paths(options.paths or ())
    from peach_cli.client.items import base_url
    from peach_cli.testing.cases import select_cases
    from peach_cli.testing.host import Host
    from peach_cli.testing.run import run_cases
    from peach_cli.views.testing import print_file, print_outcome, print_test_report

    shown: dict[str, Any] = {}
    if options.output_format == "text":  # each outcome as it comes
        shown = {
            "on_file": partial(print_file, output),
            "on_outcome": partial(print_outcome, output),
        }
    with Host(
        project,
        base_url(options.url),
        doing="testing",
        tool="test",
        timeout_s=options.timeout_s,
        secrets=output.secrets,
    ) as host:
        selected = select_cases(host.root, files, options.keyword, host.endpoint_urls)
        outcomes = run_cases(selected, host.client, host.base, host.timeout_s, **shown)
    print_test_report(output, outcomes, time.perf_counter() - began, options.output_format)
    return 0 if all(outcome.passed for outcome in outcomes) else 1
