"""`peach validate` and `peach schema` as a user runs them: a real process, exit codes, output."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cli_support import run_peach
from projectkit import BASE_CELLS, write_project

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"
GOOD = "codops: shop\nendpoints:\n  e:\n    url: /e\n    components:\n      main: {notebook: nb.ipynb, method: ask}\n"


def peach(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_peach(*args, cwd=cwd, columns=80)


@pytest.mark.slow
def test_clean_project_exits_0_with_a_summary():
    result = peach("validate", str(QUICKSTART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid: 2 endpoints" in result.stdout.splitlines()[-1]


@pytest.mark.slow
def test_current_folder_is_the_default(tmp_path):
    write_project(tmp_path, GOOD, {"nb.ipynb": BASE_CELLS})
    result = peach("validate", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_errors_exit_1_one_line_each_with_excerpt_caret_and_hint(tmp_path):
    conf = (
        GOOD.replace("method: ask", "methdo: ask")
        + "  f:\n    url: /f\n    py_env: lmm\n    components: {main: {notebook: nb.ipynb, method: ask}}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS})
    result = peach("validate", str(tmp_path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert (
        "peach.yaml:6:34: error PC101 unknown key 'methdo' in endpoints.e.components.main" in lines
    )
    index = lines.index(
        "peach.yaml:6:34: error PC101 unknown key 'methdo' in endpoints.e.components.main"
    )
    assert lines[index + 1].endswith("main: {notebook: nb.ipynb, methdo: ask}")
    assert lines[index + 2].endswith("|" + " " * 34 + "^^^^^^")
    assert lines[index + 3] == "  hint: did you mean 'method'?"
    assert any(
        line.startswith("peach.yaml:6:7: error PC102 missing required key 'method'")
        for line in lines
    )
    assert any("error PC114" in line for line in lines)
    assert lines[-1].startswith("✗ 3 errors in ")
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_json_format_lists_every_field(tmp_path):
    cells = BASE_CELLS[:-1]  # without the cell that does not parse
    write_project(tmp_path, GOOD.replace("method: ask", "method: aks"), {"nb.ipynb": cells})
    result = peach("validate", str(tmp_path), "--format", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data == [
        {
            "file": "peach.yaml",
            "line": 6,
            "column": 42,
            "cell": None,
            "severity": "error",
            "code": "PC204",
            "message": "method 'aks' is not defined at the top level of nb.ipynb",
            "hint": "did you mean 'ask'?",
        }
    ]


@pytest.mark.slow
def test_json_of_a_clean_project_is_an_empty_list(tmp_path):
    write_project(tmp_path, GOOD, {"nb.ipynb": BASE_CELLS})
    result = peach("validate", str(tmp_path), "--format", "json")
    assert (result.returncode, json.loads(result.stdout)) == (0, [])


@pytest.mark.slow
def test_warnings_pass_unless_strict(tmp_path):
    write_project(
        tmp_path, GOOD.replace("method: ask", "method: with_magic"), {"nb.ipynb": BASE_CELLS}
    )
    relaxed = peach("validate", str(tmp_path))
    strict = peach("validate", str(tmp_path), "--strict")
    assert relaxed.returncode == 0 and "warning PC304" in relaxed.stdout
    assert strict.returncode == 1 and "--strict" in strict.stdout.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["validate", "/nonexistent/project"], "does not exist"),
        (["validate", "{tmp}"], "not a peach project"),
        (["validate", str(QUICKSTART), "--format", "xml"], "unknown --format"),
        (["validate", str(QUICKSTART), "--no-such-option"], "No such option"),
    ],
)
def test_usage_errors_exit_2_without_traceback(tmp_path, args, message):
    result = peach(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "content",
    [
        b"\x00\x01\x02\xff\xfe binary",
        b"- a list\n- of things\n",
        b"codops: [unclosed\n",
        b"\t\x0b\x0c",
    ],
    ids=["binary", "list", "syntax", "control"],
)
def test_bad_conf_files_are_diagnostics_not_tracebacks(tmp_path, content):
    (tmp_path / "peach.yaml").write_bytes(content)
    result = peach("validate", str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.startswith("peach.yaml:")


@pytest.mark.slow
def test_a_50_megabyte_conf_is_refused_quickly(tmp_path):
    with open(tmp_path / "peach.yaml", "w") as f:
        f.write("codops: x\n")
        f.write(("# " + "x" * 1022 + "\n") * 50 * 1024)
    result = peach("validate", str(tmp_path))
    assert result.returncode == 1
    assert "PC002" in result.stdout and "too large" in result.stdout


@pytest.mark.slow
def test_a_single_yaml_file_is_a_project(tmp_path):
    write_project(tmp_path, None, {"nb.ipynb": BASE_CELLS}, {"other.yaml": GOOD})
    assert peach("validate", str(tmp_path / "other.yaml")).returncode == 0


@pytest.mark.slow
def test_schema_is_json_schema_of_the_conf():
    result = peach("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert "required" not in schema  # codops is required once per project, not per file
    assert schema["additionalProperties"] is False
    assert {
        "codops",
        "timeout_s",
        "py_environments",
        "endpoints",
        "decorator_endpoints",
        "tasks",
        "env_vars",
        "secrets",
    } == set(schema["properties"])
    component = schema["$defs"]["Component"]
    assert component["additionalProperties"] is False
    assert set(component["required"]) == {"notebook", "method"}
    for model in (schema, component, schema["$defs"]["Task"]):  # SPEC §10, on all three
        names = model["properties"]["env_vars"]["propertyNames"]["pattern"]
        assert model["properties"]["secrets"]["items"]["pattern"] == names
        assert re.match(names, "OPENAI_API_KEY") and not re.match(names, "2-BAD")


@pytest.mark.slow
def test_schema_accepts_every_file_of_a_split_project_and_flags_mistakes(tmp_path):
    """What yaml-language-server does with the schema: check each conf file on its own."""
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    validator = jsonschema.Draft202012Validator(json.loads(peach("schema").stdout))
    files = [
        *ROOT.glob("examples/*/peach.yaml"),
        *ROOT.glob("tests/projects/*/peach.yaml"),
    ]
    files.remove(ROOT / "tests/projects/typos/peach.yaml")  # its mistakes are the point
    write_project(
        tmp_path,
        "codops: shop\n",
        None,
        {"peach.conf/endpoints.yaml": GOOD.replace("codops: shop\n", "")},
    )
    files += [tmp_path / "peach.yaml", tmp_path / "peach.conf" / "endpoints.yaml"]
    for path in files:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], path
    typo = yaml.safe_load(GOOD.replace("method:", "methdo:"))
    assert any("methdo" in e.message for e in validator.iter_errors(typo))
    ab = yaml.safe_load((ROOT / "examples/recommender/peach.yaml").read_text())
    ab["endpoints"]["recommend"]["ab"]["by"] = "users"
    assert any("users" in e.message for e in validator.iter_errors(ab))


@pytest.mark.slow
def test_a_single_file_of_peach_conf_resolves_notebooks_from_the_project(tmp_path):
    write_project(tmp_path, None, {"nb.ipynb": BASE_CELLS}, {"peach.conf/shop.yaml": GOOD})
    result = peach("validate", str(tmp_path / "peach.conf" / "shop.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    broken = GOOD.replace("nb.ipynb", "nope.ipynb")
    (tmp_path / "peach.conf" / "shop.yaml").write_text(broken)
    result = peach("validate", str(tmp_path / "peach.conf" / "shop.yaml"))
    assert result.stdout.startswith("peach.conf/shop.yaml:6:")


@pytest.mark.slow
def test_help_documents_the_exit_codes_in_one_paragraph():
    result = run_peach("validate", "--help", columns=200)
    assert result.returncode == 0
    [line] = [line for line in result.stdout.splitlines() if "Exit codes" in line]
    assert "0 no error" in line and "1 errors, or warnings with --strict" in line
    assert "2 bad command line" in line  # wrapped by the terminal's width, not the source's


def test_the_caret_underlines_a_path_in_a_conf_and_a_name_in_code():
    from peach_cli.project.diagnostics import Diagnostic, Position
    from peach_cli.views.console import excerpt_lines

    def caret(position: Position) -> str:
        return excerpt_lines(Diagnostic("PC307", "m", position))[1].split("| ", 1)[1]

    code = "    return pd.DataFrame([q])"
    assert caret(Position("nb.ipynb", 2, 12, 3, code)) == " " * 11 + "^^"
    conf = "      main: {notebook: notebooks/E.ipynb, method: ask}"
    assert caret(Position("peach.yaml", 6, 24, None, conf)) == " " * 23 + "^" * 17


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "doing"),
    [
        (("dev",), ": not serving"),
        (("task", "run", "t"), ": not running"),
        (("deploy", "--dry-run"), ": not deploying"),
        (("task", "list"), ""),
        (("env", "list"), ""),
    ],
)
def test_every_command_reports_a_broken_project_as_validate_does(tmp_path, command, doing):
    """The diagnostics on stdout, then one summary line: the same words for every command,
    no second error line on stderr, exit 1."""
    conf = GOOD.replace("codops: shop", "codops: shop\nbogus: 1")
    conf += "tasks:\n  t: {notebook: nb.ipynb, method: ask}\n"
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS})
    result = peach(*command, str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "peach.yaml:2:1: error PC101 unknown key 'bogus' in the top level"
    assert lines[-1] == f"✗ 1 error in {tmp_path}{doing}"
    assert result.stderr == ""


def init_shop(tmp_path: Path) -> Path:
    assert peach("init", "shop", "--streaming", cwd=tmp_path).returncode == 0
    return tmp_path / "shop"


def edit_notebook(project: Path, old: str, new: str) -> None:
    path = project / "notebooks" / "Endpoints.ipynb"
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if old in source:
            cell["source"] = source.replace(old, new, 1).splitlines(True)
            path.write_text(json.dumps(notebook))
            return
    raise AssertionError(f"{old!r} is in no cell")


def test_a_syntax_error_in_a_notebook_shows_its_load_errors_and_no_case_cascade(tmp_path):
    project = init_shop(tmp_path)
    edit_notebook(project, 'lang: str = "en"):', 'lang: str = "en")')  # the colon goes
    result = peach("validate", str(project))
    assert result.returncode == 1, result.stdout
    codes = re.findall(r" error (PC\d+) ", result.stdout)
    assert codes == ["PC206", "PC204"], result.stdout
    assert "cell 3 is not valid Python: expected ':'" in result.stdout
    assert "not an endpoint" not in result.stdout and "endpoints: /story" not in result.stdout
    assert "2 errors" in result.stdout.splitlines()[-1]


def test_a_case_of_an_endpoint_that_fails_to_validate_is_no_cascade_but_a_wrong_url_is(tmp_path):
    project = init_shop(tmp_path)
    (project / "peach.yaml").write_text(
        (project / "peach.yaml").read_text().replace("method: greet ", "method: gret ")
    )
    cases = project / "tests" / "greet.peach-test.yaml"
    cases.write_text(cases.read_text() + "\n- name: a typo\n  url: /gret\n")
    result = peach("validate", str(project))
    assert result.returncode == 1, result.stdout
    assert re.findall(r" error (PC\d+) ", result.stdout) == ["PC204", "PC803"], result.stdout
    assert "case 'a typo': /gret is not an endpoint" in " ".join(result.stdout.split())
