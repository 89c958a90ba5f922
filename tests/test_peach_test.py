"""`peach test`: case files run against a real `peach dev` (tests/projects/streams, started
once) and against the simulator `peach test` starts itself (examples/quickstart).

Every expect key passes once and fails once with its diff; JUnit XML is parsed back; `-k`
selects; no case is exit 2; a case file with an unknown key is an error at its line.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from cli_support import REPO, run_peach
from conftest import PROJECTS, start_peach_dev

STREAMS = PROJECTS / "streams"

PASSING = """\
- name: answer equal
  url: /answer
  params: {query: hi, size: 2}
  expect:
    status: 200
    component: main
    result: {query: hi, items: [0, 1]}
    max_ms: 5000
- name: answer contains
  url: /answer
  method: POST
  params: {query: hi}
  expect:
    result_contains: {items: [0, 2]}
- name: error code
  url: /fails
  expect: {status: 500, error_code: method_error}
- name: stream text
  url: /sse
  stream: true
  expect: {text_contains: "Hi there", chunks_min: 3, cut: false}
- name: stream cut
  url: /breaks
  stream: true
  params: {after: 2}
  expect: {text_contains: "line 1", cut: true}
"""

# One failing case per expect key: (name, case, the key, a line of its diff)
FAILING = [
    ("bad status", "url: /fails\n  expect: {status: 200}", "status", "-200"),
    ("bad component", "url: /answer\n  expect: {component: fallback}", "component", '-"fallback"'),
    (
        "bad result",
        "url: /answer\n  params: {size: 1}\n  expect: {result: {query: '', items: [7]}}",
        "result",
        "-    7",
    ),
    (
        "bad contains",
        "url: /answer\n  expect: {result_contains: {items: [2, 0]}}",
        "result_contains",
        "-    0",
    ),
    (
        "bad error",
        "url: /fails\n  expect: {status: 500, error_code: nope}",
        "error_code",
        '-"nope"',
    ),
    (
        "bad text",
        "url: /plain\n  stream: true\n  expect: {text_contains: omega}",
        "text_contains",
        '-"omega"',
    ),
    (
        "bad chunks",
        "url: /plain\n  stream: true\n  expect: {chunks_min: 50}",
        "chunks_min",
        "-50",
    ),
    ("bad cut", "url: /plain\n  stream: true\n  expect: {cut: true}", "cut", "-true"),
    (
        "bad time",
        "url: /count\n  stream: true\n  params: {n: 2, delay: 0.3}\n  expect: {max_ms: 0.01}",
        "max_ms",
        "-0.01",
    ),
]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("peach-test-dev") / "dev.log"
    server = start_peach_dev(STREAMS, log_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cases")
    (folder / "passing.peach-test.yaml").write_text(PASSING)
    failing = "".join(f"- name: {name}\n  {body}\n" for name, body, _, _ in FAILING)
    (folder / "failing.peach-test.yaml").write_text(failing)
    return folder


def peach_test(*args: str, cwd: Path = REPO):
    return run_peach("test", *args, cwd=cwd)


@pytest.mark.slow
def test_every_expect_key_passes_against_dev(dev, cases):
    result = peach_test(str(cases / "passing.peach-test.yaml"), "--url", dev.url)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.strip() for line in result.stdout.splitlines() if "✓" in line]
    assert len(lines) == 5, result.stdout
    assert all(line.endswith(" ms") for line in lines)
    assert "✓ 5 cases passed" in result.stderr


@pytest.mark.slow
def test_each_expect_key_fails_with_its_diff(dev, cases):
    result = peach_test(
        str(cases / "failing.peach-test.yaml"), "--url", dev.url, "--format", "json"
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["failed"] == len(FAILING) and report["passed"] == 0
    by_name = {case["name"]: case for case in report["cases"]}
    for name, _, key, diff_line in FAILING:
        failures = by_name[name]["failures"]
        assert [f["key"] for f in failures] == [key], (name, failures)
        assert diff_line in failures[0]["diff"], (name, failures[0]["diff"])
        assert failures[0]["diff"][:2] == ["--- expected", "+++ observed"]

    text = peach_test(str(cases / "failing.peach-test.yaml"), "--url", dev.url, "-k", "result")
    assert text.returncode == 1
    assert "failing.peach-test.yaml:" in text.stdout and ": bad result  " in text.stdout
    assert "-      7\n" not in text.stdout
    assert "the result differs" in text.stdout
    assert "-    7" in text.stdout and "+    0" in text.stdout  # the JSON-aware diff
    assert "✗ 1 failed, 0 passed" in text.stderr


@pytest.mark.slow
def test_junit_is_parsed_back_one_suite_per_file(dev, cases):
    result = peach_test(
        "failing.peach-test.yaml",
        "passing.peach-test.yaml",
        "--url",
        dev.url,
        "--format",
        "junit",
        cwd=cases,
    )
    assert result.returncode == 1
    root = ET.fromstring(result.stdout)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["failing.peach-test.yaml", "passing.peach-test.yaml"]
    failing, passing = suites
    assert failing.get("tests") == str(len(FAILING)) and failing.get("failures") == str(
        len(FAILING)
    )
    assert passing.get("tests") == "5" and passing.get("failures") == "0"
    bad_status = failing.find("testcase[@name='bad status']")
    assert bad_status is not None
    failure = bad_status.find("failure")
    assert failure is not None and "status 500, expected 200" in failure.get("message", "")
    assert "-200" in (failure.text or "")
    assert all(case.find("failure") is None for case in passing.findall("testcase"))
    assert float(root.get("time", "0")) > 0


@pytest.mark.slow
def test_k_selects_by_name(dev, cases):
    result = peach_test(
        str(cases / "passing.peach-test.yaml"), "--url", dev.url, "-k", "stream", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    assert [c["name"] for c in json.loads(result.stdout)["cases"]] == ["stream text", "stream cut"]


@pytest.mark.slow
def test_no_case_found_is_exit_2(dev, cases, tmp_path):
    nothing = peach_test(str(cases / "passing.peach-test.yaml"), "--url", dev.url, "-k", "zzz")
    assert nothing.returncode == 2
    assert "no case matches -k 'zzz'" in nothing.stderr
    assert "ending in .peach-test.yaml" not in nothing.stderr  # cases there are: none match
    names = [
        case["name"] for case in yaml.safe_load((cases / "passing.peach-test.yaml").read_text())
    ]
    assert f"{len(names)} cases in 1 file: {names[0]!r}" in nothing.stderr
    shutil.copytree(REPO / "examples" / "quickstart", tmp_path / "q", ignore=_no_cases)
    empty = peach_test(str(tmp_path / "q"))
    assert empty.returncode == 2
    assert "no case found in" in empty.stderr
    assert "Traceback" not in empty.stderr


def _no_cases(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".peach-test.yaml")]


@pytest.mark.slow
def test_unknown_key_is_an_error_at_its_line(tmp_path):
    shutil.copytree(REPO / "examples" / "quickstart", tmp_path / "q", ignore=_no_cases)
    (tmp_path / "q" / "tests").mkdir(exist_ok=True)
    (tmp_path / "q" / "tests" / "x.peach-test.yaml").write_text(
        "- name: a\n  url: /recommend\n  expect:\n    stauts: 200\n"
    )
    for command in (["test"], ["validate"]):
        result = run_peach(*command, str(tmp_path / "q"))
        assert result.returncode == (2 if command == ["test"] else 1), result.stderr
        output = result.stdout + result.stderr
        assert "tests/x.peach-test.yaml:4:5: error PC101 unknown key 'stauts'" in output
        assert "did you mean 'status'?" in output
        assert "Traceback" not in output


@pytest.mark.slow
def test_peach_test_starts_its_own_simulator(tmp_path):
    project = tmp_path / "q"
    shutil.copytree(REPO / "examples" / "quickstart", project, ignore=_no_cases)
    (project / "story.peach-test.yaml").write_text(
        "- name: a story\n  url: /story\n  stream: true\n  params: {topic: fig, words: 2}\n"
        "  expect: {text_contains: fig-1, chunks_min: 2}\n"
        "- name: apple\n  url: /recommend\n  params: {item_id: apple}\n"
        "  expect: {result: [pear, banana]}\n"
    )
    result = peach_test(str(project))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ a story" in result.stdout and "✓ apple" in result.stdout
    assert "✓ 2 cases passed" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart", "recommender", "assistant", "decorated"])
def test_every_example_has_cases_that_pass(name):
    result = peach_test(f"examples/{name}", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] >= 2 and report["failed"] == 0
    if name != "quickstart":
        assert f"peach test examples/{name}" in (REPO / "examples" / name / "README.md").read_text()


@pytest.mark.slow
def test_a_project_with_errors_is_not_tested_exit_2(tmp_path):
    project = tmp_path / "q"
    shutil.copytree(REPO / "examples" / "quickstart", project)
    conf = project / "peach.yaml"
    conf.write_text(conf.read_text().replace("method: recommend ", "methdo: recommend "))
    result = peach_test(str(project))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown key 'methdo'" in result.stdout + result.stderr
    assert "not testing" in result.stdout + result.stderr


def test_peach_schema_tests_is_the_case_file_schema():
    result = run_peach("schema", "--tests")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["type"] == "array" and schema["items"] == {"$ref": "#/$defs/Case"}
    case = schema["$defs"]["Case"]
    assert case["additionalProperties"] is False and case["required"] == ["name", "url"]
    assert set(case["properties"]) == {"name", "url", "method", "params", "stream", "expect"}
    expect = schema["$defs"]["Expect"]
    assert expect["additionalProperties"] is False
    assert set(expect["properties"]) == {
        "status", "component", "result", "result_contains", "error_code",
        "text_contains", "chunks_min", "cut", "max_ms",
    }  # fmt: skip


@pytest.mark.slow
def test_case_files_in_dot_ignored_and_venv_folders_are_not_read(tmp_path):
    project = tmp_path / "q"
    shutil.copytree(REPO / "examples" / "quickstart", project, ignore=_no_cases)
    broken = "- name: x\n  url: /nowhere\n"
    for folder in (".hidden", "ignored", "venv", "node_modules"):
        (project / folder).mkdir()
        (project / folder / "t.peach-test.yaml").write_text(broken)
    (project / "venv" / "pyvenv.cfg").write_text("")
    (project / ".gitignore").write_text("ignored/\n")
    (project / "loop.ipynb").symlink_to("loop.ipynb")  # never stat'ed: not a case file's name
    assert run_peach("validate", str(project)).returncode == 0
    (project / "seen.peach-test.yaml").write_text(broken)
    seen = run_peach("validate", str(project))
    assert seen.returncode == 1
    assert "seen.peach-test.yaml:2:8: error PC803" in seen.stdout
    assert seen.stdout.count("PC803") == 1


def test_a_failing_case_names_its_file_and_line_in_text_json_and_junit(dev, cases):
    failing = cases / "failing.peach-test.yaml"
    line = failing.read_text().splitlines().index("- name: bad result") + 1
    place = f"failing.peach-test.yaml:{line}"
    text = peach_test("failing.peach-test.yaml", "--url", dev.url, "-k", "result", cwd=cases)
    assert text.returncode == 1, text.stdout + text.stderr
    assert f"  ✗ {place}: bad result  " in text.stdout, text.stdout
    passing = peach_test("passing.peach-test.yaml", "--url", dev.url, "-k", "equal", cwd=cases)
    assert "  ✓ answer equal  " in passing.stdout, passing.stdout  # a pass says no more

    json_run = peach_test(
        "failing.peach-test.yaml", "--url", dev.url, "-k", "result", "--format", "json", cwd=cases
    )
    (case,) = json.loads(json_run.stdout)["cases"]
    assert (case["file"], case["line"]) == ("failing.peach-test.yaml", line)

    junit = peach_test(
        "failing.peach-test.yaml", "--url", dev.url, "-k", "result", "--format", "junit", cwd=cases
    )
    testcase = ET.fromstring(junit.stdout).find("testsuite/testcase[@name='bad result']")
    assert testcase is not None
    suite = ET.fromstring(junit.stdout).find("testsuite")
    assert suite is not None and suite.get("file") == "failing.peach-test.yaml"
    assert testcase.get("classname") == "failing.peach-test.yaml"  # as pytest's report names it
    failure = testcase.find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith(f"{place}: bad result: the result differs")
    assert (failure.text or "").startswith(f"{place}: bad result\n")


def test_a_failing_case_of_a_project_names_its_project_relative_place(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(STREAMS, project)
    (project / "tests").mkdir()
    (project / "tests" / "greet.peach-test.yaml").write_text(
        "- name: answers\n  url: /answer\n\n- name: greets in French\n  url: /answer\n"
        "  expect: {status: 418}\n"
    )
    result = run_peach("test", str(project))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "  ✗ tests/greet.peach-test.yaml:4: greets in French  " in result.stdout


JUNIT_SCHEMA = Path(__file__).resolve().parent / "data" / "junit-10.xsd"
"""Jenkins xUnit's JUnit schema (its source is named in the file)."""


def test_junit_validates_against_jenkins_xunit_schema_and_a_case_without_answer_is_an_error(
    dev, cases, tmp_path
):
    from lxml import etree

    schema = etree.XMLSchema(etree.parse(str(JUNIT_SCHEMA)))
    result = peach_test(
        "failing.peach-test.yaml", "passing.peach-test.yaml", "--url", dev.url,
        "--format", "junit", cwd=cases,
    )  # fmt: skip
    document = etree.fromstring(result.stdout.encode())
    assert schema.validate(document), schema.error_log
    # a refused connection: no answer came, an <error> counted in errors, not a mismatch
    refused = peach_test(
        "passing.peach-test.yaml", "--url", "http://127.0.0.1:9", "-k", "equal",
        "--format", "junit", cwd=cases,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    document = etree.fromstring(refused.stdout.encode())
    assert schema.validate(document), schema.error_log
    assert document.get("errors") == "1" and document.get("failures") == "0"
    (testcase,) = document.iter("testcase")
    (error,) = testcase.iter("error")
    assert "no answer" in error.get("message", "") and not list(testcase.iter("failure"))
