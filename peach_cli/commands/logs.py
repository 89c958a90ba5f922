"""`peach logs`: options in, one core call, each line out with its deployment and replica.

The work is in ``peach_cli.deploy.logs``. Lines go to stdout as they are, each prefixed with
``deployment#replica`` (a dim prefix on a terminal, plain text when piped, so grep works);
``--follow`` runs until Ctrl-C.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.cluster_options import LogsOptions


DEFAULT_TAIL = 100


def run_logs(output: Output, options: LogsOptions) -> int:
    """Print the replicas' logs of ``app`` (the cluster's only application by default)."""
    app, address, deployment = options.app_name, options.address, options.deployment
    tail, follow = options.tail, options.follow
    if tail < 0:
        raise UsageError("--tail must be 0 or more lines")
    from peach_cli.deploy.deployer import connect
    from peach_cli.deploy.logs import find_replicas, follow_logs, read_logs
    from peach_cli.deploy.variables import deployed_secrets
    from peach_cli.views.deploy import print_log_line, print_note, reporter

    with connect(address, reporter(output)) as dashboard:
        output.secrets.hide(deployed_secrets(dashboard.serve_details()))  # what code prints
        name, replicas = find_replicas(dashboard, app, deployment)
        if not replicas:
            print_note(output, f"no replicas of {name} have logs yet")
        lines = (
            follow_logs(dashboard, replicas, tail, app=name, deployment=deployment)
            if follow
            else read_logs(dashboard, replicas, tail)
        )
        for line in lines:
            print_log_line(output, line)
    return 0
