"""A profiling run against one host: `peach profile`'s work between its command line and
what it shows.

``profile_host`` sends the request read from the command line before the host started
(``peach_cli.client.items.prepare_request``) to the host's base, picks the samplers of the host's kind and sends the
load (``peach_cli.profile.load``: `peach bench`'s load generator) while they sample every
replica of the endpoint's components. On a `peach dev` (the project's simulator, or a
``--url`` on this machine whose health declares ``host: "dev"``) the replicas sample
themselves (``peach_cli.profile.dev``); ``init`` instead restarts the components that have
an ``init`` with the sampler on, and sends no load. On a deployed app (``host: "ray"``) the
Ray dashboard profiles its replicas (``peach_cli.profile.deployed``) while the same load
runs::

    with Host(Path("examples/quickstart"), None, doing="profiling", tool="profile") as host:
        profiled = profile_host(host, prepare_request("/hot"), Load(None, 8, 10.0, 60.0))
    profiled.profiles   # one raw profile a replica (``peach_cli.profile.model``)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.client.request import Prepared
    from peach_cli.profile.load import Load
    from peach_cli.testing.host import Host


@dataclass(frozen=True)
class Profiled:
    """What a run measured: the replicas' raw profiles, how long it took, and the load's
    figures (None for ``init``) and whether Ctrl-C stopped it."""

    method: str
    path: str
    profiles: list[dict[str, Any]]
    duration_s: float
    figures: dict[str, Any] | None
    interrupted: bool


def profile_host(
    host: Host,
    request: Prepared,
    load: Load,
    *,
    cpu: bool = False,
    init: bool = False,
    address: str | None = None,
    named: bool = False,
) -> Profiled:
    """Profile ``request`` (``peach_cli.client.items.prepare_request``'s: its path joined to
    the host's base, or its full URL) on ``host``:
    the replicas sample CPU time with ``cpu``, else wall-clock time; ``init`` profiles the
    components' init instead of the load. A deployed app is profiled through the dashboard
    at ``address``, its lines named by the project here (``named``: the project was given,
    so it must be one)."""
    from peach_cli.profile.deployed import DeployedSampling
    from peach_cli.profile.dev import DevSampling
    from peach_cli.profile.load import send_load

    sent = request.at(host.base)
    parts = urlsplit(sent.url)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path or "/"
    deployed = host.kind == "ray"
    if deployed and init:
        raise UsageError(
            f"--init is not offered on a deployed app ({origin}): its replicas cannot "
            "be restarted under the profiler from outside the cluster",
            hint="profile init locally: `peach profile TARGET --init` in the project folder",
        )  # fmt: skip
    if not deployed and named and host.url is not None:
        raise UsageError("give --url or --project, not both (with --url the project runs "
                         "where that server runs)")  # fmt: skip
    sampling = (
        DeployedSampling(
            host.found, origin, path, address=address, duration_s=load.duration_s,
            cpu=cpu, named=named,
        )
        if deployed
        else DevSampling(origin, path, cpu=cpu, duration_s=load.duration_s, init=init)
    )  # fmt: skip
    began = time.perf_counter()
    figures: dict[str, Any] | None = None
    interrupted = False
    with sampling:
        if not init:  # init is profiled as its components restart: no load
            figures, interrupted = send_load(sent, load)
    duration_s = figures["duration_s"] if figures is not None else time.perf_counter() - began
    return Profiled(sent.method, path, sampling.profiles, duration_s, figures, interrupted)
