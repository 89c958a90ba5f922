"""The checks of SPEC §10: variable names, secrets given a value, and values that look
like credentials.

PC118: a name under ``env_vars`` or ``secrets`` that is not an environment variable's name.
PC119: a secret that ``env_vars`` also gives a value (a value in the conf is no secret).
PC311: a conf value, or a string literal in the code that runs, that looks like a
credential (an ``sk-…`` or ``AKIA…`` key, a GitHub token, a private key block, a long
random token, a URL with a password): it belongs in ``.env``, named under ``secrets:``.

The credential check aims at a low false-positive rate: a generic token is flagged only
when it is long, random-looking (high entropy, mixed letters and digits) and not a path,
a hash (hex) or a base64 blob, or when it is assigned to a name that says it is a secret.
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from peach_cli.project.conf import VARIABLE_PATTERN
from peach_cli.project.diagnostics import Diagnostic, Position
from peach_cli.project.notebook import walk

if TYPE_CHECKING:
    from peach_cli.checks.undeclared import Run
    from peach_cli.project.conf import PeachConf
    from peach_cli.project.loader import Path_

VARIABLE_NAME = re.compile(VARIABLE_PATTERN)

_KNOWN = (
    (re.compile(r"\bsk-(?:proj-|ant-|live_|test_)?[A-Za-z0-9_\-]{20,}"), "an API key (sk-…)"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key (AKIA…)"),
    (
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
        "a GitHub token",
    ),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), "a Google API key"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "a Hugging Face token"),
    (re.compile(r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----"), "a private key"),
    (
        re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@{}$<>]+:[^/\s@{}$<>*]{3,}@[\w.-]+"),
        "a URL with a password",
    ),
)
_BEARER = re.compile(r"^(Bearer|Token|Basic)\s+([A-Za-z0-9._~+/=-]{16,})$", re.IGNORECASE)
_TOKEN = re.compile(r"^[A-Za-z0-9+/=_\-]{32,256}$")
_SECRET_NAME = re.compile(
    r"(api_?key|apikey|access_?key|secret|token|passw(or)?d|passwd|credential|auth_?key)",
    re.IGNORECASE,
)
_PLACEHOLDER = re.compile(r"(x{4,}|\.\.\.|<[^>]*>|\$\{|your[_-]|changeme|example|dummy)", re.I)


def looks_like_credential(value: str, name: str | None = None) -> str | None:
    """What ``value`` looks like (``"an API key (sk-…)"``), or None for an ordinary string.

    ``name`` is what the value is assigned to, when known: a name such as ``api_key``
    makes a shorter random-looking value suspect too.

    >>> looks_like_credential("sk-" + "a1B2" * 6)
    'an API key (sk-…)'
    >>> looks_like_credential("hello world") is None
    True
    """
    for pattern, what in _KNOWN:
        match = pattern.search(value)
        if match and not _PLACEHOLDER.search(match.group()):
            return what
    text = value.strip()
    bearer = _BEARER.match(text)
    if bearer and not _PLACEHOLDER.search(text) and _random(bearer.group(2)):
        return f"a {bearer.group(1).lower()} token"
    if _PLACEHOLDER.search(text) or " " in text:
        return None
    if _TOKEN.match(text) and _random(text, strict=True):
        return "a long random token"
    if name and _SECRET_NAME.search(name) and 16 <= len(text) <= 256 and _random(text):
        return f"a secret ({name})"
    return None


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random(text: str, *, strict: bool = False) -> bool:
    """Random-looking: letters and digits mixed, high entropy; with ``strict`` also both
    cases (a hex digest, a UUID, a snake_case name are not tokens)."""
    if "/" in text and (text.count("/") > 2 or any(c in text for c in "-_.")):
        return False  # a path, a model id (org/name-v2), a base64 blob with many slashes
    has_digit = any(c.isdigit() for c in text)
    has_lower = any(c.islower() for c in text)
    has_upper = any(c.isupper() for c in text)
    if not (has_digit and (has_lower or has_upper)):
        return False
    if strict and not (has_lower and has_upper):
        return False
    if strict and re.fullmatch(r"[A-Za-z]+(?:[_-][A-Za-z0-9]+)+", text):  # words_and_words1
        return False
    return _entropy(text) >= (4.0 if strict else 3.3)


# --- the conf ---------------------------------------------------------------------------------


def _scopes(conf: PeachConf) -> Iterator[tuple[Path_, dict[str, str], list[str]]]:
    yield (), conf.env_vars, conf.secrets
    for name, endpoint in conf.endpoints.items():
        for component_name, component in endpoint.components.items():
            where = ("endpoints", name, "components", component_name)
            yield where, component.env_vars, component.secrets
    for name, task in conf.tasks.items():
        yield ("tasks", name), task.env_vars, task.secrets


def check_variables(conf: PeachConf, at: Callable[..., Position]) -> list[Diagnostic]:
    """PC118 and PC119 for every scope (the top level, each component, each task)."""
    found: list[Diagnostic] = []
    hint = "a name is letters, digits and '_', not starting with a digit (like OPENAI_API_KEY)"
    for where, env_vars, secrets in _scopes(conf):
        for name in env_vars:
            if not VARIABLE_NAME.match(name):
                found.append(
                    Diagnostic(
                        "PC118",
                        f"env_vars name {name!r} is not an environment variable's name",
                        at((*where, "env_vars", name), key=True),
                        hint,
                    )
                )
        for index, name in enumerate(secrets):
            if not VARIABLE_NAME.match(name):
                found.append(
                    Diagnostic(
                        "PC118",
                        f"secret name {name!r} is not an environment variable's name",
                        at((*where, "secrets", index)),
                        hint,
                    )
                )
    top_values = conf.env_vars
    for where, env_vars, secrets in _scopes(conf):
        for index, name in enumerate(secrets):
            given = name in env_vars or name in top_values
            if not given:
                continue
            place = (*where, "env_vars", name) if name in env_vars else ("env_vars", name)
            found.append(
                Diagnostic(
                    "PC119",
                    f"secret {name} is also given a value in env_vars "
                    f"({'.'.join(str(p) for p in place)})",
                    at((*where, "secrets", index)),
                    "a secret's value comes from the environment or .env, never from the "
                    "conf: remove it from env_vars",
                )
            )
    return found


def _conf_strings(value: Any, path: Path_) -> Iterator[tuple[Path_, str, str | None]]:
    """Every string in a conf value, with its path and the key it is under."""
    if isinstance(value, str):
        key = path[-1] if path and isinstance(path[-1], str) else None
        yield path, value, key
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _conf_strings(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _conf_strings(item, (*path, index))


def credential_warnings(
    conf: PeachConf, at: Callable[..., Position], runs: list[Run]
) -> list[Diagnostic]:
    """PC311 for conf values and string literals of the code that runs that look like a
    credential."""
    found: list[Diagnostic] = []
    hint = (
        "a credential does not belong in the project: put it in .env (or export it), "
        "name it under secrets: and read it with os.environ"
    )
    scopes: list[tuple[Path_, Any]] = [(("env_vars",), conf.env_vars)]
    for name, endpoint in conf.endpoints.items():
        for component_name, component in endpoint.components.items():
            where = ("endpoints", name, "components", component_name)
            scopes += [
                ((*where, "env_vars"), component.env_vars),
                ((*where, "args"), component.args),
            ]
    for name, task in conf.tasks.items():
        scopes += [
            (("tasks", name, "env_vars"), task.env_vars),
            (("tasks", name, "args"), task.args),
        ]
    for root, value in scopes:
        for path, text, key in _conf_strings(value, root):
            what = looks_like_credential(text, key)
            if what is not None:
                found.append(
                    Diagnostic(
                        "PC311",
                        f"{'.'.join(str(p) for p in path)} looks like {what}",
                        at(path),
                        hint,
                    )
                )
    seen: set[tuple[str, int, int]] = set()
    visited: set[tuple[str, int]] = set()  # a cell shared by many components is read once
    for _where, notebook, extraction in runs:
        for cell in extraction.cells:
            if cell.tree is None or (notebook.path, cell.number) in visited:
                continue
            visited.add((notebook.path, cell.number))
            for node, label in _literals(cell.tree):
                found_in = looks_like_credential(str(node.value), label)
                if found_in is None:
                    continue
                place = (notebook.path, cell.number, node.lineno)
                if place in seen:
                    continue
                seen.add(place)
                found.append(
                    Diagnostic(
                        "PC311",
                        f"a string in the code looks like {found_in}",
                        Position(
                            notebook.path,
                            node.lineno,
                            node.col_offset + 1,
                            cell.number,
                            cell.line(node.lineno),
                        ),
                        hint,
                    )
                )
    return found


def _literals(tree: ast.AST) -> Iterator[tuple[ast.Constant, str | None]]:
    """Every string constant in ``tree`` with the name it is assigned to (a variable, a
    keyword argument, a dict key), when there is one. Docstrings are skipped."""
    names: dict[int, str] = {}
    docstrings: set[int] = set()
    for node in walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                label = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                if label and node.value is not None:
                    names[id(node.value)] = label
        elif isinstance(node, ast.keyword) and node.arg:
            names[id(node.value)] = node.arg
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    names[id(value)] = key.value
    for node in walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node, names.get(id(node))
