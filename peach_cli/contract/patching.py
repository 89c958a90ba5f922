"""Which statements of a component's new code a hot patch runs, in a copy of its module.

A patch keeps what a replica holds: the state ``init`` returned, and what else the replica
built — a dict ``init`` filled, a global it set, a model a top-level statement loaded, the
classes of the objects in its state (so ``isinstance`` still holds). So the patched module
starts as a copy of the module in use, and of the new code only these statements run, in
order (``patch_plan``):

- every function definition: the new method and its helpers, each cheap to define and
  bound to the new module;
- every other top-level statement that is new or changed (compared by syntax tree, so
  comments, blank lines and positions do not count);
- an unchanged statement that reads a name one of those binds anew (``B = A * 10`` after
  an edit of ``A = 1``, ``TABLE = build()`` after an edit of ``build``): what it bound
  would be stale otherwise.

Every other unchanged statement keeps the object it bound. Names the old code bound at
top level and the new code does not are dropped, so a deleted helper fails as it would
after a restart. Standard library only (this runs inside every replica)::

    plan = patch_plan(old_source, new_source, "Notebook.ipynb")
    namespace = dict(old_module.__dict__)
    for name in plan.dropped: namespace.pop(name, None)
    exec(compile(plan.module, "Notebook.ipynb", "exec"), namespace)
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True)
class PatchPlan:
    module: ast.Module
    """The statements to run, with their positions in the new code (for tracebacks)."""
    dropped: frozenset[str]
    """Top-level names of the old code that the new code no longer binds."""


def bound_names(statement: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds."""
    if isinstance(statement, (*_FUNCTIONS, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {
            alias.asname or alias.name.split(".")[0]
            for alias in statement.names
            if alias.name != "*"
        }
    names: set[str] = set()
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, _SCOPES):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)  # a def or class nested in an if/try/with at top level
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= bound_names(node)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return names


def _read_names(statement: ast.stmt) -> set[str]:
    """Every name the statement reads, in nested bodies too (a class's methods read the
    module's names when they run)."""
    names: set[str] = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)  # `X += 1` reads X
    return names


def _executed(statement: ast.stmt) -> list[ast.AST]:
    """The nodes that run when the statement runs: not the bodies of the functions and
    lambdas it defines (a method's ``CACHE[k] = v`` runs when it is called)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, (*_FUNCTIONS, ast.Lambda)) and node is not statement:
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _modified_names(statement: ast.stmt) -> set[str]:
    """Names whose object the statement may change in place, or rebinds from itself:
    ``C += 1``, ``X = X + 1``, ``CACHE["k"] = v``, ``obj.attr = v``, ``RUNS.append(v)``."""
    names = _read_names(statement) & bound_names(statement)
    for node in _executed(statement):
        if isinstance(node, (ast.Subscript, ast.Attribute)) and not isinstance(node.ctx, ast.Load):
            base = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
        else:
            continue
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        if isinstance(base, ast.Name):
            names.add(base.id)
    return names


def patch_plan(old_source: str, new_source: str, filename: str = "<patch>") -> PatchPlan:
    """What to run of ``new_source`` in a copy of the module ``old_source`` made.

    Raises ``SyntaxError`` when the new code does not parse (the old code did: it runs)."""
    old = ast.parse(old_source)
    new = ast.parse(new_source, filename)
    body = new.body
    old_functions = {node.name: ast.dump(node) for node in old.body if isinstance(node, _FUNCTIONS)}
    unchanged = Counter(ast.dump(node) for node in old.body if not isinstance(node, _FUNCTIONS))
    run: set[int] = set()
    changed_functions: set[str] = set()
    for index, statement in enumerate(body):
        if isinstance(statement, _FUNCTIONS):
            run.add(index)  # cheap, and it must see the new module
            if old_functions.get(statement.name) != ast.dump(statement):
                changed_functions.add(statement.name)
            continue
        key = ast.dump(statement)
        if unchanged[key] > 0:
            unchanged[key] -= 1
        else:
            run.add(index)
    # Close over the data flow: a statement reading what a re-run one binds runs again;
    # a re-run one that changes a name in place (C += 1) needs that name's earlier
    # statements to run again first, as a fresh run would.
    statements = [i for i, s in enumerate(body) if not isinstance(s, _FUNCTIONS)]
    grew = True
    while grew:
        grew = False
        fresh = set(changed_functions)
        for index in statements:
            if index in run:
                fresh |= bound_names(body[index])
            elif _read_names(body[index]) & fresh:
                run.add(index)
                fresh |= bound_names(body[index])
                grew = True
        for index in [i for i in statements if i in run]:
            modified = _modified_names(body[index])
            for earlier in statements:
                if earlier >= index:
                    break
                if earlier not in run and bound_names(body[earlier]) & modified:
                    run.add(earlier)
                    grew = True
    before = set().union(*(bound_names(s) for s in old.body))
    after = set().union(*(bound_names(s) for s in body))
    module = ast.Module(body=[s for i, s in enumerate(body) if i in run], type_ignores=[])
    return PatchPlan(module, frozenset(before - after))
