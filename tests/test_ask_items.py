"""`peach ask` items are httpie's (SPEC §3): split by httpie's rules, checked against
httpie's own item test vectors (``tests/data/httpie_items.json``, from httpie's
``tests/test_cli.py``), and sent where they say — a header never ends up in the URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ask_support import ServerState, ask, make_app, run_server

from peach_cli.client.items import build_request, split_item
from peach_cli.errors import UsageError

VECTORS = json.loads((Path(__file__).parent / "data" / "httpie_items.json").read_text())
FILE_CONTENT = "Hello, world\nsecond line\n"
JSON_FILE_CONTENT = {"name": "Jakub Roztočil", "unicode": "χρυσαφὶ 太陽"}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("items")
    (folder / "test.txt").write_text(FILE_CONTENT)
    (folder / "test.json").write_text(json.dumps(JSON_FILE_CONTENT, ensure_ascii=False))
    return {"{FILE}": str(folder / "test.txt"), "{JSON_FILE}": str(folder / "test.json")}


def fill(text, files: dict[str, str]):
    if isinstance(text, list):
        return [fill(part, files) for part in text]
    if text == "{FILE_CONTENT}":
        return FILE_CONTENT
    if text == "{JSON_FILE_CONTENT}":
        return JSON_FILE_CONTENT
    if isinstance(text, str):
        for placeholder, path in files.items():
            text = text.replace(placeholder, path)
    return text


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["item"] for c in VECTORS["cases"]])
def test_httpie_item_vectors(case, files):
    item = fill(case["item"], files)
    if case["httpie"] is None:
        with pytest.raises(UsageError):
            split_item(item)
    else:
        split = split_item(item)
        assert [split.key, split.sep, split.value] == fill(case["httpie"], files)
    outcome = case["peach"]
    if "refused" in outcome:
        with pytest.raises(UsageError) as refused:
            build_request("/a", [item])
        assert repr(item) in refused.value.message and outcome["refused"] in refused.value.message
        return
    request = build_request("/a", [item])
    (kind, expected), *_ = outcome.items()
    expected = fill(expected, files)
    if kind == "header":
        assert tuple(expected) in request.headers
        assert request.params == () and request.body is None
    elif kind == "unset":
        assert expected.lower() not in {name.lower() for name, _ in request.headers}
        assert request.params == () and request.body is None
    elif kind in ("string", "query"):  # a short KEY=VALUE goes in the query string (§3)
        assert request.params == (tuple(expected),) and request.body is None
    else:
        assert request.body == {expected[0]: expected[1]} and request.params == ()


def test_a_name_colon_leaves_out_a_default_header():
    names = [name for name, _ in build_request("/a", ["User-Agent:"]).headers]
    assert "User-Agent" not in names
    assert ("User-Agent", "curl/8") in build_request("/a", ["User-Agent:curl/8"]).headers


@pytest.fixture(scope="module")
def url():
    with run_server(make_app(ServerState())) as base:
        yield base


@pytest.mark.slow
def test_items_reach_the_server_where_they_say(url, files):
    result = ask(
        f"{url}/echo",
        "Authorization:Basic dTpw==",
        "X-Trace: 7",
        r"baz\=bar=foo",
        "page==2",
        f"note=@{files['{FILE}']}",
        f"person:=@{files['{JSON_FILE}']}",
        "n:=3",
    )
    assert result.code == 0, result.stderr
    echoed = json.loads(result.stdout)
    assert echoed["headers"]["authorization"] == "Basic dTpw=="  # a header, not in the URL
    assert echoed["headers"]["x-trace"] == "7"
    assert echoed["query"] == [["page", "2"], ["baz=bar", "foo"], ["note", FILE_CONTENT]]
    assert echoed["body"] == {"person": JSON_FILE_CONTENT, "n": 3}
    assert "dTpw" not in json.dumps(echoed["query"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("photo@cat.jpg", "'photo@cat.jpg' is a file upload"),
        ("X-Empty;", "'X-Empty;' is an empty header"),
        ("a[b]=c", "'a[b]=c' uses a nested key"),
        ("size:=@missing.json", "'size:=@missing.json': cannot read missing.json"),
    ],
)
def test_unsupported_items_are_refused_naming_them(url, item, says):
    result = ask(f"{url}/echo", item)
    assert result.code == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_bad_item_hints_at_headers_too(url):
    result = ask(f"{url}/echo", "novalue")
    assert result.code == 2
    assert "'novalue' is not KEY=VALUE, KEY:=JSON, KEY==VALUE or Name:Value" in result.stderr
    assert "Name:Value" in result.stderr.split("is not", 1)[1].split("\n", 1)[1]  # the hint
