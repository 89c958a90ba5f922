"""`peach doctor --address` against a real Ray cluster that wants a token (one head here), and
`peach status` finding that token where Ray's own tools look for it."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from cli_support import run_peach
from ray_cluster import RayHead

from peach_cli.deploy.dashboard import DashboardClient
from peach_cli.deploy.resources import has_totals

pytestmark = pytest.mark.ray

TOKEN = "peach-doctor-token-0123456789abcdef"


@pytest.fixture(scope="module")
def head() -> Iterator[RayHead]:
    with RayHead(num_cpus=3, auth_token=TOKEN) as running:
        with DashboardClient(running.dashboard_url, token=TOKEN) as dashboard:
            deadline = time.monotonic() + 30  # a new cluster reports its CPUs after a moment
            while not has_totals(dashboard.cluster_status()):
                assert time.monotonic() < deadline, "the cluster reported no resources"
                time.sleep(0.2)
        yield running


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peach(
    *args: str, cwd: Path, token: str | None = None, token_path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PEACH_ENV_CACHE": str(cwd)}
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    if token_path is not None:
        env["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    return run_peach(*args, cwd=cwd, env=env)


def cluster_checks(
    head: RayHead, project: Path, token: str | None, token_path: Path | None = None
) -> tuple[int, dict]:
    result = peach(
        "doctor",
        "--address",
        head.dashboard_url,
        "--offline",  # the package index is not what this module tests
        "--port",
        str(free_port()),
        "--format",
        "json",
        cwd=project,
        token=token,
        token_path=token_path,
    )
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    return result.returncode, checks


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`peach init shop`, once for the module."""
    folder = tmp_path_factory.mktemp("init")
    assert peach("init", "shop", cwd=folder).returncode == 0
    return folder / "shop"


@pytest.fixture
def project(initialised: Path, tmp_path: Path) -> Path:
    """A copy of the project `peach init` wrote, for this test alone."""
    return Path(shutil.copytree(initialised, tmp_path / "shop"))


def test_with_the_token_every_cluster_check_passes(head, project):
    code, checks = cluster_checks(head, project, TOKEN)
    assert code == 0, checks
    assert checks["dashboard"]["status"] == "ok"
    assert checks["token"] == {
        "name": "token",
        "status": "ok",
        "summary": "the cluster needs a token: the one in RAY_AUTH_TOKEN is accepted",
        "advice": None,
        "details": {"needed": True, "found": True, "accepted": True},
    }
    ray = checks["ray_version"]
    assert ray["status"] == "ok"
    assert ray["details"] == {"cluster": version("ray"), "installed": version("ray")}
    resources = checks["resources"]
    assert resources["status"] == "ok", resources
    # the gateway (0.1 CPU), then main and fallback, 1 CPU each by default
    assert resources["summary"].startswith("the project asks for 2.1 CPUs and 0 GiB; ")
    assert "the cluster has 3 CPUs (3 free)" in resources["summary"]
    assert resources["details"]["cpus"] == 3.0


def test_without_the_token_the_token_check_fails(head, project):
    code, checks = cluster_checks(head, project, None)
    assert code == 1
    assert checks["dashboard"]["status"] == "ok"  # it answered: 401
    token = checks["token"]
    assert token["status"] == "fail"
    assert token["summary"] == "the cluster needs a token and RAY_AUTH_TOKEN is not set"
    assert checks["ray_version"]["status"] == checks["resources"]["status"] == "skip"


def test_a_token_file_that_cannot_be_read_is_named(head, project, tmp_path):
    missing = tmp_path / "no-such-token"
    code, checks = cluster_checks(head, project, None, token_path=missing)
    assert code == 1
    token = checks["token"]
    assert token["status"] == "fail"
    assert f"cannot read the token file {missing} named by RAY_AUTH_TOKEN_PATH" in token["summary"]


def test_a_wrong_token_is_refused(head, project):
    code, checks = cluster_checks(head, project, "not-the-token")
    assert code == 1
    assert checks["token"]["status"] == "fail"
    assert "refused the token in RAY_AUTH_TOKEN" in checks["token"]["summary"]
    assert "(403)" in checks["token"]["summary"]


def test_a_project_larger_than_the_cluster_fails_with_the_numbers(head, project):
    conf = project / "peach.yaml"
    conf.write_text(
        conf.read_text().replace(
            "init: load_greetings", "init: load_greetings\n        replicas: 5"
        )
    )
    code, checks = cluster_checks(head, project, TOKEN)
    assert code == 1
    resources = checks["resources"]
    assert resources["status"] == "fail"
    assert re.fullmatch(
        r"the project asks for 6.1 CPUs and 0 GiB of memory; the cluster has 3 CPUs and "
        r"[\d.]+ GiB free",
        resources["summary"],
    ), resources["summary"]
    assert "lower `replicas`, `cpus` or `memory`" in resources["advice"]


def test_the_token_is_read_as_rays_tools_read_it(head, tmp_path):
    """`peach status` (as every command that talks to the cluster) finds the token where
    Ray's own tools look for it, and never prints it."""
    token = TOKEN
    home = tmp_path / "home"
    home.mkdir()
    empty_home = {"HOME": str(home)}

    def status(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return run_peach("status", "--address", head.dashboard_url, env=env)

    missing = status(empty_home)
    assert missing.returncode == 1
    assert "refused the request (401)" in missing.stderr
    assert "set RAY_AUTH_TOKEN" in missing.stderr and "RAY_AUTH_TOKEN_PATH" in missing.stderr

    wrong = status({**empty_home, "RAY_AUTH_TOKEN": "not-the-token"})
    assert wrong.returncode == 1 and "(403)" in wrong.stderr
    assert "not-the-token" not in wrong.stderr + wrong.stdout  # never printed

    right = status({**empty_home, "RAY_AUTH_TOKEN": token})
    assert right.returncode == 0, right.stderr
    assert "no applications" in right.stdout

    token_file = tmp_path / "token"
    token_file.write_text(f"  {token}\n")  # whitespace stripped
    by_path = status({**empty_home, "RAY_AUTH_TOKEN_PATH": str(token_file)})
    assert by_path.returncode == 0, by_path.stderr

    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text(f"{token}\n")
    by_home = status(empty_home)
    assert by_home.returncode == 0, by_home.stderr
    assert token not in by_home.stdout + by_home.stderr

    gone = status({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "nope")})
    assert gone.returncode == 1
    assert f"cannot read the token file {tmp_path / 'nope'}" in gone.stderr
