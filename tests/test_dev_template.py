"""Replicas forked from a warm template (``simulator.template``) under a real `peach dev`.

Forty endpoints start and each replica is its own process with its own init; a replica
killed is reported and restarted as before; a template killed takes its replicas with it and
they come back; two components of one env see only their own variables; forked replicas do
not share a random state; ``PEACH_NO_TEMPLATE=1`` spawns each replica instead.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import DevProcess, start_peach_dev
from projectkit import many_endpoints_conf, write_project

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not hasattr(os, "fork") or os.uname().sysname != "Linux", reason="Linux"),
]

CELL = (
    "import os\nimport random\n\nINITS = []\n\n\n"
    "def load():\n    INITS.append(1)\n    return {'drawn': random.random()}\n\n\n"
    "def answer(model):\n"
    "    names = ('ALPHA', 'BETA', 'ALPHA_KEY', 'BETA_KEY')\n"
    "    return {'pid': os.getpid(), 'inits': len(INITS), 'drawn': model['drawn'],\n"
    "            'seen': {n: os.environ.get(n) for n in names}}\n"
)
NOTEBOOK = {"nb.ipynb": [CELL]}
MANY = 40

PAIR = """\
codops: pair
endpoints:
  alpha:
    url: /alpha
    components:
      main: {notebook: nb.ipynb, init: load, method: answer, replicas: 2, cpus: 0.1,
             env_vars: {ALPHA: a}, secrets: [ALPHA_KEY]}
  beta:
    url: /beta
    components:
      main: {notebook: nb.ipynb, init: load, method: answer, cpus: 0.1,
             env_vars: {BETA: b}, secrets: [BETA_KEY]}
"""
SECRETS = {"ALPHA_KEY": "alpha-secret-value", "BETA_KEY": "beta-secret-value"}


def replicas(dev: DevProcess) -> list[dict]:
    health = httpx.get(f"{dev.url}/_peach/health", timeout=10).json()
    return [r for c in health["components"] for r in c["replicas"]]


def templates(dev: DevProcess) -> list[psutil.Process]:
    """The templates below `peach dev` (its replicas, forked, show the same command line)."""
    peach = psutil.Process(dev.process.pid)
    keepers = [p for p in peach.children() if "peach_cli.runtime.keeper" in p.cmdline()]
    below = [child for starter in [peach, *keepers] for child in starter.children()]
    return [p for p in below if "peach_cli.runtime.template" in " ".join(p.cmdline())]


def poll(check, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s"
        time.sleep(0.05)


def all_healthy(dev: DevProcess, old: frozenset[int] | set[int] = frozenset()) -> list[dict] | None:
    found = replicas(dev)
    fine = all(r["state"] == "healthy" and r["pid"] and r["pid"] not in old for r in found)
    return found if fine else None


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    root = write_project(
        tmp_path_factory.mktemp("many"),
        many_endpoints_conf(MANY, "{notebook: nb.ipynb, init: load, method: answer, cpus: 0.01}"),
        NOTEBOOK,
    )
    dev = start_peach_dev(root, root / "peach-dev.log")
    try:
        yield dev
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    root = write_project(tmp_path_factory.mktemp("pair"), PAIR, NOTEBOOK)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SECRETS.items():
            patch.setenv(name, value)
        dev = start_peach_dev(root, root / "peach-dev.log")
    try:
        dev.wait_ready()
        yield dev
    finally:
        dev.stop()


def test_forty_endpoints_start_each_replica_its_own_process_with_its_own_init(many):
    many.wait_ready(timeout_s=180)
    found = poll(lambda: all_healthy(many), "40 healthy replicas", 120)
    assert len(found) == MANY
    pids = set()
    with httpx.Client(base_url=many.url, timeout=30) as client:
        for i in range(MANY):
            response = client.get(f"/e{i}")
            assert response.status_code == 200, response.text
            result = response.json()["result"]
            assert result["inits"] == 1  # its own init, once
            pids.add(result["pid"])
    assert pids == {r["pid"] for r in found}  # 40 distinct processes, as the health says
    (template,) = templates(many)
    assert {psutil.Process(pid).ppid() for pid in pids} == {template.pid}  # forked from it
    sampled = poll(lambda: all(r["pss"] > 0 for r in replicas(many)), "PSS for every replica")
    assert sampled
    for replica in replicas(many):
        assert 0 < replica["pss"] <= replica["rss"]  # shared pages counted once


def test_a_replica_killed_is_reported_with_its_exit_and_restarted(pair):
    (victim, *_) = [r for r in replicas(pair) if r["id"] == "beta/main#1"]
    os.kill(victim["pid"], signal.SIGKILL)
    pair.wait_for_output(r"beta/main#1 .*was killed by SIGKILL")
    found = poll(lambda: all_healthy(pair, {victim["pid"]}), "a restarted replica")
    (template,) = templates(pair)
    restarted = [r for r in found if r["id"] == "beta/main#1"][0]
    assert psutil.Process(restarted["pid"]).ppid() == template.pid
    answer = httpx.get(f"{pair.url}/beta", timeout=10).json()["result"]
    assert answer["pid"] == restarted["pid"] and answer["inits"] == 1


def test_components_of_one_env_see_only_their_own_variables(pair):
    with httpx.Client(base_url=pair.url, timeout=10) as client:
        alpha = client.get("/alpha").json()["result"]["seen"]
        beta = client.get("/beta").json()["result"]["seen"]
    assert alpha == {
        "ALPHA": "a",
        "BETA": None,
        "ALPHA_KEY": SECRETS["ALPHA_KEY"],
        "BETA_KEY": None,
    }
    assert beta == {"ALPHA": None, "BETA": "b", "ALPHA_KEY": None, "BETA_KEY": SECRETS["BETA_KEY"]}
    (template,) = templates(pair)
    held = template.environ()
    assert not {"ALPHA", "BETA", "ALPHA_KEY", "BETA_KEY"} & set(held)  # nobody's secrets


def test_forked_replicas_do_not_share_a_random_state(pair):
    drawn: dict[int, float] = {}
    with httpx.Client(base_url=pair.url, timeout=10) as client:
        for _ in range(40):
            result = client.get("/alpha").json()["result"]
            drawn[result["pid"]] = result["drawn"]
            if len(drawn) == 2:
                break
    assert len(drawn) == 2  # both replicas answered
    assert len(set(drawn.values())) == 2


def test_a_template_killed_takes_its_replicas_and_they_start_again(pair):
    (template,) = templates(pair)
    before = {r["pid"] for r in replicas(pair)}
    template.kill()
    pair.wait_for_output(r"alpha/main#\d .*was killed by SIGKILL")
    found = poll(lambda: all_healthy(pair, before), "replicas started again", 60)
    assert len(found) == 3
    assert not any(psutil.pid_exists(pid) for pid in before)  # none left behind
    answer = httpx.get(f"{pair.url}/alpha", timeout=10).json()["result"]
    assert answer["pid"] in {r["pid"] for r in found} and answer["inits"] == 1
    (again,) = templates(pair)  # a new template forked them
    assert again.pid != template.pid
    assert {psutil.Process(r["pid"]).ppid() for r in found} == {again.pid}


@pytest.mark.slow
@pytest.mark.parametrize(
    "knob",
    [("PEACH_NO_TEMPLATE", "1"), ("PEACH_LINUX_WITHOUT", "fork")],
    ids=["no-template", "without-fork"],  # the latter: macOS's fallback (no fork-based template)
)
def test_without_templates_each_replica_is_spawned(tmp_path: Path, monkeypatch, knob):
    root = write_project(tmp_path / "pair", PAIR, NOTEBOOK)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(*knob)
    dev = start_peach_dev(root, tmp_path / "peach-dev.log")
    try:
        dev.wait_ready()
        found = poll(lambda: all_healthy(dev), "healthy replicas")
        assert not templates(dev)
        (keeper,) = {psutil.Process(r["pid"]).ppid() for r in found}  # started by one process:
        assert psutil.Process(keeper).ppid() == dev.process.pid  # peach's keeper
        beta = httpx.get(f"{dev.url}/beta", timeout=10).json()["result"]
        assert beta["inits"] == 1 and beta["seen"]["BETA_KEY"] == SECRETS["BETA_KEY"]
    finally:
        dev.stop()


@pytest.mark.slow
def test_neither_template_nor_replicas_outlive_peach_dev_killed(peach_dev, tmp_path: Path):
    root = write_project(
        tmp_path / "one",
        many_endpoints_conf(2, "{notebook: nb.ipynb, method: answer, init: load}"),
        NOTEBOOK,
    )
    dev = peach_dev(root)
    dev.wait_ready()
    found = poll(lambda: all_healthy(dev), "healthy replicas")
    (template,) = templates(dev)
    left = {template.pid, *(r["pid"] for r in found)}
    dev.process.kill()  # SIGKILL: peach cannot stop anything itself
    dev.process.wait()
    poll(lambda: not any(psutil.pid_exists(pid) for pid in left), "exit of every process", 10)


def test_a_template_that_cannot_start_leaves_the_replicas_to_spawns(tmp_path: Path):
    import asyncio

    from simulator.spawn import Interpreter, WorkerLaunch
    from simulator.template import Templates

    said: list[str] = []

    async def scenario() -> tuple[object, object]:
        templates = Templates(on_failure=said.append)
        launch = WorkerLaunch(tmp_path, Interpreter(python="/bin/false", name="base"))
        first = await templates.fork(launch)  # /bin/false exits at once
        again = await templates.fork(launch)
        await templates.close()
        return first, again

    assert asyncio.run(scenario()) == (None, None)
    assert said == [  # said once, not at each replica
        "the warm template of py_env base exited at start (code 1): its replicas are "
        "spawned one by one instead (slower to start, more memory)"
    ]


def test_the_staged_runtime_is_byte_compiled_even_without_bytecode_writing(tmp_path, monkeypatch):
    import importlib.util
    import subprocess
    import sys

    from peach_cli.envs import runtime

    monkeypatch.setenv("PEACH_ENV_CACHE", str(tmp_path / "cache"))
    folder = runtime.stage_runtime()
    for name in runtime.REPLICA_RUNTIME:
        assert Path(importlib.util.cache_from_source(str(folder / name))).is_file(), name
    # a worker that may not write bytecode reads it: no module compiled from its source
    probe = (
        "import sys, importlib.machinery as m\n"
        "compiled = []\n"
        "original = m.SourceFileLoader.source_to_code\n"
        "m.SourceFileLoader.source_to_code = lambda self, *a, **k: (compiled.append(self.name), original(self, *a, **k))[1]\n"
        "import peach_cli.runtime.replica_worker\n"
        "print([n for n in compiled if n.startswith('peach_cli')])\n"
    )
    env = {"PYTHONPATH": str(folder), "PYTHONDONTWRITEBYTECODE": "1", "PATH": os.environ["PATH"]}
    seen = subprocess.run(
        [sys.executable, "-P", "-c", probe], env=env, capture_output=True, text=True
    )
    assert seen.stdout.strip() == "[]", seen.stdout + seen.stderr
