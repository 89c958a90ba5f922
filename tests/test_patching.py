"""What a hot patch runs of a component's new code (``peach_cli.contract.patching``),
checked by running old and new code for real: the patched namespace must equal what a
fresh run of the new code gives, except for what an unchanged statement bound before."""

from __future__ import annotations

from typing import Any

from peach_cli.contract.patching import bound_names, patch_plan


def run(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<old>", "exec"), namespace)  # noqa: S102 - the test's own code
    return namespace


def patch(old: str, new: str, namespace: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """The namespace after the patch, and the line numbers (in ``new``) of what ran."""
    plan = patch_plan(old, new, "<new>")
    patched = dict(namespace)
    for name in plan.dropped:
        patched.pop(name, None)
    exec(compile(plan.module, "<new>", "exec"), patched)  # noqa: S102
    return patched, [statement.lineno for statement in plan.module.body]


OLD = """\
import math
RUNS = []
RUNS.append("top level")
CACHE = {}


class Model:
    pass


def helper():
    return 1


def init():
    CACHE["w"] = Model()


def predict():
    return helper()
"""


def test_unchanged_statements_keep_what_they_bound_and_functions_are_new() -> None:
    old = run(OLD)
    old["init"]()
    new_source = OLD.replace("return helper()", "return helper() + 1")
    patched, ran = patch(OLD, new_source, old)
    assert ran == [11, 15, 19]  # the three function definitions, nothing else
    assert patched["RUNS"] == ["top level"]  # not run again
    assert patched["Model"] is old["Model"] and isinstance(patched["CACHE"]["w"], patched["Model"])
    assert patched["predict"]() == 2 and patched["predict"] is not old["predict"]
    assert patched["predict"].__globals__ is patched  # the new function sees the new module
    assert old["predict"]() == 1  # the module in use is untouched


def test_a_changed_statement_runs_and_so_does_every_statement_that_reads_it() -> None:
    old_source = "A = 1\nB = A * 10\nC = 5\nC += A\nD = 7\n"
    new_source = "A = 2\nB = A * 10\nC = 5\nC += A\nD = 7\n"
    patched, ran = patch(old_source, new_source, run(old_source))
    # C += A reads A: it runs, and so does C = 5 before it (C += A changes C in place)
    assert ran == [1, 2, 3, 4]
    fresh = run(new_source)
    assert {k: patched[k] for k in "ABCD"} == {k: fresh[k] for k in "ABCD"}
    old_source = "RUNS = []\nRUNS.append(N := 1)\nLIMIT = 2\n"
    patched, ran = patch(old_source, old_source.replace("N := 1", "N := 3"), run(old_source))
    assert ran == [1, 2] and patched["RUNS"] == [3]  # the list is made anew, not appended to
    old_source = "def build():\n    return [1]\n\n\nTABLE = build()\n"
    new_source = "def build():\n    return [2]\n\n\nTABLE = build()\n"
    patched, ran = patch(old_source, new_source, run(old_source))
    assert ran == [1, 5] and patched["TABLE"] == [2]


def test_a_class_that_reads_a_changed_name_is_defined_again() -> None:
    old_source = (
        "def scale():\n    return 2\n\n\nclass M:\n    def f(self):\n        return scale()\n"
    )
    new_source = old_source.replace("return 2", "return 3")
    old = run(old_source)
    patched, _ = patch(old_source, new_source, old)
    assert patched["M"] is not old["M"] and patched["M"]().f() == 3
    kept_source = "class K:\n    x = 1\n\n\n" + old_source
    old = run(kept_source)
    patched, _ = patch(kept_source, "class K:\n    x = 1\n\n\n" + new_source, old)
    assert patched["K"] is old["K"]


def test_names_the_new_code_no_longer_binds_are_dropped() -> None:
    old_source = "import json\nLIMIT = 3\n\n\ndef gone():\n    pass\n\n\ndef kept():\n    pass\n"
    new_source = "def kept():\n    return 1\n"
    plan = patch_plan(old_source, new_source)
    assert plan.dropped == {"json", "LIMIT", "gone"}


def test_bound_names_of_top_level_statements() -> None:
    import ast

    tree = ast.parse(
        "import os.path as p, sys\nfrom x import *\nfrom y import a as b\n"
        "for i, (j, k) in []: pass\nif True:\n    def f(): z = 1\n    class C: w = 2\n"
        "with open('f') as handle: pass\nx = y = lambda q: q\n"
    )
    names = [bound_names(statement) for statement in tree.body]
    assert names == [
        {"p", "sys"},
        set(),
        {"b"},
        {"i", "j", "k"},
        {"f", "C"},
        {"handle"},
        {"x", "y"},
    ]


def test_what_a_method_changes_when_called_does_not_rerun_the_module_data() -> None:
    """A class defined again (it reads a changed helper) whose method fills CACHE: the
    CACHE = {} statement is not run again, so what init put there stays."""
    old_source = (
        "CACHE = {}\n\n\ndef key():\n    return 'a'\n\n\n"
        "class Store:\n    def put(self, v):\n        CACHE[key()] = v\n"
    )
    new_source = old_source.replace("return 'a'", "return 'b'")
    old = run(old_source)
    old["CACHE"]["from init"] = 1
    patched, ran = patch(old_source, new_source, old)
    assert ran == [4, 8]  # key() and the class that reads it; not CACHE = {}
    patched["Store"]().put(2)
    assert patched["CACHE"] == {"from init": 1, "b": 2}
