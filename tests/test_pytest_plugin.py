"""The pytest plugin (entry point ``pytest11: peach``), run in a subprocess on a copy of
examples/quickstart: its case files collected as items (one passing, one failing with its
diff), and the ``peach`` fixture's ``ask`` and ``stream`` against the project's simulator."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET

import pytest
from cli_support import REPO, run_peach

PLUGIN = "peach_cli.testing.pytest_plugin"

FIXTURE_TESTS = """\
def test_ask(peach):
    reply = peach.ask("/recommend", item_id="apple")
    assert (reply.status, reply.result, reply.component) == (200, ["pear", "banana"], "main")
    assert reply.error_code is None and reply.replica and reply.elapsed_ms > 0
    assert reply.headers["x-peach-component"] == "main"


def test_ask_an_error(peach):
    reply = peach.ask("/story")
    assert (reply.status, reply.error_code) == (400, "stream_required")


def test_stream(peach):
    stream = peach.stream("/story", topic="fig", words=3)
    assert "".join(stream) == "fig-0 fig-1 fig-2 "
    assert len(stream.chunks) >= 1 and stream.cut is False
"""

FAILING_CASE = """\
- name: expects a plum
  url: /recommend
  params: {item_id: apple}
  expect: {result: [plum]}
"""


def plugin_args() -> list[str]:
    """``-p PLUGIN`` unless the installed package already registers it."""
    for entry in importlib.metadata.entry_points(group="pytest11"):
        if entry.value == PLUGIN:
            return []
    return ["-p", PLUGIN]


def test_the_entry_point_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"peach": PLUGIN}


def test_importing_the_plugin_loads_nothing_of_peach():
    code = (
        f"import sys, {PLUGIN}; "
        "loaded = [m for m in ('pydantic', 'httpx', 'yaml', 'simulator.session') if m in sys.modules]; "
        "print(loaded)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.slow
def test_pytest_collects_case_files_and_gives_the_peach_fixture(tmp_path):
    project = tmp_path / "quickstart"
    shutil.copytree(REPO / "examples" / "quickstart", project)
    (project / "test_fixture.py").write_text(FIXTURE_TESTS)
    (project / "tests" / "plum.peach-test.yaml").write_text(FAILING_CASE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-q", "-p", "no:cacheprovider",
         "--junitxml", str(tmp_path / "pytest.xml")],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "1 failed, 7 passed" in output  # 4 cases of the example, 3 tests of the fixture
    assert "FAILED tests/plum.peach-test.yaml::expects a plum" in output
    assert "tests/plum.peach-test.yaml:1: case 'expects a plum' failed" in output
    assert '-  "plum"' in output and '+  "pear",' in output
    # the same case has the same classname in pytest's JUnit report and in peach test's
    peach_test = run_peach("test", "tests/plum.peach-test.yaml", "--format", "junit", cwd=project)
    assert peach_test.returncode == 1, peach_test.stdout + peach_test.stderr

    def classname(xml: str) -> str | None:
        case = ET.fromstring(xml).find(".//testcase[@name='expects a plum']")
        assert case is not None, xml
        return case.get("classname")

    pytest_xml = (tmp_path / "pytest.xml").read_text()
    assert classname(pytest_xml) == classname(peach_test.stdout) == "tests.plum.peach-test.yaml"

    only = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *plugin_args(),
            "-q",
            "-p",
            "no:cacheprovider",
            "--peach-project",
            str(project),
            str(project / "tests"),
            "-k",
            "apple",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert only.returncode == 0, only.stdout + only.stderr
    assert "1 passed" in only.stdout
