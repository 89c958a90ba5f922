"""`peach replay`: send a recording's requests again and say which answers changed.

Exit codes: 0 every answer is the same, 1 an answer differs (or a request failed), 2 the
command line is wrong or the file is not a recording, 3 a host refused the connection (the
replay stops there: every other request would fail the same way).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output, Secrets
    from peach_cli.commands.host_options import ReplayOptions
    from peach_cli.testing.host import FoundProject

FORMATS = ("text", "json")
FIRST_SHOWN = 5
"""How many differences the text output shows in full."""


def run_replay(output: Output, options: ReplayOptions) -> int:
    """Run `peach replay`; return the exit code (usage mistakes raise ``UsageError``)."""
    url, against, ignore, output_format = (
        options.url, options.against, options.ignore or [], options.output_format
    )  # fmt: skip
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    # a recording stores secret values as ***: compared and shown masked
    masked = _secrets_of(options.project, output.secrets)
    from peach_cli.testing.replay import counts, parse_path, read_recording, replay

    for path in ignore:
        parse_path(path)  # a bad path is a usage error before anything is sent
    entries = read_recording(options.file)
    if masked is None:
        output.stderr.print(
            "no project here: no secret value is masked in what is shown "
            "(give the project with -p PROJECT)",
            markup=False,
            highlight=False,
        )
    began = time.perf_counter()
    outcomes = replay(
        entries,
        url=url,
        against=against,
        ignore=ignore,
        timeout_s=options.timeout_s,
        secrets=output.secrets,
    )
    seconds = time.perf_counter() - began
    found = counts(outcomes)
    if output_format == "json":
        from peach_cli.views.console import print_json

        print_json(
            output,
            {**found, "seconds": round(seconds, 3), "requests": [o.to_dict() for o in outcomes]},
            channel="replay",
        )
    else:
        from peach_cli.views.testing import print_replay

        print_replay(output, outcomes, found, seconds, shown=FIRST_SHOWN)
    return 1 if found["differ"] or found["failed"] else 0


def _secrets_of(project: Path | None, secrets: Secrets) -> FoundProject | None:
    """The project whose secrets are masked from now on in what the run of ``secrets``
    shows: ``project`` (``UsageError`` when it has no conf), else the current folder's, else
    None."""
    from peach_cli.testing.host import FoundProject

    if project is not None:
        return FoundProject.masked(project, secrets=secrets)
    try:
        return FoundProject.masked(Path("."), secrets=secrets)
    except UsageError:
        return None
