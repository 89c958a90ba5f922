"""`peach dev` runs each py_environment's replicas in an isolated env (SPEC §4).

Real `peach dev` processes, real envs built with uv into the session's env cache (see
``env_support``), real HTTP. The envs here are few and small: ``base`` = tomli-w,
``extra`` = base + websocket-client (the session's ``SMALL`` set), and one that cannot be
built.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from hammer_support import Hammer
from projectkit import write_project

pytestmark = pytest.mark.timeout(240)

CONF = """\
codops: envs
py_environments:
  base: {dependencies: [tomli-w]}
  extra: {dependencies: [websocket-client]}
  broken: {dependencies: ["peach-no-such-package-zz==1.0"]}
endpoints:
  base_info:
    url: /base
    components: {main: {notebook: nb.ipynb, method: base_info}}
  extra_info:
    url: /extra
    py_env: extra
    components: {main: {notebook: nb.ipynb, method: extra_info}}
  undeclared:
    url: /undeclared
    components: {main: {notebook: yaml_nb.ipynb, init: load, method: answer}}
  broken:
    url: /broken
    py_env: broken
    components: {main: {notebook: nb.ipynb, method: base_info}}
"""

CELLS = [
    "import importlib.util\nimport sys\n\n\n"
    "def importable(name):\n    return importlib.util.find_spec(name) is not None\n",
    "def base_info():\n    import tomli_w\n\n"
    '    return {"prefix": sys.prefix, "tomli_w": tomli_w.__file__}\n',
    "def extra_info():\n    import tomli_w\n    import websocket\n\n"
    "    return {\n"
    '        "prefix": sys.prefix,\n'
    '        "tomli_w": tomli_w.__file__,\n'
    '        "websocket": websocket.__file__,\n'
    '        "peach_deps": {n: importable(n) for n in ("typer", "httpx", "ray", "yaml")},\n'
    '        "six": importable("six"),\n'
    "    }\n",
]

YAML_CELLS = [
    "import yaml\n\n\ndef load():\n    return yaml.__version__\n\n\n"
    "def answer(model):\n    return model\n",
]


def make_project(root: Path) -> Path:
    cells = [CELLS[0] + "\n\n" + CELLS[1] + "\n\n" + CELLS[2]]
    return write_project(root, CONF, {"nb.ipynb": cells, "yaml_nb.ipynb": YAML_CELLS})


def ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()["result"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, env_cache: Path):
    """One `peach dev` of the project for the read-only tests of this module."""
    from conftest import start_peach_dev

    root = make_project(tmp_path_factory.mktemp("envs-project"))
    dev = start_peach_dev(root, root / "peach-dev.log")
    try:
        dev.wait_ready(timeout_s=180)
        yield dev
    finally:
        dev.stop()


def test_a_declared_dependency_is_importable_from_the_envs_prefix(served, env_cache):
    result = ok(httpx.get(f"{served.url}/base", timeout=10))
    prefix = Path(result["prefix"])
    assert prefix.is_relative_to(env_cache)  # the replica's sys.prefix is its env's
    assert Path(result["tomli_w"]).is_relative_to(prefix)


def test_an_env_inherits_base_and_holds_nothing_of_peachs_interpreter(served, env_cache):
    base = ok(httpx.get(f"{served.url}/base", timeout=10))
    extra = ok(httpx.get(f"{served.url}/extra", timeout=10))
    prefix = Path(extra["prefix"])
    assert prefix != Path(base["prefix"]) and prefix.is_relative_to(env_cache)
    assert Path(extra["tomli_w"]).is_relative_to(prefix)  # base's dependency, inherited
    assert Path(extra["websocket"]).is_relative_to(prefix)
    # installed next to peach, not declared: not importable (as on the platform)
    assert extra["peach_deps"] == {"typer": False, "httpx": False, "ray": False, "yaml": False}


def test_an_undeclared_import_is_unhealthy_with_the_requirement_to_add(served):
    response = httpx.get(f"{served.url}/undeclared", timeout=10)
    assert response.status_code == 503, response.text
    message = response.json()["error"]["message"]
    assert "No module named 'yaml'" in message
    assert "py_env 'base'" in message and "'pyyaml'" in message
    health = httpx.get(f"{served.url}/_peach/health", timeout=10).json()
    errors = [r["error"] for c in health["components"] for r in c["replicas"]]
    assert any(e and "'pyyaml'" in e for e in errors)


def test_each_build_step_is_reported_with_its_seconds(served):
    """Not a terminal: one plain line per step of each env's build; an env already in the
    cache (an earlier test of the session may have built base and extra) says nothing."""
    # base's requirements come first in every env (inheritance), then its own
    served.wait_for_output(r"py_env broken resolving: tomli-w, peach-no-such-package-zz==1\.0")
    for env in ("base", "extra", "broken"):
        lines = re.findall(rf"^py_env {env} .*$", served.output(), re.M)
        assert all(re.search(r"\(\d+\.\d s\)$", line) for line in lines), lines
        assert not any(line.endswith(": cached (0.0 s)") for line in lines), lines


def test_an_env_that_cannot_be_built_fails_clearly_while_the_others_serve(served):
    response = httpx.get(f"{served.url}/broken", timeout=10)
    assert response.status_code == 503, response.text
    message = response.json()["error"]["message"]
    assert "py_env 'broken'" in message and "peach-no-such-package-zz" in message
    assert ok(httpx.get(f"{served.url}/base", timeout=10))["tomli_w"]
    served.wait_for_output(r"error: py_env 'broken'.*peach-no-such-package-zz")


def test_shared_env_serves_undeclared_imports_and_says_they_are_not_checked(peach_dev, tmp_path):
    root = make_project(tmp_path / "project")
    dev = peach_dev(root, "--shared-env")
    dev.wait_ready(timeout_s=120)
    assert ok(httpx.get(f"{dev.url}/undeclared", timeout=10))  # peach's pyyaml is visible
    dev.wait_for_output(r"--shared-env: every replica runs in peach's own Python")


@pytest.mark.slow
def test_a_dependency_edit_reloads_only_that_envs_components(peach_dev, tmp_path):
    """Adding a requirement to `extra` rebuilds that env while the old replicas serve,
    then swaps its component; base's replica and state stay; no request fails."""
    root = make_project(tmp_path / "project")
    dev = peach_dev(root, reload=True)
    health = dev.wait_ready(timeout_s=180)
    pids = {c["component"]: [r["pid"] for r in c["replicas"]] for c in health["components"]}
    assert ok(httpx.get(f"{dev.url}/extra", timeout=10))["six"] is False
    dev.wait_for_output(r"watching .* for changes")

    served = {path: lambda r: "tomli_w" in r.json()["result"] for path in ("/base", "/extra")}
    hammer = Hammer(dev.url, served).start()
    began = time.monotonic()
    conf = root / "peach.yaml"
    conf.write_text(conf.read_text().replace("[websocket-client]", "[websocket-client, six]"))
    with hammer.stopped_on_error():
        dev.wait_for_output(r"restarted extra_info/main \(py_env changed\)", timeout_s=180)
    hammer.finish(began, time.monotonic())
    assert ok(httpx.get(f"{dev.url}/extra", timeout=10))["six"] is True
    after = httpx.get(f"{dev.url}/_peach/health", timeout=10).json()
    now = {c["component"]: [r["pid"] for r in c["replicas"]] for c in after["components"]}
    assert now["base_info/main"] == pids["base_info/main"]  # untouched: same process
    assert now["extra_info/main"] != pids["extra_info/main"]


def test_stopping_peach_dev_during_an_env_build_stops_uv_at_once(peach_dev, tmp_path):
    """A stop (SIGINT to peach alone, as an IDE's stop button sends) while uv builds a
    package kills uv and the build backend it runs, instead of waiting for them."""
    import os
    import signal
    import subprocess

    from env_support import SlowPackage
    from waiting import assert_gone

    slow = SlowPackage.write(tmp_path)
    conf = (
        "codops: slow\npy_environments:\n"
        f'  base: {{dependencies: ["{slow.requirement}"]}}\n'
        "endpoints:\n  info:\n    url: /info\n"
        "    components: {main: {notebook: nb.ipynb, method: info}}\n"
    )
    root = write_project(tmp_path / "project", conf, {"nb.ipynb": ["def info():\n    return 1\n"]})
    dev = peach_dev(root)
    backend = slow.wait_building()
    os.kill(dev.process.pid, signal.SIGINT)
    try:
        code = dev.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"peach dev still waits for uv:\n{dev.output()}") from None
    assert code == 0, dev.output()
    assert "Traceback" not in dev.output()
    assert_gone(backend)  # the build backend went with uv


@pytest.mark.slow
def test_prune_all_keeps_the_envs_a_running_peach_dev_uses(peach_dev, tmp_path, monkeypatch):
    """`peach env prune --all` beside a running `peach dev`: its env (and the staged
    runtime) are kept and it goes on serving; once it stops, the next prune removes them.
    Runtimes staged by other versions of peach go at once."""
    from cli_support import run_peach

    cache = tmp_path / "cache"  # its own cache: prune --all must not touch the session's
    monkeypatch.setenv("PEACH_ENV_CACHE", str(cache))
    old_runtime = cache / "runtime-0123456789abcdef"  # another version's
    (old_runtime / "peach_cli").mkdir(parents=True)
    (old_runtime / "peach_cli" / "__init__.py").write_text("")
    conf = "codops: pruned\nendpoints:\n  info:\n    url: /info\n    components: {main: {notebook: nb.ipynb, method: info}}\n"  # noqa: E501
    cells = ["import sys\n\n\ndef info():\n    return sys.prefix\n"]
    root = write_project(tmp_path / "project", conf, {"nb.ipynb": cells})
    dev = peach_dev(root)
    dev.wait_ready(timeout_s=120)
    env_path = Path(ok(httpx.get(f"{dev.url}/info", timeout=10)))
    assert env_path.is_relative_to(cache)
    (runtime,) = [p for p in cache.glob("runtime-*") if p != old_runtime]
    listed = run_peach("env", "list", str(root), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["envs"]
    assert row["path"] == str(env_path) and row["in_use"] is True
    text = run_peach("env", "list", str(root)).stdout
    assert "built: yes, in use" in text

    pruned = run_peach("env", "prune", "--all")
    assert pruned.returncode == 0, pruned.stderr
    assert f"kept {env_path} (no requirements, " in pruned.stdout
    assert "in use by a running peach" in pruned.stdout and "removed" not in pruned.stdout
    assert "removed 0 envs" in pruned.stderr and "1 in use kept" in pruned.stderr
    assert "1 runtime of other peach versions" in pruned.stderr
    assert env_path.is_dir() and runtime.is_dir() and not old_runtime.exists()
    assert ok(httpx.get(f"{dev.url}/info", timeout=10)) == str(env_path)  # still serving

    assert dev.stop() == 0
    (row,) = json.loads(run_peach("env", "list", str(root), "--format", "json").stdout)["envs"]
    assert row["in_use"] is False
    pruned = run_peach("env", "prune", "--all")
    assert pruned.returncode == 0, pruned.stderr
    assert f"removed {env_path} (no requirements, " in pruned.stdout
    assert "removed 1 env " in pruned.stderr and not env_path.exists()
    assert runtime.is_dir()  # this version's runtime stays
