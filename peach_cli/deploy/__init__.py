"""`peach deploy`, `peach status`, `peach delete`: the project on a Ray Serve cluster.

The package is split by job, and only ``app`` imports Ray (it runs on the cluster):

* ``dashboard`` — the REST client of the cluster's dashboard (httpx, explicit timeouts);
* ``packaging`` — the project and the tool's runtime package as content-hashed zips;
* ``config``    — the Serve config (``ServeDeploySchema``) built from a ``ProjectPlan``;
* ``resources`` — whether the cluster has the CPUs and memory the project asks for;
* ``progress``  — reading deployment and replica states, spotting a replica start failure;
* ``deployer``  — the steps of a deploy, a status and a delete, reporting progress;
* ``app``       — the Serve application itself: the gateway and the component deployments.
"""

from __future__ import annotations

APPLICATION_BUILDER = "peach_cli.deploy.app:build_application"
"""The ``import_path`` of every peach application: a builder that takes ``args``."""
INIT_FAILED_MARKER = "PeachInitFailed"
"""The exception a component replica raises when its code or init fails."""
