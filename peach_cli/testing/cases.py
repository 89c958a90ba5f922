"""Case files: ``*.peach-test.yaml``, each a list of endpoint tests (SPEC §8).

Read with the conf's YAML-with-positions reader (``peach_cli.project.loader``), so every
mistake is a ``Diagnostic`` at file:line:col, unknown keys with "did you mean"::

    files, diagnostics = load_cases(Path("examples/quickstart"))
    files[0].cases[0].case.name, files[0].cases[0].case.url  # ("recommends two", "/recommend")

``check_urls`` adds the cases whose url is not an endpoint of the project (``peach
validate`` calls it with the validated endpoints); ``select_cases`` is `peach test`'s step:
the cases read, checked against the loaded project's urls, selected by ``-k``, or the error
to show. Nothing here sends a request.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from peach_cli.project.diagnostics import Diagnostic, Position, did_you_mean
from peach_cli.project.filenames import CASE_SUFFIX
from peach_cli.project.loader import (
    NodePosition,
    Path_,
    link_outside,
    read_yaml_file,
    schema_diagnostic,
)

if TYPE_CHECKING:
    from peach_cli.runtime.plan import EndpointSpec


class Expect(BaseModel):
    """What a case expects of the answer; every key is optional."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    status: int | None = Field(
        None,
        ge=100,
        le=599,
        description="The HTTP status. Default: 200, unless error_code is given.",
    )
    component: str | None = Field(None, description="The X-Peach-Component that answered.")
    result: Any = Field(None, description="The envelope's result, equal as JSON.")
    result_contains: Any = Field(
        None,
        description="Every key given equal (recursively); for lists, the items given, in order.",
    )
    error_code: str | None = Field(None, description="The error envelope's error.code.")
    text_contains: str | None = Field(None, description="A stream's text (chunks joined) has it.")
    chunks_min: int | None = Field(
        None, ge=0, description="A stream has at least this many chunks."
    )
    cut: bool | None = Field(None, description="Whether the stream was cut (SPEC §2).")
    max_ms: float | None = Field(
        None, gt=0, description="Answered (or first chunk) within this many milliseconds."
    )


class Case(BaseModel):
    """One request and what its answer must be."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(
        min_length=1, description="Unique in its file; `peach test -k` selects on it."
    )
    url: str = Field(pattern=r"^/", description="The endpoint's url, like /greet.")
    method: Literal["GET", "POST"] = Field(
        "GET", description="GET sends params as the query string, POST as the JSON body."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="The endpoint's parameters.")
    stream: bool = Field(False, description="Send stream=true and read the stream.")
    expect: Expect = Field(
        default_factory=lambda: Expect.model_validate({}), description="What the answer must be."
    )


class CaseList(BaseModel):
    """A case file (for the JSON schema): a list of cases."""

    model_config = ConfigDict(extra="forbid")

    cases: list[Case]


@dataclass(frozen=True)
class LoadedCase:
    case: Case
    position: Position
    """Where the case starts (its ``- name:`` line)."""
    url_position: Position


@dataclass
class CaseFile:
    """One case file: its project-relative name and its valid cases, in file order."""

    name: str
    path: Path
    cases: list[LoadedCase] = field(default_factory=list)


def find_case_files(root: Path) -> list[Path]:
    """Every ``*.peach-test.yaml`` of the project, by path, outside what `peach deploy`
    leaves out of its upload: dot-folders, what a ``.gitignore``/``.rayignore`` excludes,
    virtualenvs and caches. Only names are read: an unreadable folder or a broken link is
    skipped."""
    from peach_cli.deploy.uploads import CACHE_DIRS, CACHE_TAG, IGNORE_FILES, VENV_MARKERS

    found: list[Path] = []
    pending: list[tuple[Path, list[tuple[str, Any]]]] = [(root, [])]
    while pending:
        folder, rules = pending.pop()
        lines: list[str] = []
        for ignore_file in IGNORE_FILES:
            with contextlib.suppress(OSError):
                lines += (folder / ignore_file).read_text(errors="replace").splitlines()
        if lines:
            import pathspec  # only for a project with ignore files: 10 ms of `peach validate`

            rules = [
                *rules,
                (_relative(root, folder), pathspec.GitIgnoreSpec.from_lines(lines)),
            ]
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if not is_dir and not entry.name.endswith(CASE_SUFFIX):
                continue
            if _ignored(rules, _relative(root, Path(entry.path)), is_dir):
                continue
            if not is_dir:
                found.append(Path(entry.path))
            elif entry.name not in CACHE_DIRS and not any(
                os.path.exists(os.path.join(entry.path, marker))
                for marker in (*VENV_MARKERS, CACHE_TAG)
            ):
                pending.append((Path(entry.path), rules))
    return sorted(found, key=lambda p: _relative(root, p))


def _relative(root: Path, path: Path) -> str:
    """``path`` (found under ``root``) relative to it, as posix; the root is ``.``."""
    return path.relative_to(root).as_posix()


def _ignored(rules: list[tuple[str, Any]], relative: str, is_dir: bool) -> bool:
    """Whether the deepest ignore file that decides excludes ``relative`` (as git does)."""
    for base, spec in reversed(rules):
        inner = relative[len(base) + 1 :] if base not in ("", ".") else relative
        decision = spec.check_file(inner + "/" if is_dir else inner).include
        if decision is not None:
            return bool(decision)
    return False


def load_cases(
    root: Path, files: list[Path] | None = None
) -> tuple[list[CaseFile], list[Diagnostic]]:
    """The case files of the project at ``root`` (or ``files``), and every problem in them."""
    paths = find_case_files(root) if files is None else files
    diagnostics: list[Diagnostic] = []
    loaded = [read_case_file(root, path, diagnostics) for path in paths]
    return [f for f in loaded if f is not None], diagnostics


def select_cases(
    root: Path, files: list[Path], keyword: str | None, urls: list[str] | None
) -> list[CaseFile]:
    """The cases of the project at ``root`` (or of ``files``) whose name holds ``keyword``;
    with ``urls`` (the project's endpoints), a case whose url is none of them is an error.
    ``ProjectInvalid`` (exit 2) when a case file has errors, ``UsageError`` when no case is
    selected."""
    from peach_cli.errors import UsageError
    from peach_cli.project.diagnostics import has_errors, invalid, sort_key
    from peach_cli.wording import count

    loaded, diagnostics = load_cases(root, files or None)
    if urls is not None:
        diagnostics += check_urls(loaded, urls)
    if has_errors(diagnostics):
        diagnostics.sort(key=sort_key)
        error = invalid(root, diagnostics, "testing")
        error.exit_code = 2  # nothing was tested
        raise error
    names = [c.case.name for f in loaded for c in f.cases]
    if keyword:
        for case_file in loaded:
            case_file.cases = [c for c in case_file.cases if keyword in c.case.name]
    selected = [f for f in loaded if f.cases]
    if selected:
        return selected
    if keyword and names:
        shown = ", ".join(repr(name) for name in names[:5])
        more = f", … ({len(names) - 5} more)" if len(names) > 5 else ""
        raise UsageError(
            f"no case matches -k {keyword!r}: no case name contains it",
            hint=f"{count(len(names), 'case')} in {count(len(loaded), 'file')}: "
            f"{shown}{more} (-k is case-sensitive; leave it out to run them all)",
        )
    where = ", ".join(str(f) for f in files) if files else str(root)
    raise UsageError(
        f"no case found in {where}",
        hint=f"write cases in a file ending in {CASE_SUFFIX} (see `peach schema --tests`)",
    )


def read_case_file(root: Path, path: Path, diagnostics: list[Diagnostic]) -> CaseFile | None:
    """One case file's valid cases; its problems go to ``diagnostics``.

    A case file in the project that is a link leaving it is PC006, and never opened."""
    if path.absolute().is_relative_to(root.absolute()):
        refused = link_outside(root, path, "a case file must live inside the project folder")
        if refused is not None:
            diagnostics.append(refused)
            return None
    tree = read_yaml_file(root, path, diagnostics, empty=[])
    if tree is None:
        return None
    name = tree.name
    positions = tree.positions
    if not isinstance(tree.value, list):
        kind = "a mapping" if isinstance(tree.value, dict) else "a single value"
        diagnostics.append(
            Diagnostic(
                "PC801",
                f"{name} must be a list of cases (- name: ..., url: ...), not {kind}",
                _at(positions, (), name),
                "start each case with '- name:'",
            )
        )
        return None
    found = CaseFile(name, path)
    seen: dict[str, Position] = {}
    for index, item in enumerate(tree.value):
        where = _at(positions, (index,), name)
        label = f"case {index + 1}"
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            label = f"case '{item['name']}'"
        try:
            case = Case.model_validate(item)
        except ValidationError as error:
            for problem in error.errors(include_url=False):
                diagnostic = schema_diagnostic(
                    problem,
                    lambda loc, key=False, index=index: _locate(
                        positions, (index, *loc), key, name
                    ),
                    Case,
                )
                diagnostics.append(
                    Diagnostic(
                        diagnostic.code,
                        diagnostic.message.replace("the top level", label)
                        if "the top level" in diagnostic.message
                        else f"{diagnostic.message} of {label}",
                        diagnostic.position,
                        diagnostic.hint,
                    )
                )
            continue
        if case.name in seen:
            diagnostics.append(
                Diagnostic(
                    "PC802",
                    f"case '{case.name}' appears twice in {name} (first at line {seen[case.name].line})",
                    _at(positions, (index, "name"), name),
                    "give each case of a file its own name",
                )
            )
            continue
        seen[case.name] = where
        found.cases.append(LoadedCase(case, where, _at(positions, (index, "url"), name)))
    return found


def check_urls(files: list[CaseFile], urls: list[str]) -> list[Diagnostic]:
    """PC803 for each case whose url is not one of ``urls`` (the project's endpoints)."""
    from peach_cli.runtime.plan import url_key

    known = {url_key(u) for u in urls}
    problems = []
    for case_file in files:
        for loaded in case_file.cases:
            if url_key(loaded.case.url) not in known:
                problems.append(
                    Diagnostic(
                        "PC803",
                        f"case '{loaded.case.name}': {loaded.case.url} is not an endpoint of the "
                        "project",
                        loaded.url_position,
                        did_you_mean(loaded.case.url, sorted(urls))
                        or (f"endpoints: {', '.join(sorted(urls))}" if urls else None),
                    )
                )
    return problems


STREAM_KEYS = ("text_contains", "chunks_min", "cut")
"""The expect keys about a stream: a case needs ``stream: true`` for them."""


def streaming_urls(endpoints: Iterable[EndpointSpec]) -> dict[str, str]:
    """url → the method of each endpoint whose primary method streams (a generator, sync
    or async), read from its code (never run)."""
    import ast

    from peach_cli.project.notebook import is_generator

    found = {}
    for endpoint in endpoints:
        component = endpoint.components.get(endpoint.primary)
        if component is None:
            continue
        try:
            tree = ast.parse(component.source)
        except (SyntaxError, ValueError):
            continue
        functions = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == component.method
        ]
        if functions and is_generator(functions[-1]):  # the last definition wins
            found[endpoint.url] = component.method
    return found


def check_streams(files: list[CaseFile], streaming: dict[str, str]) -> list[Diagnostic]:
    """PC804 for each case that expects a stream (``text_contains``, ``chunks_min``,
    ``cut``) of an endpoint that streams, without ``stream: true``: it would fail at run
    time (``stream_required``, or an answer that is no stream)."""
    from peach_cli.runtime.plan import url_key

    methods = {url_key(url): method for url, method in streaming.items()}
    problems = []
    for case_file in files:
        for loaded in case_file.cases:
            case = loaded.case
            method = methods.get(url_key(case.url))
            keys = [key for key in STREAM_KEYS if key in case.expect.model_fields_set]
            if case.stream or method is None or not keys:
                continue
            problems.append(
                Diagnostic(
                    "PC804",
                    f"case '{case.name}': {' and '.join(keys)} "
                    f"{'reads' if len(keys) == 1 else 'read'} a stream, but the case does not "
                    f"ask for one ({case.url} streams: '{method}' is a generator)",
                    loaded.position,
                    "add `stream: true` to the case",
                )
            )
    return problems


def _at(positions: dict[Path_, NodePosition], path: Path_, name: str) -> Position:
    found = positions.get(path)
    return found.value if found is not None else Position(name, 1, 1)


def _locate(positions: dict[Path_, NodePosition], path: Path_, key: bool, name: str) -> Position:
    for end in range(len(path), 0, -1):
        found = positions.get(tuple(path[:end]))
        if found is not None:
            return found.key if key or end < len(path) else found.value
    return Position(name, 1, 1)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a case file (``peach schema --tests``), for editors."""
    schema = CaseList.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "peach test cases",
        "description": "A *.peach-test.yaml file: a list of endpoint tests (`peach test`).",
        "type": "array",
        "items": schema["properties"]["cases"]["items"],
        "$defs": schema.get("$defs", {}),
    }


__all__ = [
    "Case",
    "CaseFile",
    "Expect",
    "LoadedCase",
    "check_streams",
    "check_urls",
    "find_case_files",
    "json_schema",
    "load_cases",
    "streaming_urls",
]
