"""`peach validate` and `peach schema`: load once, check everything, render, return an exit code.

Exit codes of ``peach validate``: 0 no error (warnings allowed unless ``--strict``), 1 errors
(or warnings under ``--strict``), 2 the command line is wrong (``UsageError``, rendered by
``peach_cli.cli.main``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError
from peach_cli.wording import count

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.checks.validate import Validation
    from peach_cli.commands.project_options import SchemaOptions, ValidateOptions
    from peach_cli.project.loader import Project

FORMATS = ("text", "json")


def run_validate(output: Output, options: ValidateOptions) -> int:
    """Validate the project at ``project`` and print every problem; return the exit code."""
    project, output_format, strict = options.project, options.output_format, options.strict
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    from peach_cli.checks.validate import validate_project
    from peach_cli.project.diagnostics import sort_key
    from peach_cli.project.loader import load_project
    from peach_cli.views import console

    loaded, diagnostics = load_project(project)
    endpoints = 0
    if loaded is not None:
        from peach_cli.project.secrets import hide_declared

        hide_declared(loaded.root, loaded.conf, output.secrets)  # a finding quoting one: ***
        result = validate_project(loaded)
        diagnostics += result.diagnostics
        endpoints = len(result.endpoints)
        diagnostics += check_case_files(
            loaded.root, endpoint_urls(loaded, result), result.endpoints.values()
        )
    diagnostics.sort(key=sort_key)
    counts = {s: sum(d.severity == s for d in diagnostics) for s in ("error", "warning", "info")}
    failed = counts["error"] > 0 or (strict and counts["warning"] > 0)
    if output_format == "json":
        console.print_json(output, [d.to_dict() for d in diagnostics], channel="validate")
    else:
        console.print_diagnostics(
            output,
            diagnostics,
            summary=summarize(project, counts, endpoints, strict),
            ok=not failed,
        )
    return 1 if failed else 0


def summarize(project: Path, counts: dict[str, int], endpoints: int, strict: bool) -> str:
    """``2 errors, 1 warning in examples/bad`` / ``examples/quickstart is valid: 2 endpoints``."""

    notes = [count(counts[s], s) for s in ("error", "warning") if counts[s]]
    if counts["info"]:
        notes.append(f"{counts['info']} info")
    if counts["error"] or (strict and counts["warning"]):
        suffix = " (--strict: warnings fail)" if strict and not counts["error"] else ""
        return f"{', '.join(notes)} in {project}{suffix}"
    detail = f" ({', '.join(notes)})" if notes else ""
    return f"{project} is valid: {count(endpoints, 'endpoint')}{detail}"


def endpoint_urls(project: Project, result: Validation) -> list[str]:
    """The urls case files may name: every endpoint the conf declares, served or not, and
    those the decorator notebooks define; none (no url check) when a notebook of the
    project failed to load, so that only its load errors are shown (SPEC §8)."""
    if any(
        d.severity == "error" and d.position.file.endswith(".ipynb") for d in result.diagnostics
    ):
        return []
    declared = [e.url for e in project.conf.endpoints.values()]
    return list(dict.fromkeys([*declared, *(e.url for e in result.endpoints.values())]))


def check_case_files(root: Path, urls: list[str], endpoints: Iterable[Any] = ()) -> list:
    """The problems of the project's case files (``*.peach-test.yaml``): their schema, and
    urls that are not endpoints (when the endpoints are known: the conf has no error), and
    stream expectations of streaming ``endpoints`` without ``stream: true``."""
    from peach_cli.testing.cases import check_streams, check_urls, load_cases, streaming_urls

    files, diagnostics = load_cases(root)
    if urls:
        diagnostics += check_urls(files, urls)
    diagnostics += check_streams(files, streaming_urls(endpoints))
    return diagnostics


def run_schema(output: Output, options: SchemaOptions) -> int:
    """Print the JSON Schema of peach.conf (``tests``: of a case file) on stdout."""
    tests = options.tests
    from peach_cli.views import console

    if tests:
        from peach_cli.testing.cases import json_schema
    else:
        from peach_cli.project.conf import json_schema  # type: ignore[assignment]
    console.print_json(output, json_schema())
    return 0
