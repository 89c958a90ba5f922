"""Rules of the dev gateway's structure (issue 51): the attempt written once, the request a
call serves passed explicitly, the debugger told in one place, the gateway's own paths and
tool header named once. Rules over the code's syntax, not name pins: a rename keeps them,
a second copy elsewhere breaks them."""

from __future__ import annotations

import ast

import pytest
from test_structure import PACKAGES, ROOT, _sources, _tree, _walk

pytestmark = pytest.mark.xdist_group("structure")  # with test_structure: one parse


def _trees(packages: tuple[str, ...] = PACKAGES) -> dict[str, ast.Module]:
    return {
        path.relative_to(ROOT).as_posix(): _tree(path)
        for name, path in _sources().items()
        if name.split(".")[0] in packages
    }


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    """``(name, line)`` of every call: ``f(...)`` and ``x.f(...)`` give ``f``."""
    found = []
    for node in _walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                found.append((func.id, node.lineno))
            elif isinstance(func, ast.Attribute):
                found.append((func.attr, node.lineno))
    return found


def test_no_request_state_hides_in_a_context_variable() -> None:
    """What a request to ``peach dev`` carries (its line for a breakpoint's banner, say) is
    passed along with its call: no ``ContextVar`` set on one of the gateway's paths and read
    on another."""
    found = [
        f"{path}:{line}"
        for path, tree in _trees(("simulator",)).items()
        for name, line in _calls(tree)
        if name == "ContextVar"
    ]
    assert found == []


def test_the_debugger_relay_is_told_of_calls_in_one_place() -> None:
    """A replica's call or stream is registered with the debugger relay by the replica's
    table of requests in flight, whichever path sent it (a task's run by its runner)."""
    allowed = {"simulator/replica.py", "simulator/tasks/run.py"}
    found = [
        f"{path}:{line} {name}"
        for path, tree in _trees(("simulator",)).items()
        for name, line in _calls(tree)
        if name in ("register", "unregister")
        and path not in allowed
        and path != "simulator/metrics.py"  # prometheus' registry.register
    ]
    assert found == []


def test_a_calls_deadline_is_made_by_the_contract_only() -> None:
    """Every path bounds a call with the contract's attempt (``Attempt``, ``bounded``): no
    host builds a ``Deadline`` of its own."""
    found = [
        f"{path}:{line}"
        for path, tree in _trees().items()
        if not path.startswith("peach_cli/runtime/contract/")
        for name, line in _calls(tree)
        if name == "Deadline"
    ]
    assert found == []


def test_the_gateways_paths_and_tool_header_are_named_once() -> None:
    """``/_peach/…`` paths and ``x-peach-tool`` are written in ``peach_cli.internal`` and
    taken from there by the servers and the clients (words about them, in messages and
    help, may name them)."""
    found = []
    for path, tree in _trees().items():
        if path == "peach_cli/internal.py":
            continue
        docstrings = {
            id(node.body[0].value)
            for node in _walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in _walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and (node.value.startswith("/_peach") or node.value.lower() == "x-peach-tool")
            ):
                found.append(f"{path}:{node.lineno} {node.value[:60]!r}")
    assert found == []
