"""The checks of a component's or task's notebook: it exists inside the project and parses,
the functions the conf names are defined at its top level with usable signatures, and the
cells that run do not lean on cells that do not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from peach_cli.checks.report import Findings
from peach_cli.project import notebook as nb
from peach_cli.project.diagnostics import Position, did_you_mean
from peach_cli.project.loader import Path_


@dataclass
class Code:
    """A component's code, once found: the notebook, its extraction, its functions."""

    notebook: nb.Notebook
    extraction: nb.Extraction
    method: nb.Definition | None
    init: nb.Definition | None


class NotebookChecks:
    """Reads each notebook once and checks the code of components and tasks against it."""

    def __init__(self, out: Findings) -> None:
        self.out = out
        self.notebooks: dict[str, nb.Notebook | None] = {}
        self.paths: dict[str, str | None] = {}
        self.read: list[str] = []
        """The notebooks read, project-relative, in the order first read."""
        self.runs: list[tuple[Path_, nb.Notebook, nb.Extraction]] = []
        """The code that runs (for the import and trigger checks)."""

    def load_notebook(self, relative: str, where: Position) -> nb.Notebook | None:
        """Read a notebook once; report a bad path or an unreadable file at ``where``."""
        if relative not in self.paths:
            self.paths[relative] = self.inside_project(relative)
        key = self.paths[relative]
        if key is None:
            self.out.report(
                "PC202",
                f"notebook {relative} is outside the project folder",
                where,
                "notebook paths are relative to the project folder and stay inside it",
            )
            return None
        root = self.out.project.root.resolve()
        if key not in self.notebooks:
            try:
                self.notebooks[key] = nb.read_notebook(root, key)
            except nb.NotebookError as error:
                self.notebooks[key] = None
                hint = self.similar_notebooks(key) if error.missing else None
                self.out.report("PC201" if error.missing else "PC203", error.message, where, hint)
                return None
            self.read.append(key)
        return self.notebooks[key]

    def inside_project(self, relative: str) -> str | None:
        """The project-relative posix path of ``relative``, or None if it leaves the project."""
        root = self.out.project.root.resolve()
        if PurePosixPath(relative.replace("\\", "/")).is_absolute() or Path(relative).is_absolute():
            return None
        try:
            resolved = (root / relative).resolve()
        except (ValueError, OSError, RuntimeError):  # a NUL byte, a symlink loop
            return None
        return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else None

    def similar_notebooks(self, relative: str) -> str | None:
        root = self.out.project.root
        try:
            candidates = [
                p.relative_to(root).as_posix()
                for p in root.rglob("*.ipynb")
                if ".ipynb_checkpoints" not in p.parts
            ][:500]
        except OSError:
            return None
        return did_you_mean(relative, candidates)

    def report_cells(
        self, notebook: nb.Notebook, cells: tuple[nb.Cell, ...] | list[nb.Cell]
    ) -> None:
        """Warn once per cell about dropped magics; report invalid Python once per cell."""
        for cell in cells:
            if cell.dropped and (notebook.path, cell.number, "PC304") not in self.out.reported:
                self.out.reported.add((notebook.path, cell.number, "PC304"))
                count = len(cell.dropped)
                self.out.report(
                    "PC304",
                    f"{count} IPython magic/shell line{'s' if count > 1 else ''} dropped from "
                    f"cell {cell.number}: {'they do' if count > 1 else 'it does'} not run on the platform",
                    self.out.in_cell(notebook, cell, cell.dropped[0], 1),
                    "declare packages in py_environments instead of !pip install"
                    if any("pip" in (cell.line(n) or "") for n in cell.dropped)
                    else "magics and shell lines only work inside Jupyter",
                )
            if cell.syntax_error is not None:
                self.report_syntax_error(notebook, cell)

    def report_syntax_error(
        self, notebook: nb.Notebook, cell: nb.Cell, hint: str | None = None
    ) -> None:
        if (notebook.path, cell.number, "PC206") in self.out.reported:
            return
        self.out.reported.add((notebook.path, cell.number, "PC206"))
        error = cell.syntax_error
        assert error is not None
        line = error.lineno or 1
        self.out.report(
            "PC206",
            f"cell {cell.number} is not valid Python: {error.msg}",
            self.out.in_cell(notebook, cell, line, error.offset),
            hint,
        )

    def check_code(self, where: Path_, component: Any, state_param: str) -> Code | None:
        """Check one conf component or task against its notebook; None if it cannot run."""
        notebook = self.load_notebook(component.notebook, self.out.at((*where, "notebook")))
        if notebook is None:
            return None
        method = self.find_function(notebook, component.method, (*where, "method"), "method")
        init = None
        if component.init is not None:
            init = self.find_function(notebook, component.init, (*where, "init"), "init")
        extraction = notebook.extract(
            None
            if component.full_notebook
            else [n for n in (component.method, component.init) if n]
        )
        self.report_cells(notebook, extraction.cells)
        self.runs.append((where, notebook, extraction))
        if not component.full_notebook:
            self.check_names(notebook, extraction, [component.method, component.init])
        if "stream" in component.args:
            self.out.report(
                "PC302",
                "'stream' in args is never seen: the gateway decides to stream before args apply",
                self.out.at((*where, "args", "stream"), key=True),
                "remove it; callers send stream=true with the request",
            )
        ok = method is not None and (component.init is None or init is not None)
        if ok and component.full_notebook and notebook.broken_cells():
            ok = False
        self.check_functions(notebook, method, init, state_param)
        self.check_annotations(notebook, extraction, method)
        if not ok or method is None:
            return None
        return Code(notebook, extraction, method, init)

    def check_names(
        self, notebook: nb.Notebook, extraction: nb.Extraction, functions: list[str | None]
    ) -> None:
        """Warn about names the extracted cells take from cells that are not extracted."""
        defining = " and ".join(name for name in functions if name)
        for cell, node, definition in nb.names_from_other_cells(notebook, extraction):
            self.out.report(
                "PC307",
                f"'{node.id}' is defined in cell {definition.cell.number}, which does not run: "
                f"only the cells defining {defining} do",
                self.out.in_cell(notebook, cell, node.lineno, node.col_offset + 1),
                f"move '{node.id}' into cell {cell.number}, or set full_notebook: true",
            )

    def find_function(
        self, notebook: nb.Notebook, name: str, where: Path_ | Position, role: str
    ) -> nb.Definition | None:
        definition = notebook.definitions.get(name)
        if definition is not None:
            for cell in notebook.broken_redefinitions(name):
                self.report_syntax_error(
                    notebook,
                    cell,
                    f"this cell seems to redefine {name}; until it parses, the {name} of "
                    f"cell {definition.cell.number} is the one used",
                )
            rebound = notebook.rebinding(name)
            if rebound is not None:
                function, statement = rebound
                text = (definition.cell.line(statement.lineno) or "").strip()
                self.out.report(
                    "PC209",
                    f"{role} '{name}' is defined in cell {function.cell.number}, but cell "
                    f"{definition.cell.number} rebinds '{name}' (`{text}`): the notebook's last "
                    f"binding wins, so {notebook.path} does not define a function '{name}'",
                    self.out.in_cell(notebook, definition.cell, definition.line, definition.column),
                    f"rename the variable in cell {definition.cell.number}, or the function "
                    "(and the conf's name for it)",
                )
                return None
            return definition
        hint = did_you_mean(name, notebook.functions())
        broken = notebook.broken_cells()
        if broken:
            for cell in broken:
                self.report_syntax_error(notebook, cell)
            hint = hint or f"cell {broken[0].number} is not valid Python; is {name} defined there?"
        self.out.report(
            "PC204",
            f"{role} '{name}' is not defined at the top level of {notebook.path}",
            where if isinstance(where, Position) else self.out.at(where),
            hint,
        )
        return None

    def check_functions(
        self,
        notebook: nb.Notebook,
        method: nb.Definition | None,
        init: nb.Definition | None,
        state_param: str,
    ) -> None:
        if init is not None and init.node is not None:
            required = nb.required_parameters(init.node)
            if required:
                self.out.report(
                    "PC205",
                    f"init '{init.name}' takes required parameters ({', '.join(required)}): "
                    "it is called with none",
                    self.out.at_def(notebook, init),
                    "give them defaults, or read settings inside the function",
                )
        if method is None or method.node is None:
            return
        function = method.node
        if init is not None and not nb.accepts(function, state_param):
            self.out.report(
                "PC301",
                f"'{method.name}' declares no '{state_param}' parameter, so it never receives "
                f"what '{init.name}' returns",
                self.out.at_def(notebook, method),
                f"add a parameter named {state_param}",
            )
        if nb.is_generator(function):
            drift = nb.mentions_drift(function)
            if drift is not None:
                self.out.report(
                    "PC303",
                    f"'{method.name}' is a generator: a stream cannot signal drift_detected",
                    self.out.in_cell(
                        notebook,
                        method.cell,
                        getattr(drift, "lineno", method.line),
                        getattr(drift, "col_offset", 0) + 1,
                    ),
                    "detect drift in a non-streaming method, or re-load state inside the generator",
                )
        if nb.is_async_generator(function):
            self.out.report(
                "PC401",
                f"'{method.name}' is an async generator: callers must send stream=true "
                '(?stream=true or "stream": "true" in the body)',
                self.out.at_def(notebook, method),
            )

    def check_annotations(
        self, notebook: nb.Notebook, extraction: nb.Extraction, method: nb.Definition | None
    ) -> None:
        """Warn about parameter annotations the OpenAPI document cannot express (PC312)."""
        if method is None or method.node is None:
            return
        from peach_cli.openapi.contract import method_parameters
        from peach_cli.openapi.schemas import Annotations, annotation_text

        statements = [n for cell in extraction.cells if cell.tree for n in cell.tree.body]
        for parameter in method_parameters(method.node, Annotations(statements), {}):
            for node in parameter.schema.unexpressed:
                self.out.report(
                    "PC312",
                    f"'{method.name}' parameter '{parameter.name}': no JSON Schema expresses "
                    f"`{annotation_text(node)}`, so the OpenAPI document says any value",
                    self.out.in_cell(notebook, method.cell, node.lineno, node.col_offset + 1),
                    "annotate with int, float, bool, str, list[...], dict[str, ...], "
                    "Optional, Literal or an Enum of str/int defined in the notebook",
                )
