"""`peach test`: run the project's case files against its own simulator, or a URL.

Exit codes: 0 every case passed, 1 a case failed, 2 the command line is wrong, a case file
has errors, or no case was found (``UsageError`` and ``ProjectInvalid`` are rendered by
``peach_cli.cli.main``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError
from peach_cli.project.filenames import CASE_SUFFIX

if TYPE_CHECKING:
    from peach_cli.testing.cases import CaseFile
    from peach_cli.testing.host import Hosts
    from peach_cli.testing.report import Outcome

FORMATS = ("text", "json", "junit")
EXIT_USAGE = 2


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


def project_root(project: Path, *, need_conf: bool) -> Path:
    from peach_cli.project.loader import find_conf_files

    if not need_conf and not project.exists():
        raise UsageError(f"{project} does not exist")
    try:
        return find_conf_files(project)[0]
    except UsageError:
        if need_conf:
            raise
        return project if project.is_dir() else project.parent


def select(files: list[CaseFile], keyword: str | None) -> list[CaseFile]:
    if not keyword:
        return files
    for case_file in files:
        case_file.cases = [c for c in case_file.cases if keyword in c.case.name]
    return [f for f in files if f.cases]


def load_selected(
    root: Path, files: list[Path], keyword: str | None, urls: list[str] | None
) -> list[CaseFile]:
    """The case files' cases selected by ``keyword``; ``ProjectInvalid`` on errors,
    ``UsageError`` when no case is found."""
    from peach_cli.checks.validate import invalid
    from peach_cli.project.diagnostics import has_errors, sort_key
    from peach_cli.testing.cases import check_urls, load_cases
    from peach_cli.wording import count

    loaded, diagnostics = load_cases(root, files or None)
    if urls is not None:
        diagnostics += check_urls(loaded, urls)
    if has_errors(diagnostics):
        diagnostics.sort(key=sort_key)
        error = invalid(root, diagnostics, "testing")
        error.exit_code = EXIT_USAGE
        raise error
    names = [c.case.name for f in loaded for c in f.cases]
    selected = select(loaded, keyword)
    if not any(f.cases for f in selected):
        where = ", ".join(str(f) for f in files) if files else str(root)
        if keyword and names:
            shown = ", ".join(repr(name) for name in names[:5])
            more = f", … ({len(names) - 5} more)" if len(names) > 5 else ""
            raise UsageError(
                f"no case matches -k {keyword!r}: no case name contains it",
                hint=f"{count(len(names), 'case')} in {count(len(loaded), 'file')}: "
                f"{shown}{more} (-k is case-sensitive; leave it out to run them all)",
            )
        raise UsageError(
            f"no case found in {where}",
            hint=f"write cases in a file ending in {CASE_SUFFIX} (see `peach schema --tests`)",
        )
    return selected


def run_test(
    paths: Sequence[Path] = (),
    *,
    url: str | None = None,
    keyword: str | None = None,
    output_format: str = "text",
    timeout_s: float = 60.0,
) -> int:
    """Run the selected cases; print one line per case (or JSON, or JUnit XML)."""
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    began = time.perf_counter()
    project, files = split_paths(paths)
    root = project_root(project, need_conf=url is None)
    from peach_cli.testing.host import Hosts
    from peach_cli.testing.run import DEFAULT_TIMEOUT_S

    hosts = Hosts(url, timeout_s=timeout_s or DEFAULT_TIMEOUT_S)  # nothing started yet
    plan = None
    urls: list[str] | None = None
    if url is not None:
        from peach_cli.client.items import check_url

        check_url(url if "://" in url else "http://" + url, what="--url")
        hosts.mask_secrets(root)  # what the host answers is shown with them masked
    else:
        from peach_cli.commands.loading import load_plan_to_check

        plan = load_plan_to_check(project, doing="testing")
        urls = [e.url for e in plan.endpoints.values()]
    selected = load_selected(root, files, keyword, urls)
    with hosts:
        outcomes = run_cases(selected, hosts, hosts.url_for(root, plan=plan), output_format)
    seconds = time.perf_counter() - began
    from peach_cli.testing.report import summary_counts, to_json, to_junit

    passed, failed = summary_counts(outcomes)
    if output_format == "json":
        from peach_cli.views.console import print_json

        print_json(to_json(outcomes, seconds), channel="test-json")
    elif output_format == "junit":
        from peach_cli.boundary import write_report

        write_report(to_junit(outcomes, seconds), channel="test-junit")
    else:
        from peach_cli.views.testing import print_test_summary

        print_test_summary(passed, failed, seconds)
    return 1 if failed else 0


def run_cases(
    selected: list[CaseFile], hosts: Hosts, base: str, output_format: str
) -> list[Outcome]:
    """Each selected case sent to the host at ``base``, its outcome printed as it comes
    (with ``output_format`` text)."""
    from peach_cli.testing.report import Outcome
    from peach_cli.testing.run import compare, observe

    text = output_format == "text"
    if text:
        from peach_cli.views.testing import print_file, print_outcome
    outcomes: list[Outcome] = []
    for case_file in selected:
        if text:
            print_file(case_file.name)
        for loaded in case_file.cases:
            observed = observe(hosts.client, base, loaded.case, hosts.timeout_s)
            outcome = Outcome(
                case_file.name, loaded, observed, compare(loaded.case.expect, observed)
            )
            outcomes.append(outcome)
            if text:
                print_outcome(outcome)
    return outcomes
