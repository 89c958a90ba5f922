"""Checks for building environments: the package index uv uses, and the env cache.

Example::

    check_index({"base": ("orjson",)})          # a HEAD to the index, 3 s at most
    check_index({"base": ()}, offline=True)     # what `peach dev --offline` would find
    check_cache()                               # the cache folder: writable, its size
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from peach_cli.doctor import Check

DEFAULT_INDEX = "https://pypi.org/simple/"
INDEX_ENV_VARS = ("UV_DEFAULT_INDEX", "UV_INDEX_URL")
"""Where uv reads its index from the environment (the newer name first)."""
INDEX_TIMEOUT_S = 3.0


def index_url() -> tuple[str, str]:
    """The index uv will use, and where that came from (a variable, or uv's default)."""
    for name in INDEX_ENV_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            return value, name
    return DEFAULT_INDEX, "uv's default"


def cached_envs(environments: dict[str, tuple[str, ...]]) -> dict[str, bool]:
    """For each env, whether `peach dev --offline` could use it from the cache.

    ``True``: it is built (or needs nothing from the index); ``False``: it is not built.
    The env builder answers without resolving or touching the network (``find_built``).
    """
    from peach_cli.envs import EnvSpec, find_built

    return {
        name: not requirements or find_built(EnvSpec(name, requirements)) is not None
        for name, requirements in environments.items()
    }


def offline_ready(environments: dict[str, tuple[str, ...]]) -> str:
    """What ``--offline`` has when nothing is missing: envs built in the cache, and envs
    that need no package at all (those are never "built in the cache").

    >>> offline_ready({"base": ()})
    '--offline ready: py_env base needs no package, so nothing is fetched'
    >>> offline_ready({"base": (), "llm": ("numpy",)})
    '--offline ready: py_env llm is built in the cache; base needs no package'
    """
    built = sorted(name for name, requirements in environments.items() if requirements)
    empty = sorted(name for name, requirements in environments.items() if not requirements)
    if not built:
        names = ", ".join(empty)
        return (
            f"--offline ready: py_env {names} need no package, so nothing is fetched"
            if len(empty) > 1
            else f"--offline ready: py_env {names} needs no package, so nothing is fetched"
        )
    verb = "is" if len(built) == 1 else "are"
    text = f"--offline ready: py_env {', '.join(built)} {verb} built in the cache"
    if empty:
        text += f"; {', '.join(empty)} {'needs' if len(empty) == 1 else 'need'} no package"
    return text


def reach_index() -> _Answer:
    """``HEAD`` the index uv would use (bounded by ``INDEX_TIMEOUT_S``), for ``check_index``:
    started by ``run_checks`` before anything else, as it waits on the network."""
    return _head(index_url()[0])


def check_index(
    environments: dict[str, tuple[str, ...]] | None,
    *,
    offline: bool = False,
    reached: _Answer | None = None,
) -> Check:
    """The package index reachable, or (``offline``, or when it is not) what the cache holds.

    ``environments`` maps each py_env the project uses to its requirements (``None``: no
    project to check).
    """
    from peach_cli.deploy.dashboard import shown_address

    url, source = index_url()
    shown = shown_address(url)
    readiness = cached_envs(environments or {})
    missing = sorted(name for name, ready in readiness.items() if not ready)
    ready = environments is not None and not missing
    details: dict[str, object] = {
        "index": shown,
        "source": source,
        "offline": offline,
        "envs": dict(sorted(readiness.items())),
    }
    if offline:
        cache = _cache_contents()
        details["cache"] = cache
        if environments is None:
            return Check(
                "index",
                "skip",
                "--offline: no project, so no env to look for in the cache",
                advice="run peach doctor in a project folder (or give PROJECT)",
                details=details,
            )
        if ready:
            return Check("index", "ok", offline_ready(environments), details=details)
        return Check(
            "index",
            "fail",
            f"--offline: {'env' if len(missing) == 1 else 'envs'} {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not built in the cache",
            advice="build them once while online: peach env build",
            details=details,
        )
    if reached is None:
        reached = _head(url)
    details.update(status_code=reached.status_code, elapsed_ms=reached.elapsed_ms)
    if reached.status_code is not None and reached.status_code < 400:
        return Check(
            "index",
            "ok",
            f"package index {shown} answered in {reached.elapsed_ms:.0f} ms ({source})",
            details=details,
        )
    problem = reached.error or f"answered HTTP {reached.status_code}"
    details["error"] = problem
    advice = (
        "the index wants credentials: put them in the URL or in uv's configuration"
        if reached.status_code in (401, 403)
        else f"check the network, or the index URL ({' / '.join(INDEX_ENV_VARS)})"
    )
    if ready:
        return Check(
            "index",
            "warn",
            f"package index {shown} {problem}; the project's envs need no package from it",
            advice=advice,
            details=details,
        )
    if environments:
        cache = _cache_contents()
        details["cache"] = cache
        advice += (
            f"; or, if its envs were built before, peach dev --offline (cache: {_describe(cache)})"
        )
    return Check(
        "index", "fail", f"package index {shown} {problem}", advice=advice, details=details
    )


@dataclass(frozen=True)
class _Answer:
    status_code: int | None = None
    elapsed_ms: float | None = None
    error: str | None = None


def _head(url: str) -> _Answer:
    """``HEAD url`` with a short timeout: the status and time, or why it failed."""
    import httpx

    started = time.monotonic()
    try:
        response = httpx.head(url, timeout=INDEX_TIMEOUT_S, follow_redirects=False)
    except httpx.TimeoutException:
        return _Answer(error=f"did not answer in {INDEX_TIMEOUT_S:g} s")
    except (httpx.HTTPError, ValueError) as error:
        reason = str(error).strip() or type(error).__name__
        return _Answer(error=f"is unreachable: {reason}")
    elapsed_ms = round((time.monotonic() - started) * 1000, 1)
    return _Answer(response.status_code, elapsed_ms)


def check_cache() -> Check:
    """The env cache folder: writable (or creatable) and how much it holds."""
    from peach_cli.envs.paths import CACHE_ENV_VAR, cache_root

    root = cache_root()
    details: dict[str, object] = {"path": str(root), "override": CACHE_ENV_VAR in os.environ}
    advice = f"point {CACHE_ENV_VAR} at a folder you can write to"
    if root.exists() and not root.is_dir():
        return Check("cache", "fail", f"env cache {root} is not a folder", advice, details)
    if not root.exists():
        parent = _existing_parent(root)
        if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            return Check(
                "cache",
                "fail",
                f"env cache {root} cannot be created ({parent} is not a writable folder)",
                advice,
                details,
            )
        return Check(
            "cache",
            "ok",
            f"env cache {root} does not exist yet; it will be created (empty)",
            details={**details, "exists": False, "bytes": 0, "entries": 0},
        )
    if not os.access(root, os.W_OK | os.X_OK):
        return Check("cache", "fail", f"env cache {root} is not writable", advice, details)
    contents = _cache_contents(root)
    details.update(exists=True, **contents)
    return Check("cache", "ok", f"env cache {root}: writable, {_describe(contents)}", None, details)


def _existing_parent(path: Path) -> Path | None:
    for parent in path.parents:
        if parent.exists():
            return parent
    return None


def _cache_contents(root: Path | None = None) -> dict[str, int]:
    """How many entries the cache holds (uv's own package cache aside) and their bytes."""
    from peach_cli.envs.paths import cache_root, uv_cache_dir
    from peach_cli.envs.store import directory_size

    root = root or cache_root()
    uv_cache = uv_cache_dir()
    try:
        entries = [entry for entry in root.iterdir() if entry != uv_cache]
    except OSError:
        return {"entries": 0, "bytes": 0}
    return {"entries": len(entries), "bytes": directory_size(root)}


def _describe(contents: dict[str, int]) -> str:
    """``3 entries, 120.4 MiB`` (``empty`` when nothing is there)."""
    from peach_cli.wording import human_size

    if not contents.get("entries") and not contents.get("bytes"):
        return "empty"
    entries = contents.get("entries", 0)
    return f"{entries} entr{'y' if entries == 1 else 'ies'}, {human_size(contents.get('bytes', 0))}"
