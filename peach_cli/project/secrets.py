"""Secret values (SPEC §10): read from peach's environment, else the project's ``.env``.

The conf names secrets, never their values. ``secret_values`` finds each value when a
replica, a task or a deployment needs it; a name found nowhere is ``MissingSecret``, whose
message is the one users see on every host. Masking them in what peach prints is the output
boundary's job (``peach_cli.boundary.hide``).

    values = secret_values(root, ("OPENAI_API_KEY",))     # raises MissingSecret
    environment = variables_of(spec, root)                # env_vars + secrets of a component
    hide(values.values())                                 # peach_cli.boundary
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from peach_cli.errors import PeachError

DOTENV = ".env"


class MissingSecret(PeachError):
    """A secret named by the conf is neither in peach's environment nor in ``.env``."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        super().__init__(missing_message(self.names))


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
    variables); empty when there is no such file or it cannot be read."""
    path = Path(root) / DOTENV
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path, interpolate=False, encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return {k: v for k, v in values.items() if v is not None}


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
    digest = hashlib.sha256()
    for name in sorted(values):
        digest.update(f"{name}\0{values[name]}\0".encode())
    return digest.hexdigest()[:16]


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


def known_values(root: Path, names: Iterable[str]) -> list[str]:
    """The values of ``names`` that are set (peach's environment, else ``.env``); the
    missing ones are left out (a command that only shows output masks what it can)."""
    names = list(names)
    try:
        return list(secret_values(root, names).values())
    except MissingSecret as error:
        found = [name for name in names if name not in error.names]
        return list(secret_values(root, found).values()) if found else []


def hide_declared(root: Path, conf: object | None = None) -> None:
    """Mask, in everything this process shows from now on, the values of the secrets the
    project declares (``conf``, or the conf read from ``root``; those set nowhere and a
    conf that cannot be read are skipped: this only ever hides more)."""
    from peach_cli.boundary import hide

    if conf is None:
        from peach_cli.project.loader import load_project

        try:
            loaded, _ = load_project(root)
        except PeachError:
            return
        if loaded is None:
            return
        conf = loaded.conf
    hide(known_values(root, declared_names(conf)))
