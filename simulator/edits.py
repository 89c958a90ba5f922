"""What kind of edit a component's new code is: a method edit that can be patched, or not.

The pure part of hot patching (``simulator.hotpatch`` applies it). A save whose only change
to a component is in its code can be patched into the running replicas — their ``init``
state kept — when the edit leaves ``init`` alone: the ``init`` function's source and the
cell that defines it are unchanged (when that cell also defines the method, everything in
it but the method's own definition is unchanged), and the method did not become or stop
being a generator. Code is compared by syntax tree, so comments and blank lines do not
count. Nothing here runs user code::

    restart_reason(old_spec, new_spec)   # None: patch; "init", "generator", ...: restart
"""

from __future__ import annotations

import ast

from peach_cli.notebook import FunctionNode, is_async_generator, is_generator
from peach_cli.plan import ComponentSpec

REASONS = {
    "init": "init changed",
    "generator": "method is now a generator",
    "not generator": "method is no longer a generator",
    "code": "code changed",
}
"""What each reason of ``restart_reason`` means, as the reload line says it."""


def split_cells(spec: ComponentSpec) -> list[str]:
    """The cells the extracted source was joined from, in order (``ComponentSpec.line_map``).

    >>> from peach_cli.plan import ComponentSpec
    >>> spec = ComponentSpec("e", "main", "/e", "N.ipynb", "a = 1\\n\\nb = 2\\n\\n", "N.ipynb",
    ...                      "f", line_map=((1, 1, 1), (3, 2, 1)))
    >>> split_cells(spec)
    ['a = 1\\n\\n', 'b = 2\\n\\n']
    """
    lines = spec.source.splitlines(keepends=True)
    starts = [first for first, _, _ in spec.line_map] or [1]
    ends = [*starts[1:], len(lines) + 1]
    return ["".join(lines[start - 1 : end - 1]) for start, end in zip(starts, ends, strict=True)]


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _is_function(node: ast.stmt, name: str) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name


def _defining(trees: list[ast.Module], name: str) -> tuple[int, FunctionNode] | None:
    """The last cell defining function ``name`` at top level (as re-running would), and it."""
    found = None
    for index, tree in enumerate(trees):
        for node in tree.body:
            if _is_function(node, name):
                assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                found = (index, node)
    return found


def _streams(function: FunctionNode) -> bool:
    return is_generator(function) or is_async_generator(function)


def _dump_without(tree: ast.Module, name: str) -> list[str]:
    """The cell's top-level statements but the definition of ``name``, positions ignored."""
    return [ast.dump(node) for node in tree.body if not _is_function(node, name)]


def restart_reason(old: ComponentSpec, new: ComponentSpec) -> str | None:
    """Why the new code of a component needs new replicas (a key of ``REASONS``), or None
    when it can be patched into the running ones: only the method's code changed.

    The two specs are assumed to differ only in their code and cell positions (the config
    and the imported project modules are compared by ``simulator.changes``).
    """
    old_trees = [_parse(text) for text in split_cells(old)]
    new_trees = [_parse(text) for text in split_cells(new)]
    if any(t is None for t in old_trees) or any(t is None for t in new_trees):
        return "code"
    before = [t for t in old_trees if t is not None]
    after = [t for t in new_trees if t is not None]
    old_method, new_method = _defining(before, old.method), _defining(after, new.method)
    if old_method is None or new_method is None:
        return "code"
    if _streams(old_method[1]) != _streams(new_method[1]):
        return "generator" if _streams(new_method[1]) else "not generator"
    if not new.init:
        return None
    old_init, new_init = _defining(before, new.init), _defining(after, new.init)
    if old_init is None or new_init is None:
        return "init"
    old_shared, new_shared = old_init[0] == old_method[0], new_init[0] == new_method[0]
    if old_shared != new_shared:
        return "init"
    old_cell, new_cell = before[old_init[0]], after[new_init[0]]
    if new_shared:  # the method may change inside the cell it shares with init, nothing else
        unchanged = _dump_without(old_cell, new.method) == _dump_without(new_cell, new.method)
    else:
        unchanged = ast.dump(old_cell) == ast.dump(new_cell)
    return None if unchanged else "init"
