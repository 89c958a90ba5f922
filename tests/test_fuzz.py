"""`peach fuzz` (SPEC §11) as a user runs it: planted bugs found and shrunk, nothing found in
a project without bugs, the same output for the same seed, the JSON format, the ready cases
failing under `peach test` as the fuzzer saw, a host given by --url, and one clear line when
Hypothesis is not installed.

The projects are tests/projects/fuzzing/: ``buggy`` (a division by a parameter, a primary
that raises for negative values behind a fallback, a slow path past ``timeout_s``, a stream
its generator cuts, a replica that exits) and ``clean`` (the same endpoints, fixed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from cli_support import REPO, Env, run_peach, run_peach_process

PROJECTS = Path(__file__).parent / "projects" / "fuzzing"
SPEC_KEYS = {"seed", "examples", "findings"}
FINDING_KEYS = {
    "endpoint", "url", "component", "kind", "method", "params", "status", "error", "case"
}  # fmt: skip


def _copy(name: str, tmp_path: Path) -> Path:
    """A copy of a fuzzing project (whatever a run leaves in it is seen)."""
    return Path(shutil.copytree(PROJECTS / name, tmp_path / name))


def _fuzz_json(project: Path, *args: str) -> tuple[int, dict]:
    done = run_peach("fuzz", *args, "--format", "json", cwd=project)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.fixture(scope="module")
def buggy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict]:
    project = _copy("buggy", tmp_path_factory.mktemp("fuzz"))
    code, found = _fuzz_json(project, "divide", "score", "slow", "spell", "--seed", "7")
    return project, code, found


@pytest.mark.slow
def test_each_planted_bug_is_found_shrunk_to_a_minimal_request(buggy_run) -> None:
    project, code, found = buggy_run
    assert code == 1
    by_endpoint = {f["endpoint"]: f for f in found["findings"]}
    assert sorted(by_endpoint) == ["divide", "score", "slow", "spell"], found
    assert len(found["findings"]) == 4

    divide = by_endpoint["divide"]
    assert (divide["kind"], divide["component"], divide["status"]) == ("method_error", "main", 500)
    assert divide["params"] == {"total": 0, "parts": 0}  # shrunk: the divisor 0, nothing else
    assert divide["error"].endswith("ZeroDivisionError: integer division or modulo by zero")

    score = by_endpoint["score"]  # the fallback answered: only the simulator's log shows it
    assert (score["kind"], score["component"], score["status"]) == ("method_error", "main", 200)
    assert score["params"] == {"value": -1}
    assert "ValueError: negative value: -1" in score["error"]

    slow = by_endpoint["slow"]
    assert (slow["kind"], slow["component"], slow["status"]) == ("timeout", "main", 504)
    assert slow["params"] == {"size": 101}  # the least size on the slow path

    spell = by_endpoint["spell"]
    assert (spell["kind"], spell["params"]) == ("method_error", {"word": ""})
    assert "ValueError: nothing to spell" in spell["error"]


@pytest.mark.slow
def test_the_json_is_the_format_of_spec_11(buggy_run) -> None:
    _project, _code, found = buggy_run
    assert set(found) == SPEC_KEYS
    assert (found["seed"], found["examples"]) == (7, 50)
    for finding in found["findings"]:
        assert set(finding) == FINDING_KEYS
        assert finding["kind"] in ("method_error", "timeout", "server_error", "replica_died")
        assert finding["method"] in ("GET", "POST")
        [case] = yaml.safe_load(finding["case"])
        assert case["url"] == finding["url"] and case["params"] == finding["params"]


@pytest.mark.slow
def test_the_ready_cases_fail_under_peach_test_as_the_fuzzer_saw(buggy_run) -> None:
    project, _code, found = buggy_run
    cases = [yaml.safe_load(f["case"])[0] for f in found["findings"]]
    (project / "found.peach-test.yaml").write_text(yaml.safe_dump(cases, sort_keys=False))
    done = run_peach("test", "--format", "json", cwd=project)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    results = {c["name"]: c for c in report["cases"]}
    for finding in found["findings"]:
        result = results[yaml.safe_load(finding["case"])[0]["name"]]
        assert result["passed"] is False, result
        assert result["status"] == finding["status"], result
    score = next(f for f in found["findings"] if f["endpoint"] == "score")
    assert results[yaml.safe_load(score["case"])[0]["name"]]["component"] == "fallback"


@pytest.mark.slow
def test_hypothesis_leaves_nothing_in_the_project(buggy_run) -> None:
    project, _code, _found = buggy_run
    assert not any(p.name == ".hypothesis" for p in project.rglob("*"))


@pytest.mark.slow
def test_a_replica_that_dies_is_a_finding(tmp_path: Path) -> None:
    project = _copy("buggy", tmp_path)
    code, found = _fuzz_json(project, "crash", "--seed", "7", "--examples", "20")
    assert code == 1
    [crash] = found["findings"]
    assert (crash["kind"], crash["component"], crash["params"]) == (
        "replica_died", "main", {"code": -1}
    )  # fmt: skip
    assert "exited with code 3" in crash["error"]


@pytest.mark.slow
def test_nothing_is_found_in_a_project_without_bugs(tmp_path: Path) -> None:
    project = _copy("clean", tmp_path)
    done = run_peach("fuzz", "--seed", "7", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing found in 3 endpoints" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_an_endpoint_without_a_healthy_replica_is_said_not_fuzzed(tmp_path: Path) -> None:
    from projectkit import write_project

    conf = (
        "codops: initfail\nendpoints:\n  hello:\n    url: /hello\n    components:\n"
        "      main: {notebook: notebooks/N.ipynb, init: boom, method: hello}\n"
    )
    cells = [
        'def boom():\n    raise RuntimeError("no model file")\n',
        'def hello(model, name: str = "x"):\n    return name\n',
    ]
    project = write_project(tmp_path / "initfail", conf, {"notebooks/N.ipynb": cells})
    done = run_peach("fuzz", "--seed", "1", "--examples", "5", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr  # nothing found: not a finding
    assert "each answered 503 unavailable" in done.stderr
    assert "RuntimeError: no model file" in done.stderr
    assert "1 endpoint not fuzzed: no healthy replica" in done.stderr.splitlines()[-1]


@pytest.mark.slow
def test_the_same_seed_gives_the_same_output(tmp_path: Path) -> None:
    project = _copy("buggy", tmp_path)
    runs = [run_peach("fuzz", "divide", "score", "--seed", "11", cwd=project) for _ in range(2)]
    assert [r.returncode for r in runs] == [1, 1], runs[0].stdout + runs[0].stderr
    assert runs[0].stdout == runs[1].stdout  # the findings, their requests and cases
    assert "divide: method_error in main (ZeroDivisionError)" in runs[0].stdout
    assert "params: {total: 0, parts: 0}" in runs[0].stdout
    progress = [r.stderr.splitlines()[:-1] for r in runs]  # the last line says how long
    assert progress[0] == progress[1]
    assert "seed 11" in runs[0].stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_url_is_fuzzed_for_what_its_answers_show(tmp_path: Path) -> None:
    """Against a running peach dev the answers are all there is: the division's 500 shows,
    the error the fallback covered does not."""
    from tests.conftest import start_peach_dev

    project = _copy("buggy", tmp_path)
    dev = start_peach_dev(project, tmp_path / "dev.log")
    try:
        dev.wait_ready()
        code, found = _fuzz_json(project, "divide", "score", "--url", dev.url, "--seed", "7")
    finally:
        dev.stop()
    assert code == 1
    [divide] = found["findings"]
    assert (divide["endpoint"], divide["kind"], divide["params"]) == (
        "divide", "method_error", {"total": 0, "parts": 0}
    )  # fmt: skip


@pytest.mark.slow
def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    project = _copy("clean", tmp_path)
    for args, says in [
        (["nowhere"], "no endpoint 'nowhere' in the project"),
        (["--examples", "0"], "--examples must be 1 or more"),
        (["--format", "xml"], "unknown --format 'xml'"),
    ]:
        done = run_peach("fuzz", *args, cwd=project)
        assert done.returncode == 2, (args, done.stdout + done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_without_hypothesis_one_line_says_what_to_install(tmp_path: Path) -> None:
    """A real `peach` process in which Hypothesis cannot be imported (a shim first on
    PYTHONPATH raises ImportError as a missing package does)."""
    shim = tmp_path / "shim" / "hypothesis"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'hypothesis\'", name="hypothesis")\n'
    )
    project = _copy("clean", tmp_path)
    # real processes: the shim first on their PYTHONPATH hides Hypothesis from their imports
    env: Env = {"PYTHONPATH": f"{shim.parent}:{REPO}"}
    done = run_peach_process("fuzz", str(project), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: peach fuzz needs Hypothesis, which is not installed: pip install 'peach-cli[fuzz]'"
    ]
    # the rest of peach works without it
    other = run_peach_process("validate", str(project), env=env)
    assert other.returncode == 0, other.stdout + other.stderr
