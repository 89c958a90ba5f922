"""Loading a project: read its conf files (``peach_cli.project.filenames.find_conf_files``
finds them) as YAML with positions, merge, validate the model.

``load_project`` is the one loader every command uses (``read_project`` when the files are
found already). It never raises for a mistake in the
project: each problem becomes a :class:`~peach_cli.project.diagnostics.Diagnostic` carrying the
file, line and column of the YAML node it is about. Only a PROJECT argument that is not a
project at all (a missing folder, a folder without conf) raises ``UsageError``.

The loader knows nothing of notebooks or plans: ``peach_cli.checks.build.build_plan`` loads
with it, adds the checks that need the notebooks and, when there is no error, returns the
``ProjectPlan`` that ``peach dev`` and ``peach deploy`` serve.

YAML is read with ``yaml.compose`` (nodes only, never constructing objects from tags) and
turned into plain values here, so ``!!python/object`` and friends are reported, not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

import yaml

from peach_cli.project.diagnostics import Diagnostic, Position, did_you_mean
from peach_cli.project.filenames import CONF_FILES, find_conf_files

if TYPE_CHECKING:
    from peach_cli.project.conf import PeachConf

MAX_CONF_BYTES = 4 * 1024 * 1024
MAX_YAML_NODES = 200_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCALARS = yaml.SafeLoader("")
"""Only its safe scalar constructors are used, called directly: its ``construct_object``
remembers every node it constructed (a reload's conf nodes, kept for good)."""
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STANDARD_PREFIX = "tag:yaml.org,2002:"
_STR_TAG = "tag:yaml.org,2002:str"
_SAFE_SCALAR_TAGS = {
    f"tag:yaml.org,2002:{name}"
    for name in ("null", "bool", "int", "float", "str", "binary", "timestamp")
}

Path_ = tuple[Union[str, int], ...]


@dataclass(frozen=True)
class NodePosition:
    """Where a YAML value sits: its key's position and its value's position."""

    key: Position
    value: Position


@dataclass
class Project:
    """A loaded project: its merged conf and where each value came from."""

    root: Path
    conf: PeachConf
    """The merged conf. When the schema has errors, only its valid entries (never None)."""
    files: tuple[str, ...]
    """Conf files, project-relative posix paths, in merge order."""
    positions: dict[Path_, NodePosition] = field(default_factory=dict)
    schema_ok: bool = True
    partial: set[str] = field(default_factory=set)
    """Endpoints with schema errors, of which ``conf`` holds only the valid parts."""

    def position(self, path: Path_, *, key: bool = False) -> Position:
        """The position of the value at ``path`` (or of its key), else the nearest parent's."""
        for end in range(len(path), 0, -1):
            found = self.positions.get(tuple(path[:end]))
            if found is not None:
                return found.key if key or end < len(path) else found.value
        return Position(self.files[0] if self.files else CONF_FILES[0], 1, 1)


# --- file names ----------------------------------------------------------------------------


def relative_name(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


# --- YAML → plain values with positions -------------------------------------------------------


class _TooLarge(Exception):
    pass


@dataclass
class _FileTree:
    name: str
    text: str
    value: Any = None
    positions: dict[Path_, NodePosition] = field(default_factory=dict)
    nodes: int = 0


def read_conf_file(root: Path, path: Path, diagnostics: list[Diagnostic]) -> _FileTree | None:
    """Read one conf file into plain values and positions; report problems, never raise."""
    tree = read_yaml_file(root, path, diagnostics)
    if tree is None or isinstance(tree.value, dict):
        return tree
    kind = "a list" if isinstance(tree.value, list) else "a single value"
    diagnostics.append(
        Diagnostic(
            "PC003",
            f"{tree.name} must be a mapping of keys (codops:, endpoints:, ...), not {kind}",
            tree.positions.get((), NodePosition(Position(tree.name), Position(tree.name))).value,
        )
    )
    return None


def read_yaml_file(
    root: Path, path: Path, diagnostics: list[Diagnostic], *, empty: Any = None
) -> _FileTree | None:
    """Read one YAML file of the project (a conf file, a case file) into plain values and
    positions, whatever its top level is; report problems, never raise.

    An empty file reads as ``empty`` (default ``{}``).
    """
    name = relative_name(root, path)
    text = _read_text(name, path, diagnostics)
    if text is None:
        return None
    tree = _FileTree(name, text)
    lines = text.splitlines()
    node = _compose(name, text, lines, diagnostics)
    if node is False:
        return None
    if node is None:
        tree.value = {} if empty is None else empty
        return tree
    try:
        tree.value = _to_value(node, (), tree, lines, diagnostics, None, 0)
    except (_TooLarge, RecursionError):
        diagnostics.append(
            Diagnostic(
                "PC004",
                f"{name} expands to too many values (recursive or exponential aliases?)",
                Position(name, 1, 1),
            )
        )
        return None
    return tree


def _read_text(name: str, path: Path, diagnostics: list[Diagnostic]) -> str | None:
    """The file's text (None: too large, unreadable or not UTF-8, reported)."""
    try:
        size = path.stat().st_size
        if size > MAX_CONF_BYTES:
            diagnostics.append(
                Diagnostic(
                    "PC002",
                    f"{name} is too large for a conf file ({size} bytes, limit {MAX_CONF_BYTES})",
                    Position(name, 1, 1),
                )
            )
            return None
        data = path.read_bytes()
    except OSError as error:
        diagnostics.append(
            Diagnostic("PC002", f"cannot read {name}: {error.strerror or error}", Position(name))
        )
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        diagnostics.append(
            Diagnostic(
                "PC002",
                f"{name} is not UTF-8 text (byte {error.start})",
                Position(name, line, 1),
                "a conf file is YAML text; is this a binary file?",
            )
        )
        return None
    return text


def _compose(
    name: str, text: str, lines: list[str], diagnostics: list[Diagnostic]
) -> yaml.Node | None | Literal[False]:
    """The YAML node tree of ``text`` (None: an empty file; False: it is not YAML, reported)."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = " ".join(str(p) for p in (error.context, error.problem) if p) or str(error)
        diagnostics.append(
            Diagnostic(
                "PC001",
                f"YAML syntax error: {message}",
                _mark_position(name, mark, lines),
                _syntax_hint(error, lines),
            )
        )
        return False
    except yaml.YAMLError as error:  # ReaderError: control characters and the like
        position = Position(name, 1, 1)
        index = getattr(error, "position", None)
        if isinstance(index, int):
            line = text.count("\n", 0, index)
            position = Position(name, line + 1, index - (text.rfind("\n", 0, index) + 1) + 1)
        diagnostics.append(Diagnostic("PC001", f"YAML error: {error}", position))
        return False
    except RecursionError:
        diagnostics.append(
            Diagnostic("PC004", f"{name} is nested too deeply", Position(name, 1, 1))
        )
        return False
    return node


def _syntax_hint(error: yaml.MarkedYAMLError, lines: list[str]) -> str | None:
    """A tab used as indentation, or where the unclosed construct an error is about starts."""
    problem, context = error.problem_mark, error.context_mark
    if problem is not None and problem.line < len(lines):
        text = lines[problem.line]
        if problem.column < len(text) and text[problem.column] == "\t":
            return "YAML indents with spaces: replace the tab"
    if context is not None and (problem is None or context.line != problem.line):
        what = str(error.context or "")
        for prefix in ("while parsing a ", "while scanning a ", "while parsing an "):
            what = what.removeprefix(prefix)
        where = f"the {what} starts at line {context.line + 1}, column {context.column + 1}"
        return f"check the indentation: {where}" if what.startswith("block") else where
    return None


def _mark_position(name: str, mark: Any, lines: list[str]) -> Position:
    if mark is None:
        return Position(name, 1, 1)
    line = mark.line + 1
    return Position(
        name, line, mark.column + 1, None, lines[line - 1] if line <= len(lines) else None
    )


def _to_value(
    node: yaml.Node,
    path: Path_,
    tree: _FileTree,
    lines: list[str],
    diagnostics: list[Diagnostic],
    key_position: Position | None,
    depth: int,
) -> Any:
    tree.nodes += 1
    if tree.nodes > MAX_YAML_NODES or depth > 100:
        raise _TooLarge
    here = _mark_position(tree.name, node.start_mark, lines)
    tree.positions[path] = NodePosition(key_position or here, here)
    if isinstance(node, yaml.ScalarNode):
        return _scalar_value(node, here, diagnostics)
    if isinstance(node, yaml.SequenceNode):
        if node.tag != "tag:yaml.org,2002:seq":
            diagnostics.append(
                Diagnostic("PC004", f"YAML tag {_tag(node)} is not allowed in a conf file", here)
            )
            return None
        return [
            _to_value(item, (*path, index), tree, lines, diagnostics, None, depth + 1)
            for index, item in enumerate(node.value)
        ]
    assert isinstance(node, yaml.MappingNode)
    if node.tag != "tag:yaml.org,2002:map":
        diagnostics.append(
            Diagnostic("PC004", f"YAML tag {_tag(node)} is not allowed in a conf file", here)
        )
        return None
    return _mapping_value(node, path, tree, lines, diagnostics, key_position, here, depth)


def _scalar_value(node: yaml.ScalarNode, here: Position, diagnostics: list[Diagnostic]) -> Any:
    if node.tag not in _SAFE_SCALAR_TAGS:
        diagnostics.append(
            Diagnostic(
                "PC004",
                f"YAML tag {_tag(node)} is not allowed in a conf file",
                here,
                "write a plain value; peach never constructs objects from tags",
            )
        )
        return None
    if node.tag == _STR_TAG:
        return node.value
    try:
        return _SCALARS.yaml_constructors[node.tag](_SCALARS, node)
    except (yaml.YAMLError, ValueError, OverflowError):
        diagnostics.append(Diagnostic("PC004", f"invalid {node.tag} value {node.value!r}", here))
        return None


def _mapping_value(
    node: yaml.MappingNode,
    path: Path_,
    tree: _FileTree,
    lines: list[str],
    diagnostics: list[Diagnostic],
    key_position: Position | None,
    here: Position,
    depth: int,
) -> dict[str, Any]:
    """A mapping's keys and values (``<<: *anchor`` merged in); a key given twice or not
    plain is reported and left out."""
    result: dict[str, Any] = {}
    seen: dict[str, Position] = {}
    merged: list[yaml.MappingNode] = []
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            merged += _merge_sources(value_node)
            continue
        key_here = _mark_position(tree.name, key_node.start_mark, lines)
        if not isinstance(key_node, yaml.ScalarNode):
            diagnostics.append(Diagnostic("PC004", "a key must be a plain name", key_here))
            continue
        key = str(key_node.value)
        if key in seen:
            first = seen[key]
            diagnostics.append(
                Diagnostic(
                    "PC005",
                    f"key '{key}' appears twice in this mapping (first at line {first.line})",
                    key_here,
                    "YAML keeps only one of them; remove or rename the other",
                )
            )
            continue
        seen[key] = key_here
        result[key] = _to_value(
            value_node, (*path, key), tree, lines, diagnostics, key_here, depth + 1
        )
    for source in merged:  # `<<: *anchor`: keys not given explicitly
        extra = _to_value(source, path, tree, lines, diagnostics, key_position, depth + 1)
        if isinstance(extra, dict):
            for key, value in extra.items():
                result.setdefault(key, value)
        tree.positions[path] = NodePosition(key_position or here, here)
    return result


def _tag(node: yaml.Node) -> str:
    tag = str(node.tag)
    return "!!" + tag[len(_STANDARD_PREFIX) :] if tag.startswith(_STANDARD_PREFIX) else tag


def _merge_sources(node: yaml.Node) -> list[yaml.MappingNode]:
    if isinstance(node, yaml.MappingNode):
        return [node]
    if isinstance(node, yaml.SequenceNode):
        return [n for n in node.value if isinstance(n, yaml.MappingNode)]
    return []


# --- merging files ----------------------------------------------------------------------------

_NAMED_SECTIONS = ("endpoints", "tasks", "py_environments")
_PROJECT_VALUES = ("codops", "timeout_s")


def merge_files(trees: list[_FileTree], diagnostics: list[Diagnostic]) -> tuple[dict, dict]:
    """Merge conf files: names once, one codops, lists concatenated; report duplicates."""
    merged: dict[str, Any] = {}
    positions: dict[Path_, NodePosition] = {}

    def take(tree: _FileTree, local: Path_, target: Path_) -> None:
        for p, pos in tree.positions.items():
            if p[: len(local)] == local:
                positions.setdefault((*target, *p[len(local) :]), pos)

    def named(tree: _FileTree, key: str, value: dict[str, Any], message: str, hint: str) -> None:
        """The names of section ``key`` merged: one given twice (with another value, for
        env_vars) is reported as PC110 with ``message`` (its ``{name}``, ``{other}``)."""
        for name, item in value.items():
            if name in merged[key] and (key != "env_vars" or merged[key][name] != item):
                other = positions[(key, name)].key
                diagnostics.append(
                    Diagnostic(
                        "PC110",
                        message.format(name=name, other=f"{other.file}:{other.line}"),
                        tree.positions[(key, name)].key,
                        hint,
                    )
                )
            elif name not in merged[key]:
                merged[key][name] = item
                take(tree, (key, name), (key, name))

    for tree in trees:
        for key, value in tree.value.items():
            here = tree.positions[(key,)]
            if key not in merged:
                merged[key] = value if not isinstance(value, dict) else dict(value)
                take(tree, (key,), (key,))
                continue
            first = positions[(key,)]
            if key in _PROJECT_VALUES:
                if merged[key] != value:
                    diagnostics.append(
                        Diagnostic(
                            "PC111",
                            f"{key} is {value!r} here but {merged[key]!r} in "
                            f"{first.value.file}:{first.value.line}",
                            here.value,
                            f"a project has one {key}; make them agree",
                        )
                    )
            elif (
                key in _NAMED_SECTIONS and isinstance(value, dict) and isinstance(merged[key], dict)
            ):
                what = {"endpoints": "endpoint", "tasks": "task"}.get(key, "py_environment")
                message = what + " '{name}' is defined twice: here and in {other}"
                named(tree, key, value, message, "rename one of them")
            elif key == "env_vars" and isinstance(value, dict) and isinstance(merged[key], dict):
                message = "env_vars '{name}' is set twice: here and in {other}"
                named(tree, key, value, message, "set it in one file")
            elif (
                isinstance(value, list)
                and isinstance(merged[key], list)
                and key in _conf_model().model_fields
            ):
                offset = len(merged[key])
                merged[key] = merged[key] + value
                for index in range(len(value)):
                    take(tree, (key, index), (key, offset + index))
            else:  # the first file's value stands and the schema judges it; judge this one
                problem = _unmerged_problem(key, value)
                if problem is not None:
                    diagnostics.append(
                        schema_diagnostic(
                            problem,
                            lambda _loc, key=False, here=here: here.key if key else here.value,
                            _conf_model(),
                        )
                    )
    return merged, positions


def _conf_model() -> type[PeachConf]:
    from peach_cli.project.conf import PeachConf

    return PeachConf


def _unmerged_problem(key: str, value: Any) -> dict[str, Any] | None:
    """What the schema would say of a later file's ``key: value`` that was not merged."""
    if key not in _conf_model().model_fields:
        return {"loc": (key,), "type": "extra_forbidden", "msg": "Extra inputs are not permitted"}
    if key in _NAMED_SECTIONS and not isinstance(value, dict):
        return {"loc": (key,), "type": "dict_type", "msg": "Input should be a valid dictionary"}
    if key == "env_vars" and not isinstance(value, dict):
        return {"loc": (key,), "type": "dict_type", "msg": "Input should be a valid dictionary"}
    if key in ("decorator_endpoints", "secrets") and not isinstance(value, list):
        return {"loc": (key,), "type": "list_type", "msg": "Input should be a valid list"}
    return None


# --- validating against the model -------------------------------------------------------------


def _misplaced_component(loc: tuple[Any, ...], value: Any) -> str | None:
    """The hint for a component written at its endpoint's level (``fallback:`` dedented out
    of ``components:``): where it belongs."""
    if len(loc) != 3 or loc[0] != "endpoints":
        return None
    key = str(loc[2])
    looks_like = isinstance(value, dict) and ("notebook" in value or "method" in value)
    if key not in ("main", "fallback") and not looks_like:
        return None
    return (
        f"did you mean endpoints.{loc[1]}.components.{key}? a component (the fallback "
        "too) goes under the endpoint's components:, indented below it"
    )


def schema_diagnostic(item: Any, locate: Any, model: type) -> Diagnostic:
    """Turn one pydantic error into a diagnostic at the position of the node it is about.

    ``locate(path, key=...)`` gives positions; ``model`` is the model validated at the root.
    """
    loc = tuple(item["loc"])
    kind = item["type"]
    where = ".".join(str(p) for p in loc[:-1]) or "the top level"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        if key == "dependencies":
            return Diagnostic(
                "PC104",
                f"'dependencies' is not allowed in {where}",
                locate(loc, key=True),
                "declare them in py_environments (base or a named env) and set py_env: NAME",
            )
        allowed = _allowed_keys(model, loc[:-1])
        hint = (
            did_you_mean(key, allowed)
            or _misplaced_component(loc, item.get("input"))
            or (f"allowed keys: {', '.join(allowed)}" if allowed else None)
        )
        return Diagnostic("PC101", f"unknown key '{key}' in {where}", locate(loc, key=True), hint)
    if kind == "missing":
        return Diagnostic(
            "PC102",
            f"missing required key '{loc[-1]}' in {where}",
            locate(loc[:-1], key=True) if loc[:-1] else locate((), key=True),
        )
    from peach_cli.project.ab_errors import schema_problem

    ab_problem = schema_problem(item, locate)
    if ab_problem is not None:
        return ab_problem
    field_path = ".".join(str(p) for p in loc if not _is_type_tag(p))
    message = str(item.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    hint = None
    if kind == "string_pattern_mismatch":
        name = str(loc[-1])
        hint = {
            "url": "a url starts with '/', like /assistant",
            "codops": "codops is lowercase letters, digits, '_' and '-'",
        }.get(name)
    return Diagnostic(
        "PC103",
        f"invalid {field_path}: {message}",
        locate(tuple(p for p in loc if not _is_type_tag(p))),
        hint,
    )


def _is_type_tag(part: Any) -> bool:
    """pydantic adds union member tags like 'str' or 'function-after[...]' to locations."""
    return isinstance(part, str) and (
        part in ("str", "int", "float", "bool", "none") or "[" in part
    )


def _allowed_keys(model: Any, path: Path_) -> list[str]:
    """The keys allowed at ``path`` of ``model`` (for "did you mean")."""
    from pydantic import BaseModel

    current: Any = model
    for part in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            if info is None:
                return []
            current = info.annotation
        else:
            origin, args = get_origin(current), get_args(current)
            if origin is dict and len(args) == 2:
                current = args[1]
            elif origin is list and args:
                current = args[0]
            else:
                return []
        while get_origin(current) is Union or type(current).__name__ == "UnionType":
            members = [a for a in get_args(current) if a is not type(None)]
            current = members[0] if members else None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _partial_conf(raw: dict) -> tuple[PeachConf, set[str]]:
    """The valid parts of a conf whose schema has errors, so that later checks still run.

    An endpoint with an invalid component keeps its url, py_env and valid components; its
    name is in the returned set, so checks of its component structure are skipped.
    """
    from pydantic import BaseModel, ValidationError

    from peach_cli.project.conf import BASE_ENV, Component, Endpoint, PeachConf, PyEnvironment, Task

    def valid(value: Any, model: type[BaseModel]) -> Any:
        """The model, or failing that the model without the keys its errors are about."""
        try:
            return model.model_validate(value)
        except ValidationError as error:
            if not isinstance(value, dict):
                return None
            bad = {e["loc"][0] for e in error.errors() if e["loc"]}
            trimmed = {k: v for k, v in value.items() if k not in bad}
            if len(trimmed) == len(value):
                return None
            try:
                return model.model_validate(trimmed)
            except ValidationError:
                return None

    def section(name: str) -> dict:
        items = raw.get(name)
        return items if isinstance(items, dict) else {}

    partial: set[str] = set()
    endpoints = {}
    for name, value in section("endpoints").items():
        endpoint = valid(value, Endpoint)
        if endpoint is None and isinstance(value, dict):
            components = value.get("components")
            components = components if isinstance(components, dict) else {}
            url, py_env = value.get("url"), value.get("py_env", BASE_ENV)
            endpoint = Endpoint.model_construct(
                url=url if isinstance(url, str) and url.startswith("/") else "",
                py_env=py_env if isinstance(py_env, str) else BASE_ENV,
                components={
                    n: c
                    for n, c in ((n, valid(c, Component)) for n, c in components.items())
                    if c is not None
                },
            )
            partial.add(name)
        if endpoint is not None:
            endpoints[name] = endpoint

    def entries(name: str, model: type) -> dict:
        found = {n: valid(v, model) for n, v in section(name).items()}
        return {n: v for n, v in found.items() if v is not None}

    env_vars = raw.get("env_vars")
    secrets = raw.get("secrets")
    listed = raw.get("decorator_endpoints")
    codops = raw.get("codops")
    timeout = raw.get("timeout_s")
    conf = PeachConf.model_construct(
        codops=codops if isinstance(codops, str) else "",
        timeout_s=float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else 30.0,
        py_environments=entries("py_environments", PyEnvironment),
        endpoints=endpoints,
        tasks=entries("tasks", Task),
        decorator_endpoints=[p for p in listed if isinstance(p, str)]
        if isinstance(listed, list)
        else [],
        env_vars={k: v for k, v in env_vars.items() if isinstance(v, str)}
        if isinstance(env_vars, dict)
        else {},
        secrets=[s for s in secrets if isinstance(s, str)] if isinstance(secrets, list) else [],
    )
    return conf, partial


def _renumber_strings(positions: dict[Path_, NodePosition], key: str, items: Any) -> None:
    """``_partial_conf`` keeps only the strings of a list: move their positions along."""
    if not isinstance(items, list):
        return
    kept = [i for i, item in enumerate(items) if isinstance(item, str) and (key, i) in positions]
    moved: dict[Path_, NodePosition] = {(key, n): positions[(key, o)] for n, o in enumerate(kept)}
    for path in [p for p in positions if len(p) > 1 and p[0] == key]:
        del positions[path]
    positions.update(moved)


def load_project(path: Path | str) -> tuple[Project | None, list[Diagnostic]]:
    """Load a project folder (or one YAML file) into the merged conf model.

    Returns the project (None only when no conf file could be read at all) and every
    problem found in the conf files. Raises ``UsageError`` when ``path`` is not a project.
    """
    return read_project(*find_conf_files(Path(path)))


def read_project(root: Path, files: list[Path]) -> tuple[Project | None, list[Diagnostic]]:
    """The project rooted at ``root`` read from its conf ``files`` (``find_conf_files``),
    merged in that order: the project (None only when no conf file could be read at all)
    and every problem found in the conf files."""
    from pydantic import ValidationError

    from peach_cli.project.conf import PeachConf

    diagnostics: list[Diagnostic] = []
    trees = [
        t
        for t in (read_conf_file(root, f, diagnostics) for f in _inside(root, files, diagnostics))
        if t is not None
    ]
    names = tuple(relative_name(root, f) for f in files)
    if not trees:
        return None, diagnostics
    raw, positions = merge_files(trees, diagnostics)
    project = Project(root, PeachConf.model_construct(codops=""), names, positions)
    try:
        project.conf = PeachConf.model_validate(raw)
    except ValidationError as error:
        rejected = {str(d.position) for d in diagnostics if d.code == "PC004"}
        for item in error.errors(include_url=False):
            diagnostic = schema_diagnostic(item, project.position, PeachConf)
            if str(diagnostic.position) not in rejected:  # already reported as a bad tag
                diagnostics.append(diagnostic)
        project.conf, project.partial = _partial_conf(raw)
        _renumber_strings(project.positions, "decorator_endpoints", raw.get("decorator_endpoints"))
        project.schema_ok = False
    from peach_cli.project.rules import project_rules

    diagnostics += project_rules(project)
    return project, diagnostics


def _inside(root: Path, files: list[Path], diagnostics: list[Diagnostic]) -> list[Path]:
    """The conf files whose real path stays in the project; PC006 for each other one.

    A conf file linked to ``/etc/shadow`` is refused by name: none of its lines is read.
    """
    kept = []
    for path in files:
        refused = link_outside(root, path, "a conf file must live inside the project folder")
        if refused is None:
            kept.append(path)
        else:
            diagnostics.append(refused)
    return kept


def link_outside(root: Path, path: Path, what: str) -> Diagnostic | None:
    """PC006 when the real path of ``path`` (links followed) leaves the project at ``root``:
    the file is refused by name, and none of it is opened. ``what`` starts the hint."""
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a loop of links
        inside = False
    if inside:
        return None
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    return Diagnostic(
        "PC006",
        f"{name} is a link to a file outside the project: not read",
        Position(name),
        f"{what}; copy it in",
    )
