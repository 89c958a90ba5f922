"""`peach doctor`: check the machine, the project and a cluster, and say what to fix.

Each check is a :class:`Check` (``ok``, ``warn``, ``fail`` or ``skip``, a one-line summary,
one line of advice); ``run_checks`` runs them all and never changes anything: no file is
written, nothing is installed, the cluster is only read. The checks live by subject:

* ``machine`` — Python against ``requires-python``, uv, the dev port;
* ``envs`` — the package index (or what the cache holds for ``--offline``), the env cache;
* ``project_checks`` — the project validating, as ``peach validate`` reports it;
* ``cluster`` — the dashboard, its token, its Ray version and its CPUs and memory.

Example::

    report = run_checks(Path("."), address=None)
    report.ok                          # False when any check failed
    [check.to_dict() for check in report.checks]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    """The result of one check."""

    name: str
    """A stable id: ``python``, ``uv``, ``index``, ``cache``, ``port``, ``project``, ..."""
    status: Status
    summary: str
    advice: str | None = None
    """What to do about it (for ``fail``, ``warn`` and ``skip``)."""
    details: dict[str, Any] = field(default_factory=dict)
    """The figures behind the summary, for ``--format json``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "advice": self.advice,
            "details": self.details,
        }


@dataclass(frozen=True)
class Report:
    """Every check, in the order run."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """No check failed (warnings and skipped checks allowed)."""
        return all(check.status != "fail" for check in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [check.to_dict() for check in self.checks]}


def run_checks(
    project: Path,
    *,
    explicit_project: bool = True,
    address: str | None = None,
    port: int = 8000,
    offline: bool = False,
) -> Report:
    """Run every check; ``address`` (or env ``PEACH_RAY_ADDRESS``) adds the cluster's.

    What waits on something else runs at once, each bounded by its own timeout: the package
    index's ``HEAD``, ``uv --version`` and the cluster's requests run in threads while the
    project is validated, so the whole takes about the slowest of them, not their sum. The
    report keeps the order below whatever finishes first.
    """
    from concurrent.futures import ThreadPoolExecutor

    from peach_cli.doctor import cluster, envs, machine, project_checks

    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="peach-doctor") as pool:
        reached = None if offline else pool.submit(envs.reach_index)
        uv = pool.submit(lambda: machine.check_uv(machine.locate_uv()))
        checked = project_checks.check_project(project, explicit=explicit_project)
        on_cluster = pool.submit(cluster.check_cluster, address, checked.plan)
        checks = [
            machine.check_python(),
            uv.result(),
            envs.check_index(
                checked.environments,
                offline=offline,
                reached=reached.result() if reached is not None else None,
            ),
            envs.check_cache(),
            machine.check_port("127.0.0.1", port),
            checked.check,
            *([checked.secrets] if checked.secrets is not None else []),
            *on_cluster.result(),
            machine.check_processes(),
        ]
    return Report(tuple(checks))
