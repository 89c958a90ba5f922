"""The task scheduler a deploy adds to a project's application (SPEC §5, "Tasks on the cluster").

A project with tasks gets one more deployment, ``tasks``: one replica of
``scheduler_app.ServeTaskScheduler``, the loop of ``peach dev --tasks`` on the cluster. What
it runs travels in its ``user_config`` — each task's Ray job request (the one ``peach task
run --address`` submits: ``jobs.job_template``), its ``timeout_s``, whether the loop runs
(``--no-tasks`` leaves it out; triggered runs still go through the scheduler) and the pause
between rounds (``--task-interval``). Serve hands a changed ``user_config`` to the running
replica, so a redeploy that changes a task applies from its next run and keeps the counts.

The deployment's ``env_vars`` hold the values of the tasks' secrets (named by
``PEACH_SECRETS``, masked by ``status`` and ``logs`` as a component's are): each run gets
those its task declares. Nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from peach_cli.runtime.taskloop import DEFAULT_INTERVAL_S
from peach_cli.runtime.triggers import SCHEDULER_DEPLOYMENT, SECRETS_ENV

if TYPE_CHECKING:
    from peach_cli.deploy.packaging import Package
    from peach_cli.runtime.plan import ProjectPlan

SCHEDULER_CPUS = 0.05
"""What the scheduler reserves: it waits, and reads a job's status while one runs."""
SCHEDULER_MAX_ONGOING = 1000
"""Triggers are answered at once (queued), so many may arrive together."""


def scheduler_deployment(
    plan: ProjectPlan,
    project: Package,
    secrets: Mapping[str, str] | None,
    *,
    loop: bool = True,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> tuple[dict[str, Any], list[Package]]:
    """The ``tasks`` deployment of ``plan`` and the packages its job requests name
    (``secrets``: their values; ``***`` each when None, as ``--dry-run`` shows them)."""
    from peach_cli.deploy.jobs import job_template
    from peach_cli.deploy.variables import MASK

    templates: dict[str, Any] = {}
    timeouts: dict[str, float] = {}
    packages: list[Package] = []
    names: list[str] = []
    for name, spec in plan.tasks.items():
        template = job_template(plan, spec, project)
        templates[name] = template.body
        timeouts[name] = float(spec.timeout_s)
        packages += template.packages
        names += [secret for secret in spec.secrets if secret not in names]
    env_vars = {name: MASK if secrets is None else secrets[name] for name in names}
    if names:
        env_vars[SECRETS_ENV] = ",".join(names)
    user_config = {
        "codops": plan.codops,
        "names": list(plan.tasks),
        "tasks": templates,
        "timeouts": timeouts,
        "loop": loop,
        "interval_s": float(interval_s),
    }
    runtime_env = {"env_vars": env_vars} if env_vars else {}  # with the app's py_modules
    actor_options: dict[str, Any] = {"num_cpus": SCHEDULER_CPUS, "runtime_env": runtime_env}
    deployment = {
        "name": SCHEDULER_DEPLOYMENT,
        "num_replicas": 1,
        "max_ongoing_requests": SCHEDULER_MAX_ONGOING,
        "user_config": user_config,
        "ray_actor_options": actor_options,
    }
    return deployment, packages


def task_secrets(plan: ProjectPlan) -> list[str]:
    """The names of the secrets the project's tasks declare (the scheduler holds them)."""
    return [name for spec in plan.tasks.values() for name in spec.secrets]


__all__ = ["SCHEDULER_CPUS", "SCHEDULER_DEPLOYMENT", "scheduler_deployment", "task_secrets"]
