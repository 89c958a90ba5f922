"""Every command works without Ray installed here (Ray is the extra ``peach-cli[ray]``).

The CLI runs with ``import ray`` made impossible — a ``sitecustomize`` that sets
``sys.modules["ray"] = None`` in every process the test starts, the replicas too — for
validate, dev (a request and a stream), ask, deploy --dry-run (which says the Serve config
is not checked against Ray's schema, and how to get it checked), and the commands that
only read the project or talk to the dashboard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# real processes: Ray is hidden from their imports (no_ray_env), which a test process cannot undo
from cli_support import run_peach, run_peach_process

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "tests" / "projects" / "deploy_basic"
BLOCK = 'import sys\nsys.modules["ray"] = None  # `import ray` raises ModuleNotFoundError\n'


@pytest.fixture(scope="module")
def no_ray_env(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("no-ray")
    (folder / "sitecustomize.py").write_text(BLOCK)
    path = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {"PYTHONPATH": path}
    probe = subprocess.run(
        [sys.executable, "-c", "import ray"], env={**os.environ, **env}, capture_output=True
    )
    assert probe.returncode != 0 and b"import of ray halted" in probe.stderr  # the block works
    return env


@pytest.mark.slow
def test_reading_commands_work_without_ray(no_ray_env):
    for args in (
        ("--version",),
        ("--help",),
        ("validate", str(PROJECT)),
        ("schema",),
        ("task", "list", str(PROJECT)),
        ("env", "list", str(PROJECT)),
    ):
        result = run_peach_process(*args, env=no_ray_env)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)


@pytest.mark.slow
def test_deploy_dry_run_without_ray_says_the_schema_is_not_checked(no_ray_env):
    result = run_peach_process(
        "deploy", str(PROJECT), "--dry-run", "--format", "json", env=no_ray_env
    )
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["applications"][0]["name"] == "deploy-basic"
    assert "not checked against Ray's schema here: Ray is not installed" in result.stderr
    assert "python -m pip install 'peach-cli[ray]'" in result.stderr
    with_ray = run_peach("deploy", str(PROJECT), "--dry-run", "--format", "json")
    assert "Ray's schema" not in with_ray.stderr  # with Ray here, it is checked
    assert json.loads(with_ray.stdout) == config


@pytest.mark.slow
def test_cluster_commands_reach_for_the_dashboard_not_ray(no_ray_env):
    address = "http://127.0.0.1:9"  # nothing listens: the error is about the dashboard
    for args in (("status", "--address", address), ("deploy", str(PROJECT), "--address", address)):
        result = run_peach_process(*args, env=no_ray_env, timeout=60)
        assert result.returncode == 1, (args, result.stderr)
        assert "cannot reach the Ray dashboard at http://127.0.0.1:9" in result.stderr
        assert "Traceback" not in result.stderr and "ModuleNotFoundError" not in result.stderr


@pytest.mark.slow
def test_dev_and_ask_work_without_ray(no_ray_env, peach_dev, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", no_ray_env["PYTHONPATH"])
    dev = peach_dev(PROJECT, "--shared-env")
    dev.wait_ready()
    result = run_peach_process("ask", f"{dev.url}/hello", "name=Ada", env=no_ray_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["greeting"] == "hello Ada"
    result = run_peach_process("ask", f"{dev.url}/count", "n=2", "--stream", env=no_ray_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "0\n1\n"
    assert "Traceback" not in dev.output()
