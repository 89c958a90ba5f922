"""What a deployment or a job gets of a project's env_vars and secrets (SPEC §10).

Each component deployment's ``runtime_env`` ``env_vars`` hold its env_vars, its secrets'
values and ``PEACH_SECRETS`` naming those (so that ``status`` and ``logs`` can mask them);
the gateway gets none. Uploaded with the Serve app: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peach_cli.runtime.plan import ComponentSpec, TaskSpec
from peach_cli.runtime.triggers import SECRETS_ENV

MASK = "***"
"""What ``--dry-run`` shows for a secret's value (``peach_cli.project.secrets.MASK``).

``SECRETS_ENV`` (``PEACH_SECRETS``), in a deployment's ``runtime_env`` ``env_vars``: the
names (comma-separated) of the variables there that are secrets."""


def component_env_vars(
    spec: ComponentSpec | TaskSpec, secrets: Mapping[str, str] | None
) -> dict[str, str]:
    """A component's (or task's) ``runtime_env`` ``env_vars``: its env_vars, its secrets
    (``***`` when ``secrets`` is None) and ``PEACH_SECRETS`` naming them."""
    values = {**spec.env_vars}
    for name in spec.secrets:
        values[name] = MASK if secrets is None else secrets[name]
    if spec.secrets:
        values[SECRETS_ENV] = ",".join(spec.secrets)
    return values


def deployed_secrets(details: dict[str, Any]) -> list[str]:
    """The secret values in the deployed configs of ``GET /api/serve/applications/`` (the
    variables each deployment's ``PEACH_SECRETS`` names), to be masked."""
    found: list[str] = []
    for app in (details.get("applications") or {}).values():
        config = (app or {}).get("deployed_app_config") or {}
        for deployment in config.get("deployments") or ():
            options = (deployment or {}).get("ray_actor_options") or {}
            env_vars = (options.get("runtime_env") or {}).get("env_vars") or {}
            names = str(env_vars.get(SECRETS_ENV) or "").split(",")
            found += [str(env_vars[n]) for n in names if n and env_vars.get(n)]
    return found


__all__ = ["MASK", "SECRETS_ENV", "component_env_vars", "deployed_secrets"]
