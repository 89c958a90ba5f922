"""The gateway's own surface, named once: its ``/_peach/*`` paths and the header that marks
a request sent by one of peach's tools.

``peach dev``'s gateway (``simulator.gateway``) and the deployed app
(``peach_cli.deploy.app``) answer these paths; peach's clients (``peach ask``, ``fuzz``,
``bench``, the health checks) ask them. No endpoint may have a url under
``INTERNAL_PREFIX`` (``peach validate`` says so). It imports nothing: the CLI, the
simulator and the deployed app import it at no cost.
"""

from __future__ import annotations

INTERNAL_PREFIX = "/_peach"
"""Every path of the gateway's own (no endpoint's url starts with it)."""
ROUTES_PATH = INTERNAL_PREFIX + "/routes"
"""The endpoints, their A/B splits (``contract.status.routes_body``)."""
HEALTH_PATH = INTERNAL_PREFIX + "/health"
"""The replicas and their states (``contract.status.health_body``)."""
METRICS_PATH = INTERNAL_PREFIX + "/metrics"
"""The Prometheus figures (``peach dev``)."""
OPENAPI_PATH = INTERNAL_PREFIX + "/openapi.json"
"""The OpenAPI document of what is served (``peach_cli.openapi``)."""
DOCS_PATH = INTERNAL_PREFIX + "/docs"
"""The page to try the endpoints in a browser (``peach dev``)."""
REINIT_PATH = INTERNAL_PREFIX + "/reinit"
"""``POST …/<endpoint>[/<component>]`` re-runs ``init`` (``peach dev``, with its token)."""
PROFILE_PATH = INTERNAL_PREFIX + "/profile"
"""``POST …/start``, ``…/stop``, ``…/init``: `peach profile`'s actions (``peach dev``)."""

TOOL_HEADER = "x-peach-tool"
"""Marks a request one of peach's own tools sent (``fuzz``, ``replay``, ``bench``,
``profile``): ``peach dev --record`` does not record it."""


def is_internal(path: str) -> bool:
    """Whether ``path`` is the gateway's own (``INTERNAL_PREFIX`` or under it).

    >>> is_internal("/_peach"), is_internal("/_peach/health"), is_internal("/_peachy")
    (True, True, False)
    """
    return path == INTERNAL_PREFIX or path.startswith(INTERNAL_PREFIX + "/")
