"""The conf model and the loader: merge rules, YAML details, and the plan built from them."""

from __future__ import annotations

import pytest
from projectkit import BASE_CELLS, diagnose, write_project

from peach_cli.checks.build import build_plan
from peach_cli.project.conf import PeachConf, json_schema, memory_bytes
from peach_cli.project.loader import load_project
from peach_cli.runtime.plan import DEFAULT_MEDIA_TYPE

NB = {"nb.ipynb": BASE_CELLS}


def ep(name: str, url: str, method: str = "ask", extra: str = "") -> str:
    return (
        f"  {name}:\n    url: {url}\n{extra}    components:\n"
        f"      main: {{notebook: nb.ipynb, method: {method}}}\n"
    )


def test_files_merge_in_order_and_lists_concatenate(tmp_path):
    write_project(
        tmp_path,
        "codops: shop\ntimeout_s: 5\nendpoints:\n" + ep("a", "/a"),
        NB,
        {
            "peach.conf/20-b.yaml": "codops: shop\nendpoints:\n" + ep("b", "/b"),
            "peach.conf/10-envs.yml": "py_environments:\n  llm: {dependencies: [numpy]}\n",
            "peach.conf/30-dec.yaml": "decorator_endpoints: [D.ipynb]\n",
            "peach.conf/notes.txt": "not yaml, not read",
        },
    )
    project, diagnostics = load_project(tmp_path)
    assert diagnostics == []
    assert project.files == (
        "peach.yaml",
        "peach.conf/10-envs.yml",
        "peach.conf/20-b.yaml",
        "peach.conf/30-dec.yaml",
    )
    assert list(project.conf.endpoints) == ["a", "b"]
    assert project.conf.timeout_s == 5
    assert str(project.position(("decorator_endpoints", 0))) == "peach.conf/30-dec.yaml:1:23"
    assert str(project.position(("endpoints", "b", "url"))) == "peach.conf/20-b.yaml:4:10"


@pytest.mark.parametrize("section", ["endpoints", "tasks", "py_environments"])
def test_a_name_defined_in_two_files_names_both(tmp_path, section):
    body = {
        "endpoints": ep("x", "/x"),
        "tasks": "  x: {notebook: nb.ipynb, method: ask}\n",
        "py_environments": "  x: {dependencies: []}\n",
    }[section]
    write_project(
        tmp_path,
        f"codops: shop\n{section}:\n{body}",
        NB,
        {"peach.conf/a.yaml": f"{section}:\n{body.replace('/x', '/y')}"},
    )
    [duplicate] = [d for d in diagnose(tmp_path) if d.code == "PC110"]
    assert str(duplicate.position) == "peach.conf/a.yaml:2:3"
    assert "peach.yaml:3" in duplicate.message


def test_timeout_conflict_and_equal_values(tmp_path):
    write_project(
        tmp_path,
        "codops: shop\ntimeout_s: 5\nendpoints:\n" + ep("a", "/a"),
        NB,
        {"peach.conf/a.yaml": "codops: shop\ntimeout_s: 6\n"},
    )
    [conflict] = [d for d in diagnose(tmp_path) if d.code == "PC111"]
    assert "timeout_s is 6 here but 5 in peach.yaml:2" in conflict.message


def test_anchors_and_merge_keys(tmp_path):
    write_project(
        tmp_path,
        "codops: shop\nx-defaults: &d {notebook: nb.ipynb, replicas: 2}\nendpoints:\n"
        "  a:\n    url: /a\n    components:\n      main: {<<: *d, method: ask}\n",
        NB,
    )
    assert [d.code for d in diagnose(tmp_path)] == ["PC101"]  # x-defaults is not a key
    (tmp_path / "peach.yaml").write_text(
        "codops: shop\nendpoints:\n  a:\n    url: /a\n    components:\n"
        "      main: &m {notebook: nb.ipynb, method: ask, replicas: 2}\n"
        "      fallback: {<<: *m, method: no_model, replicas: 1}\n"
    )
    plan, diagnostics = build_plan(tmp_path)
    assert diagnostics == []
    assert plan.endpoints["a"].components["fallback"].replicas == 1
    assert plan.endpoints["a"].components["fallback"].method == "no_model"
    assert plan.endpoints["a"].components["main"].replicas == 2


def test_values_are_strict(tmp_path):
    write_project(
        tmp_path,
        "codops: shop\nendpoints:\n  a:\n    url: /a\n    components:\n"
        '      main: {notebook: nb.ipynb, method: ask, replicas: "2", cpus: true, full_notebook: 1}\n',
        NB,
    )
    messages = sorted(d.message for d in diagnose(tmp_path))
    assert len(messages) == 3 and all(
        m.startswith("invalid endpoints.a.components.main.") for m in messages
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("512Mi", 512 * 2**20),
        ("2Gi", 2 * 2**30),
        ("1.5G", 1_500_000_000),
        (1024, 1024),
        (None, None),
    ],
)
def test_memory_sizes(value, expected):
    assert memory_bytes(value) == expected


def test_schema_comes_from_the_model():
    schema = json_schema()
    component = schema["$defs"]["Component"]["properties"]
    assert component["memory"]["anyOf"][0]["pattern"]
    assert component["replicas"]["minimum"] == 1
    assert schema["properties"]["codops"]["pattern"] == "^[a-z0-9_-]+$"
    ab = schema["$defs"]["ABTest"]
    assert ab["properties"]["by"]["enum"] == ["user", "client", "session"]
    percent = ab["properties"]["split"]["additionalProperties"]
    assert (percent["type"], percent["minimum"], percent["maximum"]) == ("integer", 0, 100)
    assert ab["additionalProperties"] is False and set(ab["required"]) == {"by", "split"}
    assert PeachConf.model_json_schema()["$defs"].keys() == schema["$defs"].keys()
    # editors show descriptions on hover: every key has one
    for where in [schema, *schema["$defs"].values()]:
        for key, value in where["properties"].items():
            assert value.get("description"), key


def test_plan_fills_every_component_field(tmp_path):
    write_project(
        tmp_path,
        "codops: shop\ntimeout_s: 7.5\n"
        "py_environments:\n  base: {dependencies: [orjson]}\n  llm: {dependencies: [numpy, orjson]}\n"
        "endpoints:\n  a:\n    url: /a\n    py_env: llm\n    components:\n"
        "      main:\n        notebook: notebooks/nb.ipynb\n        init: init_model\n"
        "        method: uses_helpers\n        args: {size: 3, stream: true}\n"
        "        replicas: 2\n        memory: 512Mi\n        cpus: 0.5\n"
        "        media_type: text/event-stream\n"
        "      fallback: {notebook: notebooks/nb.ipynb, method: no_model}\n"
        "decorator_endpoints: [notebooks/nb.ipynb]\n",
        {
            "notebooks/nb.ipynb": [
                *BASE_CELLS[:-1],
                "import helpers\nfrom pkg import tools\nimport local_mod\nimport json\n\n"
                "def uses_helpers(model, size: int = 1):\n    return helpers.f(size)\n",
                "from peach_cli import endpoint\n\n"
                '@endpoint("/d", init_fn=init_model, memory=1024, replicas=3)\n'
                "def deco(init_state, q: str = ''):\n    return [q]\n",
            ]
        },
        {
            "helpers.py": "import pkg.tools\n",
            "pkg/__init__.py": "",
            "pkg/tools.py": "from . import more\n",
            "pkg/more.py": "",
            "notebooks/local_mod.py": "",
            "unused.py": "",
        },
    )
    plan, diagnostics = build_plan(tmp_path)
    assert [d.code for d in diagnostics if d.severity != "info"] == ["PC302", "PC304"]
    assert plan is not None
    assert (plan.codops, plan.timeout_s) == ("shop", 7.5)
    assert plan.py_environments == {"base": ("orjson",), "llm": ("orjson", "numpy")}
    assert plan.watched_files == ("peach.yaml", "notebooks/nb.ipynb")
    a = plan.endpoints["a"]
    assert (a.primary, a.fallback, a.decorated) == ("main", "fallback", False)
    main = a.components["main"]
    assert main.args == {"size": 3}
    assert (main.replicas, main.memory, main.cpus, main.media_type) == (
        2,
        512 * 2**20,
        0.5,
        "text/event-stream",
    )
    assert (main.init, main.method, main.state_param) == ("init_model", "uses_helpers", "model")
    assert main.dependencies == ("orjson", "numpy") and main.py_env == "llm"
    assert main.modules == (
        "helpers.py",
        "notebooks/local_mod.py",
        "pkg/__init__.py",
        "pkg/more.py",
        "pkg/tools.py",
    )
    assert main.notebook == main.source_name == "notebooks/nb.ipynb"
    assert [cell for _, cell, _ in main.line_map] == [2, 9]
    compile(main.source, main.source_name, "exec")
    fallback = a.components["fallback"]
    assert (fallback.cpus, fallback.media_type, fallback.memory, fallback.dependencies) == (
        1.0,
        DEFAULT_MEDIA_TYPE,
        None,
        ("orjson", "numpy"),
    )
    deco = plan.endpoints["deco"]
    assert (deco.url, deco.primary, deco.fallback, deco.decorated) == ("/d", "main", None, True)
    spec = deco.components["main"]
    assert (spec.init, spec.state_param, spec.memory, spec.replicas, spec.py_env) == (
        "init_model",
        "init_state",
        1024,
        3,
        "base",
    )
    assert spec.dependencies == ("orjson",)
    assert len(spec.line_map) == 9  # decorator notebooks run in full: every code cell
