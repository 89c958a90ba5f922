"""The checks of SPEC §3 that need the notebooks, and the plan they produce when they pass.

``validate_project`` takes a loaded :class:`~peach_cli.project.loader.Project` and, without running
any user code, checks every component and task against its notebook (files exist and stay
inside the project, functions exist, ``init`` takes no required parameter, ...), reads the
decorator notebooks, and checks names and urls across the whole project. It returns every
problem at once, plus the ``EndpointSpec``s for ``ProjectPlan``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from peach_cli.checks.ab import check_ab
from peach_cli.checks.decorated import DecoratorNotebooks
from peach_cli.checks.modules import ProjectModules
from peach_cli.checks.notebooks import Code, NotebookChecks
from peach_cli.checks.report import Findings
from peach_cli.project import notebook as nb
from peach_cli.project.conf import (
    BASE_ENV,
    RESERVED_URL_PREFIX,
    Component,
    Endpoint,
    Task,
    memory_bytes,
)
from peach_cli.project.diagnostics import (
    Diagnostic,
    Position,
    did_you_mean,
)
from peach_cli.project.loader import Path_, Project
from peach_cli.runtime.plan import (
    FALLBACK,
    PRIMARY,
    ComponentSpec,
    EndpointSpec,
    ProjectPlan,
    TaskSpec,
    url_key,
)


@dataclass
class Validation:
    """What ``validate_project`` found: the problems, and the endpoints when there are none."""

    project: Project
    diagnostics: list[Diagnostic] = field(default_factory=list)
    endpoints: dict[str, EndpointSpec] = field(default_factory=dict)
    notebooks: list[str] = field(default_factory=list)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    names: frozenset[str] = frozenset()
    """The names the code read uses (``ProjectPlan.names``)."""

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
            names=self.names,
        )


def validate_project(project: Project) -> Validation:
    """Check a loaded project against its notebooks; never runs user code."""
    return _Checker(project).run()


class _Checker:
    """The whole project's checks, in order; each concern's checks live in its own module
    (``notebooks``, ``decorated``, ``modules``, ``ab``, ``undeclared``, ``triggers``)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.conf = project.conf
        self.result = Validation(project)
        self.out = Findings(project)
        self.notebooks = NotebookChecks(self.out)
        self.modules = ProjectModules(project.root)
        self.urls: dict[str, tuple[str, Position]] = {}

    def run(self) -> Validation:
        for name, env in self.conf.endpoints.items():
            self.check_endpoint(name, env)
        for name, task in self.conf.tasks.items():
            self.check_task(name, task)
        self.check_decorator_notebooks()
        if self.project.schema_ok and not self.conf.endpoints and not self.conf.decorator_endpoints:
            self.out.report(
                "PC306",
                "the project defines no endpoint",
                self.out.at(()),
                "add one under endpoints: (`peach init` writes a project with one)",
            )
        self.check_across()
        self.result.diagnostics = self.out.diagnostics
        self.result.notebooks = self.notebooks.read
        self.result.names = frozenset(self.modules.names.union(*self.notebook_names()))
        return self.result

    def notebook_names(self) -> Iterator[set[str]]:
        """The names in the notebooks' code, and the parts of their paths (pathlib interns
        each: ``Soak.ipynb`` of ``notebooks/Soak.ipynb``, made anew for each component)."""
        for key, notebook in self.notebooks.notebooks.items():
            yield set(PurePosixPath(key).parts)
            for cell in notebook.cells if notebook is not None else ():
                if cell.tree is not None:
                    yield nb.identifiers(cell.tree)

    def check_endpoint(self, name: str, env: Endpoint) -> None:
        """A conf endpoint: its env, url, components and A/B split; served when all hold."""
        self.check_py_env(("endpoints", name, "py_env"), env.py_env)
        if env.url:
            self.check_url(name, env.url, self.out.at(("endpoints", name, "url")))
        if name in self.project.partial:  # its schema errors are reported already
            self.check_partial_endpoint(name, env)
            return
        components = self.check_endpoint_components(name, list(env.components))
        specs = {}
        for component_name, component in env.components.items():
            where = ("endpoints", name, "components", component_name)
            code = self.notebooks.check_code(where, component, "model")
            if code is not None:
                specs[component_name] = self.component_spec(
                    name, component_name, env.url, env.py_env, component, code, "model"
                )
        refused = env.ab is None and ("endpoints", name, "ab") in self.project.positions
        ab_problems, ab = check_ab(name, env, self.out.at, refused=refused)
        for problem in ab_problems:
            self.out.add(problem)
        if components is not None and len(specs) == len(env.components):
            primary, fallback = components
            if (env.ab is not None or refused) and ab is None:
                return  # the split is wrong (reported): nothing to serve
            self.result.endpoints[name] = EndpointSpec(
                name, env.url, specs, primary, fallback, ab=ab
            )

    def check_partial_endpoint(self, name: str, env: Endpoint) -> None:
        """An endpoint whose schema failed: what it has is still checked, nothing served."""
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
            self.notebooks.check_code(where, component, "model")

    def check_task(self, name: str, task: Task) -> None:
        self.check_py_env(("tasks", name, "py_env"), task.py_env)
        task_code = self.notebooks.check_code(("tasks", name), task, "model")
        if task_code is None:
            return
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
            dependencies=self.conf.environment(task.py_env),
            modules=self.modules.of(task_code),
            line_map=task_code.extraction.line_map,
            **self.variables(task.env_vars, task.secrets),
        )

    def check_decorator_notebooks(self) -> None:
        # made here, not kept: it holds this checker's methods, so keeping it would make
        # the checker a reference cycle, and every reload's checks (the project, its conf,
        # its notebooks' findings) would wait for a full garbage collection to go
        decorated = DecoratorNotebooks(
            self.out,
            self.notebooks,
            self.conf,
            self.result.endpoints,
            self.check_url,
            self.component_spec,
        )
        seen: dict[str, int] = {}
        for index, path in enumerate(self.conf.decorator_endpoints):
            if path in seen:
                first = self.out.at(("decorator_endpoints", seen[path]))
                self.out.report(
                    "PC110",
                    f"decorator notebook {path} is listed twice (first at line {first.line})",
                    self.out.at(("decorator_endpoints", index)),
                )
                continue
            seen[path] = index
            decorated.check(index, path)

    def check_across(self) -> None:
        """The checks across the whole project: undeclared imports, unknown triggered
        tasks, variables and credentials."""
        from peach_cli.checks.triggers import unknown_triggered_tasks
        from peach_cli.checks.undeclared import undeclared_imports
        from peach_cli.checks.variables import check_variables, credential_warnings

        for diagnostic in undeclared_imports(self.project, self.notebooks.runs):
            self.out.add(diagnostic)
        for diagnostic in unknown_triggered_tasks(self.conf, self.notebooks.runs):
            self.out.add(diagnostic)
        for diagnostic in check_variables(self.conf, self.out.at):
            self.out.add(diagnostic)
        for diagnostic in credential_warnings(self.conf, self.out.at, self.notebooks.runs):
            self.out.add(diagnostic)

    def check_py_env(self, where: Path_, name: str) -> None:
        declared = list(dict.fromkeys([BASE_ENV, *self.conf.py_environments]))
        if name not in declared:
            self.out.report(
                "PC114",
                f"py_env '{name}' is not declared in py_environments",
                self.out.at(where),
                did_you_mean(name, declared) or f"declared: {', '.join(declared)}",
            )

    def check_url(self, endpoint: str, url: str, position: Position) -> None:
        if url == RESERVED_URL_PREFIX or url.startswith(RESERVED_URL_PREFIX + "/"):
            self.out.report(
                "PC116",
                f"url {url} is reserved: {RESERVED_URL_PREFIX}/ belongs to the dev server",
                position,
                "choose another url",
            )
        else:
            from peach_cli.project.rules import url_problem

            problem = url_problem(url)
            if problem is not None:
                self.out.report(
                    "PC122",
                    f"url {url!r} is not a valid url: {problem}",
                    position,
                    "a url is like /assistant or /v2/recommend",
                )
        normalized = url_key(url)
        if normalized in self.urls:
            other, other_position = self.urls[normalized]
            self.out.report(
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
            self.out.report(
                "PC115",
                f"endpoint '{name}' has only a fallback component",
                self.out.at(where, key=True),
                "add the primary component, named main",
            )
            return None
        if len(primaries) > 1 and PRIMARY not in primaries:
            self.out.report(
                "PC113",
                f"endpoint '{name}' has several components ({', '.join(primaries)}) "
                f"and none is named '{PRIMARY}'",
                self.out.at(where, key=True),
                f"name the primary component '{PRIMARY}' (and the fallback '{FALLBACK}')",
            )
            return None
        return (PRIMARY if PRIMARY in primaries else primaries[0]), fallback

    def component_spec(
        self,
        endpoint: str,
        name: str,
        url: str,
        py_env: str,
        component: Component,
        code: Code,
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
            modules=self.modules.of(code),
            line_map=code.extraction.line_map,
            **self.variables(component.env_vars, component.secrets),
        )

    def variables(self, env_vars: dict[str, str], secrets: list[str]) -> dict:
        """A component's or task's ``env_vars`` and ``secrets`` fields, merged with the
        top level's."""
        merged, names = self.conf.variables(env_vars, secrets)
        return {"env_vars": merged, "secrets": names}
