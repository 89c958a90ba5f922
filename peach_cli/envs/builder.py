"""Building an env: resolve once, install into a temporary folder, rename it into place.

    env = ensure_env(EnvSpec("llm", ("six", "idna")), progress=print)
    env.python          # <cache>/env-3f2a…/bin/python: start replicas with it

1. **Resolve** (``uv pip compile``) the requested set for this Python and platform, once:
   the pinned result is cached under ``resolved/<request key>.json`` and reused by every
   later run, so an unchanged conf never touches the registry again.
2. The env's **key** is a hash of the pinned set, the Python version and the platform
   (``env-<key>``): two projects needing the same packages share one env.
3. **Build** under a lock file for that key: ``uv venv`` (the interpreter running peach,
   without its site-packages) and ``uv pip sync`` of the pinned set into ``tmp/``, then one
   ``rename`` into place — a half-built env is never seen under its final name.

Every step reports a ``BuildProgress`` (resolving, downloading, installing, done, with
elapsed seconds) read from what uv prints. Failures raise ``EnvBuildError`` with uv's
reason, naming the env and the requirement. Each use stamps the env (``last-used``) so
that ``peach env prune`` knows what is stale.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from peach_cli import wording
from peach_cli.envs.lock import EnvLock, LockTimeout
from peach_cli.envs.paths import cache_root
from peach_cli.envs.scratch import scratch
from peach_cli.envs.spec import EnvSpec, interpreter_tag, normalize_name, requirement_name
from peach_cli.errors import EnvBuildError

Phase = Literal["waiting", "resolving", "downloading", "installing", "done"]
MARKER = "peach-env.json"
LAST_USED = "peach-last-used"
_COUNT = re.compile(r"^(Resolved|Prepared|Installed|Audited) (\d+) packages?")


@dataclass(frozen=True)
class BuildProgress:
    """One step of a build, for the dev view and the CLI."""

    env: str
    phase: Phase
    elapsed_s: float
    detail: str = ""

    def __str__(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"py_env {self.env} {self.phase}{detail} ({self.elapsed_s:.1f} s)"


ProgressCallback = Callable[[BuildProgress], None]


@dataclass(frozen=True)
class BuiltEnv:
    """A built env on disk, ready to run replicas."""

    name: str
    """The py_env's name in the project that asked for it (``base``, ``llm``...)."""
    key: str
    path: Path
    requirements: tuple[str, ...]
    pinned: tuple[str, ...]
    """The resolved set actually installed (``name==version`` lines)."""

    @property
    def python(self) -> Path:
        """The env's interpreter: start replicas with it (its ``sys.prefix`` is ``path``)."""
        return env_python(self.path)

    def site_packages(self) -> Path | None:
        return site_packages(self.path)

    def touch(self) -> None:
        """Record a use now (``peach env prune`` removes envs unused for 30 days)."""
        record_use(self.path)

    def process_environment(
        self, base: Mapping[str, str], python_path: Sequence[str | Path] = ()
    ) -> dict[str, str]:
        """The environment variables for a process of this env (``isolated_environment``)."""
        return isolated_environment(self.path, base, python_path)


def isolated_environment(
    env: Path, base: Mapping[str, str], python_path: Sequence[str | Path] = ()
) -> dict[str, str]:
    """The environment variables for a process of the env at ``env`` (a replica, a task).

    ``base`` (usually ``os.environ``) without what would leak the host's packages in
    (``PYTHONPATH``, ``PYTHONHOME``, an activated venv or conda env, a user site);
    ``python_path`` becomes the only ``PYTHONPATH`` (the replica runtime's folder); the env
    is activated (``VIRTUAL_ENV``, its ``bin`` first on ``PATH``), so that a subprocess
    running ``python`` or a console script gets the env's, not the host's.
    """
    leaks = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONUSERBASE")
    environment = {k: v for k, v in base.items() if k not in leaks}
    if python_path:
        environment["PYTHONPATH"] = os.pathsep.join(str(p) for p in python_path)
    environment["VIRTUAL_ENV"] = str(env)
    bin_dir = str(env_python(env).parent)
    environment["PATH"] = os.pathsep.join([bin_dir, *filter(None, [base.get("PATH")])])
    return environment


def env_python(path: Path) -> Path:
    if sys.platform == "win32":  # pragma: no cover
        return path / "Scripts" / "python.exe"
    return path / "bin" / "python"


def site_packages(path: Path) -> Path | None:
    if sys.platform == "win32":  # pragma: no cover
        found = path / "Lib" / "site-packages"
        return found if found.is_dir() else None
    return next(iter(sorted((path / "lib").glob("python*/site-packages"))), None)


def record_use(path: Path) -> None:
    try:
        (path / LAST_USED).write_text(f"{time.time():.0f}\n")
    except OSError:
        pass


# -- layout of the cache ---------------------------------------------------------------


def env_dir(key: str) -> Path:
    return cache_root() / f"env-{key}"


def resolution_file(spec: EnvSpec) -> Path:
    return cache_root() / "resolved" / f"{spec.request_key}.json"


def lock_file(name: str) -> Path:
    return cache_root() / "locks" / f"{name}.lock"


def in_use_file(name: str) -> Path:
    """The ``InUse`` lock of an env key (or a staged runtime's folder name)."""
    return cache_root() / "locks" / f"{name}.inuse"


def env_key(pinned: tuple[str, ...]) -> str:
    import hashlib

    payload = json.dumps({"pinned": sorted(pinned), "python": interpreter_tag()})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _write_json(path: Path, data: object) -> None:
    """Write ``path`` atomically (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
    os.replace(temporary, path)


def cached_resolution(spec: EnvSpec) -> tuple[str, ...] | None:
    """The pinned set resolved earlier for ``spec`` on this Python, or None."""
    if not spec.requirements:
        return ()
    try:
        data = json.loads(resolution_file(spec).read_text())
        return tuple(data["pinned"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_built(spec: EnvSpec) -> BuiltEnv | None:
    """The env for ``spec`` if it is already built — never resolves, builds or waits."""
    pinned = cached_resolution(spec)
    if pinned is None:
        return None
    key = env_key(pinned)
    path = env_dir(key)
    if not usable(path):
        return None
    return BuiltEnv(spec.name, key, path, spec.requirements, pinned)


def usable(path: Path) -> bool:
    """Complete (its marker is written last) and its interpreter still resolves."""
    return (path / MARKER).is_file() and env_python(path).exists()


# -- building --------------------------------------------------------------------------


class _Reporter:
    """Turns uv's lines into phases; ``elapsed_s`` counts from the start of ``ensure_env``."""

    def __init__(self, env: str, callback: ProgressCallback | None) -> None:
        self.env = env
        self.callback = callback
        self.started = time.monotonic()
        self.phase: Phase | None = None

    def __call__(self, phase: Phase, detail: str = "") -> None:
        self.phase = phase
        if self.callback is not None:
            self.callback(BuildProgress(self.env, phase, time.monotonic() - self.started, detail))

    def uv_line(self, line: str) -> None:
        match = _COUNT.match(line.strip())
        if match is None:
            return
        word, count = match.group(1), int(match.group(2))
        packages = wording.count(count, "package")
        if word == "Resolved" and self.phase == "resolving":
            self("resolving", f"resolved {packages}")
        elif word == "Prepared":
            self("installing", f"downloaded {packages}")
        elif word == "Installed":
            self("installing", f"installed {packages}")


def resolve(
    spec: EnvSpec,
    *,
    offline: bool = False,
    refresh: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    _reporter: _Reporter | None = None,
) -> tuple[str, ...]:
    """The pinned requirement set of ``spec`` (cached; ``refresh`` resolves again)."""
    if not refresh:
        cached = cached_resolution(spec)
        if cached is not None:
            return cached
    report = _reporter or _Reporter(spec.name, progress)
    report("resolving", ", ".join(spec.requirements))
    with scratch("resolve-") as work:  # removed after; a killed build's, by the next one
        source, output = work / "requirements.in", work / "requirements.txt"
        source.write_text("".join(f"{r}\n" for r in spec.requirements))
        args = ["pip", "compile", str(source), "-o", str(output), "--python", sys.executable]
        args += ["--no-header", "--no-annotate"]
        _run(spec, args, offline=offline, on_line=report.uv_line, cancel=cancel)
        pinned = tuple(
            line.strip()
            for line in output.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        )
    _write_json(
        resolution_file(spec),
        {
            "requirements": list(spec.requirements),
            "python": interpreter_tag(),
            "pinned": list(pinned),
            "resolved_at": time.time(),
        },
    )
    return pinned


def ensure_env(
    spec: EnvSpec,
    *,
    offline: bool = False,
    refresh: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> BuiltEnv:
    """The built env for ``spec``: found in the cache, or resolved and built now.

    Blocking (run it in a thread to keep serving); safe to call from several threads and
    processes at once for the same spec. ``refresh`` resolves again (newer versions of
    unpinned requirements). ``cancel`` stops a build in progress (uv is killed, nothing is
    left under the env's name) and raises ``UvCancelled``.
    """
    report = _Reporter(spec.name, progress)
    built = None if refresh else find_built(spec)
    if built is not None:
        built.touch()
        report("done", "cached")
        return built
    pinned = resolve(spec, offline=offline, refresh=refresh, cancel=cancel, _reporter=report)
    key = env_key(pinned)
    path = env_dir(key)
    lock = EnvLock(
        lock_file(key),
        on_wait=lambda: report("waiting", "another peach is building this env"),
        cancel=cancel,
    )
    try:
        lock.acquire()
    except LockTimeout as error:
        raise EnvBuildError(spec.name, str(error)) from None
    try:
        if not usable(path):  # another process may have built it while we waited
            _build(spec, pinned, key, path, offline=offline, report=report, cancel=cancel)
    finally:
        lock.release()
    env = BuiltEnv(spec.name, key, path, spec.requirements, pinned)
    env.touch()
    count = len(pinned)
    report("done", wording.count(count, "package") if count else "no packages")
    return env


def _build(
    spec: EnvSpec,
    pinned: tuple[str, ...],
    key: str,
    path: Path,
    *,
    offline: bool,
    report: _Reporter,
    cancel: threading.Event | None,
) -> None:
    """Build into ``tmp/`` and rename into place (the caller holds the key's lock)."""
    with scratch(f"env-{key}-") as work:  # removed after; a killed build's, by the next one
        if pinned:
            report("downloading", wording.count(len(pinned), "package"))
        venv = work / "env"
        args = ["venv", str(venv), "--python", sys.executable, "--relocatable", "--quiet"]
        _run(spec, args, offline=offline, cancel=cancel)
        if pinned:
            pins = work / "requirements.txt"
            pins.write_text("".join(f"{p}\n" for p in pinned))
            args = ["pip", "sync", str(pins), "--python", str(env_python(venv))]
            _run(spec, args, offline=offline, on_line=report.uv_line, cancel=cancel)
        _write_json(
            venv / MARKER,
            {
                "key": key,
                "requirements": list(spec.requirements),
                "pinned": list(pinned),
                "python": interpreter_tag(),
                "executable": sys.executable,
                "built_at": time.time(),
            },
        )
        if path.exists():  # unusable: its base interpreter is gone
            shutil.rmtree(path, ignore_errors=True)
        os.rename(venv, path)


def _run(
    spec: EnvSpec,
    args: list[str],
    *,
    offline: bool,
    on_line: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> None:
    from peach_cli.envs.uvrun import UvFailed, run_uv  # subprocess: not for peach validate

    try:
        run_uv(args, offline=offline, on_line=on_line, cancel=cancel)
    except UvFailed as failure:
        raise build_error(spec, failure.reason, offline=offline) from None


_NOT_IN_CACHE = re.compile(r"Because ([A-Za-z0-9._-]+) was not found in the cache")


def build_error(spec: EnvSpec, reason: str, *, offline: bool) -> EnvBuildError:
    """uv's ``reason`` as an ``EnvBuildError`` naming the requirement it is about."""
    requirement = culprit(spec.requirements, reason)
    hint = None
    if offline:
        missing = _NOT_IN_CACHE.findall(reason)
        if missing:
            reason = f"not in the cache: {', '.join(dict.fromkeys(missing))} ({reason})"
        hint = "build it once online (peach env build), or run without --offline"
    elif "not found in the package registry" in reason:
        hint = "check the name on https://pypi.org (the distribution name, not the module)"
    return EnvBuildError(spec.name, reason, requirement=requirement, offline=offline, hint=hint)


def culprit(requirements: tuple[str, ...], reason: str) -> str | None:
    """The first requirement whose distribution name uv's message mentions."""
    words = {normalize_name(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", reason)}
    words |= {w.rstrip("-") for w in words}
    for requirement in requirements:
        if requirement_name(requirement) in words:
            return requirement
    return None
