"""Parity: the HTTP cases of SPEC §2, run unchanged against both hosts.

Every case of ``test_gateway_semantics.py`` (which only knows ``base_url`` and HTTP) runs
twice here: against `peach dev` and against the Ray Serve proxy after `peach deploy` of the
same project, ``tests/projects/semantics`` (``ray_semantics`` in conftest.py: one head
for the session, shared with the differential test). Any difference in semantics between the
simulator and the deployed application fails a test with the host in its id.
"""

from __future__ import annotations

import pytest
from test_gateway_semantics import *  # noqa: F403 - the cases, collected here once more


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
