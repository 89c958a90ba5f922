"""Reading notebooks: magics dropped with stable line numbers, definitions, extraction, decorators."""

from __future__ import annotations

import pytest
from projectkit import notebook_json

from peach_cli.project import notebook as nb


def parse(*cells) -> nb.Notebook:
    return nb.parse_notebook("N.ipynb", notebook_json(list(cells)).encode())


def test_magics_and_shell_lines_become_pass_keeping_line_numbers():
    notebook = parse("%load_ext autoreload\nimport os\nfiles = !ls\nif os:\n    !echo hi\nx = 1\n")
    cell = notebook.cells[0]
    assert cell.dropped == (1, 3, 5)
    assert cell.source.splitlines() == ["pass", "import os", "pass", "if os:", "    pass", "x = 1"]
    assert cell.tree is not None and cell.syntax_error is None


def test_valid_python_is_never_touched():
    text = 'doc = """\n!not a shell line\n%not a magic\n"""\n'
    cell = parse(text).cells[0]
    assert (cell.source, cell.dropped) == (text, ())


def test_cell_magics_drop_the_cell_unless_the_body_is_python():
    timed, shell = parse("%%time\ndef f():\n    return 1\n", "%%bash\necho $HOME\nls -l\n").cells
    assert timed.dropped == (1,) and "f" in parse("%%time\ndef f():\n    return 1\n").definitions
    assert shell.dropped == (1, 2, 3, 4) and shell.tree is not None
    assert shell.source.count("\n") == "%%bash\necho $HOME\nls -l\n".count("\n")


def test_cell_numbers_count_every_cell_and_the_last_definition_wins():
    notebook = parse(
        ("markdown", "# t"), "def f():\n    return 1\n", ("raw", "x"), "def f():\n    return 2\n"
    )
    assert [c.number for c in notebook.cells] == [2, 4]
    assert notebook.definitions["f"].cell.number == 4


def test_bindings_other_than_def_count_as_definitions():
    notebook = parse(
        "import json as j\nfrom os import path\nA, (B, C) = 1, (2, 3)\nclass K: pass\n"
    )
    assert {"j", "path", "A", "B", "C", "K"} <= set(notebook.definitions)
    assert notebook.functions() == []


def test_extraction_takes_defining_cells_in_order_with_a_line_map():
    notebook = parse(
        "def init():\n    return 1\n",
        "UNUSED = 1\n",
        "x = 0\n\ndef method(model):\n    return model\n",
    )
    extraction = notebook.extract(["method", "init"])
    assert [c.number for c in extraction.cells] == [1, 3]
    assert extraction.line_map == ((1, 1, 1), (4, 3, 1))
    assert "UNUSED" not in extraction.source
    module_line = extraction.source.splitlines().index("def method(model):") + 1
    assert module_line == 4 + 2  # cell 3 starts at module line 4; the def is its line 3
    compile(extraction.source, "N.ipynb", "exec")
    assert notebook.extract(None).source.count("UNUSED") == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "invalid JSON"),
        (b"[]", "no list of cells"),
        (b'{"cells": {}}', "no list of cells"),
        (b'{"cells": [], "nbformat": 3}', "nbformat 3"),
        (b'{"worksheets": [{"cells": []}], "nbformat": 3}', "nbformat 3"),  # as v3 saves it
        (b'{"cells": [1]}', "cell 1 is not an object"),
        (b'{"cells": [{"cell_type": "code", "source": 5}]}', "no text source"),
    ],
)
def test_what_is_not_a_notebook(data, message):
    with pytest.raises(nb.NotebookError, match=message):
        nb.parse_notebook("N.ipynb", data)


def test_function_shapes():
    tree = parse(
        "def a(x, y=1, *args, z, w=2, **kw): pass\n"
        "async def s():\n    yield 1\n"
        "def g():\n    def inner():\n        yield 1\n    return 'drift_detected'\n"
    )
    d = tree.definitions
    assert nb.required_parameters(d["a"].node) == ["x", "z"]
    assert nb.accepts(d["a"].node, "model") and not nb.accepts(d["s"].node, "model")
    assert nb.is_async_generator(d["s"].node) and not nb.is_generator(d["g"].node)
    assert nb.mentions_drift(d["g"].node) is not None


def test_decorator_arguments_are_read_statically():
    notebook = parse(
        "import peach_cli as pc\nfrom peach_cli import endpoint as ep\n\ndef load():\n    return 1\n",
        '@ep("/a", init_fn=load, args={"k": [1, 2]}, replicas=3, memory="1Gi", cpus=0.5,\n'
        '    media_type="text/event-stream")\ndef a(init_state):\n    return 1\n',
        '@pc.endpoint(url="/b")\nasync def b():\n    yield "x"\n',
        "def plain():\n    return 1\n",
    )
    found = {f.name: f for f in nb.find_endpoint_functions(notebook)}
    assert set(found) == {"a", "b"}
    assert found["a"].options == {
        "url": "/a",
        "init_fn": "load",
        "args": {"k": [1, 2]},
        "replicas": 3,
        "memory": "1Gi",
        "cpus": 0.5,
        "media_type": "text/event-stream",
    }
    assert found["a"].positions["media_type"] == (2, 16)
    assert found["b"].options == {"url": "/b"} and not found["b"].problems


def test_redefining_a_decorated_function_without_decorator_removes_it():
    notebook = parse('@endpoint("/a")\ndef a():\n    return 1\n', "def a():\n    return 2\n")
    assert nb.find_endpoint_functions(notebook) == []


def test_imported_modules():
    tree = parse("import a.b, c\nfrom .d import e\nfrom f import g\n").cells[0].tree
    assert nb.imported_modules(tree) == [
        ("a.b", 0),
        ("c", 0),
        ("d", 1),
        ("d.e", 1),
        ("f", 0),
        ("f.g", 0),
    ]
