"""`peach profile --url` on a deployed app: its replicas profiled by the Ray dashboard.

The dashboard profiles a worker process with py-spy on its node
(``GET /worker/cpu_profile?pid=…&ip=…&duration=…&format=speedscope``). This module finds the
replicas of the components an endpoint's requests reach (Serve's REST API gives each
replica's pid and node; the app's gateway names the endpoint's components at
``/_peach/routes``), asks the dashboard to profile each of them at once for the load's
duration, and turns py-spy's speedscope files into the profiles the replicas' own sampler
gives under `peach dev` (``peach_cli.runtime.sampler``), so ``peach_cli.profile.model``
merges and folds them the same way: notebook code is compiled as ``<notebooks/X.ipynb>``
(``contract.code_filename``), and its lines are named as tracebacks name them
(``contract.notebook_position``) with the line maps of the project folder; Ray's serving
code is peach's host, so it is folded into ``peach`` with peach's own.

When the dashboard cannot profile (profiling not enabled on the head, py-spy missing or not
permitted, a Ray without the route), ``ProfilingRefused`` carries its reason.

Example::

    with DashboardClient(address) as dashboard:
        replicas = find_replicas(dashboard, "http://127.0.0.1:8000", "/token")
        check_profiling(dashboard, replicas[0])
        profiles = profile_replicas(dashboard, replicas, 10, cpu=False, line_maps={})
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from peach_cli.errors import UsageError
from peach_cli.internal import ROUTES_PATH
from peach_cli.runtime.contract.results import notebook_position
from peach_cli.runtime.plan import url_key

if TYPE_CHECKING:
    from peach_cli.deploy.dashboard import DashboardClient
    from peach_cli.runtime.plan import NotebookCode

PROFILE_PATH = "/worker/cpu_profile"
PY_SPY_INTERVAL_S = 0.01
"""py-spy's default rate (100 a second): the seconds one of its samples stands for."""
_NOTEBOOK = re.compile(r"^<(.+\.ipynb)>$")
_SITE = re.compile(r"/(?:site|dist)-packages/(.+)$")
_STDLIB = re.compile(r"/lib/python3\.\d+/(.+)$")
_WORKING_DIR = re.compile(r"/working_dir_files/[^/]+/(.+)$")


class ProfilingRefused(UsageError):
    """The dashboard cannot profile a replica; the message quotes its reason."""


@dataclass(frozen=True)
class Replica:
    deployment: str
    replica: str
    pid: int
    node_ip: str

    @property
    def name(self) -> str:
        return f"{self.deployment}#{self.replica}"


def find_replicas(dashboard: DashboardClient, origin: str, path: str) -> list[Replica]:
    """The running replicas of the components a request to ``path`` reaches."""
    import httpx

    details = dashboard.serve_details()
    applications = details.get("applications") or {}
    chosen: tuple[str, str] | None = None
    for name, app in applications.items():
        prefix = str(app.get("route_prefix") or "/").rstrip("/")
        if (path == prefix or path.startswith(prefix + "/")) and (
            chosen is None or len(prefix) > len(chosen[1])
        ):
            chosen = (str(name), prefix)
    if chosen is None:
        raise UsageError(f"no application on the cluster at {dashboard.shown} serves {path}")
    app_name, prefix = chosen
    not_peach = UsageError(
        f"the application '{app_name}' that serves {path} is not a peach app "
        "(its gateway does not answer /_peach/routes)"
    )
    try:
        answer = httpx.get(f"{origin}{prefix}{ROUTES_PATH}", timeout=10.0)
        routes = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        routes = None
    if not isinstance(routes, dict) or not isinstance(routes.get("endpoints"), list):
        raise not_peach
    below = url_key(path[len(prefix) :] or "/")
    endpoint = next(
        (e for e in routes["endpoints"] if url_key(str(e.get("url", ""))) == below), None
    )
    if endpoint is None:
        raise UsageError(f"'{app_name}' has no endpoint at {below}")
    deployments = applications[app_name].get("deployments") or {}
    replicas: list[Replica] = []
    for component in endpoint.get("components") or []:
        name = f"{endpoint['name']}.{component}"
        for replica in (deployments.get(name) or {}).get("replicas") or []:
            if replica.get("state") == "RUNNING" and replica.get("pid") and replica.get("node_ip"):
                replicas.append(
                    Replica(
                        name,
                        str(replica.get("replica_id")),
                        int(replica["pid"]),
                        str(replica["node_ip"]),
                    )  # fmt: skip
                )
    if not replicas:
        raise UsageError(f"no replica of {endpoint['name']} is running on the cluster")
    return replicas


def check_profiling(dashboard: DashboardClient, replica: Replica) -> None:
    """Profile one replica for a second: raises ``ProfilingRefused`` when the dashboard
    cannot, before any load is sent."""
    cpu_profile(dashboard, replica, 1, idle=False)


def cpu_profile(dashboard: DashboardClient, replica: Replica, seconds: int, *, idle: bool) -> str:
    """py-spy's speedscope file of ``replica`` over ``seconds``, from the dashboard."""
    params = {
        "pid": str(replica.pid),
        "ip": replica.node_ip,
        "duration": str(seconds),
        "format": "speedscope",
        "native": "false",
        "idle": "true" if idle else "false",
    }
    status, text = dashboard.get_text(PROFILE_PATH, params=params, timeout_s=seconds + 60.0)
    if status == 200:
        return text
    reason = " ".join(text.split()) or f"HTTP {status}"
    if status == 404:
        reason = f"it has no {PROFILE_PATH} route (this Ray version does not offer it)"
    raise ProfilingRefused(
        f"the Ray dashboard at {dashboard.shown} cannot profile {replica.name}: {reason[:600]}"
    )


def profile_replicas(
    dashboard: DashboardClient,
    replicas: list[Replica],
    duration_s: float,
    *,
    cpu: bool,
    line_maps: dict[str, dict[str, NotebookCode]],
) -> Callable[[], list[dict[str, Any]]]:
    """Start profiling every replica at once for ``duration_s``; returns what waits for the
    profiles (``peach_cli.runtime.sampler``'s shape), which raises ``ProfilingRefused``.
    ``line_maps``: by deployment, its notebook code by compiled name (each component's code
    is extracted from its notebook on its own, so its lines are its own)."""
    seconds = max(1, math.ceil(duration_s))
    pool = ThreadPoolExecutor(max_workers=len(replicas), thread_name_prefix="peach-profile")
    futures = [
        pool.submit(cpu_profile, dashboard, replica, seconds, idle=not cpu) for replica in replicas
    ]
    pool.shutdown(wait=False)

    def collect() -> list[dict[str, Any]]:
        return [
            from_speedscope(
                future.result(),
                replica.name,
                cpu=cpu,
                line_maps=line_maps.get(replica.deployment, {}),
            )
            for future, replica in zip(futures, replicas, strict=True)
        ]

    return collect


def from_speedscope(
    text: str, replica: str, *, cpu: bool, line_maps: dict[str, NotebookCode]
) -> dict[str, Any]:
    """py-spy's speedscope file as a replica's profile: frames ``(kind, position, function)``
    and root-first stacks with their weights in seconds. In wall-clock mode (py-spy's
    ``--idle``) the stacks that never leave peach's, Ray's or the standard library's code —
    their threads waiting for work — are left out, as the replica's own sampler does."""
    document = json.loads(text)
    shared = document.get("shared", {}).get("frames", [])
    frames = [_describe(frame, line_maps) for frame in shared]
    stacks: dict[tuple[int, ...], float] = {}
    samples = 0
    for thread in document.get("profiles", []):
        # py-spy weighs each sample in seconds (its ``unit``); a count is a sample each
        scale = 1.0 if thread.get("unit") == "seconds" else PY_SPY_INTERVAL_S
        weights = thread.get("weights") or [1] * len(thread.get("samples", []))
        for stack, weight in zip(thread.get("samples", []), weights, strict=False):
            samples += 1
            indices = tuple(int(i) for i in stack)
            if not cpu and all(frames[i][0] in ("peach", "stdlib") for i in indices):
                continue
            stacks[indices] = stacks.get(indices, 0.0) + float(weight) * scale
    return {
        "replica": replica,
        "samples": samples,
        "mode": "cpu" if cpu else "wall",
        "frames": frames,
        "stacks": [[list(indices), weight] for indices, weight in stacks.items()],
    }


def _describe(frame: dict[str, Any], line_maps: dict[str, NotebookCode]) -> tuple[str, str, str]:
    function = str(frame.get("name") or "?")
    filename = str(frame.get("file") or "?")
    line = frame.get("line")
    at = f", line {line}" if isinstance(line, int) and line > 0 else ""
    notebook = _NOTEBOOK.match(filename)
    if notebook is not None:
        code = line_maps.get(notebook.group(1))
        if code is not None and isinstance(line, int):
            return "notebook", f"{code.source_name}, {notebook_position(code, line)}", function
        return "notebook", f"{notebook.group(1)}{at}", function
    if "/peach_cli/" in filename or "/site-packages/ray/" in filename:
        return "peach", f"{filename}{at}", function
    site = _SITE.search(filename)
    if site is not None:
        return "library", f"{site.group(1)}{at}", function
    stdlib = _STDLIB.search(filename)
    if stdlib is not None or filename.startswith("<frozen"):
        return "stdlib", f"{stdlib.group(1) if stdlib else filename}{at}", function
    project = _WORKING_DIR.search(filename)
    return "project", f"{project.group(1) if project else filename}{at}", function


__all__ = [
    "ProfilingRefused",
    "Replica",
    "check_profiling",
    "find_replicas",
    "from_speedscope",
    "profile_replicas",
]
