"""What an environment is made of: a py_env's name and its requirements (``base`` + its own).

    specs = project_envs(project.conf)      # every env the project uses, base first
    specs["llm"].requirements               # ("orjson", "numpy>=1.24")

Requirement strings are kept as written in the conf (PEP 508); ``requirement_name`` and
``normalize_name`` give the distribution name in PEP 503 form, for matching.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from peach_cli.project.conf import PeachConf

BASE_ENV = "base"
_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_SEPARATORS = re.compile(r"[-_.]+")


def normalize_name(name: str) -> str:
    """A distribution name in PEP 503 form: ``Scikit_Learn`` → ``scikit-learn``."""
    return _SEPARATORS.sub("-", name).lower()


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 string: ``numpy>=1.24`` → ``numpy``."""
    match = _NAME.match(requirement)
    return normalize_name(match.group(1)) if match else requirement.strip().lower()


def interpreter_tag() -> str:
    """What an env's build depends on besides its packages: the Python and the platform."""
    return (
        f"{sys.implementation.name}-{'.'.join(map(str, sys.version_info[:3]))}"
        f"-{sys.platform}-{platform.machine()}"
    )


@dataclass(frozen=True)
class EnvSpec:
    """One py_environment as it is built: its name and its full requirement list."""

    name: str
    requirements: tuple[str, ...]
    """``base``'s requirements, then the env's own (no repeats), as written in the conf."""

    @property
    def request_key(self) -> str:
        """A hash of the requested (unresolved) set, the Python and the platform.

        Names the cached resolution; two envs with the same requirements share it.
        """
        canonical = sorted({" ".join(r.split()) for r in self.requirements})
        payload = json.dumps({"requirements": canonical, "python": interpreter_tag()})
        return hashlib.sha256(payload.encode()).hexdigest()[:20]


def project_envs(conf: PeachConf) -> dict[str, EnvSpec]:
    """Every env of a project: ``base`` and each declared py_environment, base first."""
    names = [BASE_ENV, *sorted(n for n in conf.py_environments if n != BASE_ENV)]
    return {name: EnvSpec(name, conf.environment(name)) for name in names}


def env_users(conf: PeachConf) -> dict[str, list[str]]:
    """py_env name → the endpoints and tasks that run in it (decorator endpoints run in
    ``base``; a task shows as ``task NAME``)."""
    users: dict[str, list[str]] = {}
    for name, endpoint in conf.endpoints.items():
        users.setdefault(endpoint.py_env, []).append(name)
    for path in conf.decorator_endpoints:
        users.setdefault(BASE_ENV, []).append(path)
    for name, task in conf.tasks.items():
        users.setdefault(task.py_env, []).append(f"task {name}")
    return users


def used_envs(conf: PeachConf) -> list[str]:
    """The envs that endpoints and tasks run in, base first."""
    users = env_users(conf)
    return [name for name in project_envs(conf) if name in users]
