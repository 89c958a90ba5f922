"""The checks of decorator notebooks (``decorator_endpoints``): each ``@endpoint`` function
becomes an endpoint of its own, checked as the conf's components are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from peach_cli.checks.notebooks import Code, NotebookChecks
from peach_cli.checks.report import Findings
from peach_cli.project import notebook as nb
from peach_cli.project.conf import BASE_ENV, Component, PeachConf
from peach_cli.project.diagnostics import Position, did_you_mean
from peach_cli.project.loader import schema_diagnostic
from peach_cli.runtime.plan import PRIMARY, ComponentSpec, EndpointSpec

_IMPORT_HINTS = {
    "endpoint": "add `from peach_cli import endpoint` at the top of the notebook",
    "peach_cli": "add `import peach_cli` at the top of the notebook",
}

SpecBuilder = Callable[[str, str, str, str, Component, Code, str], ComponentSpec]


class DecoratorNotebooks:
    """Checks decorator notebooks; the endpoints they define go into ``endpoints``."""

    def __init__(
        self,
        out: Findings,
        notebooks: NotebookChecks,
        conf: PeachConf,
        endpoints: dict[str, EndpointSpec],
        check_url: Callable[[str, str, Position], None],
        component_spec: SpecBuilder,
    ) -> None:
        self.out = out
        self.notebooks = notebooks
        self.conf = conf
        self.endpoints = endpoints
        self.check_url = check_url
        self.component_spec = component_spec

    def check(self, index: int, relative: str) -> None:
        where = self.out.at(("decorator_endpoints", index))
        notebook = self.notebooks.load_notebook(relative, where)
        if notebook is None:
            return
        self.notebooks.report_cells(notebook, notebook.cells)
        functions = nb.find_endpoint_functions(notebook)
        if not functions:
            self.out.report(
                "PC305",
                f"{notebook.path} has no @endpoint function",
                where,
                'decorate a top-level function with @endpoint("/url")',
            )
        broken = bool(notebook.broken_cells())
        extraction = notebook.extract(None)
        self.notebooks.runs.append((("decorator_endpoints", index), notebook, extraction))
        for function in functions:
            spec = self.decorated_endpoint(notebook, function, extraction)
            if spec is not None and not broken:
                self.endpoints[function.name] = spec

    def decorated_endpoint(
        self, notebook: nb.Notebook, function: nb.DecoratedFunction, extraction: nb.Extraction
    ) -> EndpointSpec | None:
        position = self._positions(notebook, function)
        ok = self._check_decorator(notebook, function)
        ok = self._check_name(function, position) and ok
        url = function.options.get("url")
        ok = self._check_url(function, url, position) and ok
        component = self._component(function, notebook, position)
        method = notebook.definitions.get(function.name)
        init, init_ok = self._init(notebook, function, position)
        self._check_args(function, position)
        self.notebooks.check_functions(notebook, method, init, "init_state")
        self.notebooks.check_annotations(notebook, extraction, method)
        if not (ok and init_ok) or component is None or method is None or not isinstance(url, str):
            return None
        code = Code(notebook, extraction, method, init)
        name = function.name
        spec = self.component_spec(name, PRIMARY, url, BASE_ENV, component, code, "init_state")
        return EndpointSpec(name, url, {PRIMARY: spec}, PRIMARY, None, decorated=True)

    def _positions(
        self, notebook: nb.Notebook, function: nb.DecoratedFunction
    ) -> Callable[[str | None], Position]:
        """Where an option of the decorator stands (the function's own line without one)."""
        cell = function.cell

        def position(option: str | None) -> Position:
            if option in function.positions:
                line, column = function.positions[option]
                return self.out.in_cell(notebook, cell, line, column)
            return self.out.in_cell(
                notebook, cell, function.function.lineno, function.function.col_offset + 1
            )

        return position

    def _check_decorator(self, notebook: nb.Notebook, function: nb.DecoratedFunction) -> bool:
        """The decorator's own problems, and PC208 when it is not imported above it."""
        cell = function.cell
        for problem in function.problems:
            self.out.report(
                problem.code,
                problem.message,
                self.out.in_cell(notebook, cell, problem.line, problem.column),
                problem.hint,
            )
        ok = not function.problems
        decorator, line = function.decorator
        if not notebook.bound_before(decorator, cell, line):
            self.out.report(
                "PC208",
                f"'{decorator}' is not imported above this @endpoint: running the notebook "
                "raises NameError here",
                self.out.in_cell(notebook, cell, line, function.function.col_offset + 2),
                _IMPORT_HINTS.get(decorator, f"import {decorator} above its first use"),
            )
            ok = False
        return ok

    def _check_name(
        self, function: nb.DecoratedFunction, position: Callable[[str | None], Position]
    ) -> bool:
        """PC110: the endpoint's name is not taken by the conf or another notebook."""
        name = function.name
        if name not in self.conf.endpoints and name not in self.endpoints:
            return True
        other = (
            str(self.out.at(("endpoints", name), key=True))
            if name in self.conf.endpoints
            else "another decorator notebook"
        )
        self.out.report(
            "PC110",
            f"endpoint '{name}' is defined twice: here and in {other}",
            position(None),
            "rename the function or the conf endpoint",
        )
        return False

    def _check_url(
        self,
        function: nb.DecoratedFunction,
        url: object,
        position: Callable[[str | None], Position],
    ) -> bool:
        if "url" not in function.options:
            return True
        if not isinstance(url, str) or not url.startswith("/"):
            self.out.report(
                "PC103", f"invalid url: {url!r} is not a path starting with '/'", position("url")
            )
            return False
        self.check_url(function.name, url, position("url"))
        return True

    def _component(
        self,
        function: nb.DecoratedFunction,
        notebook: nb.Notebook,
        position: Callable[[str | None], Position],
    ) -> Component | None:
        """The decorator's options as a conf component; schema errors reported."""
        init_name = function.options.get("init_fn")
        raw: dict[str, Any] = {
            "notebook": notebook.path,
            "method": function.name,
            **{
                k: function.options[k]
                for k in ("args", "replicas", "memory", "cpus", "media_type")
                if k in function.options and (k == "replicas" or function.options[k] is not None)
            },  # None is the decorator's own default for all of them but replicas
        }
        if isinstance(init_name, str):
            raw["init"] = init_name
        from pydantic import ValidationError

        try:
            return Component.model_validate(raw)
        except ValidationError as error:  # reported; the functions are still checked
            for item in error.errors(include_url=False):
                option = str(item["loc"][0]) if item["loc"] else None
                self.out.add(
                    schema_diagnostic(
                        item, lambda *_a, option=option, **_k: position(option), Component
                    )
                )
            return None

    def _init(
        self,
        notebook: nb.Notebook,
        function: nb.DecoratedFunction,
        position: Callable[[str | None], Position],
    ) -> tuple[nb.Definition | None, bool]:
        """The ``init_fn`` definition (PC204 when it is missing or defined below), and
        whether it is fine."""
        init_name = function.options.get("init_fn")
        if not isinstance(init_name, str):
            return None, True
        init = notebook.definitions.get(init_name)
        if init is None or init.node is None:
            self.out.report(
                "PC204",
                f"init_fn '{init_name}' is not a top-level function of {notebook.path}",
                position("init_fn"),
                did_you_mean(init_name, notebook.functions()),
            )
            return None, False
        if not notebook.bound_before(init_name, function.cell, position("init_fn").line):
            self.out.report(
                "PC204",
                f"init_fn '{init_name}' is defined only after this @endpoint, in cell "
                f"{init.cell.number}: running the notebook raises NameError here",
                position("init_fn"),
                f"move the definition of {init_name} above the decorated function",
            )
            return init, False
        return init, True

    def _check_args(
        self, function: nb.DecoratedFunction, position: Callable[[str | None], Position]
    ) -> None:
        args = function.options.get("args")
        if isinstance(args, dict) and "stream" in args:
            self.out.report(
                "PC302",
                "'stream' in args is never seen: the gateway decides to stream before args apply",
                position("args"),
                "remove it; callers send stream=true with the request",
            )
