"""Isolated environments for py_environments: what they hold, where they live, how they build.

Every ``py_environment`` of a project is built as its own virtual environment (SPEC §4):
``base``'s requirements + its own, installed with uv for the interpreter running peach,
without that interpreter's site-packages. Envs are cached outside the project
(``cache_root()``: the user cache folder, or ``PEACH_ENV_CACHE``), keyed by a hash of the
resolved requirements, the Python version and the platform, and shared by every project
and run that needs the same set.

For a host (``peach dev``, ``peach task run``)::

    from peach_cli.envs import EnvBuildError, ensure_env, explain_missing_module, plan_envs

    specs = plan_envs(plan)                      # py_env name -> EnvSpec, from the ProjectPlan
    try:
        env = ensure_env(specs["llm"], offline=False, progress=on_progress, cancel=event)
    except EnvBuildError as error:               # error.message names the env and requirement
        mark_unhealthy(components_of("llm"), error.message)
    else:
        start_replica(                           # env.path is the replica's sys.prefix
            python=env.python,
            environ=env.process_environment(os.environ, python_path=[runtime_folder]),
        )

- ``ensure_env`` blocks (run it in a thread); with the env cached it returns in about a
  millisecond and never touches the network. It is safe from several threads and processes
  at once (a lock file per env key; the loser waits, with a ``waiting`` progress event, and
  then uses the env the winner built). ``cancel`` (a ``threading.Event``) kills uv and
  raises ``UvCancelled``; nothing half-built is ever left under an env's name.
- ``progress`` receives ``BuildProgress(env, phase, elapsed_s, detail)`` with phase
  ``waiting``, ``resolving``, ``downloading``, ``installing`` or ``done`` (``str()`` of it is
  a plain line for logs and non-terminals).
- ``offline=True`` installs only from uv's cache and uses only cached resolutions; what is
  missing is named in the ``EnvBuildError``.
- ``find_built(spec)`` answers "is it built?" without resolving or building (``peach
  validate`` and ``peach env list`` use it).
- ``explain_missing_module(module, env)`` is the message for a replica's
  ``ModuleNotFoundError`` (it names the module, the env and the requirement to add).
- Replicas do not get peach installed in their env: the host puts its standard-library-only
  replica runtime on their path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peach_cli.envs.builder import (
    BuildProgress,
    BuiltEnv,
    ensure_env,
    find_built,
    resolve,
)
from peach_cli.envs.missing import distribution_for, explain_missing_module
from peach_cli.envs.paths import cache_root, uv_cache_dir
from peach_cli.envs.spec import EnvSpec, project_envs
from peach_cli.envs.uvrun import UvCancelled
from peach_cli.errors import EnvBuildError

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ProjectPlan


def plan_envs(plan: ProjectPlan) -> dict[str, EnvSpec]:
    """Every env of a served plan (``plan.py_environments``), by py_env name."""
    return {name: EnvSpec(name, tuple(reqs)) for name, reqs in plan.py_environments.items()}


__all__ = [
    "BuildProgress",
    "BuiltEnv",
    "EnvBuildError",
    "EnvSpec",
    "UvCancelled",
    "cache_root",
    "distribution_for",
    "ensure_env",
    "explain_missing_module",
    "find_built",
    "plan_envs",
    "project_envs",
    "resolve",
    "uv_cache_dir",
]
