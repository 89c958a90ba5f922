"""`peach openapi`: the project's OpenAPI document (SPEC §11), built without running its code.

Exit codes: 0 the document was printed, 1 the project has errors (shown as ``peach validate``
shows them), 2 the command line is wrong. Warnings go to stderr, one line each, so that
stdout holds the document alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.project_options import OpenapiOptions


FORMATS = ("json", "yaml")


def run_openapi(output: Output, options: OpenapiOptions) -> int:
    """Print the OpenAPI document of the project at ``project``; return the exit code."""
    project, output_format = options.project, options.output_format
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    from peach_cli.commands.loading import load_plan
    from peach_cli.openapi import build_document
    from peach_cli.project.notebook import fewer_collections
    from peach_cli.views.console import print_document

    plan = load_plan(output, project, doing="describing", warnings="lines")
    with fewer_collections():
        print_document(output, build_document(plan), output_format)
    return 0
