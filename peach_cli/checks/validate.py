"""The checks of SPEC §3 that need the notebooks, and the plan they produce when they pass.

``validate_project`` takes a loaded :class:`~peach_cli.project.loader.Project` and, without running
any user code, checks every component and task against its notebook (files exist and stay
inside the project, functions exist, ``init`` takes no required parameter, ...), reads the
decorator notebooks, and checks names and urls across the whole project. It returns every
problem at once, plus the ``EndpointSpec``s for ``ProjectPlan``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from peach_cli.checks.ab import check_ab
from peach_cli.checks.diagnostics import Diagnostic, Position, did_you_mean, has_errors
from peach_cli.project import notebook as nb
from peach_cli.project.conf import BASE_ENV, RESERVED_URL_PREFIX, Component, memory_bytes
from peach_cli.project.loader import Path_, Project, load_project, schema_diagnostic
from peach_cli.runtime.plan import (
    FALLBACK,
    PRIMARY,
    ComponentSpec,
    EndpointSpec,
    ProjectPlan,
    TaskSpec,
    url_key,
)

MAX_MODULE_BYTES = 8 * 1024 * 1024
_IMPORT_HINTS = {
    "endpoint": "add `from peach_cli import endpoint` at the top of the notebook",
    "peach_cli": "add `import peach_cli` at the top of the notebook",
}


@dataclass
class Validation:
    """What ``validate_project`` found: the problems, and the endpoints when there are none."""

    project: Project
    diagnostics: list[Diagnostic] = field(default_factory=list)
    endpoints: dict[str, EndpointSpec] = field(default_factory=dict)
    notebooks: list[str] = field(default_factory=list)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)

    def plan(self) -> ProjectPlan:
        """The serving plan (only meaningful when no diagnostic is an error)."""
        conf = self.project.conf
        envs = {BASE_ENV, *conf.py_environments}
        return ProjectPlan(
            root=self.project.root,
            codops=conf.codops,
            timeout_s=float(conf.timeout_s),
            endpoints=dict(self.endpoints),
            py_environments={name: conf.environment(name) for name in sorted(envs)},
            watched_files=tuple(dict.fromkeys([*self.project.files, *self.notebooks])),
            tasks=dict(self.tasks),
        )


@dataclass
class _Code:
    """A component's code, once found: the notebook, its extraction, its functions."""

    notebook: nb.Notebook
    extraction: nb.Extraction
    method: nb.Definition | None
    init: nb.Definition | None


def validate_project(project: Project) -> Validation:
    """Check a loaded project against its notebooks; never runs user code."""
    return _Checker(project).run()


class _Checker:
    def __init__(self, project: Project) -> None:
        self.project = project
        self.conf = project.conf
        self.result = Validation(project)
        self.notebooks: dict[str, nb.Notebook | None] = {}
        self.reported: set[tuple[str, int, str]] = set()
        self.urls: dict[str, tuple[str, Position]] = {}
        self.imports: dict[tuple[Path, Path | str, int], list[Path]] = {}
        self.paths: dict[str, str | None] = {}
        self.seen: set[Diagnostic] = set()
        self.runs: list[tuple[Path_, nb.Notebook, nb.Extraction]] = []  # for PC308

    # -- reporting --

    def report(self, code: str, message: str, position: Position, hint: str | None = None) -> None:
        self.add(Diagnostic(code, message, position, hint))

    def add(self, diagnostic: Diagnostic) -> None:
        """Record a problem once: a function shared by several components is reported once."""
        if diagnostic not in self.seen:
            self.seen.add(diagnostic)
            self.result.diagnostics.append(diagnostic)

    def at(self, path: Path_, *, key: bool = False) -> Position:
        return self.project.position(path, key=key)

    @staticmethod
    def in_cell(notebook: nb.Notebook, cell: nb.Cell, line: int, column: int | None) -> Position:
        return Position(notebook.path, line, column, cell.number, cell.line(line))

    def at_def(self, notebook: nb.Notebook, definition: nb.Definition) -> Position:
        return self.in_cell(notebook, definition.cell, definition.line, definition.column)

    # -- the whole project --

    def run(self) -> Validation:
        conf = self.conf
        for name, env in conf.endpoints.items():
            self.check_py_env(("endpoints", name, "py_env"), env.py_env)
            if env.url:
                self.check_url(name, env.url, self.at(("endpoints", name, "url")))
            if name in self.project.partial:  # its schema errors are reported already
                section = ("endpoints", name, "components")
                written = [  # every component written, valid or not, in file order
                    p[3]
                    for p in self.project.positions
                    if len(p) == 4 and p[:3] == section and isinstance(p[3], str)
                ]
                if written:
                    self.check_endpoint_components(name, written)
                for component_name, component in env.components.items():
                    where = ("endpoints", name, "components", component_name)
                    self.check_code(where, component, "model")
                continue
            components = self.check_endpoint_components(name, list(env.components))
            specs = {}
            for component_name, component in env.components.items():
                where = ("endpoints", name, "components", component_name)
                code = self.check_code(where, component, "model")
                if code is not None:
                    specs[component_name] = self.component_spec(
                        name, component_name, env.url, env.py_env, component, code, "model"
                    )
            refused = env.ab is None and ("endpoints", name, "ab") in self.project.positions
            ab_problems, ab = check_ab(name, env, self.at, refused=refused)
            for problem in ab_problems:
                self.add(problem)
            if components is not None and len(specs) == len(env.components):
                primary, fallback = components
                if (env.ab is not None or refused) and ab is None:
                    continue  # the split is wrong (reported): nothing to serve
                self.result.endpoints[name] = EndpointSpec(
                    name, env.url, specs, primary, fallback, ab=ab
                )
        for name, task in conf.tasks.items():
            self.check_py_env(("tasks", name, "py_env"), task.py_env)
            task_code = self.check_code(("tasks", name), task, "model")
            if task_code is not None:
                self.result.tasks[name] = TaskSpec(
                    name=name,
                    notebook=task_code.notebook.path,
                    source=task_code.extraction.source,
                    source_name=task_code.notebook.path,
                    method=task.method,
                    init=task.init,
                    args=dict(task.args),
                    timeout_s=float(task.timeout_s),
                    py_env=task.py_env,
                    dependencies=conf.environment(task.py_env),
                    modules=self.project_modules(task_code),
                    line_map=task_code.extraction.line_map,
                )
        seen: dict[str, int] = {}
        for index, path in enumerate(conf.decorator_endpoints):
            if path in seen:
                first = self.at(("decorator_endpoints", seen[path]))
                self.report(
                    "PC110",
                    f"decorator notebook {path} is listed twice (first at line {first.line})",
                    self.at(("decorator_endpoints", index)),
                )
                continue
            seen[path] = index
            self.check_decorator_notebook(index, path)
        if self.project.schema_ok and not conf.endpoints and not conf.decorator_endpoints:
            self.report(
                "PC306",
                "the project defines no endpoint",
                self.at(()),
                "add one under endpoints: (see examples/quickstart/peach.yaml)",
            )
        from peach_cli.checks.undeclared import undeclared_imports

        for diagnostic in undeclared_imports(self.project, self.runs):
            self.add(diagnostic)
        from peach_cli.checks.triggers import unknown_triggered_tasks

        for diagnostic in unknown_triggered_tasks(self.conf, self.runs):
            self.add(diagnostic)
        return self.result

    def check_py_env(self, where: Path_, name: str) -> None:
        declared = list(dict.fromkeys([BASE_ENV, *self.conf.py_environments]))
        if name not in declared:
            self.report(
                "PC114",
                f"py_env '{name}' is not declared in py_environments",
                self.at(where),
                did_you_mean(name, declared) or f"declared: {', '.join(declared)}",
            )

    def check_url(self, endpoint: str, url: str, position: Position) -> None:
        if url == RESERVED_URL_PREFIX or url.startswith(RESERVED_URL_PREFIX + "/"):
            self.report(
                "PC116",
                f"url {url} is reserved: {RESERVED_URL_PREFIX}/ belongs to the dev server",
                position,
                "choose another url",
            )
        normalized = url_key(url)
        if normalized in self.urls:
            other, other_position = self.urls[normalized]
            self.report(
                "PC112",
                f"url {url} is already the url of endpoint '{other}' ({other_position})",
                position,
                "every endpoint needs its own url",
            )
        else:
            self.urls[normalized] = (endpoint, position)

    def check_endpoint_components(
        self, name: str, names: list[str]
    ) -> tuple[str, str | None] | None:
        where = ("endpoints", name, "components")
        primaries = [c for c in names if c != FALLBACK]
        fallback = FALLBACK if FALLBACK in names else None
        if not primaries:
            self.report(
                "PC115",
                f"endpoint '{name}' has only a fallback component",
                self.at(where, key=True),
                "add the primary component, named main",
            )
            return None
        if len(primaries) > 1 and PRIMARY not in primaries:
            self.report(
                "PC113",
                f"endpoint '{name}' has several components ({', '.join(primaries)}) "
                f"and none is named '{PRIMARY}'",
                self.at(where, key=True),
                f"name the primary component '{PRIMARY}' (and the fallback '{FALLBACK}')",
            )
            return None
        return (PRIMARY if PRIMARY in primaries else primaries[0]), fallback

    # -- notebooks --

    def load_notebook(self, relative: str, where: Position) -> nb.Notebook | None:
        """Read a notebook once; report a bad path or an unreadable file at ``where``."""
        if relative not in self.paths:
            self.paths[relative] = self.inside_project(relative)
        key = self.paths[relative]
        if key is None:
            self.report(
                "PC202",
                f"notebook {relative} is outside the project folder",
                where,
                "notebook paths are relative to the project folder and stay inside it",
            )
            return None
        root = self.project.root.resolve()
        if key not in self.notebooks:
            try:
                self.notebooks[key] = nb.read_notebook(root, key)
            except nb.NotebookError as error:
                self.notebooks[key] = None
                hint = self.similar_notebooks(key) if error.missing else None
                self.report("PC201" if error.missing else "PC203", error.message, where, hint)
                return None
            self.result.notebooks.append(key)
        return self.notebooks[key]

    def inside_project(self, relative: str) -> str | None:
        """The project-relative posix path of ``relative``, or None if it leaves the project."""
        root = self.project.root.resolve()
        if PurePosixPath(relative.replace("\\", "/")).is_absolute() or Path(relative).is_absolute():
            return None
        try:
            resolved = (root / relative).resolve()
        except (ValueError, OSError, RuntimeError):  # a NUL byte, a symlink loop
            return None
        return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else None

    def similar_notebooks(self, relative: str) -> str | None:
        root = self.project.root
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
            if cell.dropped and (notebook.path, cell.number, "PC304") not in self.reported:
                self.reported.add((notebook.path, cell.number, "PC304"))
                count = len(cell.dropped)
                self.report(
                    "PC304",
                    f"{count} IPython magic/shell line{'s' if count > 1 else ''} dropped from "
                    f"cell {cell.number}: {'they do' if count > 1 else 'it does'} not run on the platform",
                    self.in_cell(notebook, cell, cell.dropped[0], 1),
                    "declare packages in py_environments instead of !pip install"
                    if any("pip" in (cell.line(n) or "") for n in cell.dropped)
                    else "magics and shell lines only work inside Jupyter",
                )
            if cell.syntax_error is not None:
                self.report_syntax_error(notebook, cell)

    def report_syntax_error(
        self, notebook: nb.Notebook, cell: nb.Cell, hint: str | None = None
    ) -> None:
        if (notebook.path, cell.number, "PC206") in self.reported:
            return
        self.reported.add((notebook.path, cell.number, "PC206"))
        error = cell.syntax_error
        assert error is not None
        line = error.lineno or 1
        self.report(
            "PC206",
            f"cell {cell.number} is not valid Python: {error.msg}",
            self.in_cell(notebook, cell, line, error.offset),
            hint,
        )

    # -- components and tasks --

    def check_code(self, where: Path_, component: Any, state_param: str) -> _Code | None:
        """Check one conf component or task against its notebook; None if it cannot run."""
        notebook = self.load_notebook(component.notebook, self.at((*where, "notebook")))
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
            self.report(
                "PC302",
                "'stream' in args is never seen: the gateway decides to stream before args apply",
                self.at((*where, "args", "stream"), key=True),
                "remove it; callers send stream=true with the request",
            )
        ok = method is not None and (component.init is None or init is not None)
        if ok and component.full_notebook and notebook.broken_cells():
            ok = False
        self.check_functions(notebook, method, init, state_param)
        if not ok or method is None:
            return None
        return _Code(notebook, extraction, method, init)

    def check_names(
        self, notebook: nb.Notebook, extraction: nb.Extraction, functions: list[str | None]
    ) -> None:
        """Warn about names the extracted cells take from cells that are not extracted."""
        defining = " and ".join(name for name in functions if name)
        for cell, node, definition in nb.names_from_other_cells(notebook, extraction):
            self.report(
                "PC307",
                f"'{node.id}' is defined in cell {definition.cell.number}, which does not run: "
                f"only the cells defining {defining} do",
                self.in_cell(notebook, cell, node.lineno, node.col_offset + 1),
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
            return definition
        hint = did_you_mean(name, notebook.functions())
        broken = notebook.broken_cells()
        if broken:
            for cell in broken:
                self.report_syntax_error(notebook, cell)
            hint = hint or f"cell {broken[0].number} is not valid Python; is {name} defined there?"
        self.report(
            "PC204",
            f"{role} '{name}' is not defined at the top level of {notebook.path}",
            where if isinstance(where, Position) else self.at(where),
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
                self.report(
                    "PC205",
                    f"init '{init.name}' takes required parameters ({', '.join(required)}): "
                    "it is called with none",
                    self.at_def(notebook, init),
                    "give them defaults, or read settings inside the function",
                )
        if method is None or method.node is None:
            return
        function = method.node
        if init is not None and not nb.accepts(function, state_param):
            self.report(
                "PC301",
                f"'{method.name}' declares no '{state_param}' parameter, so it never receives "
                f"what '{init.name}' returns",
                self.at_def(notebook, method),
                f"add a parameter named {state_param}",
            )
        if nb.is_generator(function):
            drift = nb.mentions_drift(function)
            if drift is not None:
                self.report(
                    "PC303",
                    f"'{method.name}' is a generator: a stream cannot signal drift_detected",
                    self.in_cell(
                        notebook,
                        method.cell,
                        getattr(drift, "lineno", method.line),
                        getattr(drift, "col_offset", 0) + 1,
                    ),
                    "detect drift in a non-streaming method, or re-load state inside the generator",
                )
        if nb.is_async_generator(function):
            self.report(
                "PC401",
                f"'{method.name}' is an async generator: callers must send stream=true "
                '(?stream=true or "stream": "true" in the body)',
                self.at_def(notebook, method),
            )

    def component_spec(
        self,
        endpoint: str,
        name: str,
        url: str,
        py_env: str,
        component: Component,
        code: _Code,
        state_param: str,
    ) -> ComponentSpec:
        return ComponentSpec(
            endpoint=endpoint,
            name=name,
            url=url,
            notebook=code.notebook.path,
            source=code.extraction.source,
            source_name=code.notebook.path,
            method=component.method,
            init=component.init,
            state_param=state_param,  # type: ignore[arg-type]
            args={k: v for k, v in component.args.items() if k != "stream"},
            replicas=component.replicas,
            memory=memory_bytes(component.memory),
            cpus=float(component.cpus),
            media_type=component.media_type,
            py_env=py_env,
            dependencies=self.conf.environment(py_env),
            modules=self.project_modules(code),
            line_map=code.extraction.line_map,
        )

    # -- decorator notebooks --

    def check_decorator_notebook(self, index: int, relative: str) -> None:
        where = self.at(("decorator_endpoints", index))
        notebook = self.load_notebook(relative, where)
        if notebook is None:
            return
        self.report_cells(notebook, notebook.cells)
        functions = nb.find_endpoint_functions(notebook)
        if not functions:
            self.report(
                "PC305",
                f"{notebook.path} has no @endpoint function",
                where,
                'decorate a top-level function with @endpoint("/url")',
            )
        broken = bool(notebook.broken_cells())
        extraction = notebook.extract(None)
        self.runs.append((("decorator_endpoints", index), notebook, extraction))
        for function in functions:
            spec = self.decorated_endpoint(notebook, function, extraction)
            if spec is not None and not broken:
                self.result.endpoints[function.name] = spec

    def decorated_endpoint(
        self, notebook: nb.Notebook, function: nb.DecoratedFunction, extraction: nb.Extraction
    ) -> EndpointSpec | None:
        cell = function.cell

        def position(option: str | None) -> Position:
            if option in function.positions:
                line, column = function.positions[option]
                return self.in_cell(notebook, cell, line, column)
            return self.in_cell(
                notebook, cell, function.function.lineno, function.function.col_offset + 1
            )

        for problem in function.problems:
            self.report(
                problem.code,
                problem.message,
                self.in_cell(notebook, cell, problem.line, problem.column),
                problem.hint,
            )
        ok = not function.problems
        decorator, line = function.decorator
        if not notebook.bound_before(decorator, cell, line):
            self.report(
                "PC208",
                f"'{decorator}' is not imported above this @endpoint: running the notebook "
                "raises NameError here",
                self.in_cell(notebook, cell, line, function.function.col_offset + 2),
                _IMPORT_HINTS.get(decorator, f"import {decorator} above its first use"),
            )
            ok = False
        name = function.name
        here = position(None)
        if name in self.conf.endpoints or name in self.result.endpoints:
            other = (
                str(self.at(("endpoints", name), key=True))
                if name in self.conf.endpoints
                else "another decorator notebook"
            )
            self.report(
                "PC110",
                f"endpoint '{name}' is defined twice: here and in {other}",
                here,
                "rename the function or the conf endpoint",
            )
            ok = False
        url = function.options.get("url")
        if "url" in function.options:
            if not isinstance(url, str) or not url.startswith("/"):
                self.report(
                    "PC103",
                    f"invalid url: {url!r} is not a path starting with '/'",
                    position("url"),
                )
                ok = False
            else:
                self.check_url(name, url, position("url"))
        init_name = function.options.get("init_fn")
        raw: dict[str, Any] = {
            "notebook": notebook.path,
            "method": name,
            **{
                k: function.options[k]
                for k in ("args", "replicas", "memory", "cpus", "media_type")
                if k in function.options and (k == "replicas" or function.options[k] is not None)
            },  # None is the decorator's own default for all of them but replicas
        }
        if isinstance(init_name, str):
            raw["init"] = init_name
        from pydantic import ValidationError

        component: Component | None = None
        try:
            component = Component.model_validate(raw)
        except ValidationError as error:  # reported; the functions are still checked below
            for item in error.errors(include_url=False):
                option = str(item["loc"][0]) if item["loc"] else None
                self.add(
                    schema_diagnostic(
                        item, lambda *_a, option=option, **_k: position(option), Component
                    )
                )
        method = notebook.definitions.get(name)
        init = None
        if isinstance(init_name, str):
            init = notebook.definitions.get(init_name)
            if init is None or init.node is None:
                self.report(
                    "PC204",
                    f"init_fn '{init_name}' is not a top-level function of {notebook.path}",
                    position("init_fn"),
                    did_you_mean(init_name, notebook.functions()),
                )
                ok = False
                init = None
            elif not notebook.bound_before(init_name, cell, position("init_fn").line):
                self.report(
                    "PC204",
                    f"init_fn '{init_name}' is defined only after this @endpoint, in cell "
                    f"{init.cell.number}: running the notebook raises NameError here",
                    position("init_fn"),
                    f"move the definition of {init_name} above the decorated function",
                )
                ok = False
        args = function.options.get("args")
        if isinstance(args, dict) and "stream" in args:
            self.report(
                "PC302",
                "'stream' in args is never seen: the gateway decides to stream before args apply",
                position("args"),
                "remove it; callers send stream=true with the request",
            )
        self.check_functions(notebook, method, init, "init_state")
        if not ok or component is None or method is None or not isinstance(url, str):
            return None
        code = _Code(notebook, extraction, method, init)
        spec = self.component_spec(name, PRIMARY, url, BASE_ENV, component, code, "init_state")
        return EndpointSpec(name, url, {PRIMARY: spec}, PRIMARY, None, decorated=True)

    # -- project modules --

    def project_modules(self, code: _Code) -> tuple[str, ...]:
        """Project-local .py files the code imports, directly or through each other."""
        root = self.project.root.resolve()
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

    @staticmethod
    def resolve_imports(
        tree: ast.AST, origin: Path | None, search: list[Path], root: Path
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


def build_plan(path: Path | str) -> tuple[ProjectPlan | None, list[Diagnostic]]:
    """Load, validate and plan a project (what `peach dev` and `peach deploy` serve).

    The plan is None when any diagnostic is an error.
    """
    project, diagnostics = load_project(path)
    if project is None:
        return None, diagnostics
    result = validate_project(project)
    diagnostics += result.diagnostics
    if has_errors(diagnostics):
        return None, diagnostics
    return result.plan(), diagnostics
