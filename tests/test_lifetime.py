"""A `peach dev` a test starts through the fixtures dies with the pytest process that
started it, even when that process is killed: an inner pytest session starts one through
the ``peach_dev`` fixture, the test SIGKILLs that session, and nothing of the server (peach
dev, its keeper, its template, its replicas) is left running (``tests/lifetime_support.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TESTS
from projectkit import write_project
from waiting import assert_gone, poll

from peach_cli.runtime.tree import descendants

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CONF = """codops: lifetime
endpoints:
  hello:
    url: /hello
    components:
      main: {notebook: nb.ipynb, method: hello}
"""
CELLS = ["def hello():\n    return 'hello'\n"]

INNER = """
import json
import os
import threading
from pathlib import Path


def test_serves_until_killed(peach_dev):
    dev = peach_dev(Path(os.environ["LIFETIME_PROJECT"]))
    dev.wait_ready()
    Path(os.environ["LIFETIME_REPORT"]).write_text(json.dumps(dev.process.pid))
    threading.Event().wait(600)  # until the outer test kills this pytest
"""


@pytest.mark.slow
def test_a_peach_dev_started_by_a_fixture_dies_with_its_killed_pytest(tmp_path: Path) -> None:
    project = write_project(tmp_path / "lifetime", CONF, {"nb.ipynb": CELLS})
    (tmp_path / "test_inner.py").write_text(INNER)
    report = tmp_path / "report.json"
    path = [str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in path if p),
        LIFETIME_PROJECT=str(project),
        LIFETIME_REPORT=str(report),
    )
    command = [sys.executable, "-m", "pytest", "test_inner.py", "-p", "conftest", "-p", "no:xdist"]
    command += ["-p", "no:randomly", "-p", "no:cacheprovider", "-q"]
    command += [f"--basetemp={tmp_path / 'inner'}"]
    with (tmp_path / "inner.log").open("wb") as log:
        inner = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    tree: list[int] = []
    try:

        def started() -> str:
            assert inner.poll() is None, (tmp_path / "inner.log").read_text()
            return report.exists() and report.read_text()

        dev = json.loads(poll(started, "the inner test's peach dev", 90))
        tree = [dev, *descendants(dev)]
        assert len(tree) >= 3, tree  # peach dev, its keeper, the replica (and a template)
        os.kill(inner.pid, signal.SIGKILL)  # the pytest worker dies, no teardown
        inner.wait(timeout=30)
        for pid in tree:
            assert_gone(pid, 30)
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait(timeout=30)
        for pid in tree:  # what the test would otherwise leave running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
