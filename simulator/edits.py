"""What kind of edit a component's new code is: a method edit that can be patched, or not.

The pure part of hot patching (``simulator.hotpatch`` applies it). A save whose only change
to a component is in its code can be patched into the running replicas — their ``init``
state kept — when the edit leaves ``init`` alone: the ``init`` function's source and the
cell that defines it are unchanged (when that cell also defines the method, everything in
it but the method's own definition is unchanged), and the method did not become or stop
being a generator. A patch runs the whole new code in a new module and keeps only what
``init`` returned, so it restarts instead when the state depends on more than that: a
function ``init`` calls changed; ``init`` or a function it calls sets module globals
(``global X``) or fills a module-level object in place (``CACHE[k] = v``); a class of
the code changed; or the method checks objects against the code's own classes or enums
(``isinstance(model, Model)``: the state's objects are of the class as it was). Code is
compared by syntax tree, so comments and blank lines do not count. Nothing here runs user
code::

    restart_reason(old_spec, new_spec)   # None: patch; "init", "generator", ...: restart
"""

from __future__ import annotations

import ast

from peach_cli.project.notebook import FunctionNode, is_async_generator, is_generator
from peach_cli.runtime.plan import ComponentSpec

REASONS = {
    "init": "init changed",
    "generator": "method is now a generator",
    "not generator": "method is no longer a generator",
    "code": "code changed",
    "init globals": "init sets module globals, which a patched method would not see",
    "init module data": "init fills module-level data, which a patched method would not see",
    "own classes": "the code checks objects against its own classes, which a patch defines anew",
    "class changed": "a class changed, and the state's objects keep the class they were made of",
}
"""What each reason of ``restart_reason`` means, as the reload line says it."""


def split_cells(spec: ComponentSpec) -> list[str]:
    """The cells the extracted source was joined from, in order (``ComponentSpec.line_map``).

    >>> from peach_cli.runtime.plan import ComponentSpec
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


def _module_data_names(trees: list[ast.Module]) -> set[str]:
    """The names the code binds at top level to objects of its own: assigned values and
    classes, not imports (a module is shared through ``sys.modules``), not functions, not
    loggers (``logging.getLogger`` hands out one shared object per name)."""
    names: set[str] = set()
    imported: set[str] = set()
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported |= {a.asname or a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.Assign) and _is_logger(node.value):
                continue
            else:
                for child in ast.walk(node):
                    if isinstance(child, (ast.Import, ast.ImportFrom)):  # try: import x
                        imported |= {a.asname or a.name.split(".")[0] for a in child.names}
                    elif isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
                        names.add(child.id)
    return names - imported


def _is_logger(value: ast.expr) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "getLogger"
    )


MUTATING_METHODS = frozenset(
    {
        "append", "extend", "insert", "update", "setdefault", "add", "clear", "pop",
        "popitem", "remove", "discard", "sort", "reverse", "fit", "partial_fit", "load",
        "load_state_dict", "to", "cuda", "eval", "train", "register", "put", "set",
        "connect", "start", "__setitem__",
    }
)  # fmt: skip
"""Calls that change the object they are called on (a list, a dict, a model, a client)."""


def _root(node: ast.expr) -> ast.expr:
    """``CACHE`` for ``CACHE["a"].b``, ``GROUPS.setdefault(k, []).append`` and the like."""
    while True:
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Await):
            node = node.value
        else:
            return node


def _fills_module_data(functions: list[FunctionNode], trees: list[ast.Module]) -> bool:
    """Whether one of ``functions`` (init and what it calls) changes a module-level object
    in place (``CACHE[k] = v``, ``STORE.x = v``, ``REGISTRY.append(v)``,
    ``setattr(CFG, …)``): a patched method, in a new module, would find that object as
    the code made it, not as init left it."""
    data = _module_data_names(trees)
    for function in functions:
        local = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        local |= {
            n.id
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
        }
        module = data - local
        for node in ast.walk(function):
            if isinstance(node, (ast.Subscript, ast.Attribute)) and not isinstance(
                node.ctx, ast.Load
            ):
                base = _root(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr not in MUTATING_METHODS:
                    continue
                base = _root(node.func.value)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr")
                and node.args
            ):
                base = _root(node.args[0])
            else:
                continue
            if isinstance(base, ast.Name) and base.id in module:
                return True
    return False


def _functions(trees: list[ast.Module]) -> dict[str, FunctionNode]:
    """The code's top-level functions, the last definition of each (as running it keeps)."""
    found: dict[str, FunctionNode] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = node
    return found


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _reached(start: FunctionNode, functions: dict[str, FunctionNode]) -> list[FunctionNode]:
    """``start`` and the top-level functions it refers to, transitively (its helpers)."""
    seen = {start.name}
    order = [start]
    index = 0
    while index < len(order):
        for name in sorted(_loaded(order[index]) & functions.keys() - seen):
            seen.add(name)
            order.append(functions[name])
        index += 1
    return order


def _text_without(cells: list[str], method: tuple[int, FunctionNode]) -> list[str]:
    """The code's text but the method's own lines (decorators included)."""
    index, node = method
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = cells[index].splitlines(keepends=True)
    rest = lines[: first - 1] + lines[(node.end_lineno or node.lineno) :]
    return [*cells[:index], "".join(rest), *cells[index + 1 :]]


def _changed_functions(before: list[ast.Module], after: list[ast.Module]) -> set[str]:
    old, new = _functions(before), _functions(after)
    return {
        name
        for name in old.keys() | new.keys()
        if name not in old or name not in new or ast.dump(old[name]) != ast.dump(new[name])
    }


def _changed_classes(before: list[ast.Module], after: list[ast.Module], changed: set[str]) -> bool:
    """Whether a class of the code changed, or calls a function that changed: the objects
    in the state are of the class as it was, with its methods as they were."""

    def classes(trees: list[ast.Module]) -> dict[str, str]:
        return {n.name: ast.dump(n) for t in trees for n in t.body if isinstance(n, ast.ClassDef)}

    if classes(before) != classes(after):
        return True
    return any(
        _loaded(node) & changed
        for tree in after
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    )


def _checks_own_classes(trees: list[ast.Module], code: list[FunctionNode]) -> bool:
    """Whether ``code`` (the method and the helpers it calls, where the state goes) checks
    an object against a class the code defines itself
    (``isinstance(x, Model)``, ``type(x) is Model``, ``x.__class__ is Model``,
    ``case Model():``, ``except NotReady:``) or uses an ``Enum`` of its own (the state's
    members are of the Enum as it was): a patch defines the class anew."""
    classes = {n.name for t in trees for n in t.body if isinstance(n, ast.ClassDef)}
    if not classes:
        return False
    enums = {
        n.name
        for t in trees
        for n in t.body
        if isinstance(n, ast.ClassDef)
        and any("Enum" in ast.unparse(base) or "Flag" in ast.unparse(base) for base in n.bases)
    }

    def names(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def typed(node: ast.expr) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "type"
        ) or (isinstance(node, ast.Attribute) and node.attr == "__class__")

    for function in code:
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "issubclass")
                and len(node.args) == 2
                and names(node.args[1]) & classes
            ):
                return True
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(typed(side) for side in sides) and any(names(s) & classes for s in sides):
                    return True
            if isinstance(node, ast.MatchClass) and names(node.cls) & classes:
                return True
            if isinstance(node, ast.ExceptHandler) and node.type and names(node.type) & classes:
                return True
            if isinstance(node, ast.Name) and node.id in enums and isinstance(node.ctx, ast.Load):
                return True
    return False


def restart_reason(old: ComponentSpec, new: ComponentSpec) -> str | None:
    """Why the new code of a component needs new replicas (a key of ``REASONS``), or None
    when it can be patched into the running ones: only the method's code changed.

    The two specs are assumed to differ only in their code and cell positions (the config
    and the imported project modules are compared by ``simulator.changes``).
    """
    old_cells, new_cells = split_cells(old), split_cells(new)
    old_trees = [_parse(text) for text in old_cells]
    new_trees = [_parse(text) for text in new_cells]
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
    if not unchanged:
        return "init"
    # the common save: nothing but the method's own lines changed
    only_method = _text_without(old_cells, old_method) == _text_without(new_cells, new_method)
    changed = set() if only_method else _changed_functions(before, after) - {new.method}
    reached = _reached(new_init[1], _functions(after))
    if any(function.name in changed for function in reached):
        return "init"  # a helper init calls changed: the state would be built otherwise
    if any(isinstance(node, ast.Global) for f in reached for node in ast.walk(f)):
        # a patch runs the new code in a new module: the globals init set are not there
        return "init globals"
    if _fills_module_data(reached, after):
        return "init module data"  # CACHE["model"] = ...: the new module's CACHE is empty
    if not only_method and _changed_classes(before, after, changed | {new.method}):
        return "class changed"  # the state's objects keep the class (and methods) they had
    if _checks_own_classes(after, _reached(new_method[1], _functions(after))):
        return "own classes"  # isinstance(model, Model): the state's Model is the old class
    return None
