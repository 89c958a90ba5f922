"""`peach deploy`, `peach status`, `peach delete`: options in, one core call, render, exit code.

The work is in ``peach_cli.deploy.deployer``, the rendering in ``peach_cli.views.deploy``;
this module only checks the options, loads the project and calls them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.cluster_options import DeleteOptions, DeployOptions, StatusOptions
    from peach_cli.deploy.config import TaskOptions
    from peach_cli.runtime.plan import ProjectPlan

CONFIG_FORMATS = ("json", "yaml")
STATUS_FORMATS = ("text", "json")


def run_deploy(output: Output, options: DeployOptions) -> int:
    """Deploy the project (or print its Serve config with ``--dry-run``, or what a deploy
    would change with ``--diff``); ``ref``: the project as committed at that git revision
    (an export in a temporary folder: the working tree is not touched)."""
    from peach_cli.deploy.config import TaskOptions, check_route_prefix
    from peach_cli.project.rules import url_problem

    project, address, ref, route_prefix = (
        options.project, options.address, options.ref, options.route_prefix
    )  # fmt: skip
    http_host, http_port, dry_run, diff = (
        options.http_host, options.http_port, options.dry_run, options.diff
    )  # fmt: skip
    output_format, timeout_s, task_interval = (
        options.output_format, options.timeout_s, options.task_interval
    )  # fmt: skip

    reason = url_problem(route_prefix.strip().rstrip("/")) if route_prefix.strip("/ ") else None
    if reason is not None:  # a '..' segment, /_peach: the url rule of SPEC §1
        raise UsageError(
            f"--route-prefix {route_prefix!r} is not a route prefix: {reason}",
            hint="use / or a path like /zzacc (letters, digits, '.', '_', '~', '-' between "
            "slashes)",
        )
    route_prefix = check_route_prefix(route_prefix)
    if output_format not in CONFIG_FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(CONFIG_FORMATS)}"
        )
    if timeout_s <= 0:
        raise UsageError("--timeout must be more than 0 seconds")
    if not task_interval >= 0:
        raise UsageError(f"--task-interval must be 0 or more seconds, not {task_interval:g}")
    tasks = TaskOptions(loop=not options.no_tasks, interval_s=task_interval)
    if diff and dry_run:
        raise UsageError(
            "--diff and --dry-run do not go together",
            hint="--dry-run prints the config without a cluster; --diff compares it with one",
        )
    if not dry_run:
        from peach_cli.deploy.dashboard import resolve_address

        resolve_address(address)  # a bad address fails before any other work
    if ref is None or not project.is_dir():  # a missing folder: load_plan says so
        return _deploy_folder(output, project, None, address, http_host, http_port, route_prefix,
                              dry_run, output_format, timeout_s, diff, tasks)  # fmt: skip
    from peach_cli.deploy.release import export_revision

    with export_revision(project, ref) as exported:
        return _deploy_folder(output, exported, (project.resolve(), ref), address, http_host,
                              http_port, route_prefix, dry_run, output_format, timeout_s,
                              diff, tasks)  # fmt: skip


def _deploy_folder(
    output: Output,
    project: Path,
    ref: tuple[Path, str] | None,
    address: str | None,
    http_host: str | None,
    http_port: int | None,
    route_prefix: str,
    dry_run: bool,
    output_format: str,
    timeout_s: float,
    diff: bool,
    tasks: TaskOptions,
) -> int:
    from peach_cli.commands.loading import load_plan

    # --dry-run, --diff: stdout holds the config or the changes; warnings on stderr, a line each
    quiet = dry_run or diff
    plan = load_plan(output, project, doing="deploying", warnings="lines" if quiet else "show")
    if diff:
        from peach_cli.deploy.deployer import diff as plan_diff
        from peach_cli.views.deploy import print_changes, reporter

        changes = plan_diff(
            plan,
            address=address,
            route_prefix=route_prefix,
            reporter=reporter(output),
            tasks=tasks,
        )
        print_changes(output, changes)
        return 0
    if dry_run:
        from peach_cli.deploy.deployer import dry_run_bundle, upload_selection
        from peach_cli.views.deploy import print_config, print_uploads, reporter

        selection = upload_selection(plan)
        _warn_missing_secrets(output, plan)
        bundle = dry_run_bundle(
            plan,
            http_host=http_host,
            http_port=http_port,
            route_prefix=route_prefix,
            reporter=reporter(output),
            tasks=tasks,
        )
        print_uploads(output, selection, bundle.packages)
        print_config(output, bundle.config, output_format)
        return 0
    from peach_cli.deploy.deployer import deploy
    from peach_cli.views.deploy import ProgressView, print_deployed

    view = ProgressView(output)
    try:
        result = deploy(
            plan,
            address=address,
            http_host=http_host,
            http_port=http_port,
            route_prefix=route_prefix,
            timeout_s=timeout_s,
            reporter=view.reporter(),
            tasks=tasks,
            ref=ref,
        )
    finally:
        view.stop()
    print_deployed(output, plan, result)
    return 0


def _warn_missing_secrets(output: Output, plan: ProjectPlan) -> None:
    """``--dry-run``: the secrets a deploy would need that are set nowhere."""
    from peach_cli.deploy.scheduler import task_secrets
    from peach_cli.project.secrets import missing_message, missing_secrets
    from peach_cli.views.deploy import warn

    names = [s for c in plan.components() for s in c.secrets] + task_secrets(plan)
    missing = missing_secrets(plan.root, names)
    if missing:
        warn(output, f"{missing_message(missing)} (a deploy would fail)")


def run_status(output: Output, options: StatusOptions) -> int:
    """Show every application, its deployments and replicas."""
    address, output_format = options.address, options.output_format
    if output_format not in STATUS_FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(STATUS_FORMATS)}"
        )
    from peach_cli.deploy.deployer import status
    from peach_cli.views import console
    from peach_cli.views.deploy import print_applications, reporter

    applications = status(address, reporter=reporter(output))
    if output_format == "json":
        console.print_json(output, {"applications": [a.to_dict() for a in applications]})
    else:
        print_applications(output, applications)
    return 0


def run_delete(output: Output, options: DeleteOptions) -> int:
    """Remove one application; the others keep running."""
    app_name, address = options.app_name, options.address
    from peach_cli.deploy.deployer import delete
    from peach_cli.views.deploy import print_deleted, reporter

    remaining = delete(app_name, address=address, reporter=reporter(output))
    print_deleted(output, app_name, remaining)
    return 0
