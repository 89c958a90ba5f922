"""The project's own Python modules a component's code imports (they ship with it, and an
edit to one reloads it)."""

from __future__ import annotations

import ast
from pathlib import Path

from peach_cli.checks.notebooks import Code
from peach_cli.project import notebook as nb

MAX_MODULE_BYTES = 8 * 1024 * 1024


class ProjectModules:
    """Resolves imports to project-local ``.py`` files, each cell and module once per run."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.imports: dict[tuple[Path, Path | str, int], list[Path]] = {}
        self.names: set[str] = set()
        """The names the modules read use (``notebook.identifiers``), and the file names
        looked for (pathlib interns each part of a path: ``os.py`` for ``import os``)."""

    def of(self, code: Code) -> tuple[str, ...]:
        """Project-local .py files the code imports, directly or through each other."""
        root = self.root
        notebook_dir = (root / code.notebook.path).parent
        search = [root] if notebook_dir == root else [root, notebook_dir]
        found: list[Path] = []
        queue: list[tuple[Path | str, int]] = [
            (code.notebook.path, cell.number) for cell in code.extraction.cells
        ]
        cells = {cell.number: cell for cell in code.extraction.cells}
        while queue:
            source, number = queue.pop()
            key = (notebook_dir, source, number)
            if key not in self.imports:  # each cell and module is resolved once per run
                if isinstance(source, Path):
                    tree, origin = self.parse_module(source), source
                    if tree is not None:
                        self.names |= nb.identifiers(tree)
                else:
                    tree, origin = cells[number].tree, None
                self.imports[key] = (
                    [] if tree is None else self.resolve_imports(tree, origin, search, root)
                )
            for path in self.imports[key]:
                if path not in found:
                    found.append(path)
                    queue.append((path, 0))
        return tuple(sorted(p.relative_to(root).as_posix() for p in found))

    def resolve_imports(
        self, tree: ast.AST, origin: Path | None, search: list[Path], root: Path
    ) -> list[Path]:
        files: list[Path] = []
        for dotted, level in nb.imported_modules(tree):
            if level:
                if origin is None:
                    continue
                base = origin.parent
                for _ in range(level - 1):
                    base = base.parent
                bases = [base]
            else:
                bases = search
            parts = [p for p in dotted.split(".") if p]
            for base in bases:
                current = base
                for part in parts:
                    package, module = current / part, current / f"{part}.py"
                    self.names.update((package.name, module.name))  # as pathlib interned them
                    if (package / "__init__.py").is_file():
                        files.append(package / "__init__.py")
                        current = package
                    elif module.is_file():
                        files.append(module)
                        break
                    elif package.is_dir():  # namespace package
                        current = package
                    else:
                        break
        return [f.resolve() for f in files if f.resolve().is_relative_to(root)]

    def parse_module(self, path: Path) -> ast.AST | None:
        try:
            if path.stat().st_size > MAX_MODULE_BYTES:
                return None
            return ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return None
