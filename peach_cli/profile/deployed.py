"""The samplers of a deployed app (its gateway's health declares ``host: "ray"``): its
replicas profiled by the Ray dashboard (``peach_cli.deploy.profiling``: py-spy on their
node) while the load runs, their lines named by the project here::

    with DeployedSampling(found, "http://h:8000", "/hot", address=None, duration_s=10.0,
                          cpu=False, named=False) as sampled:
        ...                                    # the load runs
    sampled.profiles                           # one raw profile a replica
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.testing.host import FoundProject


class DeployedSampling:
    """The replicas serving ``path`` at ``origin``, profiled by the dashboard at
    ``address`` for ``duration_s`` (CPU time with ``cpu``, else wall-clock) from the
    moment the ``with`` begins; their profiles are ``profiles`` once it ends without an
    error. ``found``: the project here, whose notebooks name the lines (``named``: it was
    given with ``--project``, so it must be one)."""

    def __init__(
        self,
        found: FoundProject,
        origin: str,
        path: str,
        *,
        address: str | None,
        duration_s: float,
        cpu: bool,
        named: bool,
    ) -> None:
        self.found, self.origin, self.path = found, origin, path
        self.address, self.duration_s, self.cpu, self.named = address, duration_s, cpu, named
        self.profiles: list[dict[str, Any]] = []
        self._stack = ExitStack()
        self._pending: Any = None

    def __enter__(self) -> DeployedSampling:
        from peach_cli.deploy.dashboard import DashboardClient, resolve_address
        from peach_cli.deploy.profiling import check_profiling, find_replicas, profile_replicas
        from peach_cli.errors import DeployError

        line_maps = _line_maps(self.found, named=self.named)
        dashboard_url, _ = resolve_address(self.address)
        with ExitStack() as stack:
            dashboard = stack.enter_context(DashboardClient(dashboard_url))
            try:
                dashboard.version()
            except DeployError as error:
                raise UsageError(
                    f"peach profile cannot profile {self.origin}: no Ray dashboard to profile "
                    f"its replicas with ({error})",
                    hint="pass the cluster's dashboard with --address (env PEACH_RAY_ADDRESS)",
                ) from None
            replicas = find_replicas(dashboard, self.origin, self.path)
            check_profiling(dashboard, replicas[0])
            self._pending = profile_replicas(
                dashboard, replicas, self.duration_s, cpu=self.cpu, line_maps=line_maps
            )
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._stack:  # the dashboard's client closed, whatever ended the load
            if exc_info[0] is None:  # the load ran to its end (Ctrl-C included)
                self.profiles = self._pending()


def _line_maps(found: FoundProject, *, named: bool) -> dict[str, dict[str, Any]]:
    """By deployment, its component's notebook code by compiled name (``notebooks/X.ipynb``),
    to name the lines py-spy reports as cells; empty when there is no project here (a
    project ``named`` with ``--project`` must be one)."""
    if named:
        found.require()
    plan = found.built()
    if plan is None:
        return {}
    from peach_cli.deploy.config import deployment_name

    return {deployment_name(spec): {spec.source_name: spec} for spec in plan.components()}
