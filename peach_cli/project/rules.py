"""The text rules of SPEC §1: names, urls and requirement strings.

Every value here reaches a terminal, a log line, a url route or uv's command line, so each is
held to a narrow shape: a name is ``[A-Za-z0-9_.-]+``; a url is ``/`` followed by
``[A-Za-z0-9._~/-]``, with no ``..`` segment and nothing under ``/_peach``; a requirement is
a PEP 508 string as ``packaging`` parses it (or a bare ``git+https://…`` / ``https://…``
URL, which uv installs), never an option line, a local path, or text with a line break.

``project_rules`` reports the names and requirements of a loaded conf; the url rule is
``url_problem``, used by ``peach validate`` (conf and decorator urls) and by
``--route-prefix``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from peach_cli.printable import printable
from peach_cli.project.conf import RESERVED_URL_PREFIX
from peach_cli.project.diagnostics import Diagnostic

if TYPE_CHECKING:
    from peach_cli.project.conf import PeachConf
    from peach_cli.project.diagnostics import Position


class Project(Protocol):
    """What the rules read of a loaded project (``loader.Project``): the conf, and where
    each of its values was written."""

    conf: PeachConf

    def position(self, path: tuple[Any, ...], *, key: bool = False) -> Position: ...


_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_URL = re.compile(r"/[A-Za-z0-9._~/-]*")
_URL_SCHEMES = {"http", "https", "git+https", "git+http", "git+ssh", "ssh"}
"""Schemes a requirement's url may use: remote archives and VCS, never ``file:``."""


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid endpoint/component/task/py_environment name, or None."""
    if _NAME.fullmatch(name):
        return None
    return "a name is letters, digits, '_', '.' and '-'"


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a valid endpoint url (or route prefix), or None.

    >>> url_problem("/assistant/v2") is None, url_problem("/a b"), url_problem("/../etc")
    (True, "it may hold only letters, digits and '.', '_', '~', '/', '-'", "it has a '..' segment")
    """
    if not url.startswith("/"):
        return "it must start with '/'"
    if not _URL.fullmatch(url):
        return "it may hold only letters, digits and '.', '_', '~', '/', '-'"
    if ".." in url.split("/"):
        return "it has a '..' segment"
    if url == RESERVED_URL_PREFIX or url.startswith(RESERVED_URL_PREFIX + "/"):
        return f"{RESERVED_URL_PREFIX} belongs to the dev server"
    return None


def requirement_problem(text: str) -> str | None:
    """Why ``text`` is not a requirement peach passes to uv, or None.

    >>> requirement_problem("numpy>=1.24") is None, requirement_problem("-r /etc/passwd")
    (True, 'it is an option line, not a requirement')
    """
    if printable(text) != text:
        return "it holds a line break or another control character"
    stripped = text.strip(" \t")  # PEP 508's whitespace (str.strip would take a no-break space)
    if not stripped:
        return "it is empty"
    if stripped.startswith("-"):
        return "it is an option line, not a requirement"
    if "://" in stripped and not re.search(r"\s", stripped) and "@" not in stripped.split("://")[0]:
        return _url_problem(stripped)  # a bare url: uv names the package from its metadata
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(stripped)
    except InvalidRequirement as error:
        return f"it is not a PEP 508 requirement ({str(error).splitlines()[0]})"
    if requirement.url is not None:
        return _url_problem(requirement.url)
    return None


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "its url cannot be parsed"
    if parts.scheme.lower() == "file" or not parts.scheme:
        return "it names a local path; requirements come from an index or a remote url"
    if parts.scheme.lower() not in _URL_SCHEMES or not parts.netloc:
        return f"its url scheme {parts.scheme!r} is not one of {', '.join(sorted(_URL_SCHEMES))}"
    return None


_NAMED = (
    ("endpoints", "endpoint"),
    ("tasks", "task"),
    ("py_environments", "py_environment"),
)


def project_rules(project: Project) -> list[Diagnostic]:
    """PC120 for each bad requirement string, PC121 for each bad name, at their lines."""
    found: list[Diagnostic] = []
    conf = project.conf

    def bad_name(kind: str, name: str, path: tuple) -> None:
        problem = name_problem(name)
        if problem is not None:
            found.append(
                Diagnostic(
                    "PC121",
                    f"{kind} name {name!r} is not a valid name",
                    project.position(path, key=True),
                    problem,
                )
            )

    for section, kind in _NAMED:
        for name in getattr(conf, section):
            bad_name(kind, name, (section, name))
    for name, endpoint in conf.endpoints.items():
        for component in endpoint.components:
            bad_name("component", component, ("endpoints", name, "components", component))
    for name, env in conf.py_environments.items():
        for index, text in enumerate(env.dependencies):
            problem = requirement_problem(text)
            if problem is not None:
                found.append(
                    Diagnostic(
                        "PC120",
                        f"dependency {text!r} of {name!r} is refused: {problem}",
                        project.position(("py_environments", name, "dependencies", index)),
                        "write a PEP 508 requirement (numpy>=1.24); index options go in "
                        "uv's config or UV_INDEX_URL",
                    )
                )
    return found
