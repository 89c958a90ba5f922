"""`peach openapi` (SPEC §11): the OpenAPI document, built from real notebooks without running them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from cli_support import run_peach
from openapi_spec_validator import validate as validate_openapi
from projectkit import diagnose, write_project
from reload_support import copy_project, edit_cell
from waiting import poll

from peach_cli.checks.build import build_plan
from peach_cli.openapi import build_document, endpoint_contracts

REPO = Path(__file__).resolve().parent.parent
SEMANTICS = REPO / "tests" / "projects" / "semantics"
PROJECTS = sorted(
    p
    for p in [*(REPO / "examples").iterdir(), *(REPO / "tests" / "projects").rglob("*")]
    if p.is_dir() and ((p / "peach.yaml").exists() or (p / "peach.conf").is_dir())
)


def document(root: Path) -> dict:
    plan, diagnostics = build_plan(root)
    assert plan is not None, [str(d) for d in diagnostics]
    return build_document(plan)


@pytest.mark.parametrize("root", PROJECTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_project_has_a_valid_document(root: Path) -> None:
    plan, _ = build_plan(root)
    if plan is None:  # a project of errors on purpose (typos, broken)
        pytest.skip("the project has errors")
    found = build_document(plan)
    validate_openapi(found)
    assert set(found["paths"]) == {e.url for e in plan.endpoints.values()}
    for item in found["paths"].values():
        assert set(item) == {"get", "post"}


TYPES_CELLS = [
    "from enum import Enum, IntEnum\nfrom typing import Literal, Optional, Union\nimport typing\n",
    "class Color(str, Enum):\n    RED = 'red'\n    BLUE = 'blue'\n\n"
    "class Level(IntEnum):\n    LOW = 1\n    HIGH = 3\n\n"
    "class Point:\n    x: int = 0\n",
    "def kinds(model, n: int, x: float, flag: bool, name: str, tags: list[str],\n"
    "          weights: dict[str, float], maybe: Optional[int], either: int | None,\n"
    "          mode: Literal['fast', 'slow'], color: Color, level: Level,\n"
    "          nested: list[dict[str, list[int]]], old: typing.List[typing.Dict[str, int]],\n"
    "          pair: Union[int, str], later: 'list[Color]', point: Point,\n"
    "          bare, size: int = 10, *rest, init_state=None, **kwargs) -> list[str]:\n"
    '    """Every kind of annotation.\n\n    The rest of the docstring:\n    two lines."""\n'
    "    return [name]\n",
]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> Path:
    conf = (
        "codops: kinds\n"
        "endpoints:\n"
        "  kinds:\n"
        "    url: /kinds\n"
        "    components:\n"
        "      main: {notebook: nb.ipynb, method: kinds, full_notebook: true,\n"
        "             args: {name: ada, tags: [a]}}\n"
    )
    return write_project(tmp_path_factory.mktemp("kinds"), conf, {"nb.ipynb": TYPES_CELLS})


def test_each_annotation_kind_has_its_schema(kinds: Path) -> None:
    found = document(kinds)
    validate_openapi(found)
    get = found["paths"]["/kinds"]["get"]
    query = {p["name"]: p for p in get["parameters"]}
    body = found["paths"]["/kinds"]["post"]["requestBody"]["content"]["application/json"]
    properties = body["schema"]["properties"]
    assert list(properties) == [
        *("n", "x", "flag", "name", "tags", "weights", "maybe", "either", "mode", "color"),
        *("level", "nested", "old", "pair", "later", "point", "bare", "size"),
    ]  # model, init_state, *rest and **kwargs are never a request's
    assert properties["n"] == {"type": "integer"}
    assert properties["x"] == {"type": "number"}
    assert properties["flag"] == {"type": "boolean"}
    assert properties["name"] == {"type": "string", "default": "ada"}  # args: default
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "default": ["a"]}
    assert properties["weights"] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert properties["maybe"] == properties["either"] == {"type": ["integer", "null"]}
    assert properties["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert properties["color"] == {"type": "string", "enum": ["red", "blue"]}
    assert properties["level"] == {"type": "integer", "enum": [1, 3]}
    assert properties["nested"] == {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "integer"}},
        },
    }
    assert properties["old"] == {
        "type": "array",
        "items": {"type": "object", "additionalProperties": {"type": "integer"}},
    }
    assert properties["pair"] == {"type": ["integer", "string"]}
    assert properties["later"] == {"type": "array", "items": properties["color"]}
    assert properties["point"] == {}  # a class no JSON Schema expresses (PC312)
    assert properties["bare"] == {}  # no annotation: any value
    assert properties["size"] == {"type": "integer", "default": 10}
    assert body["schema"]["required"] == [
        *("n", "x", "flag", "weights", "maybe", "either", "mode", "color", "level"),
        *("nested", "old", "pair", "later", "point", "bare"),
    ]  # name and tags have args: defaults, size its own
    # the query string carries a list as repeated keys, anything nested as JSON text
    assert query["tags"]["style"] == "form" and query["tags"]["explode"] is True
    assert query["nested"]["content"]["application/json"]["schema"] == properties["nested"]
    assert query["weights"]["content"]["application/json"]["schema"] == properties["weights"]
    assert query["n"] == {
        "name": "n",
        "in": "query",
        "required": True,
        "schema": {"type": "integer"},
    }
    assert "required" not in query["size"]
    assert get["summary"] == "Every kind of annotation."
    assert get["description"] == "The rest of the docstring:\ntwo lines."
    ok = get["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["properties"]["result"] == {"type": "array", "items": {"type": "string"}}


@pytest.mark.slow
def test_the_command_prints_json_and_yaml_of_the_same_document(kinds: Path) -> None:
    as_json = run_peach("openapi", str(kinds))
    assert as_json.returncode == 0, as_json.stderr
    as_yaml = run_peach("openapi", str(kinds), "--format", "yaml")
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert json.loads(as_json.stdout) == yaml.safe_load(as_yaml.stdout) == document(kinds)


@pytest.mark.slow
def test_a_project_with_errors_prints_them_and_no_document(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        "codops: bad\nendpoints:\n  x: {url: /x, components: {main: {notebook: nb.ipynb, method: nope}}}\n",
        {"nb.ipynb": ["def yes():\n    return 1\n"]},
    )
    done = run_peach("openapi", str(root))
    assert done.returncode == 1
    shown = done.stdout + done.stderr
    assert "PC204" in shown and "not describing" in shown and "openapi" not in shown
    assert run_peach("openapi", str(root), "--format", "xml").returncode == 2


def test_contracts_give_each_parameter_schema(kinds: Path) -> None:
    plan, _ = build_plan(kinds)
    assert plan is not None
    (contract,) = endpoint_contracts(plan.endpoints.values())
    size = next(p for p in contract.parameters if p.name == "size")
    assert (size.schema, size.required, size.default) == ({"type": "integer"}, False, 10)
    assert not contract.streams and contract.open_parameters


def test_an_annotation_without_schema_is_a_validate_warning_naming_it(kinds: Path) -> None:
    warned = [d for d in diagnose(kinds) if d.code == "PC312"]
    assert [(d.severity, d.position.cell, d.position.line) for d in warned] == [("warning", 3, 5)]
    assert "parameter 'point'" in warned[0].message and "`Point`" in warned[0].message


ODD_CELLS = [
    "import numpy as np\nfrom typing import Callable\n",
    "def odd(a: np.ndarray, b: bytes, c: 'not python (', d: 1 + 2, e: Callable[[int], int],\n"
    "        f: dict[int, str], g: list[int, str], h: tuple[int, ...] = (1,),\n"
    "        i: 'list[list[list[list[list[list[list[list[list[list[list[list[int]]]]]]]]]]]]' = None,\n"
    "        j: set[np.float64] = None):\n"
    "    return 1\n",
]


def test_an_annotation_it_cannot_read_is_any_value_never_a_crash(tmp_path: Path) -> None:
    conf = (
        "codops: odd\nendpoints:\n  odd:\n    url: /odd\n    components:\n"
        "      main: {notebook: nb.ipynb, method: odd, full_notebook: true}\n"
    )
    root = write_project(tmp_path, conf, {"nb.ipynb": ODD_CELLS})
    found = document(root)
    validate_openapi(found)
    body = found["paths"]["/odd"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    properties = body["properties"]
    assert [properties[name] for name in "abcdef"] == [
        {},
        {},
        {},
        {},
        {},
        {"type": "object", "additionalProperties": {"type": "string"}},
    ]
    assert properties["h"] == {"type": "array", "items": {"type": "integer"}, "default": [1]}
    assert properties["j"] == {"type": ["array", "null"], "items": {}, "default": None}
    warned = {d.message.split("`")[1] for d in diagnose(root) if d.code == "PC312"}
    assert warned == {"np.ndarray", "bytes", "not python (", "1 + 2", "Callable[[int], int]"} | {
        "int",  # the key of dict[int, str]: JSON keys are strings
        "list[int, str]",
        "np.float64",
    }


# -- GET /_peach/openapi.json on `peach dev` -------------------------------------------------


def served_document(url: str) -> dict:
    answer = httpx.get(url + "/_peach/openapi.json", timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    return answer.json()


def test_peach_dev_serves_the_document_of_the_command(dev_server) -> None:
    assert served_document(dev_server.url) == document(SEMANTICS)


@pytest.mark.slow
def test_a_saved_signature_change_shows_in_the_next_get(peach_dev, tmp_path: Path) -> None:
    project = copy_project("reload_basic", tmp_path)
    dev = peach_dev(project, reload=True)
    dev.wait_ready()
    before = served_document(dev.url)["paths"]["/hello"]["get"]["parameters"]
    assert [p["name"] for p in before] == ["name"]
    edit_cell(project, 'def hello(name: str = "world"):', "def hello(name: str, times: int = 2):")

    def changed() -> list | None:
        found = served_document(dev.url)["paths"]["/hello"]["get"]["parameters"]
        return found if found != before else None

    after = poll(changed, "the new signature in /_peach/openapi.json")
    assert after == [
        {"name": "name", "in": "query", "required": True, "schema": {"type": "string"}},
        {"name": "times", "in": "query", "schema": {"type": "integer", "default": 2}},
    ]
    assert served_document(dev.url) == document(project)


# -- Schemathesis against the examples' `peach dev` -------------------------------------------

CHECKS = ",".join(
    [
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "unsupported_method",
    ]
)
"""What an answer must do to keep the document's word. Not ``not_a_server_error`` (a 500
``method_error`` is a documented answer of a method that raises) nor the request-validation
checks: a JSON body's values reach the method as sent (SPEC §2), the method decides."""


def schemathesis(url: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``schemathesis run`` in ``folder`` (where it keeps its cache)."""
    command = ["schemathesis", "run", url + "/_peach/openapi.json", "--checks", CHECKS]
    command += ["--mode", "positive", "--seed", "1", "--workers", "1", "--no-color"]
    command += ["--request-timeout", "30", "--generation-database", "none", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=folder)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("example", sorted(p.name for p in (REPO / "examples").iterdir()))
def test_schemathesis_finds_no_answer_that_breaks_the_document(
    peach_dev, example: str, tmp_path: Path
) -> None:
    """Every operation with Schemathesis's coverage phase (boundary values, each status),
    the operations that do not stream with its fuzzing phase too: a stream of generated
    size (``words=10**9``) never ends, so it is not fuzzed. (Breaking the document's
    envelope by hand, ``status: {const: okay}``, fails it with ST108: checked.)"""
    project = tmp_path / example  # a copy: a fuzzed task trigger writes into its project
    shutil.copytree(REPO / "examples" / example, project)
    dev = peach_dev(project)
    dev.wait_ready()
    found = served_document(dev.url)
    streaming = [
        operation["operationId"]
        for item in found["paths"].values()
        if "stream" in [p["name"] for p in item["get"].get("parameters", [])]
        for operation in item.values()
    ]
    covered = schemathesis(
        dev.url, tmp_path, "--phases", "examples,coverage", "--max-examples", "10"
    )
    assert covered.returncode == 0, covered.stdout[-6000:] + covered.stderr[-2000:]
    if len(streaming) < 2 * len(found["paths"]):
        excluded = [arg for op in streaming for arg in ("--exclude-operation-id", op)]
        fuzzed = schemathesis(
            dev.url, tmp_path, "--phases", "fuzzing", "--max-examples", "25", *excluded
        )
        assert fuzzed.returncode == 0, fuzzed.stdout[-6000:] + fuzzed.stderr[-2000:]


def test_a_deploy_ships_the_document_with_its_route_prefix_to_the_gateway() -> None:
    """What the Ray gateway serves at PREFIX/_peach/openapi.json: the file the CLI puts in
    its package (the Serve app reads no notebook); served on a cluster in
    tests/test_peach_test_ray.py."""
    import io
    import zipfile

    from peach_cli.deploy.config import build_bundle
    from peach_cli.deploy.packaging import OPENAPI_FILE

    plan, _ = build_plan(REPO / "examples" / "quickstart")
    assert plan is not None
    bundle = build_bundle(plan, route_prefix="/qs")
    (gateway,) = [p for p in bundle.packages if p.kind == "gateway"]
    shipped = json.loads(zipfile.ZipFile(io.BytesIO(gateway.data)).read(OPENAPI_FILE))
    assert shipped == build_document(plan, route_prefix="/qs")
    assert shipped["servers"] == [{"url": "/qs"}]
    assert {**shipped, "servers": [{"url": "/"}]} == build_document(plan)


def test_an_enum_member_default_is_its_value(tmp_path: Path) -> None:
    cells = [
        "from enum import Enum, IntEnum\n",
        "class Level(IntEnum):\n    LOW = 1\n    HIGH = 3\n\n"
        "class Theme(str, Enum):\n    DARK = 'dark'\n    LIGHT = 'light'\n",
        "def styled(model, level: Level = Level.LOW, theme: Theme = Theme.DARK,\n"
        "           other: Level = Level.MISSING, far: int = Elsewhere.X):\n"
        "    return [level, theme]\n",
    ]
    conf = (
        "codops: styles\n"
        "endpoints:\n"
        "  styled:\n"
        "    url: /styled\n"
        "    components:\n"
        "      main: {notebook: nb.ipynb, method: styled, full_notebook: true}\n"
    )
    found = document(write_project(tmp_path, conf, {"nb.ipynb": cells}))
    validate_openapi(found)
    body = found["paths"]["/styled"]["post"]["requestBody"]["content"]["application/json"]
    properties = body["schema"]["properties"]
    assert properties["level"] == {"type": "integer", "enum": [1, 3], "default": 1}
    assert properties["theme"] == {"type": "string", "enum": ["dark", "light"], "default": "dark"}
    # a member or a class the module does not define: no default to document
    assert "default" not in properties["other"] and "default" not in properties["far"]
    assert "required" not in body["schema"]
    query = {p["name"]: p for p in found["paths"]["/styled"]["get"]["parameters"]}
    assert query["level"]["schema"]["default"] == 1
