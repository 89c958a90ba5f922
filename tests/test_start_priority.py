"""A replica's process starts at the lowest CPU priority and serves at the node's
(``peach_cli.deploy.start_priority``, issue 48): the runtime package's ``sitecustomize``
as Python runs it in a new process, as Ray's workers get it on ``PYTHONPATH``. On the real
cluster: ``tests/test_rollout_cluster.py``."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from peach_cli.deploy.config import SERVING_ENV_VARS
from peach_cli.deploy.packaging import runtime_package
from peach_cli.deploy.start_priority import SERVING_ENV, START_ENV, START_NICE, may_raise_from

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's"
)

PROBE = """
import json, os, threading
from peach_cli.runtime.linux import thread_ids

def nices():
    return sorted({os.getpriority(os.PRIO_PROCESS, tid) for tid in thread_ids()})

started = threading.Event()
done = threading.Event()
worker = threading.Thread(target=lambda: (started.set(), done.wait()))
worker.start()  # a thread started while low, as Ray's and the replica's are
started.wait()
seen = {"start": nices(), "env": {k: os.environ.get(k) for k in (%r, %r)}}
from peach_cli.deploy.start_priority import serve_at_full_priority
seen["raised"] = serve_at_full_priority()
seen["serving"] = nices()
done.set()
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """peach's runtime package as Ray unpacks it for ``py_modules``."""
    folder = tmp_path_factory.mktemp("runtime")
    with zipfile.ZipFile(io.BytesIO(runtime_package().data)) as archive:
        archive.extractall(folder)
    return folder


def probe(runtime, env: dict[str, str], prefix: tuple[str, ...] = ()) -> dict:
    environment = {k: v for k, v in os.environ.items() if k not in (START_ENV, SERVING_ENV)}
    environment.update(env, PYTHONPATH=str(runtime))
    result = subprocess.run(
        [*prefix, sys.executable, "-c", PROBE % (START_ENV, SERVING_ENV)],
        capture_output=True, text=True, env=environment, cwd=runtime, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_application_starts_its_replicas_low():
    assert SERVING_ENV_VARS[START_ENV] == str(START_NICE) == "19"
    assert SERVING_ENV_VARS["RAY_worker_niceness"] == "0"


def test_a_process_with_the_runtime_on_its_path_starts_low_and_serves_at_its_priority(runtime):
    here = os.getpriority(os.PRIO_PROCESS, 0)
    if here >= START_NICE or not may_raise_from(here):
        pytest.skip("this process may not raise its priority back")
    seen = probe(runtime, {START_ENV: "19"})
    # every thread low from the start, the variable gone (a child of it is not lowered)
    assert seen["start"] == [19]
    assert seen["env"] == {START_ENV: None, SERVING_ENV: str(here)}
    # back at the priority it was started at, every thread (the one started while low too)
    assert seen["raised"] is True
    assert seen["serving"] == [here]


def test_without_the_variable_nothing_changes(runtime):
    here = os.getpriority(os.PRIO_PROCESS, 0)
    seen = probe(runtime, {})
    assert seen["start"] == seen["serving"] == [here]
    assert seen["raised"] is False


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_where_the_priority_may_not_be_raised_back_the_process_is_not_lowered(runtime):
    """Without CAP_SYS_NICE (a non-root node, a container without it), a lowered process
    would serve at 19 for good: it starts and serves at the node's priority instead."""
    here = os.getpriority(os.PRIO_PROCESS, 0)
    drop = ("setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice")
    seen = probe(runtime, {START_ENV: "19"}, drop)
    assert seen["start"] == seen["serving"] == [here]
    assert seen["env"] == {START_ENV: None, SERVING_ENV: None}
    assert seen["raised"] is False


def test_a_sitecustomize_further_on_the_path_still_runs(runtime, tmp_path):
    """The node's own ``sitecustomize`` (a distribution's) is shadowed, not lost."""
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    environment = dict(os.environ, PYTHONPATH=f"{runtime}{os.pathsep}{theirs}")
    environment[START_ENV] = "19"
    result = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('THEIRS_RAN'))"],
        capture_output=True, text=True, env=environment, cwd=runtime, timeout=60,
    )  # fmt: skip
    assert result.stdout.strip() == "1", result.stderr
