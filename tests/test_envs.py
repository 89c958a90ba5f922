"""Environments built with uv: isolation, caching, atomic and concurrent builds, failures.

Every test shares the session's env cache (``env_cache`` in conftest.py): the small env is
built once, and uv's package cache makes the few other builds links, not downloads.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from cli_support import PEACH, run_peach
from env_support import SMALL, serve_sdist, start_build, start_live_build

from peach_cli.envs import (
    EnvBuildError,
    EnvSpec,
    cache_root,
    ensure_env,
    explain_missing_module,
    find_built,
    project_envs,
)
from peach_cli.envs.builder import LAST_USED, resolution_file
from peach_cli.envs.store import built_envs, prune
from peach_cli.project.loader import load_project

CONF = """codops: shop
py_environments:
  base: {dependencies: [tomli-w]}
  ws: {dependencies: [websocket-client, tomli-w]}
endpoints:
  e: {url: /e, py_env: ws, components: {main: {notebook: nb.ipynb, method: ask}}}
tasks:
  t: {notebook: nb.ipynb, method: ask}
"""


def run_in(env, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the env's interpreter, without the test run's PYTHONPATH."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(env.python), "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env=clean,
    )


def write_conf(root: Path, conf: str = CONF) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "peach.yaml").write_text(conf)
    return root


def test_the_cache_is_the_sessions_not_the_users(env_cache):
    assert cache_root() == env_cache.resolve()
    assert os.environ["PEACH_ENV_CACHE"] == str(env_cache)


def test_an_env_is_base_plus_its_own_requirements(tmp_path):
    project, diagnostics = load_project(write_conf(tmp_path))
    assert project is not None and diagnostics == []
    specs = project_envs(project.conf)
    assert list(specs) == ["base", "ws"]
    assert specs["base"].requirements == ("tomli-w",)
    assert specs["ws"].requirements == ("tomli-w", "websocket-client")  # base first, no repeat
    # the same set, whatever the env's name or the order, is resolved once
    assert EnvSpec("x", ("a", "b")).request_key == EnvSpec("y", ("b", "a")).request_key


def test_a_built_env_has_its_requirements_and_nothing_of_peachs(small_env):
    result = run_in(
        small_env,
        "import sys, tomli_w, websocket; print(sys.prefix)\n"
        "for name in ('yaml', 'typer', 'peach_cli', 'six'):\n"
        "    try:\n        __import__(name)\n"
        "    except ModuleNotFoundError:\n        print('missing', name)\n",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert Path(lines[0]) == small_env.path  # the replica's sys.prefix is its env
    # pyyaml, typer and six are installed next to peach, but not importable in the env
    assert lines[1:] == ["missing yaml", "missing typer", "missing peach_cli", "missing six"]
    assert small_env.path.parent == cache_root()
    assert {p.split("==")[0] for p in small_env.pinned} == set(SMALL)


def test_a_cached_env_is_found_without_uv_and_records_its_use(small_env, monkeypatch):
    from peach_cli.envs import uvrun

    def no_uv() -> str:
        raise AssertionError("uv was run for an env already built")

    monkeypatch.setattr(uvrun, "uv_binary", no_uv)  # no resolution, no build: uv is not run
    (small_env.path / LAST_USED).write_text("0\n")
    phases = []
    again = ensure_env(EnvSpec("other-name", tuple(reversed(SMALL))), progress=phases.append)
    assert again.path == small_env.path
    assert [p.phase for p in phases] == ["done"] and phases[0].detail == "cached"
    assert float((small_env.path / LAST_USED).read_text()) > time.time() - 60
    assert json.loads(resolution_file(EnvSpec("x", SMALL)).read_text())["pinned"]


def leftovers(env_cache: Path) -> set[str]:
    """What the builds left in the cache's scratch folder."""
    tmp = env_cache / "tmp"
    return {p.name for p in tmp.iterdir()} if tmp.is_dir() else set()


def test_a_build_reports_its_phases_and_leaves_nothing_half_built(env_cache):
    phases = []
    before = leftovers(env_cache)
    env = ensure_env(EnvSpec("solo", ("websocket-client",)), progress=phases.append)
    names = [p.phase for p in phases]
    assert names[0] == "resolving" and names[-1] == "done"
    assert "installing" in names
    assert all(b.elapsed_s >= a.elapsed_s for a, b in zip(phases, phases[1:], strict=False))
    assert "py_env solo" in str(phases[-1])
    assert run_in(env, "import websocket").returncode == 0
    assert leftovers(env_cache) == before


@pytest.mark.slow
def test_two_processes_building_one_env_at_once_share_one_build(tmp_path):
    requirements = ("tomli-w", "websocket-client==1.8.0")  # a set no other test builds
    go = tmp_path / "go"
    builders = [start_build(go, *requirements) for _ in range(2)]
    go.touch()  # both start together
    results = []
    for builder in builders:
        out, err = builder.communicate(timeout=90)
        assert builder.returncode == 0, err
        results.append(json.loads(out))
    assert results[0]["path"] == results[1]["path"]
    built_by = [r for r in results if "downloading" in r["phases"]]
    assert len(built_by) == 1, results  # the other waited for the lock, or found it done
    env = find_built(EnvSpec("base", requirements))
    assert env is not None and run_in(env, "import websocket, tomli_w").returncode == 0


def test_no_such_package_names_the_env_and_the_requirement(env_cache):
    with pytest.raises(EnvBuildError) as raised:
        ensure_env(EnvSpec("llm", ("tomli-w", "no-such-package-peach-test")))
    error = raised.value
    assert error.env == "llm" and error.requirement == "no-such-package-peach-test"
    assert "py_env 'llm'" in error.message
    assert "not found in the package registry" in error.message  # uv's own reason
    assert "pypi" in (error.hint or "")


def test_no_matching_version_names_the_requirement():
    with pytest.raises(EnvBuildError) as raised:
        ensure_env(EnvSpec("pinned", ("tomli-w>=999",)))
    assert raised.value.requirement == "tomli-w>=999"
    assert "tomli-w>=999" in raised.value.message


def test_an_unreachable_registry_is_reported(monkeypatch):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    with pytest.raises(EnvBuildError) as raised:
        ensure_env(EnvSpec("net", ("tomli",)))
    assert raised.value.requirement == "tomli"
    assert "Failed to fetch" in raised.value.message and "py_env 'net'" in raised.value.message


def test_offline_uses_only_the_cache_and_says_what_is_missing(small_env):
    # cached: fine offline
    assert ensure_env(EnvSpec("base", SMALL), offline=True).path == small_env.path
    # never downloaded by any test (keep pyjokes out of the other tests' envs): named
    with pytest.raises(EnvBuildError) as raised:
        ensure_env(EnvSpec("air", ("pyjokes",)), offline=True)
    assert raised.value.offline and "not in the cache: pyjokes" in raised.value.message
    assert "online" in (raised.value.hint or "")


def test_offline_rebuilds_a_removed_env_from_uvs_cache(small_env):
    spec = EnvSpec("re", ("tomli-w",))
    env = ensure_env(spec)
    [stored] = [e for e in built_envs() if e.path == env.path]
    from peach_cli.envs.store import remove_env

    assert remove_env(stored) == "removed" and find_built(spec) is None
    rebuilt = ensure_env(spec, offline=True)
    assert rebuilt.path == env.path and run_in(rebuilt, "import tomli_w").returncode == 0


def test_prune_removes_only_envs_unused_for_30_days(small_env):
    bare = ensure_env(EnvSpec("bare", ()))  # a venv without packages
    assert run_in(bare, "import sys; print(sys.prefix)").stdout.strip() == str(bare.path)
    (bare.path / LAST_USED).write_text(f"{time.time() - 31 * 86400:.0f}\n")
    small_env.touch()
    pruned = prune()
    assert [e.path for e in pruned.removed] == [bare.path] and pruned.in_use == []
    assert not bare.path.exists() and small_env.path.exists()


def test_explain_missing_module_names_the_requirement_to_add():
    cases = {
        "yaml": "pyyaml",
        "sklearn.linear_model": "scikit-learn",
        "PIL": "pillow",
        "cv2": "opencv-python",
        "bs4": "beautifulsoup4",
        "dateutil": "python-dateutil",
        "Some_Pkg": "some-pkg",
    }
    for module, distribution in cases.items():
        message = explain_missing_module(module, "llm")
        top = module.split(".")[0]
        assert f"module '{top}'" in message and "py_env 'llm'" in message
        assert f"add '{distribution}' to py_environments.llm.dependencies" in message


# -- the commands ----------------------------------------------------------------------


@pytest.mark.slow
def test_env_list_shows_requirements_built_size_and_path(tmp_path, small_env):
    write_conf(tmp_path, CONF.replace("[tomli-w]", "[tomli-w, websocket-client]"))
    result = run_peach("env", "list", str(tmp_path), "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)["envs"]}
    assert rows["base"]["built"] and rows["base"]["path"] == str(small_env.path)
    assert rows["base"]["size_bytes"] > 10_000
    assert rows["base"]["used_by"] == ["task t"] and rows["ws"]["used_by"] == ["e"]
    text = run_peach("env", "list", str(tmp_path))
    assert text.returncode == 0
    line = next(line for line in text.stdout.splitlines() if line.startswith("base"))
    assert "built: yes" in line and str(small_env.path) in line and "KiB" in line


@pytest.mark.slow
def test_env_build_builds_what_it_can_and_fails_clearly(tmp_path):
    conf = CONF.replace("[websocket-client, tomli-w]", "[no-such-package-peach-test]")
    result = run_peach("env", "build", str(write_conf(tmp_path, conf)))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "✓ py_env base" in result.stderr  # the other env is built
    assert (
        "error: py_env 'ws': cannot install requirement 'no-such-package-peach-test'"
        in result.stderr
    )
    assert "1 of 2 envs built" in result.stderr
    assert "py_env base resolving" in result.stderr or "py_env base done" in result.stderr


@pytest.mark.slow
def test_env_build_with_a_cache_it_cannot_write_is_one_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # (root writes anywhere: a file in the way cannot)
    project = write_conf(tmp_path, "codops: shop\npy_environments:\n  base: {dependencies: []}\n")
    result = run_peach("env", "build", str(project), env={"PEACH_ENV_CACHE": str(blocker / "c")})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "OSError" not in result.stderr
    assert "error: py_env 'base': cannot install its requirements: cannot write the env cache" in (
        result.stderr
    )
    assert "set PEACH_ENV_CACHE to a folder that is" in result.stderr
    assert "0 of 1 env built" in result.stderr


@pytest.mark.slow
def test_env_commands_reject_bad_input(tmp_path):
    assert run_peach("env", "list", str(tmp_path / "nowhere")).returncode == 2
    bad = run_peach("env", "build", str(write_conf(tmp_path, "codops: shop\nbogus: 1\n")))
    assert bad.returncode == 1 and "PC101" in bad.stdout and "Traceback" not in bad.stderr
    assert run_peach("env", "prune", "--days", "-1").returncode == 2


@pytest.mark.slow
def test_env_prune_all_removes_every_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PEACH_ENV_CACHE", str(tmp_path / "cache"))  # not the shared one
    env = ensure_env(EnvSpec("bare", ()))
    result = run_peach("env", "prune", "--all")
    assert result.returncode == 0, result.stderr
    assert f"removed {env.path}" in result.stdout and not env.path.exists()
    assert "removed 1 env" in result.stderr


def test_a_cancelled_build_leaves_nothing_and_the_next_one_succeeds(env_cache):
    import threading

    from peach_cli.envs import UvCancelled

    cancel = threading.Event()
    spec = EnvSpec("cancelled", ("tomli-w", "six"))

    def progress(step):
        if step.phase == "downloading":  # the build has started: stop it
            cancel.set()

    before = leftovers(env_cache)
    with pytest.raises(UvCancelled):
        ensure_env(spec, progress=progress, cancel=cancel)
    assert find_built(spec) is None
    assert leftovers(env_cache) == before
    env = ensure_env(spec)  # the lock was released
    assert run_in(env, "import six, tomli_w").returncode == 0


def test_a_worker_of_an_env_gets_nothing_of_the_host_in(small_env, tmp_path, monkeypatch):
    """What a replica or task of an env is started with (``WorkerLaunch.environment``):
    the host's PYTHONPATH, user site and activated conda env stay out; the env is
    activated, so ``python`` in a subprocess is the env's."""
    from simulator.spawn import Interpreter, WorkerLaunch

    runtime = tmp_path / "runtime"
    (runtime / "peach_cli").mkdir(parents=True)
    (runtime / "peach_cli" / "__init__.py").write_text("STAGED = True\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/work", str(Path.cwd())]))
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda")
    monkeypatch.setenv("PYTHONUSERBASE", str(tmp_path / "user-site"))
    interpreter = Interpreter(python=str(small_env.python), path=(str(runtime),), isolated=True)
    environment = WorkerLaunch(tmp_path, interpreter).environment()
    result = subprocess.run(
        [str(small_env.python), "-c", "import sys, peach_cli, tomli_w; print(peach_cli.STAGED)\n"
         "import shutil; print(shutil.which('python') == sys.executable)\n"
         "try:\n    import yaml\nexcept ModuleNotFoundError:\n    print('no yaml')"],
        capture_output=True, text=True, timeout=30, env=environment, cwd="/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "no", "yaml"]
    assert environment["PYTHONPATH"] == str(runtime)
    assert environment["VIRTUAL_ENV"] == str(small_env.path)
    assert "CONDA_PREFIX" not in environment and "PYTHONUSERBASE" not in environment
    assert environment["PYTHONUNBUFFERED"] == "1"


@pytest.mark.slow
def test_a_build_killed_halfway_is_never_used_and_the_next_one_completes(env_cache):
    before = leftovers(env_cache)
    requirements = ("tomli-w", "idna")  # a set no other test builds
    builder = start_live_build(*requirements)
    try:
        assert builder.stdout is not None
        for line in builder.stdout:  # the process reports each phase as it starts
            if line.strip() == "downloading":
                break
        builder.kill()  # as a crash or a second Ctrl-C would: no cleanup runs
    finally:
        builder.kill()
        builder.wait(timeout=30)
    spec = EnvSpec("base", requirements)
    assert find_built(spec) is None
    assert any(name.startswith("env-") for name in leftovers(env_cache))  # the half-built one
    env = ensure_env(spec)  # the dead process's lock went with it
    assert run_in(env, "import idna, tomli_w").returncode == 0
    assert find_built(spec) == env
    stale = time.time() - 2 * 86400
    for name in leftovers(env_cache) - before:  # prune removes what is a day old
        os.utime(env_cache / "tmp" / name, (stale, stale))
    assert prune().removed == [] and leftovers(env_cache) == before


def test_what_an_env_provides_is_read_once_until_its_folder_changes(small_env, tmp_path):
    """`peach dev` re-validates (PC308) on every save: the env's dist-info is not re-read
    while its site-packages is unchanged; a distribution added to it is seen."""
    from peach_cli.envs.provides import installed_modules

    site = small_env.site_packages()
    assert site is not None
    first = installed_modules(site)
    assert first["websocket-client"] == {"websocket"} and first["tomli-w"] == {"tomli_w"}
    assert installed_modules(site) is first  # nothing read again
    folder = tmp_path / "site-packages"
    shutil.copytree(site, folder, symlinks=True)
    assert "extra-dist" not in installed_modules(folder)
    info = folder / "extra_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-dist\nVersion: 1.0\n\n")
    (info / "RECORD").write_text("extra_mod/__init__.py,,\n")
    assert installed_modules(folder)["extra-dist"] == {"extra_mod"}


def test_env_build_stopped_by_sigterm_stops_uv_and_its_build_backend(tmp_path):
    """`peach env build` killed (SIGTERM, as `kill` or `timeout` send; a closed terminal's
    SIGHUP alike) while uv builds a package: uv runs in its own process group, so peach
    must stop it, and the backend uv runs, before it exits."""
    import signal

    from env_support import REPO, SlowPackage
    from waiting import assert_gone

    slow = SlowPackage.write(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "peach.yaml").write_text(
        f'codops: slow\npy_environments:\n  base: {{dependencies: ["{slow.requirement}"]}}\n'
        "endpoints: {}\n"
    )
    build = subprocess.Popen(
        # a real process: the test sends it SIGTERM mid-build
        [*PEACH, "env", "build", str(project)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env=dict(os.environ, NO_COLOR="1"), start_new_session=True,
    )  # fmt: skip
    try:
        backend = slow.wait_building()
        build.send_signal(signal.SIGTERM)
        output, _ = build.communicate(timeout=20)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    assert build.returncode == 130, output
    assert "Traceback" not in output
    assert_gone(backend)  # the build backend went with uv


def killed_build(folder: Path, cache: Path) -> set[str]:
    """`peach env build` killed with SIGKILL while uv runs a build backend (no cleanup can
    run): every process it started must die with it. What it left in the cache's tmp/."""
    import signal

    import psutil
    from env_support import REPO, SlowPackage
    from waiting import assert_gone

    slow = SlowPackage.write(folder)
    project = write_conf(
        folder / "project",
        f'codops: slow\npy_environments:\n  base: {{dependencies: ["{slow.requirement}"]}}\n',
    )
    build = subprocess.Popen(
        # a real process: the test kills it and looks at its process tree
        [*PEACH, "env", "build", str(project)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
        env=dict(os.environ, NO_COLOR="1", PEACH_ENV_CACHE=str(cache)), start_new_session=True,
    )  # fmt: skip
    try:
        backend = slow.wait_building()
        started = psutil.Process(build.pid).children(recursive=True)
        assert backend in {p.pid for p in started}
        os.kill(build.pid, signal.SIGKILL)  # peach alone: its process group is left be
        build.wait(timeout=10)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.wait()
    for process in started:  # uv and the backend it runs died with peach
        assert_gone(process.pid)
    left = leftovers(cache)
    assert left, "the killed build left nothing to clean up"
    return left


@pytest.mark.slow
def test_a_build_killed_with_sigkill_kills_uv_and_its_leftovers_are_cleaned(tmp_path):
    cache = tmp_path / "cache"  # not the session's: prune --all empties it
    killed_build(tmp_path / "first", cache)
    pruned = run_peach("env", "prune", "--all", env={"PEACH_ENV_CACHE": str(cache)})
    assert pruned.returncode == 0, pruned.stderr
    assert leftovers(cache) == set()
    left = killed_build(tmp_path / "second", cache)
    bare = write_conf(
        tmp_path / "bare", "codops: bare\npy_environments:\n  base: {dependencies: []}\n"
    )
    built = run_peach("env", "build", str(bare), env={"PEACH_ENV_CACHE": str(cache)})
    assert built.returncode == 0, built.stderr
    assert leftovers(cache) & left == set()


@pytest.mark.slow
def test_the_build_backends_uv_runs_never_see_the_dashboard_token(tmp_path):
    """A package's build backend is someone else's code: it gets no Ray token from peach."""
    seen = tmp_path / "seen.json"
    backend = (
        "import json, os\n\n\ndef get_requires_for_build_wheel(config_settings=None):\n"
        f"    with open({str(seen)!r}, 'w') as out:\n"
        "        json.dump(sorted(os.environ), out)\n"
        "    raise RuntimeError('recorded')\n"
    )
    url = serve_sdist(tmp_path / "index", "peach-env-pkg", {"backend.py": backend})
    project = write_conf(
        tmp_path / "project",
        f'codops: shop\npy_environments:\n  base: {{dependencies: ["peach-env-pkg @ {url}"]}}\n',
    )
    token = {"RAY_AUTH_TOKEN": "tok-never-for-backends", "RAY_AUTH_TOKEN_PATH": "/nowhere"}
    result = run_peach("env", "build", str(project), env=token)
    assert result.returncode == 1
    names = json.loads(seen.read_text())
    assert "PATH" in names and "RAY_AUTH_TOKEN" not in names
    assert "RAY_AUTH_TOKEN_PATH" not in names
