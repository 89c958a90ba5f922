"""The shape of the code: no import cycles, one place that starts workers, a stdlib runtime.

These read the source (ast), so they fail the moment a change brings a cycle back, starts a
process somewhere new, or lets a third-party import into the code every replica runs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from peach_cli.deploy.packaging import SERVE_APP_MODULES
from peach_cli.envs.runtime import runtime_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("peach_cli", "simulator")

REPLICA_RUNTIME = runtime_files()
"""What a replica or a task imports: it runs inside every user environment, so stdlib only."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports, at module level or inside functions (lazy
    imports count: they run), but not under ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            names = []
        for name in names:
            if name in known:
                found.add(name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    return any(
        isinstance(h.type, ast.Name)
        and h.type.id in names
        or isinstance(h.type, ast.Tuple)
        and any(isinstance(e, ast.Name) and e.id in names for e in h.type.elts)
        for h in node.handlers
    )


def _required_imports(path: Path) -> set[str]:
    """Top-level names of what ``path`` imports, but for optional imports (guarded by
    ``try: … except ImportError``)."""
    modules: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child)
            return
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return modules


@pytest.mark.slow
def test_no_module_imports_one_that_imports_it_back() -> None:
    sources = _sources()
    known = set(sources)
    graph = {name: _imports(path, known) - {name} for name, path in sources.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of the code
    for name in graph:
        graph[name] = {target for target in graph[name] if not (target == name.rsplit(".", 1)[0])}
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


def test_worker_processes_are_started_in_one_module() -> None:
    """Every process the simulator runs user code in (replicas, spares, tasks) is started
    by ``simulator.spawn``; no other simulator module spawns one."""
    starters = ("create_subprocess_exec", "create_subprocess_shell", "Popen", "subprocess.run")
    starters += ("os.fork", "os.spawn", "multiprocessing")
    places = [
        f"{name}: {starter}"
        for name, path in _sources().items()
        if name.startswith("simulator.") and name != "simulator.spawn"
        for starter in starters
        if starter in path.read_text()
    ]
    assert places == []
    assert "create_subprocess_exec" in (ROOT / "simulator" / "spawn.py").read_text()


_MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "deque", "OrderedDict", "Counter"}


def _module_state(tree: ast.Module) -> list[str]:
    """Module-level statements of ``tree`` that hold or change state shared by everything
    in the process: a mutable container bound to a lowercase name (an UPPER_CASE table is
    a constant), or a call made at import."""
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if value is not None and not all(n.isupper() or n == "__all__" for n in names):
            call = value.func if isinstance(value, ast.Call) else None
            called = call.id if isinstance(call, ast.Name) else getattr(call, "attr", None)
            if isinstance(value, _MUTABLE) or called in _MUTABLE_CALLS:
                found.append(f"line {node.lineno}: {', '.join(names)}")
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            found.append(f"line {node.lineno}: a call at import")
    return found


def test_the_simulator_keeps_no_state_in_its_modules() -> None:
    """Spare workers, replica numbers, log filters: what one session holds belongs to its
    objects (``simulator.session.DevSession`` and its parts), so two sessions in one
    process — a test run, ``peach test`` — never share or leak them."""
    state = [
        f"{name} {place}"
        for name, path in _sources().items()
        if name.split(".")[0] == "simulator"
        for place in _module_state(ast.parse(path.read_text()))
    ]
    assert state == []


def test_the_simulator_rebinds_no_module_global() -> None:
    """What a session uses — its debugger relay, its knobs — is handed to its parts by the
    ``DevSession`` that owns it, never set in a module for them to find (``global``)."""
    rebound = [
        f"{name}:{node.lineno} global {', '.join(node.names)}"
        for name, path in _sources().items()
        if name.split(".")[0] == "simulator"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Global)
    ]
    assert rebound == []


@pytest.mark.slow
def test_rich_is_used_by_the_views_only() -> None:
    """Commands and core return data or raise; ``peach_cli.views`` renders it."""
    users = sorted(
        name
        for name, path in _sources().items()
        if not name.startswith("peach_cli.views")
        and name != "peach_cli.boundary"  # the consoles every view writes through
        and any(
            (
                isinstance(node, ast.Import)
                and any(a.name.split(".")[0] == "rich" for a in node.names)
            )
            or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rich")
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert users == []


def test_one_byte_size_formatter() -> None:
    """Sizes read the same everywhere: ``peach_cli.wording.human_size`` formats them all."""
    places = sorted(
        name
        for name, path in _sources().items()
        if name != "peach_cli.wording" and '"KiB"' in path.read_text()
    )
    assert places == []


@pytest.mark.slow
def test_no_private_name_crosses_a_module_boundary() -> None:
    crossings = []
    for name, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] not in PACKAGES:
                    continue
                # a package's own modules may share its private helpers
                same_package = node.module.rsplit(".", 1)[0] == name.rsplit(".", 1)[0]
                crossings += [
                    f"{name} imports {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not same_package
                ]
    assert crossings == []


def test_the_replica_runtime_imports_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"peach_cli", "simulator", "__future__"}
    outside = {
        module: sorted(_required_imports(ROOT / module) - allowed) for module in REPLICA_RUNTIME
    }
    assert {k: v for k, v in outside.items() if v} == {}


def _closure(starts: list[str]) -> set[str]:
    """The project modules ``starts`` import, transitively (lazy imports included)."""
    sources = _sources()
    known = set(sources)
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        name = todo.pop()
        if name in seen or name not in sources:
            continue
        seen.add(name)
        todo.extend(_imports(sources[name], known))
    return seen


def _as_path(module: str) -> str:
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT / module.replace(".", "/") / "__init__.py"
    return path.relative_to(ROOT).as_posix()


def test_a_worker_process_needs_nothing_outside_the_runtime_package() -> None:
    """What a replica or task process runs reaches only ``peach_cli.runtime`` (and the
    package's ``__init__``): staging that package is staging the whole runtime."""
    mains = ["peach_cli.runtime.replica_worker", "peach_cli.runtime.task_worker"]
    mains += ["peach_cli.runtime.task"]
    reached = {_as_path(module) for module in _closure(mains)}
    assert reached - set(REPLICA_RUNTIME) == set()
    assert len(REPLICA_RUNTIME) > 10  # the package, not an empty glob


def test_ray_replicas_get_everything_the_serve_app_imports() -> None:
    reached = {_as_path(module) for module in _closure(["peach_cli.deploy.app"])}
    # imported inside functions only the CLI calls (what to upload, requirements, tasks file)
    cli_side = [
        "peach_cli.deploy.requirements",
        "peach_cli.deploy.jobs",
        "peach_cli.deploy.scheduler",
    ]
    cli_side += ["peach_cli.deploy.uploads", "peach_cli.envs.runtime", "peach_cli.openapi"]
    lazily_cli_side = {_as_path(m) for m in _closure(cli_side)} - {"peach_cli/deploy/packaging.py"}
    uploaded = set(REPLICA_RUNTIME) | set(SERVE_APP_MODULES)
    assert reached - uploaded - lazily_cli_side == set()


def test_process_figures_come_from_psutil_not_proc() -> None:
    """Memory sampling must work where most users are (macOS): no ``/proc`` reads."""
    readers = [name for name, path in _sources().items() if '"/proc/' in path.read_text()]
    # the stdlib runtime's process table (no psutil in a user's env), with its `ps` fallback
    assert readers == ["peach_cli.runtime.linux"]


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


_WRITERS = {
    "print": "print()",
    "typer.echo": "typer.echo()",
    "os.write": "os.write()",
    "Console": "a Rich Console",
}
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
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else f"{ast.unparse(func.value)}.{func.attr}"
                if isinstance(func, ast.Attribute)
                else ""
            )
            short = name.rsplit(".", 1)[-1]
            if name in _WRITERS or short == "Console":
                found.add(_WRITERS.get(name) or _WRITERS["Console"])
            if short in ("write_text", "write_bytes") or (
                short in ("open", "fdopen")
                and any(
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and arg.value[:1] in _WRITE_MODES
                    for arg in [*node.args, *(k.value for k in node.keywords if k.arg == "mode")]
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
    runtime = {_module_name(ROOT / path) for path in REPLICA_RUNTIME}
    found = {
        (name, write)
        for name, path in _sources().items()
        if name != "peach_cli.boundary"
        and not name.startswith("peach_cli.runtime")
        and name not in runtime
        for write in _unbounded_writes(ast.parse(path.read_text()))
    }
    assert sorted(found - set(UNBOUNDED_WRITES)) == []
    assert sorted(set(UNBOUNDED_WRITES) - found) == [], "stale entries in UNBOUNDED_WRITES"


def test_every_channel_a_writer_names_is_registered() -> None:
    """A writer names its channel (``channel="record"``); a name that is not registered in
    ``boundary.CHANNELS`` fails here, and a registered one without a probe fails in
    ``tests/test_boundary.py``."""
    from peach_cli.boundary import CHANNELS

    named = set()
    for path in _sources().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "channel":
                if isinstance(node.value, ast.Constant):
                    named.add(node.value.value)
    assert named and named <= set(CHANNELS), sorted(named - set(CHANNELS))


FLOW_DECISIONS = {"parse_request", "choose_arm"}
"""What ``contract.Flow.prepare`` decides for every driver of the flow (SPEC §2)."""
CONNECTION_TIMERS = {"simulator.http_protocol": "a slow client's head and body (SPEC §6)"}
"""Loop timers that bound a connection, not a call (a call's is the contract's ``Deadline``)."""


def _called_names(tree: ast.Module) -> set[str]:
    """The names ``tree`` calls: ``f(…)`` and ``x.f(…)`` as ``f``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def test_the_gateways_drive_the_flow_and_keep_no_timer_of_a_call() -> None:
    """The dev gateway (its fast lane included) and the Ray ingress parse no request,
    choose no arm and time no call themselves: ``contract.Flow``'s steps and its
    ``Deadline`` do, for every path (issue 36)."""
    found = []
    for name, path in _sources().items():
        if not name.startswith(("simulator.", "peach_cli.deploy.")):
            continue
        called = _called_names(ast.parse(path.read_text()))
        found += [f"{name} calls {decision}" for decision in sorted(called & FLOW_DECISIONS)]
        if "call_at" in called and name not in CONNECTION_TIMERS:
            found.append(f"{name} calls loop.call_at")
    assert found == []
    assert "simulator.fastlane" in _sources()  # the lane is looked at


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _self_attribute(node: ast.AST) -> str | None:
    """``x`` of ``self.x``, else None."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def test_a_replica_keeps_one_table_of_requests_in_flight_settled_one_way() -> None:
    """Calls, streams, pings and patches in flight on a ``Replica`` are in one table keyed
    by request id: one method puts a request in (``_track``), one takes it out
    (``_forget``), and every outcome — a message, or the process's death — reaches it
    through ``_settle`` (issue 36)."""
    replica = _class(ROOT / "simulator" / "replica.py", "Replica")
    methods = {f.name: f for f in replica.body if isinstance(f, ast.FunctionDef)}
    tables = [
        _self_attribute(node.target)
        for node in ast.walk(methods["__init__"])
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.annotation, ast.Subscript)
        and ast.unparse(node.annotation).startswith(("dict[int", "set[int"))
    ]
    assert tables == ["_in_flight"]
    fills, empties, deliveries = set(), set(), set()
    for name, method in methods.items():
        for node in ast.walk(method):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                if _self_attribute(node.value) == "_in_flight":
                    fills.add(name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "pop" and _self_attribute(node.func.value) == "_in_flight":
                    empties.add(name)
                if node.func.attr == "deliver":
                    deliveries.add(name)
    assert fills == {"_track"}
    assert empties == {"_forget"}
    assert deliveries == {"_settle"}


def test_a_replica_leaves_its_process_to_its_supervisor() -> None:
    """Starting, reaping, killing and restarting a replica's process is
    ``simulator.supervisor``'s; ``simulator.replica`` speaks to the process only through
    its socket (issue 36)."""
    source = (ROOT / "simulator" / "replica.py").read_text()
    tree = ast.parse(source)
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported & {"kill_tree", "reap", "psutil", "signal", "subprocess"} == set()
    starts_or_ends = {"worker", "kill_tree", "reap", "kill", "terminate", "send_signal"}
    assert _called_names(tree) & starts_or_ends == set()
    assert "ProcessSupervisor" in source


def test_the_dev_server_keeps_what_it_serves_once_and_leaves_http_to_its_own_module() -> None:
    """The fingerprints of what ``peach dev`` serves are one record, ``DevServer.served``
    (hot reload reads it, and keeps none of its own); uvicorn, its protocol, the
    ``LocalService`` checks and the fast lane are assembled by ``simulator.http_server``,
    which knows nothing of plans (issue 36)."""
    sources = _sources()
    keepers = sorted(
        f"{name}: self.{_self_attribute(target)}"
        for name, path in sources.items()
        if name.startswith("simulator.")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if _self_attribute(target) in ("served", "_fingerprints", "fingerprints")
    )
    assert keepers == ["simulator.server: self.served"] * len(keepers) and keepers
    known = set(sources)
    server_imports = _imports(sources["simulator.server"], known)
    http_side = {"simulator.http_protocol", "simulator.local_service", "simulator.fastlane"}
    assert server_imports & http_side == set()
    server_tree = ast.parse(sources["simulator.server"].read_text())
    assert not any(
        isinstance(node, (ast.Import, ast.ImportFrom)) and "uvicorn" in ast.unparse(node)
        for node in ast.walk(server_tree)
    )
    assert _imports(sources["simulator.http_server"], known) >= http_side
    planning = {"simulator.changes", "simulator.pool", "simulator.routing", "simulator.reload"}
    assert _imports(sources["simulator.http_server"], known) & planning == set()


def _dict_keys(tree: ast.AST) -> list[set[str]]:
    """The string keys of every dict display in ``tree``."""
    return [
        {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
    ]


def test_both_hosts_build_routes_health_and_refusals_with_the_contract() -> None:
    """``/_peach/routes`` and ``/_peach/health`` are built by ``contract.status`` for both
    hosts (no other module writes their dicts), and no refusal of the dev server is written
    by hand: a status line comes from uvicorn's table, the body from the contract's error
    answer (issue 36)."""
    answers = ({"codops", "endpoints"}, {"status", "ready", "codops", "components"})
    parts = ({"component", "replicas"}, {"url", "components", "streams"})

    def builds(keys: set[str]) -> bool:
        return keys in answers or any(part <= keys for part in parts)

    builders = sorted(
        name
        for name, path in _sources().items()
        if name.startswith(("simulator.", "peach_cli.deploy.", "peach_cli.runtime."))
        and any(builds(keys) for keys in _dict_keys(ast.parse(path.read_text())))
    )
    assert builders == ["peach_cli.runtime.contract.status"]
    written = sorted(
        name
        for name, path in _sources().items()
        if name.startswith("simulator.")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, bytes)
        and node.value.startswith(b"HTTP/1.")
    )
    assert written == []
    for name in ("simulator.local_service", "simulator.http_protocol"):
        assert "error_answer" in _called_names(ast.parse(_sources()[name].read_text())), name


FILE_NAMES = {"peach.yaml", "peach.yml", "peach.conf", ".env", ".peach-test.yaml"}
NAMED_AS_WORDS = {("peach_cli.project.conf", "peach.conf"): "the schema's title: the conf's name"}


def test_the_names_of_a_projects_files_are_written_once() -> None:
    """``peach.yaml``, ``peach.conf/``, ``.env``, ``*.peach-test.yaml``: every module takes
    them from ``peach_cli.project.filenames``, so the loader, the reloader's watch,
    ``peach init``, ``peach test``, its pytest plugin and the completion cannot disagree."""
    sources = _sources()
    written = {
        node.value
        for node in ast.walk(ast.parse(sources["peach_cli.project.filenames"].read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert written >= FILE_NAMES
    found = [
        f"{name}:{node.lineno} {node.value!r}"
        for name, path in sources.items()
        if name != "peach_cli.project.filenames"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in FILE_NAMES or node.value.endswith(".peach-test.yaml"))
        and (name, node.value) not in NAMED_AS_WORDS
    ]
    assert found == []


def _peach_variables(sources: dict[str, Path]) -> set[str]:
    """The names modules give ``PEACH_*`` variables' names (``SOCKET_ENV = "PEACH_..."``)."""
    return {
        target.id
        for path in sources.values()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and str(node.value.value).startswith("PEACH_")
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _peach_reads(node: ast.AST, names: set[str], *, at_import: bool) -> list[int]:
    """Lines where ``node`` reads a ``PEACH_*`` variable of the environment (with
    ``at_import``: only where the module's import runs it, not inside functions)."""

    def peach(key: ast.AST | None) -> bool:
        return (isinstance(key, ast.Constant) and str(key.value).startswith("PEACH_")) or (
            isinstance(key, ast.Name) and key.id in names
        )

    lines = []
    if isinstance(node, ast.Call) and node.args and peach(node.args[0]):
        func = node.func  # environ.get(NAME), os.getenv(NAME), or a mapping's env.get(NAME)
        if isinstance(func, ast.Attribute) and func.attr in ("get", "getenv"):
            lines.append(node.lineno)
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        if _is_environ(node.value) and peach(node.slice):
            lines.append(node.lineno)
    elif isinstance(node, ast.Compare) and _is_environ(node.comparators[0]) and peach(node.left):
        lines.append(node.lineno)
    for child in ast.iter_child_nodes(node):
        if at_import and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        lines += _peach_reads(child, names, at_import=at_import)
    return lines


def test_no_module_reads_a_peach_variable_at_import() -> None:
    """A ``PEACH_*`` variable is read when a command or a session starts, never when a
    module is imported (a test, or a second session in one process, could not change it)."""
    sources = _sources()
    names = _peach_variables(sources)
    assert {"SOCKET_ENV", "CACHE_ENV_VAR"} <= names  # the names are found
    found = [
        f"{name}:{line}"
        for name, path in sources.items()
        for line in _peach_reads(ast.parse(path.read_text()), names, at_import=True)
    ]
    assert found == []


def test_the_simulators_knobs_are_read_in_one_place() -> None:
    """``PEACH_INIT_STUCK_S``, ``PEACH_NO_FAST_LANE``, ``PEACH_NO_KEEPER``…: the simulator
    reads its knobs once, into ``simulator.session.Knobs`` (a ``SessionConfig``'s); its
    parts are given their values."""
    sources = _sources()
    names = _peach_variables(sources)
    readers = {
        name
        for name, path in sources.items()
        if name.startswith("simulator.")
        and _peach_reads(ast.parse(path.read_text()), names, at_import=False)
    }
    assert readers == {"simulator.session"}


def test_peach_test_and_its_pytest_plugin_share_their_host_wiring() -> None:
    """Which host a case goes to (``--url``, else the project's simulator), the client that
    sends it and the secrets masked: ``peach_cli.testing.host.Hosts``, for the command and
    the plugin alike; neither starts a simulator or a client of its own."""
    sources = _sources()
    drivers = ("peach_cli.commands.test", "peach_cli.testing.pytest_plugin")
    wiring = {"local_host", "Client", "hide_declared", "DevSession"}
    for name in drivers:
        tree = ast.parse(sources[name].read_text())
        assert "peach_cli.testing.host.Hosts" in _imports(
            sources[name], {"peach_cli.testing.host.Hosts"}
        )
        assert _called_names(tree) & wiring == set(), name
    users = {
        name
        for name, path in sources.items()
        if "local_host" in _called_names(ast.parse(path.read_text()))
    }
    # other commands start a simulator too (peach profile, peach fuzz), never these two
    assert "peach_cli.testing.host" in users and users.isdisjoint(drivers)


MAX_FUNCTION_LINES = 80


def _long_functions() -> dict[str, int]:
    found = {}
    for name, path in _sources().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{name}:{node.name}"] = lines
    return found


def test_functions_split_along_their_steps() -> None:
    """No function past 80 lines: a long one is split where its steps are (a Typer
    command's long options are named types beside it, as ``ProjectArg`` is)."""
    assert _long_functions() == {}


PROJECT_READERS = {"load_project", "read_project", "find_conf_files", "build_plan", "checked_plan"}
"""What finds or reads a project's conf (``peach_cli.project.loader``, the plan built on it)."""


def _calls_in(tree: ast.AST) -> list[str]:
    """The names ``tree`` calls, in the order they are written."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                found.append((node.lineno, node.col_offset, func.id))
            elif isinstance(func, ast.Attribute):
                found.append((node.lineno, node.col_offset, func.attr))
    return [name for *_, name in sorted(found)]


def _functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The module's functions and its classes' methods (``Class.method``)."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{item.name}"] = item
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
    return found


def test_peach_test_walks_one_way_down() -> None:
    """`peach test` goes down once: the command loads the project (the plan, or for
    ``--url`` the conf that masks its secrets), then reads and selects the case files
    against it, then starts the host with that plan, runs the cases, reports. Below the
    command nothing reads the project again: masking takes the loaded conf, the simulator
    the loaded plan, and the command calls no step of its own once it has gone down."""
    sources = _sources()
    command = _functions(sources["peach_cli.commands.test"])
    own = set(command) - {"run_test"}
    steps = _calls_in(command["run_test"])
    assert steps.index("split_paths") < steps.index("at") < steps.index("to_check")
    assert steps.index("to_check") < steps.index("select_cases") < steps.index("Hosts")
    assert steps.index("Hosts") < steps.index("simulator_url") < steps.index("run_cases")
    first_down = steps.index("at")
    assert own.isdisjoint(steps[first_down:]), "a step of the command after going down"
    assert "url_for" not in steps  # the host of a loaded plan: nothing is loaded again
    below = {
        "peach_cli.testing.cases": None,
        "peach_cli.testing.run": None,
        "peach_cli.testing.outcome": None,
        "peach_cli.testing.report": None,
        "peach_cli.testing.host": {"FoundProject.at"},  # the one reading of the project
        "peach_cli.project.secrets": {"hide_declared_in"},  # for a command with no conf
    }
    for module, allowed in below.items():
        for name, function in _functions(sources[module]).items():
            if name in (allowed or ()):
                continue
            reads = PROJECT_READERS & set(_calls_in(function))
            assert not reads, f"{module}:{name} reads the project again ({sorted(reads)})"


def test_peach_test_reads_its_conf_once(tmp_path: Path) -> None:
    """One run of `peach test` finds the project's conf files once and reads them once,
    with its own simulator (up to the cases, here none selected) or with ``--url`` (a
    host that refuses: every case is an error)."""
    import socket

    from peach_cli.commands.test import run_test
    from peach_cli.errors import UsageError
    from peach_cli.project import filenames, loader

    counted = {filenames.find_conf_files.__code__: "find", loader.read_project.__code__: "read"}
    calls: list[str] = []

    def count(frame: object, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in counted:  # type: ignore[attr-defined]
            calls.append(counted[frame.f_code])  # type: ignore[attr-defined]

    quickstart = ROOT / "examples" / "quickstart"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{free.getsockname()[1]}"
    runs = [
        {"url": None, "keyword": "no case is named so"},
        {"url": refused, "keyword": None, "output_format": "json"},
    ]
    for options in runs:
        calls.clear()
        sys.setprofile(count)
        try:
            run_test([quickstart], **options)  # type: ignore[arg-type]
        except UsageError:
            pass  # no case selected: the run stops before any host is started
        finally:
            sys.setprofile(None)
        assert sorted(calls) == ["find", "read"], options


def test_a_reload_applies_its_plan_one_way_down() -> None:
    """``DevServer._apply`` goes down once, visiting each module one time, in this order:
    the plan's components, the patches (``hotpatch.patch_pools``), the new pools (each
    starts itself as it is made: ``ReplicaPool._start_in`` reads its secrets once, then
    builds its env, then starts its replicas), what is served (``Snapshot.replace``), the
    routes (``RoutingTable.of``). It calls no helper of its own module between two of those
    steps, and does not reach into the secrets, the envs or the routes itself."""
    sources = _sources()
    server = set(_calls_in(ast.parse(sources["simulator.server"].read_text())))
    assert server.isdisjoint({"variables_of", "secret_values", "launch_for", "Route"})
    start = _calls_in(_functions(sources["simulator.pool"])["ReplicaPool._start_in"])
    assert start.count("variables_of") == 1 and "secret_values" not in start
    assert start.index("variables_of") < start.index("launch_for") < start.index("start")
    init = _calls_in(_functions(sources["simulator.pool"])["ReplicaPool.__init__"])
    assert init.index("_start_in") < init.index("Replica")  # the pool's room, then the replicas'
    server_functions = _functions(sources["simulator.server"])
    apply = _calls_in(server_functions["DevServer._apply"])
    steps = ["components", "patch_pools", "ReplicaPool", "replace", "of"]
    assert [apply.index(step) for step in steps] == sorted(apply.index(step) for step in steps)
    own_calls = {  # self.<method>(...) and the module's own functions
        node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        for node in ast.walk(server_functions["DevServer._apply"])
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "self")
            or (isinstance(node.func, ast.Name) and node.func.id in server_functions)
        )
    }
    assert own_calls <= {"_retire"}, own_calls  # scheduled last: it drains the old pools
