"""The Serve config of a project: one application named after the codops.

The application's ``import_path`` is the builder in ``peach_cli.deploy.app``; its ``args``
name the deployments only, so the application's code version (a hash of import path,
runtime_env and args) changes only when endpoints or components are added or removed.
Every component's ``working_dir`` is the one project package; what it runs travels in its
own small spec package (``py_modules``), named by content hash: change one notebook cell
and only the components built from it get new replicas (see ``packaging``).

Nothing here imports Ray, except ``validate_config`` (Ray's own schema, when Ray is installed).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from peach_cli.deploy import APPLICATION_BUILDER
from peach_cli.deploy.packaging import (
    COMPONENT_FILE,
    GATEWAY_FILE,
    OPENAPI_FILE,
    Package,
    json_bytes,
    package,
    project_files,
    project_package,
    runtime_package,
    spec_package,
)
from peach_cli.deploy.variables import component_env_vars
from peach_cli.errors import DeployError, UsageError
from peach_cli.runtime.plan import ABSpec, ComponentSpec, EndpointSpec, ProjectPlan
from peach_cli.runtime.taskloop import DEFAULT_INTERVAL_S

GATEWAY = "gateway"
"""The ingress deployment's name (component deployments always contain a dot)."""
GATEWAY_CPUS = 0.1
GATEWAY_MAX_ONGOING = 1000
COMPONENT_MAX_ONGOING = 100


def surge_percent(replicas: int) -> int:
    """Serve's ``max_surge_percent`` for a deployment of ``replicas``: one replica more.

    A rollout starts one new replica beside the old ones, stops an old one once it runs,
    and so on (Ray's default, 0, stops an old one first: with one replica, every request
    waits for the new one). One at a time: on a busy node, the processes of new replicas
    starting all at once took the CPU from those serving (``benchmarks/rollout.py``).

    >>> surge_percent(1), surge_percent(2), surge_percent(3)
    (100, 50, 34)
    """
    return -(-100 // max(replicas, 1))


DRAIN_TIMEOUT_S = 300.0
"""Serve's ``graceful_shutdown_timeout_s``: how long a replaced replica may finish its
in-flight calls and streams (as long as `peach dev` lets a reloaded component drain)."""
SURGE_OPTION = "max_surge_percent"
DRAIN_OPTION = "graceful_shutdown_timeout_s"
"""The rollout settings of every deployment (both are updated without a restart)."""
SERVING_ENV_VARS = {"RAY_worker_niceness": "0"}
"""The application's own ``env_vars`` (every deployment of it gets them beside its own):
its replicas serve at the CPU priority Ray's processes start at. Ray lowers every worker's
(``nice`` 15) once it has imported Ray, so a new replica importing Ray during a rollout ran
at 0 against the serving ones at 15 and took the CPU from them (``benchmarks/rollout.py``).
Ray's job supervisors are given the same."""
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8000
ROUTE_PREFIX = "/"
_ROUTE_PREFIX = re.compile(r"^/[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$")


def check_route_prefix(prefix: str | None) -> str:
    """The route prefix an application serves: ``/`` or ``/team/project``, no trailing slash.

    Raises ``UsageError`` for anything Serve would refuse or route strangely.

    >>> check_route_prefix(None), check_route_prefix("/zzacc/"), check_route_prefix("/a/b")
    ('/', '/zzacc', '/a/b')
    """
    if prefix is None:
        return ROUTE_PREFIX
    text = prefix.strip()
    if text != "/":
        text = text.rstrip("/")
    if text == "/" or _ROUTE_PREFIX.match(text):
        return text
    raise UsageError(
        f"--route-prefix {prefix!r} is not a route prefix",
        hint="use / or a path like /zzacc (letters, digits, '.', '_', '~', '-' between slashes)",
    )


def deployment_name(spec: ComponentSpec) -> str:
    """``endpoint.component``: a component's deployment name (``assistant.main``)."""
    return f"{spec.endpoint}.{spec.name}"


@dataclass(frozen=True)
class Bundle:
    """What a deploy sends: the Serve config and the zips its runtime_envs reference."""

    app_name: str
    config: dict[str, Any]
    """A whole ``ServeDeploySchema`` with this one application."""
    packages: tuple[Package, ...]

    @property
    def application(self) -> dict[str, Any]:
        return self.config["applications"][0]

    @property
    def codes(self) -> dict[str, str]:
        """Deployment name → the code it runs (``progress.code_of`` its runtime_env, over
        the application's as Serve merges them: the deployment's fields win)."""
        from peach_cli.deploy.progress import code_of

        inherited = self.application.get("runtime_env") or {}
        return {
            d["name"]: code_of({**inherited, **d["ray_actor_options"]["runtime_env"]})
            for d in self.application["deployments"]
        }

    @property
    def upload_bytes(self) -> int:
        """What a deploy sends to a cluster that has none of the packages."""
        return sum(len(p.data) for p in self.packages)


@dataclass(frozen=True)
class TaskOptions:
    """How the deployed scheduler runs the tasks: the loop (``--no-tasks``: off; triggered
    runs still go through it) and its pause (``--task-interval``)."""

    loop: bool = True
    interval_s: float = DEFAULT_INTERVAL_S


# -- plan <-> JSON (the replica side rebuilds the specs from its zip) -------------------


def component_to_json(spec: ComponentSpec) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def component_from_json(data: dict[str, Any]) -> ComponentSpec:
    fields = dict(data)
    fields["dependencies"] = tuple(fields.get("dependencies") or ())
    fields["modules"] = tuple(fields.get("modules") or ())
    fields["line_map"] = tuple(tuple(item) for item in fields.get("line_map") or ())
    fields["secrets"] = tuple(fields.get("secrets") or ())
    return ComponentSpec(**fields)


def gateway_to_json(plan: ProjectPlan) -> dict[str, Any]:
    """The routing plan the gateway needs: endpoints and component names, no code."""
    endpoints = {}
    for name, endpoint in plan.endpoints.items():
        components = {
            component_name: {
                **component_to_json(dataclasses.replace(spec, source="", line_map=())),
                "deployment": deployment_name(spec),
            }
            for component_name, spec in endpoint.components.items()
        }
        endpoints[name] = {
            "name": endpoint.name,
            "url": endpoint.url,
            "primary": endpoint.primary,
            "fallback": endpoint.fallback,
            "decorated": endpoint.decorated,
            "components": components,
            "order": list(endpoint.components),  # the file's keys are sorted; the conf's order
            "ab": ab_to_json(endpoint.ab),
        }
    return {"codops": plan.codops, "timeout_s": plan.timeout_s, "endpoints": endpoints}


def ab_to_json(ab: ABSpec | None) -> dict[str, Any] | None:
    """An A/B test for the gateway: ``by`` and the split as [component, percent] pairs, in
    order (the order decides which buckets each arm owns)."""
    if ab is None:
        return None
    return {"by": ab.by, "split": [[arm, percent] for arm, percent in ab.split]}


def ab_from_json(data: dict[str, Any] | None) -> ABSpec | None:
    if not data:
        return None
    return ABSpec(data["by"], tuple((str(arm), int(percent)) for arm, percent in data["split"]))


def endpoints_from_json(data: dict[str, Any]) -> dict[str, EndpointSpec]:
    """The gateway's endpoints (component specs without code) from ``gateway_to_json``."""
    endpoints = {}
    for name, item in data["endpoints"].items():
        components = {}
        listed = item["components"]
        for component_name in item.get("order") or listed:  # as the conf lists them
            fields = {k: v for k, v in listed[component_name].items() if k != "deployment"}
            components[component_name] = component_from_json(fields)
        endpoints[name] = EndpointSpec(
            name=item["name"],
            url=item["url"],
            components=components,
            primary=item["primary"],
            fallback=item["fallback"],
            decorated=item["decorated"],
            ab=ab_from_json(item.get("ab")),
        )
    return endpoints


# -- the config ------------------------------------------------------------------------


def _component_deployment(
    spec: ComponentSpec,
    name: str,
    packages: tuple[Package, Package, Package],
    secrets: Mapping[str, str] | None,
) -> dict[str, Any]:
    """A component's Serve deployment over ``packages``: the project's, the runtime's and
    its own spec's."""
    from peach_cli.deploy.requirements import requirements_runtime_env  # not in the runtime

    project, runtime, own = packages
    runtime_env: dict[str, Any] = {
        "working_dir": project.uri,  # the same for every component: uploaded once
        "py_modules": [runtime.uri, own.uri],  # replaces the application's
        **requirements_runtime_env(spec.dependencies),  # base + its py_env's own
    }
    env_vars = component_env_vars(spec, secrets)
    if env_vars:
        runtime_env["env_vars"] = env_vars
    actor_options: dict[str, Any] = {"num_cpus": spec.cpus}
    if spec.memory:
        actor_options["memory"] = spec.memory
    actor_options["runtime_env"] = runtime_env
    return {
        "name": name,
        "num_replicas": spec.replicas,
        "max_ongoing_requests": COMPONENT_MAX_ONGOING,
        SURGE_OPTION: surge_percent(spec.replicas),
        DRAIN_OPTION: DRAIN_TIMEOUT_S,
        "ray_actor_options": actor_options,
    }


def build_bundle(
    plan: ProjectPlan,
    *,
    http_host: str = DEFAULT_HTTP_HOST,
    http_port: int = DEFAULT_HTTP_PORT,
    route_prefix: str = ROUTE_PREFIX,
    secrets: Mapping[str, str] | None = None,
    tasks: TaskOptions | None = None,
) -> Bundle:
    """The Serve config for ``plan`` and the packages it references (nothing uploaded).

    The gateway's package holds the project's OpenAPI document (with ``route_prefix`` in
    its ``servers``), built here: the Serve app serves it as it is and never reads notebooks.

    Each component's ``runtime_env`` ``env_vars`` hold its env_vars and its secrets'
    values from ``secrets`` (``***`` for each when None: what ``--dry-run`` shows); the
    gateway gets none. A project with tasks gets its scheduler (``tasks``: see
    ``deploy.scheduler``), with the loop and its pause as ``tasks`` says.
    """
    runtime = runtime_package()
    project = project_package(project_files(plan.root, excluded=plan.watched_files))
    gateway_files = [
        (GATEWAY_FILE, json_bytes(gateway_to_json(plan))),
        (OPENAPI_FILE, json_bytes(_shipped_document(plan, route_prefix, secrets))),
    ]
    gateway_package = package("gateway", gateway_files, "the gateway's routes")
    packages = {p.name: p for p in (project, runtime, gateway_package)}
    deployments: list[dict[str, Any]] = [_gateway_deployment(plan, gateway_package)]
    for spec in sorted(plan.components(), key=deployment_name):
        name = deployment_name(spec)
        own = spec_package(
            "component",
            {COMPONENT_FILE: json_bytes(component_to_json(spec))},
            f"the spec of {name}",
        )
        packages[own.name] = own
        deployments.append(_component_deployment(spec, name, (project, runtime, own), secrets))
    args: dict[str, Any] = {
        "gateway": GATEWAY,
        "components": [d["name"] for d in deployments if d["name"] != GATEWAY],
    }
    if plan.tasks:  # the project's task scheduler: every run a Ray job
        from peach_cli.deploy.scheduler import scheduler_deployment

        options = tasks or TaskOptions()
        scheduler, task_packages = scheduler_deployment(
            plan, project, secrets, loop=options.loop, interval_s=options.interval_s
        )
        deployments.append(scheduler)
        packages.update((item.name, item) for item in task_packages)
        args["tasks"] = scheduler["name"]
    application = {
        "name": plan.codops,
        "route_prefix": route_prefix,
        "import_path": APPLICATION_BUILDER,
        "args": args,
        "runtime_env": {"py_modules": [runtime.uri], "env_vars": dict(SERVING_ENV_VARS)},
        # the gateway logs each request as `peach dev` prints it: not Serve's access line
        "logging_config": {"enable_access_log": False},
        "deployments": deployments,
    }
    config = {
        "http_options": {"host": http_host, "port": http_port},
        "applications": [application],
    }
    return Bundle(plan.codops, config, tuple(packages.values()))


def _gateway_deployment(plan: ProjectPlan, gateway_package: Package) -> dict[str, Any]:
    """The gateway's deployment: one replica, its routes in ``gateway_package``, the base
    py_env's requirements."""
    from peach_cli.deploy.requirements import requirements_runtime_env  # not in the runtime

    return {
        "name": GATEWAY,
        "num_replicas": 1,
        "max_ongoing_requests": GATEWAY_MAX_ONGOING,
        SURGE_OPTION: surge_percent(1),
        DRAIN_OPTION: DRAIN_TIMEOUT_S,
        "ray_actor_options": {
            "num_cpus": GATEWAY_CPUS,
            "runtime_env": {
                "working_dir": gateway_package.uri,
                **requirements_runtime_env(plan.py_environments.get("base", ())),
            },
        },
    }


def _shipped_document(
    plan: ProjectPlan, route_prefix: str, secrets: Mapping[str, str] | None
) -> dict[str, Any]:
    """The OpenAPI document the gateway serves, as `peach openapi` prints it: the values of
    the project's ``secrets`` masked in its docstrings and defaults, the control characters
    JSON leaves raw escaped."""
    from peach_cli.boundary import mask_value, shown_value
    from peach_cli.openapi import build_document  # not in the runtime

    document = build_document(plan, route_prefix=route_prefix)
    if secrets:
        document = mask_value(document, secrets.values())
    return shown_value(document)  # type: ignore[no-any-return]


def merge_applications(
    bundle: Bundle, details: dict[str, Any], *, http_host: str | None, http_port: int | None
) -> tuple[dict[str, Any], list[str]]:
    """The config to PUT: the cluster's other declarative applications, then ours.

    A PUT replaces the whole set of declarative applications, so the others must be sent
    back unchanged. ``http_options`` are those Serve already runs with (they cannot change
    once Serve is up); a different ``--http-port``/``--http-host`` gives a warning.
    """
    warnings: list[str] = []
    ours = bundle.application
    others = []
    for name, app in sorted((details.get("applications") or {}).items()):
        if name == ours["name"]:
            continue
        if app.get("route_prefix") == ours["route_prefix"]:
            raise DeployError(
                f"the application '{name}' already serves the route prefix "
                f"'{ours['route_prefix']}' on this cluster; nothing was changed",
                hint=f"deploy this project under its own prefix: --route-prefix /{ours['name']}"
                f" (or remove the other one: peach delete {name})",
            )
        deployed = app.get("deployed_app_config")
        if app.get("source") != "declarative" or not deployed:
            warnings.append(
                f"application '{name}' was not deployed from a config; it is left as it is"
            )
            continue
        others.append(deployed)
    http_options = dict(bundle.config["http_options"])
    running = details.get("http_options") or {}
    if details.get("controller_info") and running:
        current = {"host": running.get("host"), "port": running.get("port")}
        asked = {"host": http_host, "port": http_port}
        for key, value in asked.items():
            if value is not None and current[key] is not None and value != current[key]:
                warnings.append(
                    f"Serve is already running with HTTP {key} {current[key]}; "
                    f"--http-{key} {value} is ignored (it can only be set when Serve starts)"
                )
        http_options = {k: v for k, v in current.items() if v is not None} or http_options
    config = dict(bundle.config)
    config["http_options"] = http_options
    if details.get("controller_info") and details.get("proxy_location"):
        config["proxy_location"] = details["proxy_location"]  # as Serve runs (it stays)
    config["applications"] = [*others, ours]
    return config, warnings


def without_surge(
    config: dict[str, Any], app_name: str | None = None, names: Collection[str] | None = None
) -> dict[str, Any]:
    """``config`` with deployments rolling as Ray does by default (old replicas stop before
    new ones start): the deployments ``names`` of ``app_name`` (``max_surge_percent`` 0),
    or, without ``app_name``, every deployment, with no ``max_surge_percent`` at all (a Ray
    that does not know it)."""
    applications = []
    for app in config["applications"]:
        if app_name is None or app.get("name") == app_name:
            deployments = []
            for deployment in app.get("deployments") or []:
                if app_name is None:
                    deployment = {k: v for k, v in deployment.items() if k != SURGE_OPTION}
                elif names is None or deployment.get("name") in names:
                    deployment = {**deployment, SURGE_OPTION: 0}
                deployments.append(deployment)
            app = {**app, "deployments": deployments}
        applications.append(app)
    return {**config, "applications": applications}


RAY_EXTRA_HINT = "python -m pip install 'peach-cli[ray]'"
SCHEMA_SKIPPED = (
    "the Serve config is not checked against Ray's schema here: Ray is not installed "
    f"({RAY_EXTRA_HINT} to check it; the cluster checks it anyway)"
)


def validate_config(config: dict[str, Any]) -> bool:
    """Check ``config`` against Ray's own ``ServeDeploySchema``; raise ``DeployError``.

    Ray is an extra (``peach-cli[ray]``): without it nothing is checked here (the dashboard
    checks the config it is sent with the same schema) and the result is False.
    """
    from pydantic import ValidationError

    try:
        from ray.serve.schema import DeploymentSchema, ServeDeploySchema
    except ImportError:
        return False
    if SURGE_OPTION not in DeploymentSchema.model_fields:  # an older Ray: the cluster decides
        config = without_surge(config)
    try:
        ServeDeploySchema.model_validate(config)
    except ValidationError as error:
        raise DeployError(f"the Serve config is not valid: {error}") from None
    return True


def http_url(config: dict[str, Any], route: str = "") -> str:
    """The base URL of the Serve HTTP proxy that the config asks for."""
    options = config.get("http_options") or {}
    host = options.get("host") or DEFAULT_HTTP_HOST
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    port = options.get("port") or DEFAULT_HTTP_PORT
    return f"http://{host}:{port}{route}"
