"""Whether a cluster can hold what a project asks for, before anything is deployed.

A replica that does not fit stays pending forever in Ray, so ``peach deploy`` checks the
cluster's free CPUs and memory (plus what the application's current version holds, which
a redeploy gives back) against the config's replicas × (CPUs, memory) and fails with the
numbers when it cannot fit.

A rollout starts a new replica of a changed deployment beside its old ones, one at a time
(``config.surge_percent``): until the last old one stops, the deployment holds one replica
more than it asks for (``replaced_running``), and when the cluster has no room for it the
deploy rolls as Ray does by default (an old replica first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from peach_cli.errors import DeployError

_GIB = 1024**3


@dataclass(frozen=True)
class Needs:
    """CPUs and memory (bytes) asked for, and the largest single replica."""

    cpus: float = 0.0
    memory: float = 0.0
    largest_cpus: float = 0.0
    largest_memory: float = 0.0
    largest_name: str = ""
    replicas: tuple[tuple[str, float, float], ...] = ()
    """One replica of each deployment: (name, CPUs, memory), each must fit on one node."""

    def __add__(self, other: Needs) -> Needs:
        largest = other if other.largest_cpus > self.largest_cpus else self
        return Needs(
            self.cpus + other.cpus,
            self.memory + other.memory,
            max(self.largest_cpus, other.largest_cpus),
            max(self.largest_memory, other.largest_memory),
            largest.largest_name or other.largest_name,
            self.replicas + other.replicas,
        )


def application_needs(application: dict[str, Any]) -> Needs:
    """What one application of a Serve config reserves: replicas × (num_cpus, memory)."""
    total = Needs()
    for deployment in application.get("deployments") or []:
        options = deployment.get("ray_actor_options") or {}
        cpus = float(options.get("num_cpus", 1.0) or 0.0)
        memory = float(options.get("memory") or 0.0)
        replicas = deployment.get("num_replicas", 1)
        replicas = replicas if isinstance(replicas, int) else 1
        name = deployment.get("name", "")
        total = total + Needs(
            cpus * replicas, memory * replicas, cpus, memory, name, ((name, cpus, memory),)
        )
    return total


def replaced_running(application: dict[str, Any], current: dict[str, Any]) -> Needs:
    """What a rollout of ``application`` holds beyond its own needs: one replica of each
    deployment it restarts that has a replica running (the old ones stop one at a time, as
    each new one runs). ``current`` is the application as Serve details it
    (``deployed_app_config``, and each deployment's replicas with their states).

    A deployment restarts when its fingerprint's restart part changes — its actor options
    (CPUs, memory, runtime_env merged over the application's), or the application's code
    (its ``import_path``, ``args`` or ``runtime_env``) — as ``peach deploy --diff`` says
    (``release.deployment_fingerprints``, one source of truth); the number of replicas or
    the rollout settings change without a restart.

    >>> old = {"import_path": "a:b", "deployments": [
    ...     {"name": "x.main", "ray_actor_options": {"num_cpus": 0.5, "runtime_env": {"py_modules": ["1"]}}},
    ...     {"name": "y.main", "ray_actor_options": {"num_cpus": 1}}]}
    >>> running = {"deployed_app_config": old, "deployments": {
    ...     "x.main": {"replicas": [{"state": "RUNNING"}, {"state": "RUNNING"}]},
    ...     "y.main": {"replicas": [{"state": "RUNNING"}]}}}
    >>> new = {"import_path": "a:b", "deployments": [
    ...     {"name": "x.main", "ray_actor_options": {"num_cpus": 0.5, "runtime_env": {"py_modules": ["2"]}}},
    ...     {"name": "y.main", "ray_actor_options": {"num_cpus": 1}}]}
    >>> held = replaced_running(new, running)
    >>> held.cpus, [name for name, _, _ in held.replicas]
    (0.5, ['x.main'])
    >>> replaced_running(old, running).cpus
    0.0
    """
    from peach_cli.deploy.release import deployment_fingerprints  # what --diff says too

    deployed = current.get("deployed_app_config") or {}
    details = current.get("deployments") or {}
    before = deployment_fingerprints(deployed)
    old = {d.get("name", ""): d for d in deployed.get("deployments") or []}
    total = Needs()
    for name, after in deployment_fingerprints(application).items():
        running_before = before.get(name)
        if running_before is None or running_before.restart == after.restart:
            continue
        replicas = (details.get(name) or {}).get("replicas") or ()
        running = sum(1 for r in replicas if str(r.get("state")) == "RUNNING")
        if running:
            one = application_needs({"deployments": [{**old[name], "num_replicas": 1}]})
            total = total + one
    return total


def check_fits(needs: Needs, report: dict[str, Any], held: Needs | None = None) -> None:
    """Raise ``DeployError`` when ``needs`` cannot fit the cluster in ``report``.

    ``report`` is the dashboard's load metrics (``usage``: resource → [used, total], and
    ``usageByNode``); ``held`` is what the application's running version reserves.

    >>> report = {"usage": {"CPU": [1.0, 4.0], "memory": [0.0, 8 * 1024**3]}}
    >>> check_fits(Needs(2.0, 0.0, 1.0, 0.0, "a.main"), report)
    >>> check_fits(Needs(4.0, 0.0, 1.0, 0.0, "a.main"), report)
    Traceback (most recent call last):
    ...
    peach_cli.errors.DeployError: the project asks for 4 CPUs and 0 GiB of memory; the cluster has 3 CPUs and 8 GiB free
    """
    held = held or Needs()
    usage = report.get("usage") or {}
    used_cpus, total_cpus = pair(usage.get("CPU"))
    used_memory, total_memory = pair(usage.get("memory"))
    free_cpus = min(total_cpus, total_cpus - used_cpus + held.cpus)
    free_memory = min(total_memory, total_memory - used_memory + held.memory)
    if needs.cpus > free_cpus + 1e-9 or needs.memory > free_memory + 1:
        raise DeployError(
            f"the project asks for {cpus_text(needs.cpus)} CPUs and {gib_text(needs.memory)} GiB of "
            f"memory; the cluster has {cpus_text(free_cpus)} CPUs and {gib_text(free_memory)} GiB free",
            hint="lower `replicas`, `cpus` or `memory` in peach.conf, or add nodes "
            f"(the cluster has {cpus_text(total_cpus)} CPUs and {gib_text(total_memory)} GiB in all)",
        )
    nodes = [node or {} for node in (report.get("usageByNode") or {}).values()]
    if not nodes:
        return
    sizes = [(pair(node.get("CPU"))[1], pair(node.get("memory"))[1]) for node in nodes]
    asked = needs.replicas or ((needs.largest_name, needs.largest_cpus, needs.largest_memory),)
    for name, cpus, memory in asked:
        if not any(cpus <= c + 1e-9 and memory <= m + 1 for c, m in sizes):
            raise DeployError(
                f"a replica of {name} asks for {cpus_text(cpus)} CPUs and {gib_text(memory)} GiB; "
                f"no node has that much (the nodes have at most "
                f"{cpus_text(max(c for c, _ in sizes))} CPUs and {gib_text(max(m for _, m in sizes))} GiB)"
            )


def fits_when_idle(needs: Needs, report: dict[str, Any]) -> bool:
    """Whether ``needs`` would fit the cluster in ``report`` with nothing else running.

    >>> fits_when_idle(Needs(3.0, 0.0), {"usage": {"CPU": [3.0, 4.0], "memory": [0, 1]}})
    True
    """
    usage = report.get("usage") or {}
    return (
        needs.cpus <= pair(usage.get("CPU"))[1] + 1e-9
        and needs.memory <= pair(usage.get("memory"))[1] + 1
    )


def has_totals(report: dict[str, Any]) -> bool:
    """Whether the report knows the cluster's CPUs yet (a new cluster takes a few seconds)."""
    return pair((report.get("usage") or {}).get("CPU"))[1] > 0


def pair(value: Any) -> tuple[float, float]:
    """A ``[used, total]`` figure of Ray's cluster status, as two floats (0, 0 when absent)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return float(value[0]), float(value[1])
    return 0.0, 0.0


def cpus_text(value: float) -> str:
    """``1.5`` CPUs, ``2`` CPUs: two decimals at most."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def gib_text(value: float) -> str:
    """Bytes as GiB, two decimals at most."""
    return f"{value / _GIB:.2f}".rstrip("0").rstrip(".")
