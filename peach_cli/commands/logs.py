"""`peach logs`: options in, one core call, each line out with its deployment and replica.

The work is in ``peach_cli.deploy.logs``. Lines go to stdout as they are, each prefixed with
``deployment#replica`` (a dim prefix on a terminal, plain text when piped, so grep works);
``--follow`` runs until Ctrl-C.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.deploy.logs import LogLine

DEFAULT_TAIL = 100


def run_logs(
    app: str | None,
    *,
    address: str | None = None,
    deployment: str | None = None,
    tail: int = DEFAULT_TAIL,
    follow: bool = False,
) -> int:
    """Print the replicas' logs of ``app`` (the cluster's only application by default)."""
    if tail < 0:
        raise UsageError("--tail must be 0 or more lines")
    from peach_cli.deploy.deployer import Reporter, connect
    from peach_cli.deploy.logs import find_replicas, follow_logs, read_logs
    from peach_cli.views import console

    out = console.stdout()
    from peach_cli.deploy.variables import deployed_secrets
    from peach_cli.project.secrets import hide

    with connect(address, Reporter(warn=_warn)) as dashboard:
        hide(deployed_secrets(dashboard.serve_details()))  # what the code prints of them
        name, replicas = find_replicas(dashboard, app, deployment)
        if not replicas:
            console.stderr().print(f"no replicas of {name} have logs yet", soft_wrap=True)
        lines = (
            follow_logs(dashboard, replicas, tail, app=name, deployment=deployment)
            if follow
            else read_logs(dashboard, replicas, tail)
        )
        for line in lines:
            _print_line(out, line)
    return 0


def _warn(message: str) -> None:
    from rich.markup import escape

    from peach_cli.views import console

    console.stderr().print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)


def _print_line(out: object, line: LogLine) -> None:
    import sys

    from rich.console import Console

    from peach_cli.project.secrets import mask

    assert isinstance(out, Console)
    line = dataclasses.replace(line, text=mask(line.text))
    if out.is_terminal:
        from rich.markup import escape

        style = "red" if line.stream == "err" else "dim"
        out.print(f"[{style}]{escape(line.prefix)} |[/] {escape(line.text)}", soft_wrap=True)
    else:
        sys.stdout.write(f"{line.prefix} | {line.text}\n")
        sys.stdout.flush()
