"""Property: whatever a user does to a valid conf, validate never crashes and every problem
has a position (a file of the project and a line)."""

from __future__ import annotations

import copy
import json
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from projectkit import BASE_CELLS, diagnose, write_project

from peach_cli.project.diagnostics import CODES

VALID = {
    "codops": "shop",
    "timeout_s": 10,
    "py_environments": {"base": {"dependencies": ["orjson"]}, "llm": {"dependencies": ["numpy"]}},
    "endpoints": {
        "a": {
            "url": "/a",
            "py_env": "llm",
            "components": {
                "main": {
                    "notebook": "nb.ipynb",
                    "init": "init_model",
                    "method": "ask",
                    "args": {"size": 2},
                    "replicas": 2,
                    "memory": "1Gi",
                    "cpus": 0.5,
                },
                "fallback": {"notebook": "nb.ipynb", "method": "no_model"},
            },
        },
        "b": {"url": "/b", "components": {"main": {"notebook": "nb.ipynb", "method": "streamer"}}},
    },
    "decorator_endpoints": ["D.ipynb"],
    "tasks": {"t": {"notebook": "nb.ipynb", "method": "ask", "py_env": "llm"}},
}
DECORATED = [
    "from peach_cli import endpoint\n\ndef load():\n    return 1\n",
    '@endpoint("/d", init_fn=load, args={"k": 1})\ndef d(init_state, k: int = 0):\n    return k\n',
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "",
            "/",
            "/a",
            "/_peach/x",
            "nb.ipynb",
            "../x.ipynb",
            "D.ipynb",
            "ask",
            "init_model",
            "init_needs",
            "llm",
            "base",
            "2Gi",
            "main",
            "fallback",
            "stream",
            "dependencies",
            "codops",
            "x" * 300,
        ]
    ),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


def paths(node, prefix=()):
    """Every path to a value inside ``node``."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from paths(value, (*prefix, index))


def mutate(conf: dict, data) -> dict:
    conf = copy.deepcopy(conf)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        every = list(paths(conf))
        path = data.draw(st.sampled_from(every), label="path")
        parent = conf
        for part in path[:-1]:
            parent = parent[part]
        action = data.draw(
            st.sampled_from(["replace", "delete", "rename", "add", "duplicate"]), label="action"
        )
        if not path:
            continue
        key = path[-1]
        if action == "replace":
            parent[key] = data.draw(values, label="value")
        elif action == "delete":
            del parent[key]
        elif action == "rename" and isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=10), label="new key")] = parent.pop(key)
        elif action == "add" and isinstance(parent[key], dict):
            parent[key][data.draw(st.text(max_size=10), label="added")] = data.draw(values)
        elif action == "duplicate" and isinstance(parent, dict):
            parent[f"{key}2"] = copy.deepcopy(parent[key])
    return conf


def text_mutation(text: str, data) -> str:
    """Damage the YAML text itself: insert, delete or replace a few characters."""
    for _ in range(data.draw(st.integers(0, 3), label="edits")):
        at = data.draw(st.integers(0, len(text)), label="at")
        kind = data.draw(st.sampled_from(["insert", "delete"]), label="edit")
        if kind == "insert":
            text = (
                text[:at]
                + data.draw(
                    st.sampled_from(
                        [
                            ":",
                            "-",
                            "\t",
                            "  ",
                            "[",
                            "{",
                            "'",
                            "&a",
                            "*a",
                            "!!x ",
                            "\n",
                            "#",
                            "\x00",
                            "é",
                        ]
                    )
                )
                + text[at:]
            )
        else:
            text = text[:at] + text[at + data.draw(st.integers(1, 5)) :]
    return text


def check(project: Path) -> None:
    files = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    for diagnostic in diagnose(project):
        assert diagnostic.code in CODES
        assert diagnostic.position.file in files, diagnostic
        assert diagnostic.position.line >= 1, diagnostic
        assert diagnostic.message


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_confs_never_crash_and_errors_have_positions(data):
    conf = mutate(VALID, data)
    text = yaml.safe_dump(conf, sort_keys=False, allow_unicode=True)
    if data.draw(st.booleans(), label="damage text"):
        text = text_mutation(text, data)
    with tempfile.TemporaryDirectory() as folder:
        project = write_project(Path(folder), text, {"nb.ipynb": BASE_CELLS, "D.ipynb": DECORATED})
        check(project)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(cells=st.lists(st.text(max_size=40), max_size=4), url=st.text(max_size=10))
def test_arbitrary_notebook_text_never_crashes(cells, url):
    conf = copy.deepcopy(VALID)
    decorated = [*DECORATED, f"@endpoint({url!r})\n" + "\n".join(cells)]
    with tempfile.TemporaryDirectory() as folder:
        project = write_project(
            Path(folder),
            yaml.safe_dump(conf),
            {"nb.ipynb": [*BASE_CELLS, *cells], "D.ipynb": decorated},
        )
        check(project)


# -- names, urls and requirement strings through `peach validate` (SPEC §1 rules) ------------

NAME_RULE = re.compile(r"[A-Za-z0-9_.-]+")
URL_RULE = re.compile(r"/[A-Za-z0-9._~/-]*")
hostile_text = st.characters(blacklist_categories=("Cs",), max_codepoint=0x3000)
names = st.sampled_from(["ep", "ep\nforged", "a b", "ep\x1b[41m", "é", "v1.2_x-y"]) | st.text(
    hostile_text, min_size=1, max_size=10
)
urls = st.sampled_from(
    ["/ep", "/a b", "/q?x=1", "/a/../b", "/_peach/x", "/a%0a", "/v2/ok~x", "/x\ny"]
) | st.text(hostile_text, max_size=10).map(lambda t: "/" + t)
requirements = st.sampled_from(
    [
        "numpy>=1.24",
        "requests\n--index-url http://127.0.0.1:9/simple",
        "-r /etc/passwd",
        "-e file:///etc",
        "numpy=1.26",
        "uvicorn[standard>=0.29",
        "pkg @ https://example.com/p.whl",
        "pkg @ file:///etc",
        "git+https://github.com/a/b",
        'pkg[x]; python_version>="3.10"',
    ]
) | st.text(hostile_text, min_size=1, max_size=16)


def url_ok(url: str) -> bool:
    return bool(URL_RULE.fullmatch(url)) and ".." not in url.split("/")


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=names, url=urls, requirement=requirements)
def test_names_urls_and_requirements_through_peach_validate(name, url, requirement):
    from cli_support import run_peach
    from packaging.requirements import InvalidRequirement, Requirement

    conf = {
        "codops": "shop",
        "py_environments": {"base": {"dependencies": [requirement]}},
        "endpoints": {
            name: {"url": url, "components": {"main": {"notebook": "nb.ipynb", "method": "ask"}}}
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        project = write_project(Path(folder), json.dumps(conf), {"nb.ipynb": BASE_CELLS})
        result = run_peach("validate", str(project))
    out = result.stdout + result.stderr
    assert result.returncode in (0, 1) and "Traceback" not in out, out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\x1b]", out), (
        out
    )  # nothing raw reaches a terminal
    assert ("error PC121" in out) is (NAME_RULE.fullmatch(name) is None), out
    url_refused = "error PC122" in out or "error PC116" in out
    assert url_refused is (not url_ok(url) or url == "/_peach" or url.startswith("/_peach/")), out
    if "error PC120" not in out:
        assert not re.search(r"[\x00-\x1f\x7f-\x9f]", requirement)
        assert not requirement.strip().startswith("-")
        assert "file:" not in requirement
        if not requirement.startswith("git+"):
            try:
                Requirement(requirement)
            except InvalidRequirement:
                raise AssertionError(f"{requirement!r} was accepted") from None
