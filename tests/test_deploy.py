"""`peach deploy` without a cluster: address checks, the dashboard client's boundary,
packaging, the Serve config (checked by Ray's own schema), resources and progress parsing."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
import yaml
from cli_support import run_peach

from peach_cli.checks.build import build_plan
from peach_cli.deploy import APPLICATION_BUILDER
from peach_cli.deploy.config import (
    GATEWAY,
    build_bundle,
    component_from_json,
    component_to_json,
    endpoints_from_json,
    gateway_to_json,
    merge_applications,
    validate_config,
)
from peach_cli.deploy.dashboard import DashboardClient, resolve_address
from peach_cli.deploy.packaging import (
    COMPONENT_FILE,
    SITECUSTOMIZE,
    SPEC_PACKAGE,
    build_zip,
    project_files,
    runtime_modules,
    runtime_package,
)
from peach_cli.deploy.progress import (
    read_application,
    starting_errors,
    startup_failure,
    still_failing_to_start,
    strip_ansi,
)
from peach_cli.deploy.resources import Needs, application_needs, check_fits
from peach_cli.errors import DeployError, UsageError

TESTS = Path(__file__).resolve().parent
PROJECTS = TESTS / "projects"
BASIC = PROJECTS / "deploy_basic"
SEMANTICS = PROJECTS / "semantics"
REPO = TESTS.parent


def plan_of(path: Path):
    plan, diagnostics = build_plan(path)
    assert plan is not None, diagnostics
    return plan


# -- the address ----------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["auto", "ray://10.0.0.1:10001"])
def test_ray_client_addresses_are_refused_with_a_clear_message(address):
    with pytest.raises(UsageError) as caught:
        resolve_address(address)
    assert "dashboard" in caught.value.message
    assert "http://127.0.0.1:8265" in (caught.value.hint or "")


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "localhost:6379", "head-node"])
def test_addresses_that_are_not_urls_are_refused(address):
    with pytest.raises(UsageError) as caught:
        resolve_address(address)
    assert "not a dashboard URL" in caught.value.message


@pytest.mark.parametrize(
    "address", ["ray://me:s3cret@10.0.0.1:10001", "me:s3cret@head:6379", "ftp://me:s3cret@h:1"]
)
def test_a_refused_address_is_shown_without_its_password(address):
    with pytest.raises(UsageError) as caught:
        resolve_address(address)
    assert "s3cret" not in caught.value.message and "me:***@" in caught.value.message


def test_plain_http_to_another_host_warns_but_loopback_does_not():
    assert resolve_address("http://127.0.0.1:8265/") == ("http://127.0.0.1:8265", [])
    assert resolve_address("http://localhost:8265")[1] == []
    assert resolve_address("https://ray.example.com")[1] == []
    url, warnings = resolve_address("http://ray.example.com:8265")
    assert url == "http://ray.example.com:8265"
    assert warnings and "not encrypted" in warnings[0]


def test_the_address_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("PEACH_RAY_ADDRESS", "http://10.1.2.3:8265")
    assert resolve_address(None)[0] == "http://10.1.2.3:8265"
    monkeypatch.delenv("PEACH_RAY_ADDRESS")
    assert resolve_address(None)[0] == "http://127.0.0.1:8265"


# -- the dashboard client -------------------------------------------------------------------


def recording_transport(handler):
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    return httpx.MockTransport(handle), seen


def test_the_token_goes_in_the_authorization_header(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cret-token")
    transport, seen = recording_transport(
        lambda request: httpx.Response(200, json={"ray_version": "2.60.0"})
    )
    with DashboardClient("http://ray.example.com:8265", transport=transport) as client:
        assert client.version()["ray_version"] == "2.60.0"
    assert seen[0].headers["authorization"] == "Bearer s3cret-token"


def test_no_token_no_authorization_header(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    transport, seen = recording_transport(
        lambda request: httpx.Response(200, json={"ray_version": "2.60.0"})
    )
    with DashboardClient("http://127.0.0.1:8265", transport=transport) as client:
        client.version()
    assert "authorization" not in seen[0].headers


def test_a_refused_token_is_explained_and_never_shown(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cret-token")
    transport, _ = recording_transport(lambda request: httpx.Response(401, text="unauthorized"))
    with DashboardClient("http://127.0.0.1:8265", transport=transport) as client:
        with pytest.raises(DeployError) as caught:
            client.serve_details()
    text = f"{caught.value.message} {caught.value.hint}"
    assert "401" in text and "RAY_AUTH_TOKEN" in text
    assert "s3cret" not in text


def test_an_unreachable_dashboard_is_one_clear_error():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport, _ = recording_transport(refuse)
    with DashboardClient("http://127.0.0.1:1", transport=transport) as client:
        with pytest.raises(DeployError) as caught:
            client.version()
    assert "cannot reach the Ray dashboard at http://127.0.0.1:1" in caught.value.message
    assert "ray start --head" in (caught.value.hint or "")


def test_a_server_that_is_not_a_dashboard_is_named():
    transport, _ = recording_transport(lambda request: httpx.Response(200, json={"hello": 1}))
    with DashboardClient("http://127.0.0.1:8000", transport=transport) as client:
        with pytest.raises(DeployError, match="not a Ray dashboard"):
            client.version()


def test_package_exists_is_a_get_and_upload_is_a_put_of_the_zip():
    stored: dict[str, bytes] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        assert request.url.path.startswith("/api/packages/gcs/")
        if request.method == "GET":
            return httpx.Response(200 if name in stored else 404)
        stored[name] = request.content
        return httpx.Response(200)

    transport, _ = recording_transport(handle)
    with DashboardClient("http://127.0.0.1:8265", transport=transport) as client:
        assert not client.package_exists("peach_x.zip")
        client.upload_package("peach_x.zip", b"PK")
        assert client.package_exists("peach_x.zip")
    assert stored == {"peach_x.zip": b"PK"}


def test_a_failed_put_shows_rays_reason():
    transport, _ = recording_transport(
        lambda request: httpx.Response(400, text="ValidationError: route_prefix ...")
    )
    with DashboardClient("http://127.0.0.1:8265", transport=transport) as client:
        with pytest.raises(DeployError, match="HTTP 400: ValidationError"):
            client.put_applications({"applications": []})


# -- packaging ------------------------------------------------------------------------------


def test_zips_are_reproducible_and_named_by_content():
    plan = plan_of(BASIC)
    first, second = build_bundle(plan), build_bundle(plan)
    assert [p.name for p in first.packages] == [p.name for p in second.packages]
    assert first.config == second.config
    assert build_zip([("a", b"1")]) != build_zip([("a", b"2")])


def test_components_share_one_project_package_and_each_has_its_own_small_spec(tmp_path):
    plan = plan_of(SEMANTICS)
    names = [name for name, _ in project_files(plan.root, excluded=plan.watched_files)]
    assert "helpers.py" in names
    assert not any(n.endswith(".ipynb") or n == "peach.yaml" for n in names)
    bundle = build_bundle(plan)
    by_uri = {p.uri: p for p in bundle.packages}
    components = [d for d in bundle.application["deployments"] if d["name"] != GATEWAY]
    working_dirs = {d["ray_actor_options"]["runtime_env"]["working_dir"] for d in components}
    (project,) = working_dirs  # one project package for every component
    assert project.startswith("gcs://_ray_pkg_")
    with zipfile.ZipFile(io.BytesIO(by_uri[project].data)) as archive:
        assert sorted(archive.namelist()) == sorted(names)  # the project's files, no spec
    own = {}
    for deployment in components:
        runtime, spec_uri = deployment["ray_actor_options"]["runtime_env"]["py_modules"]
        assert runtime == bundle.application["runtime_env"]["py_modules"][0]
        assert len(by_uri[spec_uri].data) <= 64 * 1024
        own[deployment["name"]] = spec_uri
    assert len(set(own.values())) == len(components)
    with zipfile.ZipFile(io.BytesIO(by_uri[own["loud.main"]].data)) as archive:
        assert not set(archive.namelist()) & set(names)
        spec = component_from_json(json.loads(archive.read(f"{SPEC_PACKAGE}/{COMPONENT_FILE}")))
    assert spec == next(c for c in plan.components() if c.key == "loud/main")
    assert len(bundle.packages) == len(components) + 3  # + project, runtime, gateway


def test_changing_one_component_changes_only_its_deployment(tmp_path):
    import shutil

    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    before = build_bundle(plan_of(project)).application
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("replicas: 2", "replicas: 3"))
    notebook = project / "notebooks" / "Hello.ipynb"
    notebook.write_text(notebook.read_text().replace("hello {name}", "hi {name}"))
    after = build_bundle(plan_of(project)).application

    def by_name(app):
        return {d["name"]: d for d in app["deployments"]}

    assert after["args"] == before["args"] and after["runtime_env"] == before["runtime_env"]
    assert by_name(after)["count.main"] == by_name(before)["count.main"]
    assert by_name(after)["hello.main"] != by_name(before)["hello.main"]
    assert by_name(after)["hello.main"]["num_replicas"] == 3


def test_the_gateway_carries_the_ab_tests_and_a_split_change_redeploys_only_it(tmp_path):
    import shutil

    project = tmp_path / "project"
    shutil.copytree(SEMANTICS, project)
    plan = plan_of(project)
    assert endpoints_from_json(gateway_to_json(plan))["ab"].ab == plan.endpoints["ab"].ab
    assert gateway_to_json(plan)["endpoints"]["ab_stream"]["ab"] == {
        "by": "session",
        "split": [["other", 40], ["main", 60]],  # in the conf's order: it decides the buckets
    }
    before = build_bundle(plan).application
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("{main: 50, second: 30,", "{main: 40, second: 40,"))
    after = build_bundle(plan_of(project)).application
    changed = {
        d["name"]
        for d, e in zip(before["deployments"], after["deployments"], strict=True)
        if d != e
    }
    assert changed == {GATEWAY}
    assert after["args"] == before["args"]


@pytest.mark.slow
def test_the_runtime_package_is_importable_on_its_own(tmp_path):
    """The replicas import peach_cli from this zip only: it must be self-contained."""
    package = runtime_package()
    with zipfile.ZipFile(io.BytesIO(package.data)) as archive:
        archive.extractall(tmp_path)
        assert sorted(archive.namelist()) == sorted([*runtime_modules(), SITECUSTOMIZE[0]])
    code = (
        "import sys, peach_cli.deploy.app, peach_cli;"
        "from peach_cli import endpoint;"
        "bad = [m.__file__ for n, m in sys.modules.items()"
        f" if n.startswith('peach_cli') and not m.__file__.startswith({str(tmp_path)!r})];"
        "assert not bad, bad"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    # a real process: what a replica imports starting from the zip alone
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr


def test_a_task_job_runs_from_the_packages_laid_out_as_ray_lays_them_out(tmp_path):
    """Ray unzips the working_dir into the job's cwd and each py_modules zip into a folder on
    PYTHONPATH; the job's entrypoint then finds its spec in its own small package."""
    from peach_cli.deploy.jobs import task_job

    plan = plan_of(PROJECTS / "tasks")
    job = task_job(plan, plan.tasks["record"], '{"value": 3}', secrets={})
    runtime_env = job.body["runtime_env"]
    by_uri = {p.uri: p for p in job.packages}
    folders = []
    for index, uri in enumerate([runtime_env["working_dir"], *runtime_env["py_modules"]]):
        folder = tmp_path / f"unpacked{index}"
        folder.mkdir()  # as Ray does, even for an empty zip (this project has no other file)
        with zipfile.ZipFile(io.BytesIO(by_uri[uri].data)) as archive:
            archive.extractall(folder)
        folders.append(str(folder))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(folders), **runtime_env["env_vars"])
    # a real process: the job's entrypoint as Ray's shell runs it, from the unpacked packages
    result = subprocess.run(
        job.body["entrypoint"], shell=True, env=env, capture_output=True, text=True,
        cwd=folders[0], timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert 'recorded {"value": 3}' in result.stdout
    assert "task record returned in" in result.stdout


# -- the Serve config -----------------------------------------------------------------------


@pytest.mark.parametrize("project", [BASIC, SEMANTICS], ids=["deploy_basic", "semantics"])
def test_the_config_is_accepted_by_rays_schema(project):
    plan = plan_of(project)
    bundle = build_bundle(plan, http_host="0.0.0.0", http_port=9123)
    validate_config(bundle.config)
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(bundle.config)
    app = schema.applications[0]
    assert app.name == plan.codops and app.import_path == APPLICATION_BUILDER
    assert schema.http_options.host == "0.0.0.0" and schema.http_options.port == 9123
    names = {d.name for d in app.deployments}
    assert names == {GATEWAY} | {f"{c.endpoint}.{c.name}" for c in plan.components()}


def test_component_deployments_carry_replicas_cpus_memory():
    plan = plan_of(BASIC)
    deployments = {d["name"]: d for d in build_bundle(plan).application["deployments"]}
    hello = deployments["hello.main"]
    assert hello["num_replicas"] == 2
    assert hello["ray_actor_options"]["num_cpus"] == 0.1
    assert hello["ray_actor_options"]["memory"] == 64 * 1024 * 1024
    assert "memory" not in deployments["count.main"]["ray_actor_options"]
    # no dependencies: nothing to install, so the deploy needs no network
    assert set(deployments.pop(GATEWAY)["ray_actor_options"]["runtime_env"]) == {"working_dir"}
    for deployment in deployments.values():
        assert set(deployment["ray_actor_options"]["runtime_env"]) == {"working_dir", "py_modules"}
    # Serve's request_timeout_s is never set: the gateway enforces timeout_s itself
    assert "request_timeout_s" not in json.dumps(build_bundle(plan).config)


def test_py_env_dependencies_are_installed_with_uv(tmp_path):
    import shutil

    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    conf = project / "peach.yaml"
    conf.write_text(
        conf.read_text().replace(
            "endpoints:",
            "py_environments:\n  base: {dependencies: [orjson]}\n"
            '  extra: {dependencies: ["numpy>=1.24"]}\n\nendpoints:',
        )
    )
    conf.write_text(conf.read_text().replace("url: /count", "url: /count\n    py_env: extra"))
    deployments = {d["name"]: d for d in build_bundle(plan_of(project)).application["deployments"]}
    assert deployments["hello.main"]["ray_actor_options"]["runtime_env"]["uv"] == ["orjson"]
    assert deployments["count.main"]["ray_actor_options"]["runtime_env"]["uv"] == [
        "orjson",
        "numpy>=1.24",
    ]
    # the gateway gets base's
    assert deployments["gateway"]["ray_actor_options"]["runtime_env"]["uv"] == ["orjson"]
    validate_config(build_bundle(plan_of(project)).config)  # Ray's own schema accepts it


def test_plan_round_trips_through_the_gateway_and_component_json():
    plan = plan_of(SEMANTICS)
    for spec in plan.components():
        assert component_from_json(json.loads(json.dumps(component_to_json(spec)))) == spec
    endpoints = endpoints_from_json(json.loads(json.dumps(gateway_to_json(plan))))
    assert set(endpoints) == set(plan.endpoints)
    for name, endpoint in endpoints.items():
        original = plan.endpoints[name]
        assert (endpoint.url, endpoint.primary, endpoint.fallback, endpoint.ab) == (
            original.url,
            original.primary,
            original.fallback,
            original.ab,
        )
        assert all(c.source == "" for c in endpoint.components.values())  # no code
    # the gateway's file has sorted keys; its components keep the conf's order (routes)
    from peach_cli.deploy.packaging import json_bytes

    packed = endpoints_from_json(json.loads(json_bytes(gateway_to_json(plan))))
    assert [list(e.components) for e in packed.values()] == [
        list(plan.endpoints[name].components) for name in packed
    ]


def test_merge_keeps_the_other_applications_and_the_running_http_options():
    bundle = build_bundle(plan_of(BASIC), http_port=9000)
    other = {"name": "other", "route_prefix": "/other", "import_path": "x:y"}
    details = {
        "controller_info": {"node_id": "n"},
        "http_options": {"host": "127.0.0.1", "port": 8123},
        "applications": {
            "other": {
                "source": "declarative",
                "route_prefix": "/other",
                "deployed_app_config": other,
            },
            "deploy-basic": {
                "source": "declarative",
                "route_prefix": "/",
                "deployed_app_config": {},
            },
        },
    }
    config, warnings = merge_applications(bundle, details, http_host=None, http_port=9000)
    assert [a["name"] for a in config["applications"]] == ["other", "deploy-basic"]
    assert config["applications"][0] == other
    assert config["http_options"] == {"host": "127.0.0.1", "port": 8123}
    assert any("--http-port 9000 is ignored" in w for w in warnings)


def test_merge_refuses_a_route_prefix_taken_by_another_application():
    bundle = build_bundle(plan_of(BASIC))
    details = {"applications": {"shop": {"source": "declarative", "route_prefix": "/"}}}
    with pytest.raises(DeployError, match="'shop' already serves the route prefix '/'"):
        merge_applications(bundle, details, http_host=None, http_port=None)


# -- resources ------------------------------------------------------------------------------


def test_needs_count_replicas_times_cpus_and_memory():
    needs = application_needs(build_bundle(plan_of(BASIC)).application)
    assert needs.cpus == pytest.approx(0.1 + 0.1 + 2 * 0.1)  # gateway, count, 2 × hello
    assert needs.memory == 2 * 64 * 1024 * 1024


def test_a_project_that_does_not_fit_fails_with_the_numbers():
    report = {"usage": {"CPU": [3.0, 4.0], "memory": [0, 8 * 1024**3]}}
    with pytest.raises(DeployError) as caught:
        check_fits(Needs(2.5, 1024**3, 1.0, 1024**3, "a.main"), report)
    assert "asks for 2.5 CPUs and 1 GiB" in caught.value.message
    assert "has 1 CPUs and 8 GiB free" in caught.value.message
    # what the running version holds is given back by the redeploy
    check_fits(Needs(2.5, 0, 1.0, 0, "a.main"), report, held=Needs(2.0, 0))


def test_each_replica_must_fit_on_one_node_and_is_named():
    gib = 1024**3
    report = {
        "usage": {"CPU": [0.0, 6.0], "memory": [0, 12 * gib]},
        "usageByNode": {
            "n1": {"CPU": [0.0, 4.0], "memory": [0, 4 * gib]},
            "n2": {"CPU": [0.0, 2.0], "memory": [0, 8 * gib]},
        },
    }
    application = {
        "deployments": [
            {"name": "cpu.main", "ray_actor_options": {"num_cpus": 4}},
            {"name": "mem.main", "ray_actor_options": {"num_cpus": 1, "memory": 6 * gib}},
        ]
    }
    check_fits(application_needs(application), report)  # cpu.main on n1, mem.main on n2
    application["deployments"][1]["ray_actor_options"]["memory"] = 10 * gib
    with pytest.raises(DeployError, match="a replica of mem.main asks for 1 CPUs and 10 GiB"):
        check_fits(application_needs(application), report)
    both = {
        "deployments": [
            {"name": "both.main", "ray_actor_options": {"num_cpus": 4, "memory": 6 * gib}}
        ]
    }
    with pytest.raises(DeployError, match="a replica of both.main asks for 4 CPUs and 6 GiB"):
        check_fits(application_needs(both), report)  # 4 CPUs on n1, 6 GiB on n2: not on one


def test_a_replica_larger_than_any_node_fails():
    report = {
        "usage": {"CPU": [0.0, 8.0], "memory": [0, 8 * 1024**3]},
        "usageByNode": {"n1": {"CPU": [0.0, 4.0]}, "n2": {"CPU": [0.0, 4.0]}},
    }
    with pytest.raises(DeployError, match="a replica of big.main asks for 6 CPUs"):
        check_fits(Needs(6.0, 0, 6.0, 0, "big.main"), report)


class ReportingDashboard:
    """Answers ``cluster_status`` from a script of CPU usages, the last one repeating."""

    def __init__(self, *used_cpus: float, total_cpus: float = 4.0) -> None:
        self.reports = [
            {"usage": {"CPU": [used, total_cpus], "memory": [0.0, 8 * 1024**3]}}
            for used in used_cpus
        ]
        self.calls = 0

    def cluster_status(self) -> dict:
        report = self.reports[min(self.calls, len(self.reports) - 1)]
        self.calls += 1
        return report


def check_resources(dashboard: ReportingDashboard, details: dict) -> list[str]:
    from peach_cli.deploy.deployer import Reporter, _check_resources

    notes: list[str] = []
    bundle = build_bundle(plan_of(BASIC))  # 0.4 CPUs: gateway, count, 2 × hello
    _check_resources(dashboard, bundle, details, Reporter(note=notes.append))  # type: ignore[arg-type]
    return notes


def test_a_redeploy_after_a_failed_one_gets_back_what_the_failing_version_holds():
    # the failing version (Serve keeps retrying its replicas) holds 3.8 of the 4 CPUs
    failing = build_bundle(plan_of(BASIC)).application | {
        "deployments": [
            {"name": "hello.main", "num_replicas": 2, "ray_actor_options": {"num_cpus": 1.9}}
        ]
    }
    details = {
        "applications": {
            "deploy-basic": {"status": "DEPLOY_FAILED", "deployed_app_config": failing}
        }
    }
    dashboard = ReportingDashboard(3.8)
    assert check_resources(dashboard, details) == []
    assert dashboard.calls == 1


def test_resources_still_held_by_stopping_replicas_are_waited_for():
    # `peach delete other && peach deploy`: the report lags behind the replicas stopping
    dashboard = ReportingDashboard(3.8, 3.8, 0.0)
    notes = check_resources(dashboard, {"applications": {}})
    assert dashboard.calls == 3
    assert any("waiting for stopping replicas" in note for note in notes)


def test_a_project_larger_than_the_whole_cluster_fails_at_once():
    dashboard = ReportingDashboard(0.0, total_cpus=0.3)
    with pytest.raises(DeployError, match="asks for 0.4 CPUs"):
        check_resources(dashboard, {"applications": {}})
    assert dashboard.calls == 1


# -- progress -------------------------------------------------------------------------------

RAY_FAILURE = (
    "A replica failed to start with exception. Retrying 5 more time(s). Error:\n"
    "\x1b[36mray::ServeReplica:x:broken.main.initialize_and_get_metadata()\x1b[39m (pid=1)\n"
    '  File "/ray/serve/_private/replica.py", line 1928, in initialize\n'
    "    raise RuntimeError(traceback.format_exc()) from None\n"
    "RuntimeError: Traceback (most recent call last):\n"
    '  File "/x/peach_cli/deploy/app.py", line 70, in __init__\n'
    "    raise PeachInitFailed(text) from None\n"
    "peach_cli.deploy.app.PeachInitFailed: load_model() raised FileNotFoundError: no weights\n"
    "Traceback (most recent call last):\n"
    "  File notebooks/Broken.ipynb, cell 1, line 6, in load_model\n"
    "FileNotFoundError: no weights"
)


def app_details(deployments: dict, status: str = "DEPLOYING") -> dict:
    return {
        "status": status,
        "message": "",
        "route_prefix": "/",
        "deployments": deployments,
        "deployed_app_config": {"deployments": [{"name": "broken.main", "num_replicas": 2}]},
    }


def test_the_first_replica_start_failure_is_found_with_the_users_error_only():
    app = read_application(
        "x",
        app_details(
            {
                "broken.main": {
                    "status": "UPDATING",
                    "message": RAY_FAILURE,
                    "replicas": [{"replica_id": "a", "state": "STARTING"}],
                }
            }
        ),
    )
    failure = startup_failure(app)
    assert failure is not None and failure.deployment == "broken.main"
    assert failure.error.startswith("load_model() raised FileNotFoundError: no weights")
    assert "notebooks/Broken.ipynb, cell 1, line 6" in failure.error
    assert "\x1b" not in failure.error and "replica.py" not in failure.error


def test_a_redeploy_does_not_stop_at_the_failure_of_the_version_it_replaces():
    def failing(status: str, spec: str):
        # the project package is the same: the component's own spec package changed
        runtime_env = {"working_dir": "gcs://_ray_pkg_1.zip", "py_modules": ["gcs://r.zip", spec]}
        raw = app_details(
            {
                "broken.main": {
                    "status": status,
                    "message": RAY_FAILURE,
                    "replicas": [{"replica_id": "a", "state": "STARTING"}],
                    "deployment_config": {"ray_actor_options": {"runtime_env": runtime_env}},
                }
            }
        )
        return read_application("x", raw)

    replaced = starting_errors(failing("UPDATING", "gcs://old.zip"))
    assert "no weights" in replaced["broken.main"]
    code = {"broken.main": "gcs://_ray_pkg_1.zip gcs://r.zip gcs://new.zip"}
    # Serve has not picked up the new code yet, or an old replica's failure is still shown
    assert startup_failure(failing("DEPLOY_FAILED", "gcs://old.zip"), code, replaced) is None
    assert startup_failure(failing("UPDATING", "gcs://new.zip"), code, replaced) is None
    # the new version given up with that error, or any failure of a first deploy, counts
    assert startup_failure(failing("DEPLOY_FAILED", "gcs://new.zip"), code, replaced)
    assert startup_failure(failing("UPDATING", "gcs://new.zip"), code, {})


def test_replicas_starting_are_not_a_failure_and_not_ready():
    app = read_application(
        "x",
        app_details(
            {
                "broken.main": {
                    "status": "UPDATING",
                    "message": "",
                    "replicas": [
                        {"replica_id": "a", "state": "RUNNING"},
                        {"replica_id": "b", "state": "STARTING"},
                    ],
                }
            }
        ),
    )
    assert startup_failure(app) is None and not app.ready
    assert app.deployments[0].running == 1 and app.deployments[0].target == 2


# Serve's own words when a retried replica is slow to start (deployment_state.py, 2.60)
SLOW_SCHEDULING = (
    "Deployment 'broken.main' in application 'x' has 1 replicas that have taken more than "
    "30s to be scheduled. This may be due to waiting for the cluster to auto-scale or for a "
    "runtime environment to be installed."
)
SLOW_INIT = (
    "Deployment 'broken.main' in application 'x' has 1 replicas that have taken more than "
    "30s to initialize.\nThis may be caused by a slow __init__ or reconfigure method."
)


def test_a_start_failure_stays_known_while_serves_slow_start_warning_replaces_it():
    """The gateway answers 503 with the init error while a component cannot start; on a
    loaded machine Serve overwrites the failure message with its slow-start warning during
    the retries, and that must not make the gateway wait for a replica that never comes."""
    seen = still_failing_to_start("UPDATING", RAY_FAILURE, 0, None)
    assert seen == "load_model() raised FileNotFoundError: no weights"
    for warning in (SLOW_SCHEDULING, SLOW_INIT):
        assert still_failing_to_start("UPDATING", warning, 0, seen) == seen
        # never seen failing: a slow start is only slow
        assert still_failing_to_start("UPDATING", warning, 0, None) is None
    # a replica runs (a fixed version started), or a new deploy reset the message
    assert still_failing_to_start("UPDATING", SLOW_INIT, 1, seen) is None
    assert still_failing_to_start("UPDATING", "", 0, seen) is None
    assert still_failing_to_start("HEALTHY", "", 2, seen) is None
    # Serve gave up
    assert still_failing_to_start("DEPLOY_FAILED", "The deployment failed", 0, None)


def test_strip_ansi():
    assert strip_ansi("\x1b[1m\x1b[31mboom\x1b[0m") == "boom"


# -- the command line (no cluster) ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("output_format", ["json", "yaml"])
def test_dry_run_prints_the_exact_config_without_a_cluster(output_format):
    # an address nobody listens on: a dry run must not try it
    result = run_peach(
        "deploy",
        str(BASIC),
        "--dry-run",
        "--format",
        output_format,
        "--http-port",
        "9321",
        env={"PEACH_RAY_ADDRESS": "http://127.0.0.1:9"},
    )
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout) if output_format == "json" else yaml.safe_load(result.stdout)
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(config)
    assert config == build_bundle(plan_of(BASIC), http_port=9321).config


@pytest.mark.slow
def test_deploy_of_an_invalid_project_shows_the_diagnostics_and_exits_1(tmp_path):
    import shutil

    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("method: hello", "method: helo"))
    result = run_peach("deploy", str(project), "--dry-run")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1].endswith(" error in " + str(project) + ": not deploying")
    assert result.stderr == ""  # the diagnostics and their summary, no second error line


@pytest.mark.slow
def test_deploy_to_a_non_dashboard_address_exits_2_with_a_message():
    result = run_peach("deploy", str(BASIC), "--address", "auto")
    assert result.returncode == 2
    assert "dashboard REST API" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_status_with_nothing_listening_exits_1_with_a_message():
    result = run_peach("status", "--address", "http://127.0.0.1:9")
    assert result.returncode == 1
    assert "cannot reach the Ray dashboard" in result.stderr
    assert "Traceback" not in result.stderr


# -- the wait -------------------------------------------------------------------------------


class ScriptedDashboard:
    """Answers ``serve_details`` from a script of application states, the last one repeating."""

    def __init__(self, *apps: dict) -> None:
        self.apps = list(apps)
        self.calls = 0

    def serve_details(self) -> dict:
        app = self.apps[min(self.calls, len(self.apps) - 1)]
        self.calls += 1
        return {"applications": {"x": app}}


def deployment(status: str, states: list[str], message: str = "") -> dict:
    return {
        "status": status,
        "message": message,
        "replicas": [{"replica_id": f"r{i}", "state": s} for i, s in enumerate(states)],
    }


def test_the_wait_returns_when_every_replica_runs():
    from peach_cli.deploy.deployer import Reporter, wait_until_running

    seen = []
    dashboard = ScriptedDashboard(
        app_details({"broken.main": deployment("UPDATING", ["STARTING", "STARTING"])}),
        app_details({"broken.main": deployment("UPDATING", ["RUNNING", "STARTING"])}),
        app_details({"broken.main": deployment("HEALTHY", ["RUNNING", "RUNNING"])}, "RUNNING"),
    )
    app = wait_until_running(
        dashboard,  # type: ignore[arg-type]
        "x",
        timeout_s=10,
        reporter=Reporter(progress=lambda app, elapsed: seen.append(app.deployments[0].running)),
        poll_interval_s=0,
    )
    assert app.ready and seen == [0, 1, 2]


def test_the_wait_stops_at_the_first_start_failure():
    from peach_cli.deploy.deployer import ReplicaStartFailed, Reporter, wait_until_running

    dashboard = ScriptedDashboard(
        app_details({"broken.main": deployment("UPDATING", ["STARTING"])}),
        app_details({"broken.main": deployment("UPDATING", ["STARTING"], RAY_FAILURE)}),
        app_details({"broken.main": deployment("HEALTHY", ["RUNNING"])}, "RUNNING"),
    )
    with pytest.raises(ReplicaStartFailed) as caught:
        wait_until_running(
            dashboard,  # type: ignore[arg-type]
            "x",
            timeout_s=10,
            reporter=Reporter(),
            poll_interval_s=0,
        )
    assert dashboard.calls == 2
    assert "a replica of broken.main failed to start" in caught.value.message
    assert "no weights" in caught.value.message and "peach delete x" in (caught.value.hint or "")


def test_the_wait_times_out_naming_what_is_pending():
    from peach_cli.deploy.deployer import DeployTimeout, Reporter, wait_until_running

    pending = (
        "Deployment 'broken.main' has 1 replicas that have taken more than 30s to be scheduled."
    )
    dashboard = ScriptedDashboard(
        app_details({"broken.main": deployment("UPDATING", ["PENDING_ALLOCATION"], pending)})
    )
    with pytest.raises(DeployTimeout) as caught:
        wait_until_running(
            dashboard,  # type: ignore[arg-type]
            "x",
            timeout_s=0.05,
            reporter=Reporter(),
            poll_interval_s=0.01,
        )
    assert "not every replica of 'x' was running after 0 s" in caught.value.message
    assert "broken.main: 0/2 running" in (caught.value.hint or "")
    assert "taken more than 30s to be scheduled" in (caught.value.hint or "")


def test_the_timeout_names_the_whole_wait_and_an_application_without_deployments():
    import time

    from peach_cli.deploy.deployer import DeployTimeout, Reporter, wait_until_running

    dashboard = ScriptedDashboard(app_details({}))  # Serve is still building the application
    with pytest.raises(DeployTimeout) as caught:
        wait_until_running(
            dashboard,  # type: ignore[arg-type]
            "x",
            timeout_s=0.05,  # what was left of --timeout after the upload
            reporter=Reporter(),
            started=time.monotonic() - 2.0,
            poll_interval_s=0.01,
        )
    assert "not every replica of 'x' was running after 2 s" in caught.value.message
    assert caught.value.hint == (
        "application status DEPLOYING: its deployments are not created yet"
    )


# -- the task scheduler (SPEC §5 "Tasks on the cluster") ---------------------------------------


def test_a_project_with_tasks_gets_its_scheduler_in_the_same_application(tmp_path):
    from peach_cli.deploy.config import TaskOptions

    project = Path(shutil.copytree(PROJECTS / "tasks", tmp_path / "tasks"))
    bundle = build_bundle(plan_of(project), tasks=TaskOptions(loop=False, interval_s=5))
    validate_config(bundle.config)
    deployments = {d["name"]: d for d in bundle.application["deployments"]}
    scheduler = deployments["tasks"]
    assert bundle.application["args"]["tasks"] == "tasks"
    assert scheduler["num_replicas"] == 1
    config = scheduler["user_config"]
    assert config["names"] == ["record", "greet", "fail", "hang", "chain"]
    assert (config["loop"], config["interval_s"], config["timeouts"]["hang"]) == (False, 5.0, 2.0)
    record = config["tasks"]["record"]  # the request `peach task run --address` sends
    assert record["entrypoint"] == "python -m _peach_spec"
    assert (
        record["runtime_env"]["working_dir"]
        == deployments["kick.main"]["ray_actor_options"]["runtime_env"]["working_dir"]
    )  # the one project package
    names = {p.name for p in bundle.packages}
    assert {uri.removeprefix("gcs://") for uri in record["runtime_env"]["py_modules"]} <= names
    # a changed task changes the scheduler's user_config (applied by the running replica),
    # not the components' code: their replicas keep running
    notebook = project / "notebooks" / "Tasks.ipynb"
    notebook.write_text(notebook.read_text().replace("greet v1", "greet v2"))
    changed = build_bundle(plan_of(project), tasks=TaskOptions(loop=False, interval_s=5))
    after = {d["name"]: d for d in changed.application["deployments"]}
    assert changed.codes == bundle.codes
    assert after["tasks"]["user_config"] != scheduler["user_config"]
    assert {k: v for k, v in after.items() if k != "tasks"} == {
        k: v for k, v in deployments.items() if k != "tasks"
    }


def test_no_tasks_and_task_interval_reach_the_scheduler_and_a_project_without_tasks_has_none():
    dry = run_peach(
        "deploy", str(PROJECTS / "tasks"), "--dry-run", "--no-tasks", "--task-interval", "7"
    )
    assert dry.returncode == 0, dry.stderr
    config = json.loads(dry.stdout)["applications"][0]
    (scheduler,) = [d for d in config["deployments"] if d["name"] == "tasks"]
    assert (scheduler["user_config"]["loop"], scheduler["user_config"]["interval_s"]) == (False, 7)
    bad = run_peach("deploy", str(PROJECTS / "tasks"), "--dry-run", "--task-interval", "-1")
    assert bad.returncode == 2
    assert "--task-interval must be 0 or more seconds, not -1" in bad.stderr
    plain = build_bundle(plan_of(BASIC))
    assert "tasks" not in plain.application["args"]
    assert all(d["name"] != "tasks" for d in plain.application["deployments"])
