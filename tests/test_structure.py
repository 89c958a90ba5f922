"""The shape of the code, as rules: who may import what, who owns what, what a module holds.

Each test reads the source (ast) and states a rule over every module of ``peach_cli`` and
``simulator``: it names modules where the rule is about a module ("only X may import Y"),
never a function or the order of calls, so renaming a function keeps it green and moving the
same code somewhere else turns it red.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

from peach_cli.deploy.packaging import SERVE_APP_MODULES
from peach_cli.envs.runtime import runtime_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("peach_cli", "simulator")

pytestmark = pytest.mark.xdist_group("structure")  # with test_structure_gateway: one parse

REPLICA_RUNTIME = runtime_files()
"""What a replica or a task imports: it runs inside every user environment, so stdlib only."""


# -- reading the code ---------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _sources() -> dict[str, Path]:
    return {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _trees(prefix: str = "") -> dict[str, ast.Module]:
    return {name: _tree(path) for name, path in _sources().items() if name.startswith(prefix)}


_WALKS: dict[int, tuple[ast.AST, ...]] = {}
_IMPORTED: dict[int, frozenset[str]] = {}


def _walk(tree: ast.AST) -> tuple[ast.AST, ...]:
    """``ast.walk`` of a module's tree (one ``_tree`` keeps), walked once: every rule reads
    every module again."""
    nodes = _WALKS.get(id(tree))
    if nodes is None:
        nodes = _WALKS[id(tree)] = tuple(ast.walk(tree))
    return nodes


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test).endswith("TYPE_CHECKING")


def _imported(tree: ast.AST) -> frozenset[str]:
    """Every module name ``tree`` imports (``a.b`` and, for ``from a.b import c``, ``a.b.c``
    too), at module level or inside functions (lazy imports run), not under
    ``if TYPE_CHECKING:``. (Read once per tree, as ``_walk``.)"""
    if id(tree) not in _IMPORTED:
        _IMPORTED[id(tree)] = frozenset(_imports_in(tree))
    return _IMPORTED[id(tree)]


def _imports_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _imports(name: str) -> set[str]:
    """The project modules module ``name`` imports."""
    return _imported(_tree(_sources()[name])) & set(_sources())


def _importers(of: str, prefix: str = "") -> set[str]:
    """The modules (under ``prefix``) that import ``of`` or anything inside it."""
    return {
        name
        for name, tree in _trees(prefix).items()
        if any(m == of or m.startswith(of + ".") for m in _imported(tree))
    }


def _called_names(tree: ast.AST) -> set[str]:
    """The names ``tree`` calls: ``f(…)`` and ``x.f(…)`` as ``f``."""
    return {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in _walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    }


def _defined_names(tree: ast.Module) -> set[str]:
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _closure(starts: list[str]) -> set[str]:
    """The project modules ``starts`` import, transitively (lazy imports included)."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        name = todo.pop()
        if name not in seen and name in _sources():
            seen.add(name)
            todo.extend(_imports(name))
    return seen


def _as_path(module: str) -> str:
    return _sources()[module].relative_to(ROOT).as_posix()


# -- imports and ownership ----------------------------------------------------------------


@pytest.mark.slow
def test_no_module_imports_one_that_imports_it_back() -> None:
    # a package's __init__ re-exporting its own modules is not a cycle of the code
    graph = {name: _imports(name) - {name, name.rsplit(".", 1)[0]} for name in _sources()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                walk(target)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


PROCESS_MODULES = {
    "simulator.spawn": "starts every worker process (replicas, spares, tasks)",
    "simulator.supervisor": "watches, restarts and stops a replica's process",
    "simulator.template": "the warm template each replica is forked from (spawn asks it)",
    "simulator.keeper": "the keeper every worker tree is started under",
    "simulator.trees": "a worker's process tree, killed whole",
    "simulator.tasks.run": "a task run's process, stopped at its timeout",
}
"""The simulator's modules that start, signal or reap processes; no other one does."""
_STARTS = {"create_subprocess_exec", "create_subprocess_shell", "Popen", "fork", "spawnv"}
_ENDS = {"kill", "terminate", "send_signal", "kill_tree", "reap", "killpg"}


def test_only_the_process_modules_start_or_end_a_process_in_the_simulator() -> None:
    """A replica speaks to its process through its socket; starting a process is
    ``simulator.spawn``'s (and the warm template's it asks), signalling and reaping one the
    process modules'."""
    starting = {
        name for name, tree in _trees("simulator.").items() if _called_names(tree) & _STARTS
    }
    assert starting <= {"simulator.spawn", "simulator.template"}, starting
    ending = {
        name
        for name, tree in _trees("simulator.").items()
        if _called_names(tree) & _ENDS
        or _imported(tree) & {"signal", "psutil", "subprocess", "multiprocessing"}
    }
    assert ending <= set(PROCESS_MODULES), sorted(ending - set(PROCESS_MODULES))


def test_the_http_side_of_the_simulator_is_its_own() -> None:
    """uvicorn (and its internals, which ``simulator.http_protocol`` imitates), its protocol,
    ``LocalService`` and the fast lane are assembled by ``simulator.http_server``, which
    knows nothing of plans; the server plans (pools, routes, reloads) and knows ASGI only."""
    assert _importers("uvicorn") == {"simulator.http_server", "simulator.http_protocol"}
    internals = {
        n for n, t in _trees().items() if any(m.startswith("uvicorn.") for m in _imported(t))
    }
    assert internals == {"simulator.http_protocol"}
    http_side = {"simulator.http_protocol", "simulator.local_service", "simulator.fastlane"}
    planning = {"simulator.changes", "simulator.pool", "simulator.routing", "simulator.reload"}
    assert _imports("simulator.server") & http_side == set()
    assert _imports("simulator.http_server") & planning == set()


@pytest.mark.slow
def test_rich_is_used_by_the_views_only() -> None:
    """Commands and core return data or raise; ``peach_cli.views`` renders it (through the
    consoles of ``peach_cli.boundary``)."""
    users = _importers("rich") - _importers("rich", "peach_cli.views") - {"peach_cli.boundary"}
    assert users == set()


def test_commands_send_no_http_themselves() -> None:
    """A command wires a host and renders; what goes over HTTP is the client's
    (``peach_cli.client``) or the host wiring's (``peach_cli.testing.host``)."""
    assert _importers("httpx", "peach_cli.commands.") == set()


def test_the_dev_token_is_sent_by_one_client() -> None:
    """The ``/_peach/*`` actions a command sends (with the dev token of a loopback host) go
    through one client, ``peach_cli.client.actions``; the server side holds the token in the
    simulator."""
    assert _importers("peach_cli.devtoken", "peach_cli.") == {"peach_cli.client.actions"}


def test_a_fuzz_or_profile_run_is_handed_its_host_and_reads_no_project() -> None:
    """`peach fuzz` and `peach profile` wire their host once (``peach_cli.testing.host``: the
    project found, read and checked, its secrets masked, what it serves) and hand it to their
    run: nothing under ``peach_cli.fuzz`` or ``peach_cli.profile`` imports the wiring, what
    finds, reads, checks or plans a project, what reads its secrets, or starts a simulator
    (their types only, for type checking; the simulator's events are read by
    ``fuzz.watch``)."""
    wiring = (
        "peach_cli.testing.host",
        "peach_cli.project.filenames",
        "peach_cli.project.loader",
        "peach_cli.project.secrets",
        "peach_cli.checks",
        "simulator.session",
    )
    for run in ("peach_cli.fuzz.", "peach_cli.profile."):
        reaching = {f"{name} -> {w}" for w in wiring for name in _importers(w, run)}
        assert reaching == set(), run


def test_peach_test_and_its_pytest_plugin_reach_a_host_through_one_module() -> None:
    """Which host a case goes to (``--url``, else the project's simulator) and the client
    that sends it are ``peach_cli.testing.host``'s, for the command and the plugin alike:
    neither starts a simulator, a session or a client of its own."""
    for driver in ("peach_cli.commands.test", "peach_cli.testing.pytest_plugin"):
        imported = _imported(_tree(_sources()[driver]))
        assert "peach_cli.testing.host" in imported, driver
        own = {
            m
            for m in imported
            if m.split(".")[0] == "simulator"
            or m.startswith(("peach_cli.project.secrets", "peach_cli.client.send.Client"))
        }
        assert own == set(), driver


@pytest.mark.slow
def test_no_private_name_crosses_a_module_boundary() -> None:
    crossings = [
        f"{name} imports {node.module}.{alias.name}"
        for name, tree in _trees().items()
        for node in _walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        and node.module.split(".")[0] in PACKAGES
        # a package's own modules may share its private helpers
        and node.module.rsplit(".", 1)[0] != name.rsplit(".", 1)[0]
        for alias in node.names
        if alias.name.startswith("_")
    ]  # fmt: skip
    assert crossings == []


def _required_imports(tree: ast.AST) -> set[str]:
    """Top-level names of what ``tree`` imports, but for optional imports (guarded by
    ``try: … except ImportError``)."""
    modules: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and any(
            "ImportError" in ast.unparse(h.type or ast.Pass()) for h in node.handlers
        ):
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child)
            return
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return modules


def test_the_replica_runtime_imports_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"peach_cli", "simulator", "__future__"}
    outside = {
        module: sorted(_required_imports(_tree(ROOT / module)) - allowed)
        for module in REPLICA_RUNTIME
    }
    assert {k: v for k, v in outside.items() if v} == {}


def test_a_worker_process_needs_nothing_outside_the_runtime_package() -> None:
    """What a replica or task process runs reaches only ``peach_cli.runtime`` (and the
    package's ``__init__``): staging that package is staging the whole runtime."""
    mains = ["peach_cli.runtime.replica_worker", "peach_cli.runtime.task_worker"]
    reached = {_as_path(module) for module in _closure([*mains, "peach_cli.runtime.task"])}
    assert reached - set(REPLICA_RUNTIME) == set()
    assert len(REPLICA_RUNTIME) > 10  # the package, not an empty glob


def test_ray_replicas_get_everything_the_serve_app_imports() -> None:
    reached = {_as_path(module) for module in _closure(["peach_cli.deploy.app"])}
    # imported inside functions only the CLI calls (what to upload, requirements, tasks file)
    cli_side = ["peach_cli.deploy.requirements", "peach_cli.deploy.jobs"]
    cli_side += ["peach_cli.deploy.scheduler", "peach_cli.deploy.uploads"]
    cli_side += ["peach_cli.envs.runtime", "peach_cli.openapi"]
    lazily_cli_side = {_as_path(m) for m in _closure(cli_side)} - {"peach_cli/deploy/packaging.py"}
    uploaded = set(REPLICA_RUNTIME) | set(SERVE_APP_MODULES)
    assert reached - uploaded - lazily_cli_side == set()


# -- one place for each thing ---------------------------------------------------------------


def test_one_byte_size_formatter() -> None:
    """Sizes read the same everywhere: ``peach_cli.wording.human_size`` formats them all."""
    places = {name for name, path in _sources().items() if '"KiB"' in path.read_text()}
    assert places == {"peach_cli.wording"}


def test_process_figures_come_from_psutil_not_proc() -> None:
    """Memory sampling must work where most users are (macOS): no ``/proc`` reads, but for
    the stdlib runtime's process table (no psutil in a user's env), beside its fallback."""
    readers = {name for name, path in _sources().items() if '"/proc/' in path.read_text()}
    assert readers == {"peach_cli.runtime.linux"}


LINUX_ONLY = ("prctl", '"/proc', 'platform.startswith("linux")', "unshare", "setns")
"""What only Linux offers: used in ``peach_cli.runtime.linux`` alone, beside its fallbacks."""
LINUX_ELSEWHERE = {
    "peach_cli.envs.uvrun": "GUARD is a script for a bare `python -I -S` (it cannot import "
    "peach); whether it runs is `linux.offers('parent-death')`",
}


def test_what_only_linux_offers_is_used_in_one_module() -> None:
    found = {
        name
        for name, path in _sources().items()
        if any(token in path.read_text() for token in LINUX_ONLY)
    }
    assert found == {"peach_cli.runtime.linux", *LINUX_ELSEWHERE}


FILE_NAMES = {"peach.yaml", "peach.yml", "peach.conf", ".env", ".peach-test.yaml"}
NAMED_AS_WORDS = {("peach_cli.project.conf", "peach.conf"): "the schema's title: the conf's name"}


def test_the_names_of_a_projects_files_are_written_once() -> None:
    """``peach.yaml``, ``peach.conf/``, ``.env``, ``*.peach-test.yaml``: one module holds
    them, so the loader, the reloader's watch, ``peach init``, ``peach test``, its pytest
    plugin and the completion cannot disagree."""
    holders = {
        name
        for name, tree in _trees().items()
        for node in _walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in FILE_NAMES or node.value.endswith(".peach-test.yaml"))
        and (name, node.value) not in NAMED_AS_WORDS
    }
    assert len(holders) == 1, sorted(holders)


def _peach_variables() -> set[str]:
    """The names modules give ``PEACH_*`` variables' names (``SOCKET_ENV = "PEACH_..."``)."""
    return {
        target.id
        for tree in _trees().values()
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and str(node.value.value).startswith("PEACH_")
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _peach_reads(node: ast.AST, names: set[str], *, at_import: bool) -> list[int]:
    """Lines where ``node`` reads a ``PEACH_*`` variable of the environment (with
    ``at_import``: only where the module's import runs it, not inside functions)."""

    def peach(key: ast.AST | None) -> bool:
        return (isinstance(key, ast.Constant) and str(key.value).startswith("PEACH_")) or (
            isinstance(key, ast.Name) and key.id in names
        )

    def environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    lines = []
    if isinstance(node, ast.Call) and node.args and peach(node.args[0]):
        func = node.func  # environ.get(NAME), os.getenv(NAME), or a mapping's env.get(NAME)
        if isinstance(func, ast.Attribute) and func.attr in ("get", "getenv"):
            lines.append(node.lineno)
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        if environ(node.value) and peach(node.slice):
            lines.append(node.lineno)
    elif isinstance(node, ast.Compare) and environ(node.comparators[0]) and peach(node.left):
        lines.append(node.lineno)
    for child in ast.iter_child_nodes(node):
        if at_import and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        lines += _peach_reads(child, names, at_import=at_import)
    return lines


def test_no_module_reads_a_peach_variable_at_import() -> None:
    """A ``PEACH_*`` variable is read when a command or a session starts, never when a
    module is imported (a test, or a second session in one process, could not change it)."""
    names = _peach_variables()
    assert {"SOCKET_ENV", "CACHE_ENV_VAR"} <= names  # the names are found
    found = [
        f"{name}:{line}"
        for name, tree in _trees().items()
        for line in _peach_reads(tree, names, at_import=True)
    ]
    assert found == []


def test_the_simulators_knobs_are_read_in_one_place() -> None:
    """``PEACH_INIT_STUCK_S``, ``PEACH_NO_FAST_LANE``, ``PEACH_NO_KEEPER``…: the simulator
    reads its knobs once, into ``simulator.session.Knobs``; its parts are given their
    values."""
    names = _peach_variables()
    readers = {
        name
        for name, tree in _trees("simulator.").items()
        if _peach_reads(tree, names, at_import=False)
    }
    assert readers == {"simulator.session"}


def test_the_gateways_drive_the_flow_and_keep_no_timer_of_a_call() -> None:
    """The dev gateway (its fast lane included) and the Ray ingress parse no request,
    choose no arm and time no call themselves: the contract's flow and its ``Deadline`` do,
    for every path (issue 36). Whatever the contract names its parsing and its choice of an
    arm, a gateway calling one of them is caught; a loop timer bounds a connection only."""
    decisions = _defined_names(_tree(_sources()["peach_cli.runtime.contract.request"]))
    decisions |= _defined_names(_tree(_sources()["peach_cli.runtime.contract.ab"]))
    connection_timers = {"simulator.http_protocol": "a slow client's head and body (SPEC §6)"}
    found = []
    for name, tree in _trees().items():
        if name.startswith(("simulator.", "peach_cli.deploy.")):
            called = _called_names(tree)
            found += [f"{name} calls {d}" for d in sorted(called & decisions - {"RequestParams"})]
            if "call_at" in called and name not in connection_timers:
                found.append(f"{name} calls loop.call_at")
    assert found == []


def _dict_keys(tree: ast.AST) -> list[set[str]]:
    """The string keys of every dict display in ``tree``."""
    return [
        {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        for node in _walk(tree)
        if isinstance(node, ast.Dict)
    ]


def test_both_hosts_build_routes_health_and_refusals_with_the_contract() -> None:
    """``/_peach/routes`` and ``/_peach/health`` are built by one module for both hosts (no
    other writes their dicts), and no refusal of the dev server is written by hand: a status
    line comes from uvicorn's table, the body from the contract's error answer (issue 36)."""
    answers = ({"codops", "endpoints"}, {"status", "ready", "codops", "components"})
    parts = ({"component", "replicas"}, {"url", "components", "streams"})

    def builds(keys: set[str]) -> bool:
        return keys in answers or any(part <= keys for part in parts)

    builders = {
        name
        for name, tree in _trees().items()
        if name.startswith(("simulator.", "peach_cli.deploy.", "peach_cli.runtime."))
        and any(builds(keys) for keys in _dict_keys(tree))
    }
    assert builders == {"peach_cli.runtime.contract.status"}
    written = {
        name
        for name, tree in _trees("simulator.").items()
        for node in _walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, bytes)
        and node.value.startswith(b"HTTP/1.")
    }
    assert written == set()


SECRET_READERS = {
    "simulator.pool": "a component's variables, read once for all its replicas",
    "simulator.tasks.scheduler": "a task run's variables",
    "simulator.changes": "the secrets' digests: a changed secret restarts its component",
}


def test_secrets_are_read_where_workers_are_made() -> None:
    """Of the simulator, only what makes a replica's or a task's process reads secrets (and
    the change analysis their digests); the server, the reloader and the gateway are handed
    what they need."""
    readers = _importers("peach_cli.project.secrets", "simulator.")
    assert readers <= set(SECRET_READERS), sorted(readers - set(SECRET_READERS))


# -- state -----------------------------------------------------------------------------------

MUTABLE_MAKERS = {"dict", "list", "set", "bytearray", "defaultdict", "deque", "OrderedDict"}
MUTABLE_MAKERS |= {"Counter", "ChainMap", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet"}
MUTABLE_MAKERS |= {"ContextVar", "local", "Lock", "RLock", "Event", "Condition", "Queue", "count"}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem"}
MUTATORS |= {"remove", "discard", "clear", "set", "appendleft", "put", "reset"}
STATE_EXEMPT = {
    "peach_cli.project.notebook:_Readers": "who holds the collector's thresholds down: "
    "``gc`` is the interpreter's, one per process",
    "simulator.http_protocol:_DEFAULT_HEAD": "uvicorn's default headers written out once a "
    "second, for every server of the process; to be held by the fast lane's server",
}
"""Module state known and going away, each with why; an entry no longer found fails."""


def _stateful_classes() -> set[str]:
    """Project classes whose instances hold state: a dataclass not frozen, or a class whose
    methods set ``self.<attribute>`` (an Enum, a NamedTuple, a frozen dataclass or a bare
    sentinel class holds none)."""
    found = set()
    for tree in _trees().values():
        for node in _walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            decorators = [ast.unparse(d) for d in node.decorator_list]
            frozen = any("dataclass" in d and "frozen=True" in d for d in decorators)
            plain = any(d.startswith("dataclass") for d in decorators) and not frozen
            sets = any(
                isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"
                for n in ast.walk(node)
                if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            )
            if plain or (sets and not frozen):
                found.add(node.name)
    return found


def _module_state(tree: ast.Module, stateful: set[str]) -> dict[str, int]:
    """Names bound at module level that hold state shared by everything in the process,
    with their lines: an empty container (it is there to be filled), a container made by a
    call (``set()``, ``WeakKeyDictionary()``), a ``ContextVar``, a ``threading.local``, a lock,
    an instance of a stateful project class; any module-level name the module's code mutates
    (``NAME[k] = v``, ``NAME.add(v)``, ``NAME += …``) or rebinds (``global NAME``)."""
    bound: dict[str, int] = {}
    found: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bound[node.name] = node.lineno  # its class attributes are the module's too
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            called = value.func if isinstance(value, ast.Call) else None
            maker = ast.unparse(called).rsplit(".", 1)[-1] if called is not None else None
            empty = isinstance(value, ast.Dict | ast.List | ast.Set) and not (
                value.keys if isinstance(value, ast.Dict) else value.elts
            )
            for target in targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = node.lineno
                    if empty or maker in MUTABLE_MAKERS or maker in stateful:
                        found[target.id] = node.lineno
    for node in _walk(tree):
        changed: ast.AST | None = None
        if isinstance(node, ast.Global):
            found.update({name: node.lineno for name in node.names})
        elif isinstance(node, ast.Subscript | ast.Attribute) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):
            changed = node.value  # NAME[k] = v, NAME.attribute = v
        elif isinstance(node, ast.AugAssign):
            target = node.target
            changed = target.value if isinstance(target, ast.Attribute) else target
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            changed = node.func.value if node.func.attr in MUTATORS else None
        if isinstance(changed, ast.Name) and changed.id in bound:
            if not _shadowed(tree, changed.id):
                found.setdefault(changed.id, node.lineno)
    return found


def _shadowed(tree: ast.Module, name: str) -> bool:
    """Whether some function binds ``name`` locally (its parameter or its own variable): a
    change to that name is a change to the local, not to the module's."""
    for node in _walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            params = node.args
            names = [a.arg for a in [*params.posonlyargs, *params.args, *params.kwonlyargs]]
            if name in names:
                return True
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    if inner.id == name:
                        return True
    return False


def test_no_module_holds_state() -> None:
    """What one session, one command or one test holds belongs to its objects (the
    ``DevSession`` and its parts, a command's run), handed to what uses it: two sessions in
    one process — a test run, ``peach test`` — never share or leak it, and nothing lives on
    after them. The rule is about values, whatever a name's case: a table written out in
    the code and never changed (a dict of codes, a ``frozenset``, a tuple, a
    ``MappingProxyType``, a compiled regex, a frozen dataclass) is a constant; an empty or
    made container, a ``ContextVar``, a ``threading.local``, a stateful object, or any name
    the code changes or rebinds with ``global`` is state. Memoising a function of its
    arguments (``functools.cache``) is not state. The replica runtime is apart: a worker
    process hosts one replica or task, its modules' state is that process's (the sampler's
    signal handler, pdb's hooks are process-wide by nature)."""
    runtime = {_module_name(ROOT / path) for path in REPLICA_RUNTIME}
    stateful = _stateful_classes()
    found = {
        f"{name}:{variable}": f"line {line}"
        for name, tree in _trees().items()
        if name not in runtime
        for variable, line in _module_state(tree, stateful).items()
    }
    assert {k: v for k, v in found.items() if k not in STATE_EXEMPT} == {}
    assert set(STATE_EXEMPT) - set(found) == set(), "stale entries in STATE_EXEMPT"


# -- the output boundary ---------------------------------------------------------------------

_WRITERS = {"print": "print()", "typer.echo": "typer.echo()", "os.write": "os.write()"}
_STD_STREAMS = {"stdout", "stderr", "__stdout__", "__stderr__"}
_WRITE_MODES = ("w", "a", "x")

UNBOUNDED_WRITES = {
    ("peach_cli.cli", "typer.echo()"): "`peach --version`: a constant line",
    ("peach_cli.views.ask", "sys.stdout.buffer"): (
        "`peach ask` writes the answer's bytes as the server sent them, like curl (SPEC §6: "
        "the HTTP answers themselves are what the platform sends); on a terminal it renders "
        "through the boundary's console"
    ),
    ("peach_cli.envs.builder", "a file written"): "an env's own metadata (requirements, pins)",
    ("peach_cli.project.scaffold", "a file written"): "`peach init`'s new project files",
    ("peach_cli.devtoken", "os.write()"): "`peach dev`'s session token, to its 0600 file",
    ("peach_cli.deploy.scheduler_app", "print()"): (
        "the task scheduler's replica on Ray prints each run's lines to its own stdout, as a "
        "replica's code does: `peach logs` reads that file and shows it through the boundary"
    ),
}
"""Writes that are not output channels, each with why (SPEC §6 "One output boundary")."""


def _unbounded_writes(tree: ast.Module) -> set[str]:
    """What ``tree`` writes without ``peach_cli.boundary``: prints, echoes, raw writes to
    stdout/stderr, Rich consoles made, files opened for writing."""
    found: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            short = name.rsplit(".", 1)[-1]
            if name in _WRITERS:
                found.add(_WRITERS[name])
            if short == "Console":
                found.add("a Rich Console")
            modes = [*node.args, *(k.value for k in node.keywords if k.arg == "mode")]
            if short in ("write_text", "write_bytes") or (
                short in ("open", "fdopen")
                and any(
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and arg.value[:1] in _WRITE_MODES
                    for arg in modes
                )
            ):
                found.add("a file written")
            for keyword in node.keywords:
                if keyword.arg == "file" and ast.unparse(keyword.value).startswith("sys.std"):
                    found.add("print(file=sys.std…)")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and ast.unparse(node.value.value) == "sys"
            and node.value.attr in _STD_STREAMS
            and node.attr in ("write", "writelines", "buffer")
        ):
            found.add(f"sys.{node.value.attr}.{node.attr}")
    return found


def test_every_channel_writes_through_the_output_boundary() -> None:
    """Nothing peach shows or writes bypasses ``peach_cli.boundary`` (masking, escaping):
    no print, no raw write to stdout/stderr, no Rich console or report file of its own.
    The replica runtime is apart: its processes' output is read by peach and shown through
    the boundary. A write that is not an output channel is listed in UNBOUNDED_WRITES."""
    found = {
        (name, write)
        for name, tree in _trees().items()
        if name != "peach_cli.boundary" and not name.startswith("peach_cli.runtime")
        for write in _unbounded_writes(tree)
    }
    assert sorted(found - set(UNBOUNDED_WRITES)) == []
    assert sorted(set(UNBOUNDED_WRITES) - found) == [], "stale entries in UNBOUNDED_WRITES"


def test_every_channel_a_writer_names_is_registered() -> None:
    """A writer names its channel (``channel="record"``); a name that is not registered in
    ``boundary.CHANNELS`` fails here, and a registered one without a probe fails in
    ``tests/test_boundary.py``."""
    from peach_cli.boundary import CHANNELS

    named = {
        node.value.value
        for tree in _trees().values()
        for node in _walk(tree)
        if isinstance(node, ast.keyword)
        and node.arg == "channel"
        and isinstance(node.value, ast.Constant)
    }
    assert named and named <= set(CHANNELS), sorted(named - set(CHANNELS))


# -- the size of things ----------------------------------------------------------------------

MAX_FUNCTION_LINES = 80


def test_functions_split_along_their_steps() -> None:
    """No function past 80 lines: a long one is split where its steps are (a Typer
    command's long options are named types beside it, as ``ProjectArg`` is)."""
    long = {
        f"{name}:{node.name}": node.end_lineno - node.lineno + 1
        for name, tree in _trees().items()
        for node in _walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or 0) - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_requests_in_flight_on_a_replica_are_one_table_settled_one_way() -> None:
    """Calls, streams, pings, patches and profiles in flight on a replica are in one table
    keyed by request id: one method puts a request in, one takes it out, and every outcome
    — a message, or the process's death — reaches it through one method (issue 36)."""
    tables: dict[str, tuple[set[str], set[str]]] = {}  # self.<table> -> (fillers, emptiers)
    deliverers: set[str] = set()
    for name, tree in _trees("simulator.").items():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for method in (m for m in cls.body if isinstance(m, ast.FunctionDef)):
                where = f"{name}.{cls.name}.{method.name}"
                for node in ast.walk(method):
                    if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation).startswith(
                        "dict[int, "
                    ):
                        tables.setdefault(ast.unparse(node.target), (set(), set()))
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        if node.func.attr == "deliver":
                            deliverers.add(where)
                for node in ast.walk(method):
                    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                        if ast.unparse(node.value) in tables:
                            tables[ast.unparse(node.value)][0].add(where)
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                        if node.func.attr == "pop" and ast.unparse(node.func.value) in tables:
                            tables[ast.unparse(node.func.value)][1].add(where)
    in_flight = {table: ways for table, ways in tables.items() if ways[0] and ways[1]}
    assert len(in_flight) == 1, in_flight
    ((fillers, emptiers),) = in_flight.values()
    assert len(fillers) == 1 and len(emptiers) == 1, (fillers, emptiers)
    assert len(deliverers) == 1, deliverers


def test_peach_test_reads_its_conf_once(tmp_path: Path) -> None:
    """One run of `peach test` opens the project's conf once, with its own simulator (up
    to the cases, here none selected) or with ``--url`` (a host that refuses: every case is
    an error): whichever module reads it, nothing below the command reads it again."""
    import socket

    from peach_cli.boundary import Output
    from peach_cli.commands.host_options import TestOptions
    from peach_cli.commands.test import run_test
    from peach_cli.errors import UsageError

    quickstart = ROOT / "examples" / "quickstart"
    conf = quickstart / "peach.yaml"
    opened: list[str] = []
    watching = [False]

    def audit(event: str, args: tuple[object, ...]) -> None:
        if watching[0] and event == "open" and isinstance(args[0], str | Path):
            opened.append(str(args[0]))

    sys.addaudithook(audit)  # for the rest of the process: ``watching`` switches it
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{free.getsockname()[1]}"
    runs = [
        {"url": None, "keyword": "no case is named so"},
        {"url": refused, "keyword": None, "output_format": "json"},
    ]
    for options in runs:
        opened.clear()
        watching[0] = True
        try:
            run_test(Output(), TestOptions(paths=[quickstart], **options))
        except UsageError:
            pass  # no case selected: the run stops before any host is started
        finally:
            watching[0] = False
        assert [path for path in opened if Path(path) == conf] == [str(conf)], options
