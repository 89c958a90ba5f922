"""`peach doctor`: run every check (``peach_cli.doctor``), render them, exit 1 if one failed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.project_options import DoctorOptions


FORMATS = ("text", "json")


def run_doctor(output: Output, options: DoctorOptions) -> int:
    """Check the machine, the project (default: the current folder) and the cluster."""
    project, address, port = options.project, options.address, options.port
    offline, output_format = options.offline, options.output_format
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    if not 0 < port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, not {port}")
    from peach_cli.doctor import run_checks
    from peach_cli.views import console

    report = run_checks(
        project or Path("."),
        explicit_project=project is not None,
        address=address,
        port=port,
        offline=offline,
    )
    if output_format == "json":
        console.print_json(output, report.to_dict())
    else:
        console.print_checks(output, report)
    return 0 if report.ok else 1
