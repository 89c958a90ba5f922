"""The peach.conf model: every key of SPEC §1 with its type, default and rule (pydantic v2).

This is the one conf model: the loader (``peach_cli.project.loader``) validates merged YAML
against it, ``peach schema`` prints its JSON Schema, and the plan is built from it. Models
are strict (no ``"2"`` for ``2``) and forbid unknown keys; checks that need the notebooks'
code live in ``peach_cli.checks.validate``, not here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from peach_cli.internal import INTERNAL_PREFIX
from peach_cli.runtime.plan import DEFAULT_MEDIA_TYPE, DEFAULT_TASK_TIMEOUT_S, DEFAULT_TIMEOUT_S

BASE_ENV = "base"
RESERVED_URL_PREFIX = INTERNAL_PREFIX

_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T|k)?\s*$")
_UNITS = {
    None: 1,
    "K": 10**3,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
MEMORY_PATTERN = r"^\s*\d+(\.\d+)?\s*(Ki|Mi|Gi|Ti|K|M|G|T|k)?\s*$"


def memory_bytes(value: str | int | None) -> int | None:
    """``"512Mi"`` → 536870912, ``"2G"`` → 2000000000, ``1024`` → 1024, ``None`` → None.

    >>> memory_bytes("2Gi")
    2147483648
    """
    if value is None:
        return None
    if isinstance(value, int):
        return value
    match = _MEMORY.match(value)
    if match is None:
        raise ValueError(f"invalid memory {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _check_memory(value: Any) -> Any:
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("memory must be a size like 512Mi or 2Gi, or a number of bytes")
    if isinstance(value, int):
        if value < 1:
            raise ValueError("memory must be at least 1 byte")
        return value
    if _MEMORY.match(value) is None:
        raise ValueError(f"memory {value!r} is not a size like 512Mi, 2Gi or a number of bytes")
    if memory_bytes(value) == 0:
        raise ValueError("memory must be at least 1 byte")
    return value


Memory = Annotated[
    str | int | None,
    BeforeValidator(_check_memory),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": MEMORY_PATTERN},
                {"type": "integer", "minimum": 1},
                {"type": "null"},
            ],
            "description": "Per-replica memory request: 512Mi, 2Gi, or bytes.",
        }
    ),
]

Codops = Annotated[str, Field(pattern=r"^[a-z0-9_-]+$", description="The organisation id.")]
Url = Annotated[
    str, Field(pattern=r"^/", description='The endpoint\'s url; starts with "/", unique.')
]


VARIABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""An environment variable's name (``peach validate`` says so with PC118, not the model)."""
EnvVars = Annotated[
    dict[str, str],
    Field(
        description="Environment variables of the replicas and tasks (name: value; merged "
        "with the top level's). Never a secret: name those under secrets.",
        json_schema_extra={"propertyNames": {"pattern": VARIABLE_PATTERN}},
    ),
]
Secrets = Annotated[
    list[str],
    Field(
        description="Names of secrets the replicas and tasks read from the environment: their "
        "values come from peach's environment, else the project's .env, never from the conf.",
        json_schema_extra={"items": {"type": "string", "pattern": VARIABLE_PATTERN}},
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class PyEnvironment(_Strict):
    """A Python environment; every env inherits ``base``'s dependencies."""

    dependencies: list[str] = Field(default_factory=list, description="pip requirements.")


class Component(_Strict):
    """One component of an endpoint: the notebook function that serves it."""

    notebook: str = Field(description="Notebook path, relative to the project folder.")
    method: str = Field(description="The function run on every request.")
    init: str | None = Field(None, description="Runs once per replica when it starts.")
    full_notebook: bool = Field(
        False, description="Run every code cell, not only the defining ones."
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Default request parameters.")
    replicas: int = Field(1, ge=1, description="Number of replicas.")
    memory: Memory = None
    cpus: float = Field(1.0, gt=0, description="CPUs reserved per replica on Ray.")
    media_type: str = Field(DEFAULT_MEDIA_TYPE, description="Content type of streams.")
    env_vars: EnvVars = Field(default_factory=dict)
    secrets: Secrets = Field(default_factory=list)


Percent = Annotated[int, Field(ge=0, le=100, description="A whole percentage, 0 to 100.")]


class ABTest(_Strict):
    """An A/B test between an endpoint's components (SPEC §2 "A/B")."""

    by: Literal["user", "client", "session"] = Field(
        description="Who is split: read from user_id, client_id or session_id."
    )
    split: dict[str, Percent] = Field(
        min_length=1,
        description="Percent of requests per non-fallback component, in bucket order; sums to 100.",
    )
    # That they sum to 100 is checked with the split's names (``peach_cli.checks.ab``), so
    # one run reports a wrong sum and a wrong arm together.


class Endpoint(_Strict):
    """An endpoint: a url and its components (``main`` and an optional ``fallback``)."""

    url: Url
    py_env: str = Field(BASE_ENV, description="A declared py_environment, or base.")
    components: dict[str, Component] = Field(
        min_length=1,
        description="The components: main (or the only one), and an optional fallback.",
    )
    ab: ABTest | None = Field(
        None, description="Split requests between components by user, client or session."
    )


class Task(_Strict):
    """A notebook function run by ``peach task run`` and by the loop of ``peach dev --tasks``."""

    notebook: str = Field(description="Notebook path, relative to the project folder.")
    method: str = Field(description="The function the task runs.")
    init: str | None = Field(None, description="Runs once before the method.")
    py_env: str = Field(BASE_ENV, description="A declared py_environment, or base.")
    full_notebook: bool = Field(
        False, description="Run every code cell, not only the defining ones."
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Default parameters.")
    timeout_s: float = Field(
        DEFAULT_TASK_TIMEOUT_S,
        gt=0,
        description="Bound on one run, in seconds; past it the task's processes are killed.",
    )
    env_vars: EnvVars = Field(default_factory=dict)
    secrets: Secrets = Field(default_factory=list)


class PeachConf(_Strict):
    """A whole project's configuration, after merging peach.yaml and peach.conf/*.yaml."""

    codops: Codops
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0, description="Bound on non-streaming calls, in seconds."
    )
    py_environments: dict[str, PyEnvironment] = Field(
        default_factory=dict, description="Python environments; base is inherited by all."
    )
    endpoints: dict[str, Endpoint] = Field(default_factory=dict, description="Endpoints by name.")
    decorator_endpoints: list[str] = Field(
        default_factory=list, description="Notebooks whose @endpoint functions are endpoints."
    )
    tasks: dict[str, Task] = Field(
        default_factory=dict, description="Notebook functions run by peach task."
    )
    env_vars: EnvVars = Field(default_factory=dict)
    secrets: Secrets = Field(default_factory=list)

    def variables(
        self, env_vars: dict[str, str], secrets: list[str]
    ) -> tuple[dict[str, str], tuple[str, ...]]:
        """What a component or task with these ``env_vars`` and ``secrets`` gets: the top
        level's merged with its own (its own value wins), secrets without repeats."""
        return {**self.env_vars, **env_vars}, tuple(dict.fromkeys([*self.secrets, *secrets]))

    def environment(self, name: str) -> tuple[str, ...]:
        """The full dependency list of a py_env: ``base``'s, then its own (no repeats)."""
        base = self.py_environments.get(BASE_ENV)
        deps = list(base.dependencies) if base else []
        env = self.py_environments.get(name)
        if env is not None and name != BASE_ENV:
            deps += [d for d in env.dependencies if d not in deps]
        return tuple(deps)


@contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    previous = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = previous


# Building a validator makes pydantic scan every installed distribution for plugins (about
# 50 ms with ray installed, a sixth of `peach validate`). These models use none, so they are
# built here with plugins off, as typer does for its own adapters.
with _without_pydantic_plugins():
    for _model in (PyEnvironment, Component, ABTest, Endpoint, Task, PeachConf):
        _model.model_rebuild(force=True)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one peach.conf file (for yaml-language-server and editors).

    An editor checks each file on its own, while a project's files are merged: codops is
    required once per project (``peach validate`` says so), not in every file of
    ``peach.conf/``, so the schema requires no top-level key.
    """
    schema = PeachConf.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "peach.conf",
        **{k: v for k, v in schema.items() if k not in ("title", "required")},
        "description": "One file of a peach project (peach.yaml or peach.conf/*.yaml); "
        "the files are merged, and codops is required once per project.",
    }
