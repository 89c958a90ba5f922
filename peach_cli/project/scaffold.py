"""`peach init`'s new project: the files it starts with, and writing them without clobbering.

The project validates clean and serves at once: ``peach.yaml`` (naming ``peach.schema.json``
for yaml-language-server), a notebook (nbformat 4.5, with cell ids) holding an ``init`` +
method endpoint and its fallback, with ``streaming`` an async-generator endpoint too, a
``.gitignore`` and a README with the next commands.

Example::

    created = create_project(Path("shop"), streaming=True)
    created.codops      # "shop"
    created.files       # ("peach.yaml", "peach.schema.json", "notebooks/Endpoints.ipynb", ...)
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from peach_cli.errors import PeachError, UsageError
from peach_cli.project.filenames import CASE_SUFFIX, CONF_FILES, CONF_FOLDER

CODOPS_PATTERN = re.compile(r"^[a-z0-9_-]+$")
NOTEBOOK = "notebooks/Endpoints.ipynb"
SCHEMA_FILE = "peach.schema.json"
CONF = CONF_FILES[0]
"""The conf file ``peach init`` writes."""
OTHER_CONFS = (*CONF_FILES[1:], CONF_FOLDER)
"""Conf files ``peach init`` does not write but would merge with (so never overwrites)."""


@dataclass(frozen=True)
class StarterEndpoint:
    """An endpoint of the new project, and the command that calls it."""

    name: str
    url: str
    ask: str
    """The `peach ask` command line that calls it (``peach ask /greet name=Ada``)."""


@dataclass(frozen=True)
class CreatedProject:
    """What ``create_project`` wrote."""

    root: Path
    codops: str
    files: tuple[str, ...]
    """Project-relative posix paths, in the order written."""
    overwritten: tuple[str, ...]
    """Those of ``files`` that existed before (``force``)."""
    endpoints: tuple[StarterEndpoint, ...]


GREET = StarterEndpoint("greet", "/greet", "peach ask /greet name=Ada lang=fr")
STORY = StarterEndpoint("story", "/story", "peach ask /story --stream")


def valid_codops(text: str) -> str:
    """``text`` made into a codops (``[a-z0-9_-]+``), or ``""`` when nothing is left.

    >>> valid_codops("My Shop (2024)"), valid_codops("Café.Crème"), valid_codops("日本")
    ('my-shop-2024', 'cafe-creme', '')
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9_-]+", "-", ascii_text.lower()).strip("-_")


def choose_codops(folder: Path, given: str | None) -> str:
    """``--codops`` when valid, else the folder's name made valid; ``UsageError`` otherwise."""
    if given is not None:
        if CODOPS_PATTERN.match(given):
            return given
        suggestion = valid_codops(given)
        raise UsageError(
            f"--codops {given!r} is not a valid codops: use lowercase letters, digits, '_' and '-'",
            hint=f"for example --codops {suggestion}" if suggestion else None,
        )
    name = folder.resolve().name
    codops = valid_codops(name)
    if not codops:
        raise UsageError(
            f"cannot make a codops from the folder name {name!r}: a codops is lowercase "
            "letters, digits, '_' and '-'",
            hint="pass one with --codops NAME",
        )
    return codops


def create_project(
    folder: Path, *, codops: str | None = None, streaming: bool = False, force: bool = False
) -> CreatedProject:
    """Write a new project into ``folder`` (created when missing).

    Raises ``UsageError`` for a bad codops or a folder that is a file, and ``PeachError``
    when a file it would write exists (unless ``force``) or another conf file is there.
    """
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} exists and is not a folder")
    name = choose_codops(folder, codops)
    endpoints = (GREET, STORY) if streaming else (GREET,)
    files = project_files(name, endpoints)
    others = [other for other in OTHER_CONFS if (folder / other).exists()]
    if others:
        raise PeachError(
            f"{folder} already holds a peach project ({', '.join(others)}); "
            "peach init writes peach.yaml, which would merge with it",
            hint="run peach init in another folder",
        )
    existing = tuple(relative for relative in files if (folder / relative).exists())
    if existing and not force:
        raise PeachError(
            f"{folder} already has {', '.join(existing)}: nothing was written",
            hint="use --force to overwrite these files (other files are left alone)",
        )
    folders = [relative for relative in existing if (folder / relative).is_dir()]
    if folders:
        raise PeachError(f"{folder / folders[0]} is a folder; peach init writes a file there")
    for relative, content in files.items():
        path = folder / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        except OSError as error:
            raise PeachError(f"cannot write {path}: {error.strerror or error}") from None
    return CreatedProject(folder, name, tuple(files), existing, endpoints)


def project_files(codops: str, endpoints: tuple[StarterEndpoint, ...]) -> dict[str, str]:
    """Every file of the new project: relative path → text."""
    from peach_cli.project.conf import json_schema

    schema = json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"  # as `peach schema`
    return {
        CONF: conf_text(codops, endpoints),
        SCHEMA_FILE: schema,
        NOTEBOOK: notebook_text(codops, endpoints),
        ".gitignore": GITIGNORE,
        "README.md": readme_text(codops, endpoints),
        CASES: cases_text(endpoints),
    }


CASES = f"tests/greet{CASE_SUFFIX}"

_GREET_CASES = """\
# Endpoint tests: `peach test` runs them against the project's simulator (or --url HOST).
# Each case is a request and what its answer must be (`peach schema --tests` lists the keys).
- name: greets in French
  url: /greet
  params: {name: Ada, lang: fr}
  expect:
    component: main
    result: {greeting: "Bonjour, Ada!", lang: fr}

- name: falls back to English for an unknown language
  url: /greet
  params: {name: Ada, lang: xx}
  expect:
    component: fallback
    result_contains: {lang: en}
"""

_STORY_CASES = """
- name: tells a story as a stream
  url: /story
  stream: true
  params: {topic: a fig, delay_s: 0}
  expect:
    text_contains: Once upon a time there was a fig.
    chunks_min: 3
    cut: false
"""


def cases_text(endpoints: tuple[StarterEndpoint, ...]) -> str:
    return _GREET_CASES + (_STORY_CASES if STORY in endpoints else "")


def _yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar that reads back as that string (``"123"``, ``"true"``)."""
    import yaml

    return text if yaml.safe_load(text) == text else json.dumps(text)


def conf_text(codops: str, endpoints: tuple[StarterEndpoint, ...]) -> str:
    text = f"""\
# yaml-language-server: $schema=./{SCHEMA_FILE}
# `peach validate` checks this file and the notebook; `peach dev` serves every endpoint.
codops: {_yaml_scalar(codops)}
timeout_s: 30                      # bound on non-streaming calls, in seconds

endpoints:
  greet:
    url: /greet
    components:
      main:
        notebook: {NOTEBOOK}
        init: load_greetings       # runs once per replica; its result reaches `model`
        method: greet              # runs on every request
        args: {{name: world}}        # defaults for parameters a request does not send
      fallback:                    # answers when main raises, times out or returns nothing
        notebook: {NOTEBOOK}
        method: greet_in_english
"""
    if STORY in endpoints:
        text += f"""
  story:
    url: /story
    components:
      main:
        notebook: {NOTEBOOK}
        method: tell_story         # an async generator: callers send stream=true
"""
    return text


_INTRO = """\
# {codops} endpoints

Each function below is named by `peach.yaml`. Only the cell that defines a component's \
`method` (and the one defining its `init`) is served, so every cell carries its own imports.

Serve them with `peach dev` in the project folder, then call one: `{ask}`."""

_LOAD = '''\
def load_greetings():
    """Runs once per replica when it starts: load files, models or clients here."""
    return {"en": "Hello", "fr": "Bonjour", "de": "Hallo", "es": "Hola"}'''

_GREET = '''\
def greet(model, name: str = "world", lang: str = "en"):
    """Runs on every request; `model` is what load_greetings returned."""
    greeting = model.get(lang)
    if greeting is None:
        return None  # nothing to answer: the fallback answers instead
    return {"greeting": f"{greeting}, {name}!", "lang": lang}'''

_FALLBACK = '''\
def greet_in_english(name: str = "world"):
    """The fallback: answers when greet raises, times out or returns nothing."""
    return {"greeting": f"Hello, {name}!", "lang": "en"}'''

_STREAMING = """\
A streaming method is an async generator: callers send `stream=true` \
(`peach ask /story --stream`), and each chunk reaches them as soon as it is yielded."""

_STORY = '''\
import asyncio


async def tell_story(topic: str = "a peach", delay_s: float = 0.05):
    """Streams a short story, one word per chunk."""
    story = f"Once upon a time there was {topic}. It grew in the sun, and everyone came to see it."
    for word in story.split():
        yield word + " "
        await asyncio.sleep(delay_s)'''

_TRY = """\
# Try it by hand in Jupyter: peach never runs this cell.
greet(load_greetings(), "Ada", "fr")"""


def _cell(cell_id: str, kind: str, text: str) -> dict[str, object]:
    cell: dict[str, object] = {
        "cell_type": kind,
        "id": cell_id,
        "metadata": {},
        "source": text.splitlines(keepends=True),
    }
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook_text(codops: str, endpoints: tuple[StarterEndpoint, ...]) -> str:
    """An nbformat 4.5 notebook (cell ids included), as Jupyter saves it."""
    cells = [
        _cell("intro", "markdown", _INTRO.format(codops=codops, ask=GREET.ask)),
        _cell("load-greetings", "code", _LOAD),
        _cell("greet", "code", _GREET),
        _cell("greet-in-english", "code", _FALLBACK),
    ]
    if STORY in endpoints:
        cells += [_cell("streaming", "markdown", _STREAMING), _cell("tell-story", "code", _STORY)]
    cells.append(_cell("try-it", "code", _TRY))
    document = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


GITIGNORE = """\
# Jupyter checkpoints, Python and tool caches, secrets, local environments
.ipynb_checkpoints/
__pycache__/
*.py[cod]
.pytest_cache/
.mypy_cache/
.ruff_cache/
.env
.env.*
!.env.example
.venv/
"""


def readme_text(codops: str, endpoints: tuple[StarterEndpoint, ...]) -> str:
    asks = "\n".join(
        f"{endpoint.ask:<38} # call {endpoint.url} (in another terminal)" for endpoint in endpoints
    )
    return f"""\
# {codops}

A PEACH project: the endpoints are configured in `peach.yaml`, their code is in
`{NOTEBOOK}`.

```bash
peach validate                         # check the conf and the notebook, without running them
peach dev                              # serve every endpoint on http://127.0.0.1:8000, reloading on save
{asks}
peach test                             # run the cases of tests/*.peach-test.yaml on a fresh simulator
```

`{CASES}` holds endpoint tests: each case a request and what its answer must
be. `peach test` starts the project's simulator, runs them and stops it (`--url HOST` runs
them against a running `peach dev` or a deployed app; `--format junit` for CI).

`peach.schema.json` is the output of `peach schema`: editors running yaml-language-server
use it to complete and check `peach.yaml` (run `peach schema > peach.schema.json` again
after upgrading peach). `peach doctor` checks this machine, the project and a cluster;
`peach deploy --address http://HOST:8265` puts the project on a Ray Serve cluster.

Replicas see only the environment variables the conf gives them: `env_vars: {{NAME: value}}`
for settings, and `secrets: [OPENAI_API_KEY]` for credentials, whose values come from your
shell or from `.env` in this folder (`OPENAI_API_KEY=...`; git ignores it, `peach deploy`
never uploads it). Both go at the top level, on a component or on a task.
"""
