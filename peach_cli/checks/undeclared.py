"""PC308: the code that runs imports a module its py_env does not provide.

The platform runs each endpoint and task in its py_env's environment only, so an import
that is neither the standard library, a module of the project, peach's runtime, nor
provided by a declared dependency fails there with ``ModuleNotFoundError`` — even when it
works on a laptop that happens to have the package. Found by parsing only:

- when the env is built (``peach env build`` or a ``peach dev`` run), its installed
  distributions' metadata say which modules it provides;
- otherwise the requirement names do, through the table of usual mismatches
  (``yaml`` ← ``pyyaml``, ``sklearn`` ← ``scikit-learn``...) and name normalisation, and
  the extras peach knows (``uvicorn[standard]`` → ``uvloop``...); with an extra it does not
  know, the warning says it cannot tell until the env is built.

Imports inside ``try: ... except ImportError`` (or ``ModuleNotFoundError``, or a bare
``except``) are optional by design and not reported.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from peach_cli.project.diagnostics import Diagnostic, Position

if TYPE_CHECKING:
    from peach_cli.project import notebook as nb
    from peach_cli.project.loader import Path_, Project

RUNTIME_MODULES = frozenset({"peach_cli", "pipe_algorithms_lib", "__future__"})
"""What peach provides in every replica and task, whatever the env declares."""
_GUARDS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})

Run = tuple["Path_", "nb.Notebook", "nb.Extraction"]
"""Where the code comes from in the conf, its notebook, and the cells that run."""


def guarded_imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of ``tree`` and whether a ``try`` catches its ImportError."""

    def catches(handler: ast.ExceptHandler) -> bool:
        kinds = handler.type
        if kinds is None:
            return True
        names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        return any(
            (n.id if isinstance(n, ast.Name) else getattr(n, "attr", None)) in _GUARDS
            for n in names
        )

    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, guarded = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, guarded
            continue
        if isinstance(node, (ast.Try, ast.TryStar)):
            protects = any(catches(h) for h in node.handlers)
            stack += [(child, guarded or protects) for child in node.body]
            for rest in (node.handlers, node.orelse, node.finalbody):
                stack += [(child, guarded) for child in rest]
            continue
        stack += [(child, guarded) for child in ast.iter_child_nodes(node)]


KNOWN_EXTRAS: dict[tuple[str, str], frozenset[str]] = {
    ("uvicorn", "standard"): frozenset(
        {"uvloop", "httptools", "watchfiles", "websockets", "dotenv", "yaml"}
    ),
    ("httpx", "http2"): frozenset({"h2"}),
    ("httpx", "socks"): frozenset({"socksio"}),
    ("httpx", "brotli"): frozenset({"brotli"}),
    ("fastapi", "standard"): frozenset(
        {"uvicorn", "httpx", "jinja2", "multipart", "email_validator"}
    ),
    ("pydantic", "email"): frozenset({"email_validator"}),
    ("requests", "socks"): frozenset({"socks"}),
}
"""(distribution, extra) → modules the extra is known to add, for envs not built yet."""

_EXTRAS = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*\[([^\]]*)\]")


def requirement_extras(requirement: str) -> list[str]:
    """The extras a PEP 508 string asks for: ``uvicorn[standard]>=0.30`` → ``['standard']``."""
    match = _EXTRAS.match(requirement)
    if match is None:
        return []
    return [extra.strip().lower() for extra in match.group(1).split(",") if extra.strip()]


class _Provided:
    """What each env provides, worked out once per env and validation run; and, for an env
    not built yet, its requirements with extras peach does not know (what they add is
    known only once the env is built)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.cache: dict[str, tuple[set[str], list[str]]] = {}

    def modules(self, env: str) -> set[str]:
        return self._of(env)[0]

    def unknown_extras(self, env: str) -> list[str]:
        return self._of(env)[1]

    def _of(self, env: str) -> tuple[set[str], list[str]]:
        if env not in self.cache:
            self.cache[env] = self._compute(env)
        return self.cache[env]

    def _compute(self, env: str) -> tuple[set[str], list[str]]:
        from peach_cli.envs.builder import find_built
        from peach_cli.envs.missing import modules_of
        from peach_cli.envs.provides import installed_modules
        from peach_cli.envs.spec import EnvSpec, requirement_name

        requirements = self.project.conf.environment(env)
        built = find_built(EnvSpec(env, requirements))
        site = built.site_packages() if built is not None else None
        if site is not None:
            return {m for modules in installed_modules(site).values() for m in modules}, []
        modules: set[str] = set()
        unknown: list[str] = []
        for requirement in requirements:
            name = requirement_name(requirement)
            modules |= modules_of(name)
            for extra in requirement_extras(requirement):
                known = KNOWN_EXTRAS.get((name, extra))
                if known is None:
                    unknown.append(requirement.strip())
                else:
                    modules |= known
        return modules, list(dict.fromkeys(unknown))


def _project_module(root: Path, folders: list[Path], name: str, seen: dict) -> bool:
    key = (tuple(folders), name)
    if key not in seen:
        seen[key] = any(
            (folder / f"{name}.py").is_file() or (folder / name).is_dir() for folder in folders
        )
    return bool(seen[key])


def py_env_of(project: Project, where: Path_) -> str | None:
    """The py_env the code at ``where`` (a component, a task, a decorator notebook) runs in."""
    conf = project.conf
    if where[0] == "endpoints" and where[1] in conf.endpoints:
        env = conf.endpoints[str(where[1])].py_env
    elif where[0] == "tasks" and where[1] in conf.tasks:
        env = conf.tasks[str(where[1])].py_env
    else:
        env = "base"
    return env if env == "base" or env in conf.py_environments else None


def undeclared_imports(project: Project, runs: list[Run]) -> list[Diagnostic]:
    """A PC308 warning for each import of the code that runs that its env lacks."""
    provided = _Provided(project)
    root = project.root.resolve()
    seen: dict = {}
    imports: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
    found: list[Diagnostic] = []
    for where, notebook, extraction in runs:
        env = py_env_of(project, where)
        if env is None:  # an undeclared py_env is PC114 already
            continue
        notebook_dir = (root / notebook.path).parent
        folders = [root] if notebook_dir == root else [root, notebook_dir]
        for cell in extraction.cells:
            key = (notebook.path, cell.number)
            if key not in imports:  # a cell shared by many components is parsed once
                imports[key] = _third_party(cell)
            for module, line, column in imports[key]:
                if module not in provided.modules(env) and not _project_module(
                    root, folders, module, seen
                ):
                    found.append(
                        _diagnostic(
                            module, env, notebook, cell, line, column, provided.unknown_extras(env)
                        )
                    )
    return found


def _third_party(cell: nb.Cell) -> list[tuple[str, int, int]]:
    """The cell's unguarded absolute imports that are neither stdlib nor peach's runtime."""
    if cell.tree is None or "import" not in cell.source:
        return []
    return [
        (module, line, column)
        for node, guarded in guarded_imports(cell.tree)
        if not guarded
        for module, line, column in _imported(node, cell)
        if module not in sys.stdlib_module_names and module not in RUNTIME_MODULES
    ]


def _imported(node: ast.Import | ast.ImportFrom, cell: nb.Cell) -> Iterator[tuple[str, int, int]]:
    """(top-level module, line, column) of each absolute import in the statement."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name.split(".")[0], alias.lineno, alias.col_offset + 1
    elif node.level == 0 and node.module:
        top = node.module.split(".")[0]
        text = cell.line(node.lineno) or ""
        at = text.find(top, node.col_offset + 4)
        yield top, node.lineno, (at + 1 if at >= 0 else node.col_offset + 1)


def _diagnostic(
    module: str,
    env: str,
    notebook: nb.Notebook,
    cell: nb.Cell,
    line: int,
    column: int,
    unknown_extras: list[str],
) -> Diagnostic:
    from peach_cli.envs.missing import distribution_for

    distribution = distribution_for(module)
    where = Position(notebook.path, line, column, cell.number, cell.line(line))
    if unknown_extras:
        listed = ", ".join(f"'{r}'" for r in unknown_extras)
        return Diagnostic(
            "PC308",
            f"'{module}' is imported, and no dependency of py_env '{env}' provides it by "
            f"name; {listed} asks for extras, which may: peach cannot tell until the env is "
            "built",
            where,
            f"run `peach env build` to find out, or add '{distribution}' to "
            f"py_environments.{env}.dependencies",
        )
    return Diagnostic(
        "PC308",
        f"'{module}' is imported, but py_env '{env}' does not provide it: on the platform "
        "this raises ModuleNotFoundError",
        where,
        f"add '{distribution}' to py_environments.{env}.dependencies",
    )
