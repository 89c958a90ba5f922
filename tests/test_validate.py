"""Every diagnostic code of `peach validate`, each at its file, line and column (or cell)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from projectkit import BASE_CELLS, diagnose, notebook_json, write_project

from peach_cli.checks.build import build_plan
from peach_cli.project.diagnostics import CODES

ROOT = Path(__file__).resolve().parent.parent
NB = {"nb.ipynb": BASE_CELLS}


def endpoint(name: str = "e", url: str = "/e", **main: object) -> str:
    fields = {"notebook": "nb.ipynb", "method": "ask", **main}
    body = ", ".join(f"{k}: {json.dumps(v)}" for k, v in fields.items())
    return f"  {name}:\n    url: {url}\n    components:\n      main: {{{body}}}\n"


HEAD = "codops: shop\nendpoints:\n"


def ab_endpoint(ab: str, components: tuple[str, ...] = ("main", "b", "fallback")) -> str:
    """Endpoint e at /e with ``ab: <ab>`` on line 5 and one component a line from line 7."""
    lines = "".join(f"      {c}: {{notebook: nb.ipynb, method: ask}}\n" for c in components)
    return HEAD + f"  e:\n    url: /e\n    ab: {ab}\n    components:\n" + lines


# (code, peach.yaml, other files, expected position, expected text in message or hint)
CASES = [
    (
        "PC310",
        HEAD
        + endpoint(notebook="trig.ipynb")
        + "tasks:\n  retrain: {notebook: trig.ipynb, method: retrain}\n",
        {
            "trig.ipynb": notebook_json(
                [
                    "from pipe_algorithms_lib.task_helpers import trigger_task_with_event\n\n"
                    "def ask(q=''):\n    return trigger_task_with_event('retrian', {'q': q})\n",
                    "def retrain(payload):\n    return payload\n",
                ]
            )
        },
        "trig.ipynb:cell 1:line 4",
        "did you mean 'retrain'?",
    ),
    (
        "PC308",
        HEAD + endpoint(notebook="imp.ipynb"),
        {"imp.ipynb": notebook_json(["import json, yaml\n\ndef ask(q=''):\n    return q\n"])},
        "imp.ipynb:cell 1:line 1",
        "add 'pyyaml' to py_environments.base.dependencies",
    ),
    (
        "PC209",
        HEAD + endpoint(notebook="mg.ipynb", method="f"),
        {
            "mg.ipynb": notebook_json(
                ["def f(q=''):\n    return q\n", "d = 2\ne = 3\n", "f = d * e\n"]
            )
        },
        "mg.ipynb:cell 3:line 1",
        "cell 3 rebinds 'f' (`f = d * e`)",
    ),
    ("PC001", "codops: shop\nendpoints: a: b\n", {}, "peach.yaml:2:13", "YAML syntax"),
    (
        "PC801",
        HEAD + endpoint(),
        {"t.peach-test.yaml": "name: a\nurl: /e\n"},
        "t.peach-test.yaml:1:1",
        "must be a list of cases",
    ),
    (
        "PC802",
        HEAD + endpoint(),
        {"tests/t.peach-test.yaml": "- {name: a, url: /e}\n- name: a\n  url: /e\n"},
        "tests/t.peach-test.yaml:2:9",
        "first at line 1",
    ),
    (
        "PC803",
        HEAD + endpoint(),
        {"t.peach-test.yaml": "- name: a\n  url: /ee\n"},
        "t.peach-test.yaml:2:8",
        "did you mean '/e'?",
    ),
    (
        "PC804",
        HEAD + endpoint(url="/s", method="streamer"),
        {"t.peach-test.yaml": "- name: a\n  url: /s\n  expect: {text_contains: '0'}\n"},
        "t.peach-test.yaml:1:3",
        "add `stream: true` to the case",
    ),
    ("PC002", b"\x89PNG\r\n\x1a\n\x00\x00garbage\xff", {}, "peach.yaml:1:1", "not UTF-8"),
    ("PC003", "- codops: shop\n", {}, "peach.yaml:1:1", "not a list"),
    ("PC004", "codops: !!python/name:os.system x\n", {}, "peach.yaml:1:9", "!!python/name"),
    ("PC005", "codops: shop\ncodops: shop\n", {}, "peach.yaml:2:1", "twice"),
    ("PC101", HEAD + endpoint(methdo="x"), {}, "peach.yaml:6:51", "did you mean 'method'"),
    (
        "PC102",
        HEAD + "  e:\n    url: /e\n    components:\n      main: {notebook: nb.ipynb}\n",
        {},
        "peach.yaml:6:7",
        "'method'",
    ),
    ("PC103", HEAD + endpoint(replicas=0), {}, "peach.yaml:6:61", "replicas"),
    ("PC103", HEAD + endpoint(memory="lots"), {}, "peach.yaml:6:59", "512Mi"),
    ("PC103", "codops: Shop!\n", {}, "peach.yaml:1:9", "codops"),
    ("PC103", HEAD + endpoint(url="e"), {}, "peach.yaml:4:10", "url"),
    (
        "PC104",
        HEAD
        + "  e:\n    url: /e\n    dependencies: [numpy]\n    components: {main: {notebook: nb.ipynb, method: ask}}\n",
        {},
        "peach.yaml:5:5",
        "py_environments",
    ),
    (
        "PC110",
        HEAD + endpoint(),
        {"peach.conf/more.yaml": "endpoints:\n" + endpoint(url="/other")},
        "peach.conf/more.yaml:2:3",
        "peach.yaml:3",
    ),
    (
        "PC111",
        HEAD + endpoint(),
        {"peach.conf/x.yaml": "codops: other\n"},
        "peach.conf/x.yaml:1:9",
        "'shop'",
    ),
    ("PC112", HEAD + endpoint() + endpoint("f", "/e/"), {}, "peach.yaml:8:10", "endpoint 'e'"),
    (
        "PC113",
        HEAD + "  e:\n    url: /e\n    components:\n      a: {notebook: nb.ipynb, method: ask}\n"
        "      b: {notebook: nb.ipynb, method: ask}\n",
        {},
        "peach.yaml:5:5",
        "'main'",
    ),
    (
        "PC114",
        "codops: shop\npy_environments:\n  llm: {dependencies: [numpy]}\nendpoints:\n"
        "  e:\n    url: /e\n    py_env: lmm\n    components: {main: {notebook: nb.ipynb, method: ask}}\n",
        {},
        "peach.yaml:7:13",
        "did you mean 'llm'",
    ),
    (
        "PC115",
        HEAD
        + "  e:\n    url: /e\n    components:\n      fallback: {notebook: nb.ipynb, method: ask}\n",
        {},
        "peach.yaml:5:5",
        "main",
    ),
    ("PC116", HEAD + endpoint(url="/_peach/status"), {}, "peach.yaml:4:10", "reserved"),
    (
        "PC117",
        ab_endpoint("{by: users, split: {main: 80, b: 20}}"),
        {},
        "peach.yaml:5:14",
        "did you mean 'user'",
    ),
    (
        "PC117",
        ab_endpoint("{by: user, split: {main: 80.5, b: 19.5}}"),
        {},
        "peach.yaml:5:34",
        "80.5",
    ),
    ("PC117", ab_endpoint("{by: user, split: {main: 120, b: -20}}"), {}, "peach.yaml:5:34", "120"),
    (
        "PC117",
        ab_endpoint("{by: user, split: {main: 80, b: 30}}"),
        {},
        "peach.yaml:5:27",
        "sum to 110",
    ),
    (
        "PC117",
        ab_endpoint("{by: user, split: {main: 80, bb: 20}}"),
        {},
        "peach.yaml:5:38",
        "did you mean 'b'",
    ),
    (
        "PC117",
        ab_endpoint("{by: user, split: {main: 80, fallback: 20}}"),
        {},
        "peach.yaml:5:38",
        "fallback",
    ),
    (
        "PC309",
        ab_endpoint("{by: client, split: {main: 100}}"),
        {},
        "peach.yaml:8:7",
        "not in the split",
    ),
    (
        "PC309",
        HEAD + "  e:\n    url: /e\n    components:\n      main: {notebook: nb.ipynb, method: ask}\n"
        "      b: {notebook: nb.ipynb, method: ask}\n",
        {},
        "peach.yaml:7:7",
        "ab: {by: user",
    ),
    (
        "PC201",
        HEAD + endpoint(notebook="nb2.ipynb"),
        {},
        "peach.yaml:6:24",
        "did you mean 'nb.ipynb'",
    ),
    ("PC202", HEAD + endpoint(notebook="../nb.ipynb"), {}, "peach.yaml:6:24", "outside"),
    (
        "PC203",
        HEAD + endpoint(notebook="bad.ipynb"),
        {"bad.ipynb": "{not json"},
        "peach.yaml:6:24",
        "JSON",
    ),
    (
        "PC203",
        HEAD + endpoint(notebook="bad.ipynb"),
        {"bad.ipynb": "[1, 2]"},
        "peach.yaml:6:24",
        "cells",
    ),
    ("PC204", HEAD + endpoint(method="aks"), {}, "peach.yaml:6:44", "did you mean 'ask'"),
    (
        "PC204",
        HEAD + endpoint(init="init_modle"),
        {},
        "peach.yaml:6:57",
        "did you mean 'init_model'",
    ),
    ("PC205", HEAD + endpoint(init="init_needs"), {}, "nb.ipynb:cell 5:line 1", "path"),
    (
        "PC206",
        HEAD + endpoint(full_notebook=True),
        {},
        "nb.ipynb:cell 9:line 1",
        "not valid Python",
    ),
    (
        "PC301",
        HEAD + endpoint(method="no_model", init="init_model"),
        {},
        "nb.ipynb:cell 4:line 1",
        "model",
    ),
    ("PC302", HEAD + endpoint(args={"stream": True}), {}, "peach.yaml:6:58", "stream"),
    ("PC303", HEAD + endpoint(method="drifting"), {}, "nb.ipynb:cell 7:line 3", "drift"),
    ("PC304", HEAD + endpoint(method="with_magic"), {}, "nb.ipynb:cell 8:line 1", "dropped"),
    ("PC306", "codops: shop\n", {}, "peach.yaml:1:1", "no endpoint"),
    (
        "PC307",
        HEAD + endpoint(notebook="uses.ipynb"),
        {"uses.ipynb": notebook_json(["import os\n", "def ask(q=''):\n    return [os.sep, q]\n"])},
        "uses.ipynb:cell 2:line 2",
        "'os' is defined in cell 1",
    ),
    ("PC401", HEAD + endpoint(method="streamer"), {}, "nb.ipynb:cell 6:line 1", "stream=true"),
    (
        "PC312",
        HEAD + endpoint(notebook="typed.ipynb", method="typed"),
        {"typed.ipynb": notebook_json(["def typed(q: str, blob: bytes = b''):\n    return q\n"])},
        "typed.ipynb:cell 1:line 1",
        "'typed' parameter 'blob': no JSON Schema expresses `bytes`",
    ),
    (
        "PC118",
        HEAD + endpoint(env_vars={"BAD-NAME": "x"}),
        {},
        "peach.yaml:6:62",
        "'BAD-NAME' is not an environment variable's name",
    ),
    (
        "PC118",
        "secrets: [OK_NAME, 2FAST]\n" + HEAD + endpoint(),
        {},
        "peach.yaml:1:20",
        "'2FAST'",
    ),
    (
        "PC119",
        "env_vars: {API_KEY: abc}\n" + HEAD + endpoint(secrets=["API_KEY"]),
        {},
        "peach.yaml:7:61",
        "secret API_KEY is also given a value in env_vars (env_vars.API_KEY)",
    ),
    (
        "PC311",
        HEAD + endpoint(env_vars={"OPENAI_API_KEY": "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8sT1v"}),
        {},
        "peach.yaml:6:80",
        "looks like an API key (sk-…)",
    ),
    (
        "PC120",
        "py_environments:\n  base:\n    dependencies:\n      - orjson\n      - '-r /etc/passwd'\n"
        + HEAD
        + endpoint(),
        {},
        "peach.yaml:5:9",
        "'-r /etc/passwd' of 'base' is refused: it is an option line",
    ),
    ("PC121", HEAD + endpoint(name='"e\\nforged"'), {}, "peach.yaml:3:3", "'e\\nforged'"),
    ("PC122", HEAD + endpoint(url='"/q?x=1"'), {}, "peach.yaml:4:10", "url '/q?x=1'"),
]

DECORATED = [
    ("markdown", "decorated"),
    "from peach_cli import endpoint\n\ndef load():\n    return 1\n\ndef needs(x):\n    return x\n",
    '@endpoint("/similar", init_fn=load, args={"size": 5}, replicas=2, memory="1Gi")\n'
    "def similar(init_state, item: str = '', size: int = 5):\n    return [item] * size\n",
]


def decorated_case(cell: str, files: dict | None = None) -> dict:
    return {"D.ipynb": notebook_json([*DECORATED, cell]), **(files or {})}


DECORATOR_CASES = [
    (
        "PC204",
        '@endpoint("/x", init_fn=lod)\ndef x(init_state):\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "did you mean 'load'",
    ),
    (
        "PC205",
        '@endpoint("/x", init_fn=needs)\ndef x(init_state):\n    return 1\n',
        "D.ipynb:cell 2:line 6",
        "x",
    ),
    (
        "PC207",
        'N = 2\n@endpoint("/x", replicas=N)\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 2",
        "literal",
    ),
    (
        "PC207",
        '@endpoint("/x", init_fn=lambda: 1)\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "init_fn",
    ),
    (
        "PC208",
        '@endpoint("/x", replica=2)\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "did you mean 'replicas'",
    ),
    ("PC208", "@endpoint\ndef x():\n    return 1\n", "D.ipynb:cell 4:line 1", "url"),
    ("PC208", "@endpoint(replicas=1)\ndef x():\n    return 1\n", "D.ipynb:cell 4:line 1", "url"),
    (
        "PC208",
        '@endpoint("/x", url="/y")\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "url twice",
    ),
    (
        "PC103",
        '@endpoint("/x", replicas=0)\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "replicas",
    ),
    ("PC103", '@endpoint("x")\ndef x():\n    return 1\n', "D.ipynb:cell 4:line 1", "'/'"),
    ("PC110", '@endpoint("/x")\ndef e():\n    return 1\n', "D.ipynb:cell 4:line 2", "twice"),
    ("PC112", '@endpoint("/e")\ndef x():\n    return 1\n', "D.ipynb:cell 4:line 1", "endpoint 'e'"),
    (
        "PC301",
        '@endpoint("/x", init_fn=load)\ndef x(model):\n    return 1\n',
        "D.ipynb:cell 4:line 2",
        "init_state",
    ),
    (
        "PC302",
        '@endpoint("/x", args={"stream": 1})\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "stream",
    ),
    (
        "PC304",
        '%time\n@endpoint("/x")\ndef x():\n    return 1\n',
        "D.ipynb:cell 4:line 1",
        "dropped",
    ),
]


def position_and_text(diagnostic) -> tuple[str, str]:
    return str(diagnostic.position), f"{diagnostic.message} {diagnostic.hint or ''}"


@pytest.mark.parametrize(
    ("code", "conf", "files", "where", "text"), CASES, ids=[c[0] for c in CASES]
)
def test_each_code_at_its_position(tmp_path, code, conf, files, where, text):
    write_project(tmp_path, conf, NB, files)
    found = [d for d in diagnose(tmp_path) if d.code == code]
    assert found, f"no {code} in {[str(d) for d in diagnose(tmp_path)]}"
    position, message = position_and_text(found[0])
    assert position == where
    assert text in message


@pytest.mark.parametrize(
    ("code", "cell", "where", "text"), DECORATOR_CASES, ids=[c[0] for c in DECORATOR_CASES]
)
def test_decorator_codes_at_their_position(tmp_path, code, cell, where, text):
    conf = HEAD + endpoint() + "decorator_endpoints: [D.ipynb]\n"
    write_project(tmp_path, conf, NB, decorated_case(cell))
    found = [d for d in diagnose(tmp_path) if d.code == code]
    assert found, f"no {code} in {[str(d) for d in diagnose(tmp_path)]}"
    position, message = position_and_text(found[0])
    assert position == where
    assert text in message


def test_decorator_notebook_without_endpoint(tmp_path):
    conf = HEAD + endpoint() + "decorator_endpoints: [nb.ipynb, nb.ipynb]\n"
    write_project(tmp_path, conf, NB)
    found = {d.code: str(d.position) for d in diagnose(tmp_path)}
    assert found["PC305"] == "peach.yaml:7:23"
    assert found["PC110"] == "peach.yaml:7:33"


def test_a_dedented_fallback_says_it_belongs_under_components(tmp_path):
    conf = HEAD + endpoint() + "    fallback:\n      notebook: nb.ipynb\n      method: no_model\n"
    write_project(tmp_path, conf, NB)
    (found,) = [d for d in diagnose(tmp_path) if d.code == "PC101"]
    assert str(found.position) == "peach.yaml:7:5"
    assert found.message == "unknown key 'fallback' in endpoints.e"
    assert found.hint is not None
    assert found.hint.startswith("did you mean endpoints.e.components.fallback?"), found.hint


def test_every_code_is_exercised():
    exercised = {c[0] for c in CASES} | {c[0] for c in DECORATOR_CASES} | {"PC305", "PC110"}
    exercised.add("PC006")  # a symlinked conf file: tests/test_hostile_conf.py
    assert exercised == set(CODES)


def test_all_problems_in_one_run(tmp_path):
    conf = (
        "codops: shop\nendpoints:\n"
        + endpoint("a", methdo="x")
        + endpoint("b", url="/a", method="aks")
        + endpoint("c", url="/c", init="init_needs")
        + endpoint("d", url="/d", notebook="missing.ipynb")
        + "tasks:\n  t: {notebook: nb.ipynb, method: nope, py_env: gpu}\n"
    )
    write_project(tmp_path, conf, NB)
    codes = sorted(d.code for d in diagnose(tmp_path))
    # PC206: the method is missing and cell 9 does not parse, so it is reported too
    assert codes == ["PC101", "PC114", "PC201", "PC204", "PC204", "PC205", "PC206"]


def test_every_diagnostic_has_a_position(tmp_path):
    write_project(tmp_path, HEAD + endpoint(methdo=1, replicas="2") + "bogus: 1\n", NB)
    for diagnostic in diagnose(tmp_path):
        assert diagnostic.position.file == "peach.yaml"
        assert diagnostic.position.line >= 1


@pytest.mark.parametrize("name", ["quickstart"])
def test_examples_validate_clean(name):
    plan, diagnostics = build_plan(ROOT / "examples" / name)
    assert plan is not None
    assert [d for d in diagnostics if d.severity != "info"] == []


def test_user_code_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    cell = f"open({str(marker)!r}, 'w').close()\n\ndef ask(model=None):\n    return 1\n"
    conf = HEAD + endpoint(full_notebook=True) + "decorator_endpoints: [D.ipynb]\n"
    decorated = [
        "from peach_cli import endpoint\n"
        f"open({str(marker)!r}, 'w').close()\n@endpoint('/d')\ndef d():\n    return 1\n"
    ]
    write_project(tmp_path, conf, {"nb.ipynb": [cell], "D.ipynb": decorated})
    plan, diagnostics = build_plan(tmp_path)
    assert plan is not None, [str(d) for d in diagnostics]
    assert not marker.exists()


def test_an_endpoint_with_a_schema_error_is_still_checked(tmp_path):
    conf = (
        "codops: shop\nendpoints:\n  e:\n    url: /e\n    py_env: lmm\n    components:\n"
        "      main: {notebook: nb.ipynb, methdo: ask}\n"
        "      fallback: {notebook: nb.ipynb, method: nope}\n" + endpoint("f", url="/e")
    )
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS[:-1]})
    codes = sorted(d.code for d in diagnose(tmp_path))
    assert codes == ["PC101", "PC102", "PC112", "PC114", "PC204"]


def test_a_component_with_a_schema_error_still_has_its_functions_and_args_checked(tmp_path):
    conf = (
        "codops: shop\nendpoints:\n  e:\n    url: /e\n    components:\n"
        "      main: {notebook: nb.ipynb, method: aks, replica: 2, args: {stream: true}}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS[:-1]})
    found = {(d.code, d.position.line) for d in diagnose(tmp_path)}
    assert {("PC101", 6), ("PC204", 6), ("PC302", 6)} <= found


def test_a_function_shared_by_several_components_is_reported_once(tmp_path):
    conf = (
        HEAD
        + endpoint("a", url="/a", method="streamer", init="init_needs")
        + endpoint("b", url="/b", method="streamer", init="init_needs")
        + "decorator_endpoints: [D.ipynb]\n"
    )
    cells = [
        '@endpoint("/x", init_fn=needs)\ndef x(init_state):\n    return 1\n',
        '@endpoint("/y", init_fn=needs)\ndef y(init_state):\n    return 1\n',
    ]
    files = {"D.ipynb": notebook_json([*DECORATED, *cells])}
    write_project(tmp_path, conf, NB, files)
    found = sorted((d.code, str(d.position)) for d in diagnose(tmp_path))
    assert found == [
        ("PC205", "D.ipynb:cell 2:line 6"),
        ("PC205", "nb.ipynb:cell 5:line 1"),
        ("PC301", "nb.ipynb:cell 6:line 1"),
        ("PC401", "nb.ipynb:cell 6:line 1"),
    ]


def test_a_decorator_endpoint_with_a_bad_option_still_has_its_functions_checked(tmp_path):
    cell = (
        '@endpoint("/x", init_fn=lod, memory="lots", args={"stream": True})\n'
        "def x(q):\n    return 1\n"
    )
    conf = HEAD + endpoint() + "decorator_endpoints: [D.ipynb]\n"
    write_project(tmp_path, conf, NB, decorated_case(cell))
    found = {(d.code, str(d.position)) for d in diagnose(tmp_path)}
    assert found == {
        ("PC103", "D.ipynb:cell 4:line 1"),
        ("PC204", "D.ipynb:cell 4:line 1"),
        ("PC302", "D.ipynb:cell 4:line 1"),
    }


def test_a_later_redefinition_that_does_not_parse_is_an_error(tmp_path):
    cells = [
        "def ask(model, q=''):\n    return [q]\n",  # cell 1: parses
        "import os\n",
        "def ask(model, q=''):\n    return [q, 'new'\n",  # cell 3: the edit, broken
        "def other(:\n    pass\n",  # broken, but does not define ask
    ]
    write_project(tmp_path, HEAD + endpoint(), {"nb.ipynb": cells})
    found = [(d.code, str(d.position), d.hint) for d in diagnose(tmp_path)]
    assert found == [
        (
            "PC206",
            "nb.ipynb:cell 3:line 2",
            "this cell seems to redefine ask; until it parses, the ask of cell 1 is the one used",
        )
    ]


def test_a_decorator_notebook_after_an_invalid_entry_keeps_its_position(tmp_path):
    conf = HEAD + endpoint() + "decorator_endpoints:\n  - 1\n  - nb.ipynb\n"
    write_project(tmp_path, conf, NB)
    found = {(d.code, str(d.position)) for d in diagnose(tmp_path) if d.file == "peach.yaml"}
    assert found == {("PC103", "peach.yaml:8:5"), ("PC305", "peach.yaml:9:5")}


@pytest.mark.parametrize(
    ("conf", "where", "hint"),
    [
        ("codops: shop\nendpoints:\n  e:\n\turl: /e\n", "peach.yaml:4:1", "tab"),
        ("codops: shop\nendpoints: {e: {url: /e\n", "peach.yaml:3:1", "line 2, column 16"),
        ('codops: shop\nurl: "/e\n', "peach.yaml:3:1", "quoted scalar starts at line 2"),
        ("codops: shop\nendpoints:\n  e: 1\n f: 2\n", "peach.yaml:4:2", "indentation"),
    ],
)
def test_yaml_syntax_errors_say_what_to_look_at(tmp_path, conf, where, hint):
    write_project(tmp_path, conf)
    [diagnostic] = diagnose(tmp_path)
    assert (diagnostic.code, str(diagnostic.position)) == ("PC001", where)
    assert hint in (diagnostic.hint or "")


def test_decorator_options_given_as_none_take_the_defaults(tmp_path):
    cell = (
        '@endpoint(init_fn=None, url="/x", args=None, memory=None, cpus=None, media_type=None)\n'
        "def x():\n    return 1\n"
    )
    conf = HEAD + endpoint() + "decorator_endpoints: [D.ipynb]\n"
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS[:-1]}, decorated_case(cell))
    assert [str(d) for d in diagnose(tmp_path) if d.severity != "info"] == []
    plan, _ = build_plan(tmp_path)
    assert plan is not None
    assert plan.endpoints["x"].components["main"].cpus == 1.0


LATE = "def late():\n    return 1\n"


@pytest.mark.parametrize(
    "cells",
    [
        ['@endpoint("/x", init_fn=late)\ndef x(init_state):\n    return 1\n', LATE],
        ['@endpoint("/x", init_fn=late)\ndef x(init_state):\n    return 1\n\n' + LATE],
    ],
    ids=["later cell", "same cell, below"],
)
def test_an_init_fn_defined_after_its_endpoint_is_an_error(tmp_path, cells):
    conf = HEAD + endpoint() + "decorator_endpoints: [D.ipynb]\n"
    files = {"D.ipynb": notebook_json([*DECORATED, *cells])}
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS[:-1]}, files)
    found = [(d.code, str(d.position), d.message) for d in diagnose(tmp_path)]
    assert [(code, where) for code, where, _ in found] == [("PC204", "D.ipynb:cell 4:line 1")]
    assert "NameError" in found[0][2]


def test_an_init_fn_defined_above_its_endpoint_is_fine(tmp_path):
    cells = [LATE + '\n@endpoint("/x", init_fn=late)\ndef x(init_state):\n    return 1\n', LATE]
    conf = HEAD + endpoint() + "decorator_endpoints: [D.ipynb]\n"
    files = {"D.ipynb": notebook_json([*DECORATED, *cells])}
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS[:-1]}, files)
    assert diagnose(tmp_path) == []


@pytest.mark.parametrize(
    ("imports", "where", "hint"),
    [
        ("", "D.ipynb:cell 1:line 1", "from peach_cli import endpoint"),
        ("import peach_cli as pc\n", None, None),
        ("try:\n    from peach_cli import endpoint\nexcept ImportError:\n    pass\n", None, None),
        ("from peach_cli import endpoint as ep\n", None, None),
    ],
)
def test_the_decorator_must_be_imported_above_its_use(tmp_path, imports, where, hint):
    use = "@pc.endpoint" if "as pc" in imports else "@ep" if "as ep" in imports else "@endpoint"
    cell = f'{use}("/x")\ndef x():\n    return 1\n'
    files = {"D.ipynb": notebook_json([cell] if not imports else [imports, cell])}
    write_project(tmp_path, "codops: shop\ndecorator_endpoints: [D.ipynb]\n", None, files)
    found = [(str(d.position), d.hint) for d in diagnose(tmp_path) if d.code == "PC208"]
    assert found == ([(where, f"add `{hint}` at the top of the notebook")] if where else [])


def test_names_from_cells_that_do_not_run_are_warned_about_once(tmp_path):
    cells = [
        "import numpy as np\nSCALE = 2\n",  # cell 1: not extracted
        "def helper(x):\n    return x\n",  # cell 2: not extracted
        "import json\n\ndef ask(model, q=''):\n    helper(q)\n    SCALE = 3\n"
        "    return [np.zeros(SCALE), helper(q), json.dumps(q), len(q)]\n",  # cell 3
        "def init_model():\n    return np.ones(1)\n",  # cell 4: extracted as the init
    ]
    conf = HEAD + endpoint(init="init_model")
    write_project(tmp_path, conf, {"nb.ipynb": cells})
    found = sorted((str(d.position), d.message.split(" is ")[0]) for d in diagnose(tmp_path))
    # SCALE is local to ask, json imported in its cell, len a builtin: only np and helper
    assert found == [
        ("nb.ipynb:cell 3:line 4", "'helper'"),
        ("nb.ipynb:cell 3:line 6", "'np'"),
    ]
    numpy = "codops: shop\npy_environments:\n  base: {dependencies: [numpy]}\nendpoints:\n"
    conf = numpy + endpoint(init="init_model", full_notebook=True)
    write_project(tmp_path, conf, {"nb.ipynb": cells})
    assert diagnose(tmp_path) == []


def test_an_endpoint_with_a_schema_error_still_has_its_components_checked(tmp_path):
    conf = (
        "codops: shop\nendpoints:\n  e:\n    urll: /e\n    components:\n"
        "      a: {notebook: nb.ipynb, method: ask}\n"
        "      b: {notebook: nb.ipynb, methdo: ask}\n"
        "  f:\n    url: /f\n    py_env: 3\n    components:\n"
        "      fallback: {notebook: nb.ipynb, method: ask}\n"
    )
    write_project(tmp_path, conf, {"nb.ipynb": BASE_CELLS[:-1]})
    found = sorted((d.code, d.line) for d in diagnose(tmp_path))
    assert found == [
        ("PC101", 4),
        ("PC101", 7),
        ("PC102", 3),
        ("PC102", 7),
        ("PC103", 10),
        ("PC113", 5),
        ("PC115", 11),
    ]


def test_a_later_file_that_cannot_be_merged_is_still_checked(tmp_path):
    conf = HEAD + endpoint() + "decorator_endpoints: []\nendpoint: 1\ndependencies: [a]\n"
    later = "endpoints:\n  - f\ndecorator_endpoints: x.ipynb\nendpoint: 2\ndependencies: [b]\n"
    write_project(tmp_path, conf, NB, {"peach.conf/b.yaml": later})
    found = sorted(
        (d.code, str(d.position), d.hint) for d in diagnose(tmp_path) if d.file != "nb.ipynb"
    )
    assert [(code, where) for code, where, _ in found] == [
        ("PC101", "peach.conf/b.yaml:4:1"),
        ("PC101", "peach.yaml:8:1"),
        ("PC103", "peach.conf/b.yaml:2:3"),
        ("PC103", "peach.conf/b.yaml:3:22"),
        ("PC104", "peach.conf/b.yaml:5:1"),
        ("PC104", "peach.yaml:9:1"),
    ]
    assert found[0][2] == "did you mean 'endpoints'?"


def test_a_valid_ab_test_is_in_the_plan_in_split_order(tmp_path):
    write_project(tmp_path, ab_endpoint("{by: session, split: {b: 30, main: 70}}"), NB)
    plan, diagnostics = build_plan(tmp_path)
    assert plan is not None, [str(d) for d in diagnostics]
    assert [d for d in diagnostics if d.severity != "info"] == []
    ab = plan.endpoints["e"].ab
    assert ab is not None and (ab.by, ab.param, ab.split) == (
        "session",
        "session_id",
        (("b", 30), ("main", 70)),
    )


def test_a_wrong_split_is_reported_once_and_nothing_is_served(tmp_path):
    """A split the model refuses is only PC117 (no PC309 about the arms it would have)."""
    write_project(tmp_path, ab_endpoint("{by: user, split: {main: 90, b: 20}}"), NB)
    plan, diagnostics = build_plan(tmp_path)
    assert plan is None
    assert [(d.code, str(d.position)) for d in diagnostics] == [("PC117", "peach.yaml:5:27")]


@pytest.mark.parametrize(
    ("ab", "code", "where"),
    [
        ("{by: user}", "PC102", "peach.yaml:5:5"),
        ("{by: user, split: {main: 100}, spilt: 1}", "PC101", "peach.yaml:5:40"),
        ("7", "PC117", "peach.yaml:5:9"),
        ("{by: user, split: {}}", "PC117", "peach.yaml:5:27"),
    ],
)
def test_ab_keys_missing_unknown_or_of_the_wrong_shape(tmp_path, ab, code, where):
    write_project(tmp_path, ab_endpoint(ab), NB)
    found = [(d.code, str(d.position)) for d in diagnose(tmp_path) if d.severity == "error"]
    assert found == [(code, where)]


def test_overlapping_reads_collect_less_often_and_restore_the_thresholds_once_all_left() -> None:
    """Two reads of a project in two threads (a reload's and another's), the first leaving
    before the second: Python's collection thresholds are back as they were at the end,
    not left at the reads' (what a naive save-and-restore per read would do)."""
    import gc
    import threading

    from peach_cli.project.notebook import fewer_collections

    before = gc.get_threshold()
    second_in, first_out = threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def second() -> None:
        with fewer_collections():
            second_in.set()
            first_out.wait(10)
            seen.append(gc.get_threshold())  # the first read has left; this one is inside

    thread = threading.Thread(target=second)
    with fewer_collections():
        inside = gc.get_threshold()
        thread.start()
        assert second_in.wait(10)
    first_out.set()
    thread.join(10)
    assert inside != before and seen == [inside] and gc.get_threshold() == before
