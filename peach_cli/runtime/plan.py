"""The serving plan: a validated project reduced to what hosts need to run it.

``peach dev`` (the simulator) and ``peach deploy`` (Ray Serve) both consume a ``ProjectPlan``
and nothing else, so both host exactly the same thing. The plan is built by
``peach_cli.checks.build.build_plan`` from the conf model and the notebooks; it is plain frozen
data (picklable, JSON-able through ``to_dict``) so it can cross process boundaries.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

DEFAULT_MEDIA_TYPE = "text/plain; charset=utf-8"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_TASK_TIMEOUT_S = 3600.0
"""A task's bound on one run (the platform's Tasks Scheduler: one hour)."""
PRIMARY = "main"
FALLBACK = "fallback"
AB_PARAMS = {"user": "user_id", "client": "client_id", "session": "session_id"}
"""An A/B test's ``by`` → the request parameter whose value picks the arm (SPEC §2)."""


def url_key(url: str) -> str:
    """The form in which urls are compared and routed: ``/similar/`` is ``/similar``.

    >>> url_key("/similar/"), url_key("/")
    ('/similar', '/')
    """
    return url.rstrip("/") or "/"


class NotebookCode(Protocol):
    """What running a notebook's extracted code needs: a component's and a task's spec."""

    @property
    def notebook(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def source_name(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def init(self) -> str | None: ...
    @property
    def line_map(self) -> tuple[tuple[int, int, int], ...]: ...


@dataclass(frozen=True)
class ComponentSpec:
    """One component of one endpoint: the code a replica runs and how many replicas run it."""

    endpoint: str
    """The endpoint's name (``assistant``)."""
    name: str
    """The component's name (``main``, ``fallback``, ...)."""
    url: str
    """The endpoint's url, for messages."""
    notebook: str
    """The notebook the code came from, relative to the project root (posix)."""
    source: str
    """The extracted Python module source that a replica executes."""
    source_name: str
    """The filename given to ``compile()`` so tracebacks name the notebook."""
    method: str
    """The function called on every request."""
    init: str | None = None
    """The function called once per replica; its result is the state."""
    state_param: Literal["model", "init_state"] = "model"
    """Which parameter receives the init state (``init_state`` for decorator endpoints)."""
    args: dict[str, Any] = field(default_factory=dict)
    """Default request parameters (``stream`` removed: the gateway never sees it)."""
    replicas: int = 1
    memory: int | None = None
    """The per-replica memory request in bytes, if any."""
    cpus: float = 1.0
    media_type: str = DEFAULT_MEDIA_TYPE
    py_env: str = "base"
    dependencies: tuple[str, ...] = ()
    """``base``'s dependencies followed by the py_env's own."""
    modules: tuple[str, ...] = ()
    """Project-local ``.py`` files (relative posix paths) the source imports."""
    line_map: tuple[tuple[int, int, int], ...] = ()
    """(first module line, cell index, first cell line) per extracted cell, for positions."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """Its environment variables: the top level's merged with its own (SPEC §10)."""
    secrets: tuple[str, ...] = ()
    """The names of the secrets it reads; their values are never in the plan."""

    @property
    def key(self) -> str:
        """``endpoint/component``: the component's identity across reloads."""
        return f"{self.endpoint}/{self.name}"

    def fingerprint(self, root: Path | None = None) -> str:
        """A hash of everything that, when changed, requires new replicas.

        With ``root``, the contents of the project modules the code imports are included.
        """
        digest = hashlib.sha256()
        data = asdict(self)
        data.pop("url")  # a url change re-routes, it does not restart replicas
        digest.update(json.dumps(data, sort_keys=True, default=str).encode())
        if root is not None:
            for module in self.modules:
                try:
                    digest.update((root / module).read_bytes())
                except OSError:
                    digest.update(b"<missing>")
        return digest.hexdigest()[:16]


@dataclass(frozen=True)
class ABSpec:
    """An endpoint's A/B test: who is split (``by``) and each arm's percentage, in order."""

    by: str
    """``user``, ``client`` or ``session``."""
    split: tuple[tuple[str, int], ...]
    """(component, percent) in the order the conf lists them; the percents sum to 100."""

    @property
    def param(self) -> str:
        """The request parameter that identifies who is split: ``user_id``, ..."""
        return AB_PARAMS[self.by]

    @property
    def arms(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.split)


@dataclass(frozen=True)
class EndpointSpec:
    """One endpoint: a url and its components (a primary and an optional fallback)."""

    name: str
    url: str
    components: dict[str, ComponentSpec]
    primary: str = PRIMARY
    fallback: str | None = None
    decorated: bool = False
    ab: ABSpec | None = None
    """The A/B test between components, if the endpoint has one (``primary`` without)."""


@dataclass(frozen=True)
class TaskSpec:
    """One task: the code its process runs and the bound on one run."""

    name: str
    notebook: str
    """The notebook the code came from, relative to the project root (posix)."""
    source: str
    """The extracted Python module source that the task's process executes."""
    source_name: str
    """The filename given to ``compile()`` so tracebacks name the notebook."""
    method: str
    init: str | None = None
    """Called once before ``method``; its result is passed as ``model`` when accepted."""
    args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``method`` (only the names it accepts are passed)."""
    timeout_s: float = DEFAULT_TASK_TIMEOUT_S
    py_env: str = "base"
    dependencies: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    line_map: tuple[tuple[int, int, int], ...] = ()
    """(first module line, cell index, first cell line) per extracted cell, for positions."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """Its environment variables: the top level's merged with its own (SPEC §10)."""
    secrets: tuple[str, ...] = ()
    """The names of the secrets it reads; their values are never in the plan."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSpec:
        """The spec ``dataclasses.asdict`` wrote as JSON (a Ray job's ``task.json``).

        >>> spec = TaskSpec("t", "T.ipynb", "def t(): pass", "T.ipynb", "t", line_map=((1, 2, 1),))
        >>> TaskSpec.from_dict(json.loads(json.dumps(asdict(spec)))) == spec
        True
        """
        fields = dict(data)
        fields["dependencies"] = tuple(fields.get("dependencies") or ())
        fields["modules"] = tuple(fields.get("modules") or ())
        fields["line_map"] = tuple(tuple(entry) for entry in fields.get("line_map") or ())
        fields["secrets"] = tuple(fields.get("secrets") or ())
        return cls(**fields)


@dataclass(frozen=True)
class ProjectPlan:
    """Everything a host needs to serve a project."""

    root: Path
    codops: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    endpoints: dict[str, EndpointSpec] = field(default_factory=dict)
    py_environments: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each py_env's full dependency list (``base`` included)."""
    watched_files: tuple[str, ...] = ()
    """Conf files and notebooks the plan was built from (relative posix paths)."""
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    """The tasks, in conf order."""
    names: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """The names the project's code uses (its notebooks' and modules' variables, functions,
    attributes...) and the parts of its files' paths, as the parser and pathlib interned them. Held while the plan is served: a reload
    parses the code again, and each name the parser finds already interned takes no new slot
    in CPython's table of interned strings, which otherwise grew on every reload until it
    was rebuilt twice its size."""

    def components(self) -> list[ComponentSpec]:
        return [c for e in self.endpoints.values() for c in e.components.values()]

    def module_digests(self) -> dict[str, str]:
        """Each project module a component imports (relative path) -> a digest of its
        contents (``<missing>`` if it cannot be read)."""
        digests = {}
        for module in sorted({m for c in self.components() for m in c.modules}):
            try:
                digests[module] = hashlib.sha256((self.root / module).read_bytes()).hexdigest()[:16]
            except OSError:
                digests[module] = "<missing>"
        return digests
