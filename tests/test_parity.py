"""Parity: the HTTP cases of SPEC §2, run unchanged against both hosts.

Every case of ``test_gateway_semantics.py`` (which only knows ``base_url`` and HTTP) runs
twice here: against `peach dev` and against the Ray Serve proxy after `peach deploy` of the
same project, ``tests/projects/semantics``. Any difference in semantics between the
simulator and the deployed application fails a test with the host in its id.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ray_cluster import RayHead
from test_gateway_semantics import *  # noqa: F403 - the cases, collected here once more

from peach_cli.deploy.deployer import deploy
from peach_cli.project import build_plan

SEMANTICS_CPUS = 32  # logical: the project reserves 1 CPU per replica (Ray's default)
RAY_DEPLOY_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def ray_semantics() -> Iterator[str]:
    """`peach deploy tests/projects/semantics` on a fresh two-node cluster: the proxy's URL."""
    from conftest import SEMANTICS

    plan, diagnostics = build_plan(SEMANTICS)
    assert plan is not None, diagnostics
    # two nodes: a head offering no CPUs, so every replica runs on the worker node
    with RayHead(num_cpus=0, worker_cpus=SEMANTICS_CPUS) as head:
        head.start_serve()
        result = deploy(
            plan,
            address=head.dashboard_url,
            http_port=head.http_port,
            timeout_s=RAY_DEPLOY_TIMEOUT_S,
        )
        yield result.url


@pytest.fixture(
    scope="module",
    params=[
        "dev",
        # the first ray case also pays for starting the head and deploying the project
        pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.timeout(400)]),
    ],
)
def base_url(request: pytest.FixtureRequest) -> str:
    """The host under test: `peach dev` or Ray Serve, both serving the semantics project."""
    if request.param == "dev":
        return request.getfixturevalue("dev_server").url
    return request.getfixturevalue("ray_semantics")
