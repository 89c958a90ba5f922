"""Secret values (SPEC §10): read from peach's environment, else the project's ``.env``.

The conf names secrets, never their values. ``secret_values`` finds each value when a
replica, a task or a deployment needs it; a name found nowhere is ``MissingSecret``, whose
message is the one users see on every host. Masking them in what peach prints is the output
boundary's job: each run's ``peach_cli.boundary.Secrets`` is told the values it learns.

    values = secret_values(root, ("OPENAI_API_KEY",))     # raises MissingSecret
    environment = variables_of(spec, root)                # env_vars + secrets of a component
    secrets.hide(values.values())                         # the run's Secrets
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from peach_cli.errors import PeachError
from peach_cli.project.filenames import DOTENV

if TYPE_CHECKING:
    from peach_cli.boundary import Secrets

MAX_DOTENV_BYTES = 1024 * 1024
"""A larger ``.env`` is refused unread (a variables file is a few lines)."""
NOT_READ = ": no secret is read from .env until it is fixed"


class MissingSecret(PeachError):
    """A secret named by the conf is neither in peach's environment nor in ``.env``."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        super().__init__(missing_message(self.names))


class DotenvError(PeachError):
    """The project's ``.env`` cannot be read: too large, not UTF-8, or a malformed line."""


def missing_message(names: Iterable[str]) -> str:
    """``secret OPENAI_API_KEY is not set: export it or add it to .env``.

    >>> missing_message(["A", "B"])
    'secrets A, B are not set: export them or add them to .env'
    """
    names = list(names)
    if len(names) == 1:
        return f"secret {names[0]} is not set: export it or add it to .env"
    return f"secrets {', '.join(names)} are not set: export them or add them to .env"


def read_dotenv(root: Path) -> dict[str, str]:
    """The variables of ``root/.env`` (dotenv syntax, no interpolation of the shell's
    variables); empty when there is no such file.

    Raises ``DotenvError`` for a ``.env`` over ``MAX_DOTENV_BYTES`` (before reading it),
    one that is not UTF-8 text or has a line dotenv cannot read, naming ``.env:LINE``
    (never the line: it may hold a secret).
    """
    import io
    import stat

    from dotenv.parser import parse_stream

    path = Path(root) / DOTENV
    try:
        info = path.stat()
    except OSError:
        return {}
    if not stat.S_ISREG(info.st_mode):
        return {}
    if info.st_size > MAX_DOTENV_BYTES:
        raise DotenvError(
            f"{path} is {info.st_size / 1024 / 1024:.1f} MiB, over the 1 MiB a .env may hold:"
            " not read"
        )
    try:
        with path.open("rb") as file:
            data = file.read(MAX_DOTENV_BYTES + 1)
    except OSError as error:
        raise DotenvError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DotenvError(f"{path}:{line}: not UTF-8 text{NOT_READ}") from None
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            chunk = binding.original.string
            line = binding.original.line + chunk[: len(chunk) - len(chunk.lstrip())].count("\n")
            raise DotenvError(f"{path}:{line}: not a NAME=value line (dotenv syntax){NOT_READ}")
        if binding.key is not None and binding.value is not None:
            values[binding.key] = binding.value
    return values


def secret_values(
    root: Path, names: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Each secret's value: from ``environ`` (peach's environment), else ``.env``.

    Raises ``MissingSecret`` naming every secret found in neither.
    """
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    environ = os.environ if environ is None else environ
    dotenv: dict[str, str] | None = None
    values: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        if name in environ:
            values[name] = environ[name]
            continue
        if dotenv is None:
            dotenv = read_dotenv(root)
        if name in dotenv:
            values[name] = dotenv[name]
        else:
            missing.append(name)
    if missing:
        raise MissingSecret(missing)
    return values


def missing_secrets(
    root: Path, names: Iterable[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """The secrets of ``names`` that are set nowhere (for ``peach doctor``)."""
    try:
        secret_values(root, names, environ)
    except MissingSecret as error:
        return list(error.names)
    return []


class _HasVariables(Protocol):
    @property
    def env_vars(self) -> dict[str, str]: ...

    @property
    def secrets(self) -> tuple[str, ...]: ...


def variables_of(spec: _HasVariables, root: Path) -> dict[str, str]:
    """The variables a component or task gets besides the minimal environment: its
    env_vars and its secrets' values. Raises ``MissingSecret``."""
    return {**spec.env_vars, **secret_values(root, spec.secrets)}


def values_digest(spec: _HasVariables, root: Path) -> str:
    """A short digest of the values a component's replicas get (so that a changed secret
    restarts exactly the components that read it); a missing secret counts as a value."""
    try:
        values = variables_of(spec, root)
    except MissingSecret as error:
        values = {**spec.env_vars, **{name: "\0missing" for name in error.names}}
    except DotenvError as error:
        values = {**spec.env_vars, **{name: f"\0{error.message}" for name in spec.secrets}}
    digest = hashlib.sha256()
    for name in sorted(values):
        digest.update(f"{name}\0{values[name]}\0".encode())
    return digest.hexdigest()[:16]


def secret_digests(root: Path, names: Iterable[str]) -> dict[str, str]:
    """Secret name -> a digest of its value (``<missing>`` when it is set nowhere; a
    ``.env`` that cannot be read counts as empty: the components reading it restart, and
    fail saying why)."""
    names = set(names)
    try:
        dotenv = read_dotenv(root) if names - set(os.environ) else {}
    except DotenvError:
        dotenv = {}
    found = {}
    for name in sorted(names):
        value = os.environ.get(name, dotenv.get(name))
        found[name] = "<missing>" if value is None else hashlib.sha256(value.encode()).hexdigest()
    return found


def declared_names(conf: object) -> list[str]:
    """Every secret name a conf (or a plan) declares: the top level's, each component's,
    each task's."""
    names: list[str] = list(getattr(conf, "secrets", ()))
    for endpoint in (getattr(conf, "endpoints", None) or {}).values():
        for component in endpoint.components.values():
            names += component.secrets
    for task in (getattr(conf, "tasks", None) or {}).values():
        names += task.secrets
    return list(dict.fromkeys(names))


def known_values(root: Path, names: Iterable[str], *, need_dotenv: bool = False) -> list[str]:
    """The values of ``names`` that are set (peach's environment, else ``.env``); the
    missing ones are left out (a command that only shows output masks what it can).
    ``need_dotenv``: a ``.env`` that a name must come from and that cannot be read is
    ``DotenvError`` (naming ``.env:LINE``), else only the environment's values are given."""
    names = list(dict.fromkeys(names))
    try:  # read once, and only when a name is not in the environment
        dotenv = read_dotenv(root) if any(name not in os.environ for name in names) else {}
    except DotenvError:  # said where .env is needed; here only the environment's values
        if need_dotenv:
            raise
        dotenv = {}
    found = {**dotenv, **os.environ}
    return [found[name] for name in names if name in found]


def hide_declared(
    root: Path, conf: object, secrets: Secrets, *, check_dotenv: bool = False
) -> None:
    """Mask, in everything the run of ``secrets`` shows from now on, the values of the
    secrets ``conf`` (a conf or a plan of the project at ``root``) declares; those set
    nowhere are skipped. ``check_dotenv`` (a command that runs the project's code): a
    ``.env`` that a secret is to come from and that cannot be read stops the command here
    (``DotenvError``, naming ``.env:LINE``) instead of failing every replica and task that
    reads a secret. ``.env`` is read once."""
    values = known_values(root, declared_names(conf), need_dotenv=check_dotenv)
    secrets.hide(values)


def hide_declared_read(root: Path, read: tuple[Any, Any] | None, secrets: Secrets) -> None:
    """``hide_declared`` with the conf ``read_project`` read at ``root`` (as far as it was
    read: a conf with errors declares what it could be read to declare; none, nothing)."""
    loaded = read[0] if read is not None else None
    if loaded is not None:
        hide_declared(root, loaded.conf, secrets)
