"""Reading notebooks without running them: code cells, dropped magics, definitions, extraction.

A notebook is parsed once (``read_notebook``) into its code cells, each with IPython magics
and shell escapes replaced by ``pass`` (so line numbers stay those of the cell) and its
``ast``. From there, ``Notebook.definitions`` says which cell defines which top-level name
(the last definition wins, as re-running the notebook would) and ``Notebook.extract`` joins
cells into the module a replica executes, with a line map back to ``cell N:line M``.
Nothing here executes user code.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import gc
import json
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from peach_cli.project.diagnostics import did_you_mean

MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024
_CELL_MAGICS_KEEPING_BODY = {"time", "timeit", "capture", "prun"}
_MAGIC_ASSIGNMENT = re.compile(r"^\s*[A-Za-z_][\w.,\s]*=\s*[!%]")

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_NOT_CALLABLE = (
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.Constant,
    ast.JoinedStr,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)
"""Expressions whose value is never a function (``f = d * e``, ``f = [1, 2]``)."""


class NotebookError(Exception):
    """The notebook cannot be read: missing, not JSON, not nbformat 4, too large."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.missing = missing


@dataclass(frozen=True)
class Cell:
    """One code cell, ready to be executed: magics replaced, parsed once."""

    number: int
    """1-based position among all the notebook's cells (markdown included), as displayed."""
    original: str
    """The cell's text as saved."""
    source: str
    """The text a replica runs: magic and shell lines replaced by ``pass``."""
    dropped: tuple[int, ...] = ()
    """1-based lines of the cell that were magics or shell escapes."""
    tree: ast.Module | None = None
    syntax_error: SyntaxError | None = None

    def line(self, number: int | None) -> str | None:
        """The original text of a 1-based line of the cell, for excerpts."""
        lines = self.original.splitlines()
        if number is None or not 1 <= number <= len(lines):
            return None
        return lines[number - 1]


@dataclass(frozen=True)
class Definition:
    """A top-level name bound in a cell: a function (``node`` set) or anything else."""

    name: str
    cell: Cell
    line: int
    column: int
    node: FunctionNode | None = None


@dataclass(frozen=True)
class Extraction:
    """A module built from cells, and where each of its lines came from."""

    source: str
    line_map: tuple[tuple[int, int, int], ...]
    """(first module line, cell number, first cell line) per cell included."""
    cells: tuple[Cell, ...]


@dataclass
class Notebook:
    """A notebook's code cells, parsed."""

    path: str
    """Project-relative posix path."""
    cells: list[Cell]
    _definitions: dict[str, Definition] | None = field(default=None, repr=False)

    @property
    def definitions(self) -> dict[str, Definition]:
        """Top-level names → their last definition, over the cells that parse."""
        if self._definitions is None:
            found: dict[str, Definition] = {}
            for cell in self.cells:
                if cell.tree is not None:
                    for definition in _top_level_bindings(cell):
                        found[definition.name] = definition
            self._definitions = found
        return self._definitions

    def bound_before(self, name: str, cell: Cell, line: int) -> bool:
        """Whether running the notebook in order binds ``name`` before ``cell``'s ``line``.

        Module-level bindings count wherever they are: also inside ``try``/``if``/``with``
        (``try: from peach_cli import endpoint`` / ``except ImportError: ...``).
        """
        for other in self.cells:
            if other.number > cell.number:
                break
            if other.tree is not None and any(
                bound == name and (other.number < cell.number or at < line)
                for bound, at in _module_bindings(other.tree)
            ):
                return True
        return False

    def rebinding(self, name: str) -> tuple[Definition, ast.stmt] | None:
        """When ``name``'s last binding is an assignment of a value that cannot be a function
        (``f = d * e``, a literal) after a ``def name``: (that def, the assignment)."""
        last = self.definitions.get(name)
        if last is None or last.node is not None or last.cell.tree is None:
            return None
        statement = next(
            (
                node
                for node in last.cell.tree.body
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                and node.lineno == last.line
            ),
            None,
        )
        if statement is None or (
            isinstance(statement, (ast.Assign, ast.AnnAssign))
            and not isinstance(statement.value, _NOT_CALLABLE)
        ):
            return None
        earlier = None
        for cell in self.cells:
            if cell.number > last.cell.number:
                break
            if cell.tree is not None:
                for definition in _top_level_bindings(cell):
                    if definition.name == name and definition.node is not None:
                        if cell.number < last.cell.number or definition.line < last.line:
                            earlier = definition
        return (earlier, statement) if earlier is not None else None

    def functions(self) -> list[str]:
        """Names of the top-level functions (for "did you mean")."""
        return [d.name for d in self.definitions.values() if d.node is not None]

    def broken_cells(self) -> list[Cell]:
        return [cell for cell in self.cells if cell.syntax_error is not None]

    def broken_redefinitions(self, name: str) -> list[Cell]:
        """Cells after ``name``'s last parsed definition that do not parse but seem to
        define it at top level (found by text, as they have no ast): re-running the notebook
        would fail there, so the definition that parses is not the one the user wrote last.
        """
        definition = self.definitions.get(name)
        after = definition.cell.number if definition is not None else 0
        broken = [cell for cell in self.broken_cells() if cell.number > after]
        if not broken:  # the usual case: no pattern to build (a project asks for hundreds)
            return []
        pattern = re.compile(
            rf"^(?:(?:async[ \t]+)?def|class)[ \t]+{re.escape(name)}\b|^{re.escape(name)}[ \t]*=",
            re.MULTILINE,
        )
        return [cell for cell in broken if pattern.search(cell.source)]

    def extract(self, names: Iterable[str] | None = None) -> Extraction:
        """The module made of the cells defining ``names`` (all code cells when None)."""
        if names is None:
            chosen = list(self.cells)
        else:
            numbers = {self.definitions[n].cell.number for n in names if n in self.definitions}
            chosen = [cell for cell in self.cells if cell.number in numbers]
        return join_cells(chosen)


def names_from_other_cells(
    notebook: Notebook, extraction: Extraction
) -> list[tuple[Cell, ast.Name, Definition]]:
    """Names the extracted cells read that only cells left out of the extraction define.

    Each is (cell, first use, definition): running only the extracted cells raises
    NameError there. Conservative: a name bound anywhere in the extracted cells (a local,
    a parameter, ...) or a ``*`` import there is never reported.
    """
    chosen = {cell.number for cell in extraction.cells}
    bound: set[str] = set()
    loads: list[tuple[Cell, ast.Name]] = []
    for cell in extraction.cells:
        if cell.tree is None:
            return []
        for node in walk(cell.tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    loads.append((cell, node))
                else:
                    bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return []
                    bound.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                bound.update(node.names)
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
                bound.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                bound.add(node.rest)
    found: dict[str, tuple[Cell, ast.Name, Definition]] = {}
    for cell, node in loads:
        definition = notebook.definitions.get(node.id)
        if (
            node.id not in bound
            and node.id not in found
            and not hasattr(builtins, node.id)
            and definition is not None
            and definition.cell.number not in chosen
        ):
            found[node.id] = (cell, node, definition)
    return list(found.values())


def join_cells(cells: list[Cell]) -> Extraction:
    """Join cells into one module: each cell's lines, then a blank line."""
    parts: list[str] = []
    line_map: list[tuple[int, int, int]] = []
    next_line = 1
    for cell in cells:
        text = cell.source if cell.source.endswith("\n") or not cell.source else cell.source + "\n"
        line_map.append((next_line, cell.number, 1))
        parts.append(text + "\n")
        next_line += text.count("\n") + 1
    return Extraction("".join(parts), tuple(line_map), tuple(cells))


def read_notebook(root: Path, relative: str) -> Notebook:
    """Read and parse ``root/relative``; raise ``NotebookError`` if it is not a notebook."""
    path = root / relative
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise NotebookError(f"notebook {relative} does not exist", missing=True) from None
    except OSError as error:
        raise NotebookError(f"cannot read {relative}: {error.strerror or error}") from None
    if not path.is_file():
        raise NotebookError(f"{relative} is not a file")
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(f"{relative} is too large to be a notebook ({size} bytes)")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise NotebookError(f"cannot read {relative}: {error.strerror or error}") from None
    return parse_notebook(relative, data)


def parse_notebook(relative: str, data: bytes) -> Notebook:
    """Parse notebook JSON (nbformat 4) into code cells."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise NotebookError(f"{relative} is not a notebook (invalid JSON: {error})") from None
    nbformat = document.get("nbformat") if isinstance(document, dict) else None
    if isinstance(nbformat, int) and nbformat < 4:  # nbformat 3 keeps cells in "worksheets"
        raise NotebookError(
            f"{relative} is in nbformat {nbformat}; only nbformat 4 is supported "
            "(open and save it with a current Jupyter)"
        )
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError(f"{relative} is not a notebook (no list of cells)")
    cells = []
    for index, raw in enumerate(document["cells"], start=1):
        if not isinstance(raw, dict):
            raise NotebookError(f"{relative}: cell {index} is not an object")
        if raw.get("cell_type") != "code":
            continue
        source = raw.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError(f"{relative}: cell {index} has no text source")
        cells.append(make_cell(index, source))
    return Notebook(relative, cells)


def make_cell(number: int, original: str) -> Cell:
    """Parse one code cell, replacing magics and shell escapes when it is not plain Python."""
    original = original.replace("\r\n", "\n")
    try:
        return Cell(number, original, original, (), ast.parse(original), None)
    except SyntaxError:
        pass
    except (ValueError, RecursionError, MemoryError) as error:  # NUL bytes, deep nesting
        return Cell(number, original, original, (), None, SyntaxError(str(error)))
    source, dropped = _drop_magics(original)
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return Cell(number, original, source, dropped, None, error)
    except (ValueError, RecursionError, MemoryError) as error:
        return Cell(number, original, source, dropped, None, SyntaxError(str(error)))
    return Cell(number, original, source, dropped, tree, None)


def _drop_magics(text: str) -> tuple[str, tuple[int, ...]]:
    lines = text.split("\n")
    dropped: list[int] = []
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = (
            lines[first].lstrip()[2:].split(maxsplit=1)[0] if lines[first].strip() != "%%" else ""
        )
        if name not in _CELL_MAGICS_KEEPING_BODY:  # %%bash, %%writefile...: not Python at all
            return "\n" * (len(lines) - 1), tuple(range(1, len(lines) + 1))
        lines[first] = "pass"
        dropped.append(first + 1)
    for index, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")) or _MAGIC_ASSIGNMENT.match(line):
            if index + 1 not in dropped:
                lines[index] = line[: len(line) - len(stripped)] + "pass"
                dropped.append(index + 1)
    return "\n".join(lines), tuple(sorted(dropped))


def _top_level_bindings(cell: Cell) -> Iterator[Definition]:
    assert cell.tree is not None
    for node in cell.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = cell.line(node.lineno) or ""
            at = text.find(node.name, text.find("def", node.col_offset) + 3)
            column = at + 1 if at > 0 else node.col_offset + 1
            yield Definition(node.name, cell, node.lineno, column, node)
        elif isinstance(node, ast.ClassDef):
            yield Definition(node.name, cell, node.lineno, node.col_offset + 1)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in _names(target):
                    yield Definition(name, cell, node.lineno, node.col_offset + 1)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    name = alias.asname or alias.name.split(".")[0]
                    yield Definition(name, cell, node.lineno, node.col_offset + 1)


def _module_bindings(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(name, line) of every module-level binding, in compound statements too."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node.lineno
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                yield alias.asname or alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            yield node.id, node.lineno
        if not isinstance(node, scopes):
            stack += list(ast.iter_child_nodes(node))


def _names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _names(element)


# --- what a function looks like, from its ast -------------------------------------------------


def accepts(function: FunctionNode, name: str) -> bool:
    """Whether a call can pass ``name=...`` to the function."""
    a = function.args
    named = [p.arg for p in [*a.args, *a.kwonlyargs]]
    return name in named or a.kwarg is not None


def required_parameters(function: FunctionNode) -> list[str]:
    """Parameters without a default (``*args``/``**kwargs`` are never required)."""
    a = function.args
    positional = [*a.posonlyargs, *a.args]
    without_default = positional[: len(positional) - len(a.defaults)]
    keyword_only = [p for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None]
    return [p.arg for p in [*without_default, *keyword_only]]


def _own_nodes(function: FunctionNode) -> Iterator[ast.AST]:
    """The function's body nodes, not descending into nested functions, lambdas or classes."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    stack: list[ast.AST] = [n for n in function.body if not isinstance(n, nested)]
    while stack:
        node = stack.pop()
        yield node
        stack += [c for c in ast.iter_child_nodes(node) if not isinstance(c, nested)]


def is_generator(function: FunctionNode) -> bool:
    """A generator (sync or async): its body yields."""
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(function))


def is_async_generator(function: FunctionNode) -> bool:
    return isinstance(function, ast.AsyncFunctionDef) and is_generator(function)


def mentions_drift(function: FunctionNode) -> ast.AST | None:
    """The first ``"drift_detected"`` literal in the function's own body, if any."""
    for node in _own_nodes(function):
        if isinstance(node, ast.Constant) and node.value == "drift_detected":
            return node
    return None


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect garbage less often while notebooks are read and checked: parsing makes
    hundreds of thousands of objects that all stay alive, and each collection of the young
    generation walks them for nothing (about a tenth of ``peach openapi``'s time on 300
    endpoints). The thresholds are mypy's for the same job; restored on exit."""
    with _Readers.lock:  # reads may overlap (a reload's thread and another's): the first
        if _Readers.inside == 0:  # in saves the thresholds, the last out restores them
            _Readers.saved = gc.get_threshold()
            gc.set_threshold(200_000, 30, 30)
        _Readers.inside += 1
    try:
        yield
    finally:
        with _Readers.lock:
            _Readers.inside -= 1
            if _Readers.inside == 0:
                gc.set_threshold(*_Readers.saved)


class _Readers:
    """Who is inside ``fewer_collections``, and the thresholds before the first came in."""

    lock = threading.Lock()
    inside = 0
    saved: tuple[int, int, int] = (700, 10, 10)


def walk(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` in ``ast.walk``'s order, listed once per tree and kept on it
    (the checks go over each cell several times: a list is several times faster to go over
    than ``ast.walk``'s generator). The list leaves the tree itself out: it goes with the
    tree."""
    below: list[ast.AST] | None = getattr(tree, "_peach_below", None)
    if below is None:
        nodes = list(ast.walk(tree))
        tree._peach_below = nodes[1:]  # type: ignore[attr-defined]
        return nodes
    return [tree, *below]


_NAME_FIELDS: dict[type, tuple[str, ...]] = {
    ast.Name: ("id",),
    ast.Attribute: ("attr",),
    ast.arg: ("arg",),
    ast.keyword: ("arg",),
    ast.FunctionDef: ("name",),
    ast.AsyncFunctionDef: ("name",),
    ast.ClassDef: ("name",),
    ast.alias: ("name", "asname"),
    ast.ImportFrom: ("module",),
    ast.ExceptHandler: ("name",),
    ast.MatchAs: ("name",),
    ast.MatchStar: ("name",),
    ast.MatchMapping: ("rest",),
}
"""The nodes whose fields hold a name the parser interned (lists of names: below)."""
_NAME_LISTS: dict[type, str] = {ast.Global: "names", ast.Nonlocal: "names"}


def identifiers(tree: ast.AST) -> set[str]:
    """The names ``tree``'s code uses: its variables, arguments, attributes, functions,
    classes and imports. The parser interns each of them (CPython's table of interned
    strings keeps a slot per string it ever held until it is rebuilt): a served version
    keeps its code's names alive, so parsing the next version finds them there instead of
    adding the same names again on every reload.

    >>> sorted(identifiers(ast.parse("import os.path as p; f = lambda x, *, y=1: p.join(x)")))
    ['f', 'join', 'os.path', 'p', 'x', 'y']
    """
    found: set[str] = set()
    for node in walk(tree):
        kind = type(node)
        for name in _NAME_FIELDS.get(kind, ()):
            value = getattr(node, name)
            if value is not None:
                found.add(value)
        if kind in _NAME_LISTS:
            found.update(getattr(node, _NAME_LISTS[kind]))
    return found


def imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    """Absolute imports anywhere in a module: (dotted name, level 0) and relative ones (level)."""
    found: list[tuple[str, int]] = []
    for node in walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.append((base, node.level))
            found += [
                (f"{base}.{alias.name}" if base else alias.name, node.level)
                for alias in node.names
                if alias.name != "*"
            ]
    return found


# --- decorator endpoints ----------------------------------------------------------------------

DECORATOR_OPTIONS = ("url", "init_fn", "args", "replicas", "memory", "cpus", "media_type")


@dataclass(frozen=True)
class DecoratorProblem:
    """Something wrong with an ``@endpoint(...)`` call, at a line/column of its cell."""

    code: str
    message: str
    line: int
    column: int
    hint: str | None = None


@dataclass(frozen=True)
class DecoratedFunction:
    """A top-level function decorated with ``@endpoint(...)``, its arguments read statically."""

    name: str
    function: FunctionNode
    cell: Cell
    options: dict[str, object]
    """Literal values of the call's arguments (``url`` included; ``init_fn`` as a name)."""
    positions: dict[str, tuple[int, int]]
    """Where each argument is: option → (line, column) in the cell."""
    problems: tuple[DecoratorProblem, ...] = ()
    decorator: tuple[str, int] = ("endpoint", 1)
    """The name the decorator is reached by (``endpoint``, or a module alias) and its line."""


def find_endpoint_functions(notebook: Notebook) -> list[DecoratedFunction]:
    """Every ``@endpoint(...)`` function of the notebook (the last definition of a name wins)."""
    found: dict[str, DecoratedFunction] = {}
    trees = [cell.tree for cell in notebook.cells if cell.tree is not None]
    direct, modules = _decorator_names(trees)
    for cell in notebook.cells:
        if cell.tree is None:
            continue
        for node in cell.tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if _is_endpoint(target, direct, modules):
                    base = target.value if isinstance(target, ast.Attribute) else target
                    found[node.name] = replace(
                        _read_decorator(node, decorator, cell),
                        decorator=(getattr(base, "id", "endpoint"), decorator.lineno),
                    )
                    break
            else:
                found.pop(node.name, None)  # redefined without the decorator
    return list(found.values())


def _decorator_names(trees: list[ast.Module]) -> tuple[set[str], set[str]]:
    """Names that mean ``peach_cli.endpoint`` in the notebook, and names of ``peach_cli``."""
    direct, modules = {"endpoint"}, {"peach_cli"}
    for node in (n for tree in trees for n in tree.body):
        if isinstance(node, ast.ImportFrom) and node.module in (
            "peach_cli",
            "peach_cli.runtime.decorator",
        ):
            direct |= {a.asname or a.name for a in node.names if a.name == "endpoint"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "peach_cli" and a.asname}
    return direct, modules


def _is_endpoint(node: ast.expr, direct: set[str], modules: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in direct
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "endpoint"
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
    )


def _read_decorator(function: FunctionNode, decorator: ast.expr, cell: Cell) -> DecoratedFunction:
    options: dict[str, object] = {}
    positions: dict[str, tuple[int, int]] = {}
    problems: list[DecoratorProblem] = []
    where = (decorator.lineno, decorator.col_offset + 1)
    if not isinstance(decorator, ast.Call):
        problems.append(
            DecoratorProblem(
                "PC208", '@endpoint needs a url: write @endpoint("/path", ...)', *where
            )
        )
        return DecoratedFunction(function.name, function, cell, options, positions, tuple(problems))
    arguments = _decorator_arguments(decorator, problems)
    _read_options(arguments, options, positions, problems)
    if "url" not in positions:
        problems.append(DecoratorProblem("PC208", "@endpoint needs a url", *where))
    return DecoratedFunction(function.name, function, cell, options, positions, tuple(problems))


def _decorator_arguments(
    decorator: ast.Call, problems: list[DecoratorProblem]
) -> list[tuple[str, ast.expr]]:
    """The decorator's options as (name, expression), the url first; what cannot be read
    as an option goes into ``problems``."""
    arguments: list[tuple[str, ast.expr]] = []
    for index, arg in enumerate(decorator.args):
        if isinstance(arg, ast.Starred) or index > 0:
            problems.append(
                DecoratorProblem(
                    "PC208",
                    "@endpoint takes the url as its only positional argument",
                    arg.lineno,
                    arg.col_offset + 1,
                    "pass the other options by keyword: init_fn=..., args={...}",
                )
            )
            continue
        arguments.append(("url", arg))
    for keyword in decorator.keywords:
        if keyword.arg is None:
            problems.append(
                DecoratorProblem(
                    "PC207",
                    "@endpoint(**...) cannot be read without running the notebook",
                    keyword.value.lineno,
                    keyword.value.col_offset + 1,
                    "write each option as a literal keyword argument",
                )
            )
        elif keyword.arg == "url" and any(name == "url" for name, _ in arguments):
            problems.append(
                DecoratorProblem(
                    "PC208",
                    "@endpoint gets its url twice: as the first argument and as url=",
                    keyword.lineno,
                    keyword.col_offset + 1,
                    "keep one of them",
                )
            )
        elif keyword.arg not in DECORATOR_OPTIONS:
            problems.append(
                DecoratorProblem(
                    "PC208",
                    f"@endpoint has no option '{keyword.arg}'",
                    keyword.value.lineno,
                    keyword.value.col_offset + 1,
                    did_you_mean(keyword.arg, DECORATOR_OPTIONS)
                    or f"options: {', '.join(DECORATOR_OPTIONS)}",
                )
            )
        else:
            arguments.append((keyword.arg, keyword.value))
    return arguments


def _read_options(
    arguments: list[tuple[str, ast.expr]],
    options: dict[str, object],
    positions: dict[str, tuple[int, int]],
    problems: list[DecoratorProblem],
) -> None:
    """Each option's literal value into ``options`` (``init_fn`` as the function's name)
    and its position into ``positions``; a value that is no literal goes into ``problems``."""
    for name, value in arguments:
        positions[name] = (value.lineno, value.col_offset + 1)
        if name == "init_fn":
            if isinstance(value, ast.Name):
                options[name] = value.id
            elif not (isinstance(value, ast.Constant) and value.value is None):
                problems.append(
                    DecoratorProblem(
                        "PC207",
                        "init_fn must name a top-level function of this notebook",
                        *positions[name],
                        "define the function with def at the top level and pass its name",
                    )
                )
            continue
        try:
            options[name] = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            problems.append(
                DecoratorProblem(
                    "PC207",
                    f"@endpoint option '{name}' is not a literal value",
                    *positions[name],
                    "peach reads @endpoint without running the notebook: write the value "
                    "itself (a string, number, list or dict), not a variable or a call",
                )
            )
