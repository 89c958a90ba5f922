"""The exceptions peach raises, and the exit code each one maps to.

Core code raises; only ``peach_cli.cli.main`` catches, renders and exits::

    PeachError                      exit 1   any failure a user can act on
    ├── UsageError                  exit 2   bad command line (missing folder, bad option value)
    ├── ProjectInvalid              exit 1   the project has errors (carries the diagnostics)
    ├── ClientError                 exit 3+  `peach ask` failures (see peach_cli.client.send)
    ├── DeployError                 exit 1   `peach deploy` / `status` / `delete` failures
    └── EnvBuildError               exit 1   a py_environment cannot be resolved or installed
"""

from __future__ import annotations

from typing import Any


class PeachError(Exception):
    """A failure the user can act on: rendered as one clear message, no traceback."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(PeachError):
    """The command line itself is wrong."""

    exit_code = 2


class ProjectInvalid(PeachError):
    """The project has errors; ``diagnostics`` says which, where."""

    def __init__(self, message: str, diagnostics: list[Any]) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics


class ClientError(PeachError):
    """`peach ask` could not get an answer; each subclass has its own exit code."""

    exit_code = 3


class DeployError(PeachError):
    """A deploy, status or delete failed against the cluster."""


class EnvBuildError(PeachError):
    """A py_environment could not be built: ``reason`` is uv's, ``requirement`` the culprit.

    ``message`` names the env and the requirement (when uv's reason points at one), so the
    same text serves the CLI, the dev view and a component's unhealthy state.
    """

    def __init__(
        self,
        env: str,
        reason: str,
        *,
        requirement: str | None = None,
        offline: bool = False,
        hint: str | None = None,
    ) -> None:
        what = f"requirement '{requirement}'" if requirement else "its requirements"
        mode = " (offline)" if offline else ""
        super().__init__(f"py_env '{env}'{mode}: cannot install {what}: {reason}", hint=hint)
        self.env = env
        self.reason = reason
        self.requirement = requirement
        self.offline = offline
