"""Sharing a cluster (SPEC §6) without one: route prefixes, the token as Ray's tools read it,
the routes of a gateway under a prefix, the health answer and `peach logs`' arguments."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from cli_support import run_peach

from peach_cli.checks.build import build_plan
from peach_cli.client.send import routes_urls
from peach_cli.deploy.config import build_bundle, check_route_prefix, merge_applications
from peach_cli.deploy.dashboard import DashboardClient, auth_token
from peach_cli.deploy.gateway_health import proxy_url
from peach_cli.deploy.logs import choose_application
from peach_cli.deploy.reports import health_body
from peach_cli.errors import DeployError, UsageError
from peach_cli.runtime.plan import ComponentSpec

TESTS = Path(__file__).resolve().parent
BASIC = TESTS / "projects" / "deploy_basic"
REPO = TESTS.parent


def plan_of(path: Path):
    plan, diagnostics = build_plan(path)
    assert plan is not None, diagnostics
    return plan


# -- route prefixes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "used"),
    [(None, "/"), ("/", "/"), ("/zzacc", "/zzacc"), ("/zzacc/", "/zzacc"), ("/a/b-c", "/a/b-c")],
)
def test_route_prefixes_are_normalised(given, used):
    assert check_route_prefix(given) == used


@pytest.mark.parametrize("given", ["zzacc", "/a b", "//", "/a//b", "/a?b", ""])
def test_bad_route_prefixes_are_usage_errors(given):
    with pytest.raises(UsageError, match="is not a route prefix"):
        check_route_prefix(given)


def test_a_taken_prefix_is_refused_naming_the_application_and_suggesting_one():
    bundle = build_bundle(plan_of(BASIC))
    details = {"applications": {"zzacc": {"source": "declarative", "route_prefix": "/"}}}
    with pytest.raises(DeployError) as caught:
        merge_applications(bundle, details, http_host=None, http_port=None)
    assert "the application 'zzacc' already serves the route prefix '/'" in caught.value.message
    assert "--route-prefix /deploy-basic" in (caught.value.hint or "")


def test_another_prefix_is_merged_beside_the_application_at_the_root():
    bundle = build_bundle(plan_of(BASIC), route_prefix="/deploy-basic")
    root_app = {"name": "zzacc", "route_prefix": "/", "import_path": "x:y"}
    details = {
        "controller_info": {"node_id": "n"},
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": 8000},
        "applications": {
            "zzacc": {"source": "declarative", "route_prefix": "/", "deployed_app_config": root_app}
        },
    }
    config, warnings = merge_applications(bundle, details, http_host=None, http_port=None)
    assert warnings == []
    assert [(a["name"], a["route_prefix"]) for a in config["applications"]] == [
        ("zzacc", "/"),
        ("deploy-basic", "/deploy-basic"),
    ]
    assert config["proxy_location"] == "HeadOnly"  # as Serve runs: a PUT does not change it


@pytest.mark.slow
def test_the_route_prefix_is_checked_before_the_project_is_read():
    result = run_peach("deploy", "/no/such/project", "--route-prefix", "x")
    assert result.returncode == 2
    assert "--route-prefix 'x' is not a route prefix" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_routes_of_a_gateway_under_a_prefix_are_looked_up_from_the_deepest_folder():
    assert routes_urls("http://h:8000/zzacc/team/recommend") == [
        "http://h:8000/zzacc/team/_peach/routes",
        "http://h:8000/zzacc/_peach/routes",
        "http://h:8000/_peach/routes",
    ]
    assert routes_urls("http://h:8000/recommend") == ["http://h:8000/_peach/routes"]


# -- the token ------------------------------------------------------------------------------


def test_the_token_comes_from_ray_auth_token_first(tmp_path):
    (tmp_path / "file").write_text("from-file")
    environ = {"RAY_AUTH_TOKEN": "  from-env \n", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "file")}
    assert auth_token(environ) == ("from-env", "RAY_AUTH_TOKEN")


def test_then_from_the_file_ray_auth_token_path_names_stripped(tmp_path):
    (tmp_path / "token").write_text("\n  from-path\t\n")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home")
    environ = {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "token"), "HOME": str(tmp_path)}
    token, source = auth_token(environ)
    assert token == "from-path" and "RAY_AUTH_TOKEN_PATH" in source


def test_then_from_the_users_ray_folder(tmp_path):
    assert auth_token({"HOME": str(tmp_path)}) == (None, "")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    assert auth_token({"HOME": str(tmp_path)})[0] == "from-home"


def test_a_token_path_that_cannot_be_read_is_a_clear_error(tmp_path):
    with pytest.raises(DeployError, match="cannot read the token file .*RAY_AUTH_TOKEN_PATH"):
        auth_token({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")})


def test_the_file_token_is_sent_and_a_refusal_names_the_file_never_the_token(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("s3cret-from-file\n")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    seen: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(403, text=f"bad token {request.headers['authorization']}")

    with DashboardClient("http://127.0.0.1:8265", transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(DeployError) as caught:
            client.serve_details()
    assert seen[0].headers["authorization"] == "Bearer s3cret-from-file"
    text = f"{caught.value.message} {caught.value.hint}"
    assert str(tmp_path / "token") in text and "s3cret" not in text


# -- health, status and logs ----------------------------------------------------------------


def test_the_health_answer_has_the_shape_of_peach_devs():
    deployments = {
        "hello.main": {
            "status": "HEALTHY",
            "replicas": [
                {"replica_id": "a1", "state": "RUNNING", "pid": 10, "node_ip": "10.0.0.2"},
                {"replica_id": "b2", "state": "RUNNING", "pid": 11, "node_ip": "10.0.0.2"},
            ],
        },
        "broken.main": {
            "status": "UPDATING",
            "replicas": [{"replica_id": "c3", "state": "STARTING"}],
        },
    }
    records = {("hello.main", "b2"): {"error": "re-init after drift failed, keeping …"}}

    def spec(endpoint: str) -> ComponentSpec:
        return ComponentSpec(endpoint, "main", f"/{endpoint}", "n.ipynb", "", "n", "m")

    body = health_body(
        "zzacc",
        {"hello.main": spec("hello"), "broken.main": spec("broken")},
        deployments,
        records,
        {"broken.main": "load() raised OSError: no weights"},
    )
    assert body["codops"] == "zzacc" and body["status"] == "starting" and not body["ready"]
    broken, hello = body["components"]
    assert broken["component"] == "broken/main" and broken["error"].startswith("load()")
    assert broken["replicas"][0]["error"] == "load() raised OSError: no weights"
    assert [(r["id"], r["state"], r["error"]) for r in hello["replicas"]] == [
        ("hello/main#a1", "running", None),
        ("hello/main#b2", "running", "re-init after drift failed, keeping …"),
    ]


def test_the_proxy_is_reached_on_the_dashboards_host():
    details = {"http_options": {"host": "0.0.0.0", "port": 8000}}
    assert proxy_url(details, "http://ray-head.example:8265") == "http://ray-head.example:8000"
    details = {"http_options": {"host": "10.1.2.3", "port": 8080}}
    assert proxy_url(details, "http://ray-head.example:8265") == "http://10.1.2.3:8080"


def test_logs_pick_the_only_application_or_ask_for_one():
    assert choose_application({"applications": {"zzacc": {}}}, None) == "zzacc"
    with pytest.raises(UsageError, match=r"several applications \(a, b\): name one"):
        choose_application({"applications": {"a": {}, "b": {}}}, None)
    with pytest.raises(DeployError, match="no application 'zzac'") as caught:
        choose_application({"applications": {"zzacc": {}}}, "zzac")
    assert caught.value.hint == "did you mean zzacc?"
    with pytest.raises(DeployError, match="no applications are deployed"):
        choose_application({"applications": {}}, None)


@pytest.mark.slow
def test_logs_usage_errors_exit_2_without_a_cluster():
    result = run_peach("logs", "--tail", "-1")
    assert result.returncode == 2 and "--tail must be 0 or more" in result.stderr
