"""peach's replica runtime, staged as a folder that an isolated env puts on its path.

A replica in an isolated env may import nothing of peach's own dependencies, yet it runs
peach's code: the worker, the request contract, ``from peach_cli import endpoint``. Those
modules use the standard library only, so they are copied — nothing is installed in the
env — into a folder of the cache named by a hash of their contents, and the replica gets
that folder (and only it) on ``PYTHONPATH``::

    folder = stage_runtime()        # <cache>/runtime-<hash>/peach_cli/{__init__.py,runtime/...}

The folder is written once per version of the runtime, atomically (a temporary folder
renamed into place), and shared by every env and project.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from peach_cli.envs.paths import cache_root

SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent
"""The folder holding ``peach_cli`` and ``simulator`` (a checkout or site-packages)."""


def runtime_files() -> tuple[str, ...]:
    """What a replica or a task imports of peach: ``peach_cli/__init__.py`` and the whole
    ``peach_cli/runtime`` package, as paths under ``SOURCE_ROOT`` (standard library only;
    ``tests/test_structure.py``)."""
    package = SOURCE_ROOT / "peach_cli" / "runtime"
    files = sorted(path.relative_to(SOURCE_ROOT).as_posix() for path in package.rglob("*.py"))
    return ("peach_cli/__init__.py", *files)


REPLICA_RUNTIME = runtime_files()


def runtime_digest() -> str:
    """A hash of the runtime's files: a new version of peach stages a new folder."""
    digest = hashlib.sha256()
    for name in REPLICA_RUNTIME:
        digest.update(name.encode() + b"\0" + (SOURCE_ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stage_runtime() -> Path:
    """The folder holding the replica runtime (written now if this version is new)."""
    root = cache_root()
    folder = root / f"runtime-{runtime_digest()}"
    if not folder.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="runtime-", dir=root))
        try:
            for name in REPLICA_RUNTIME:
                target = work / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(SOURCE_ROOT / name, target)
            try:
                os.rename(work, folder)
            except OSError:  # another peach staged the same version meanwhile
                if not folder.is_dir():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    compile_runtime(folder)
    with contextlib.suppress(OSError):  # when it was last used: `peach env prune` reads it
        os.utime(folder)
    return folder


def compile_runtime(folder: Path) -> None:
    """Byte-compile the staged runtime for this Python, once: a worker of an env on the
    same version then reads it instead of compiling each module at every start (which
    it does where ``PYTHONDONTWRITEBYTECODE`` keeps it from caching what it compiled:
    0.07 to 0.2 s per replica measured on a busy 2-core machine)."""
    import importlib.util
    import py_compile

    sources = [folder / name for name in REPLICA_RUNTIME]
    if all(Path(importlib.util.cache_from_source(str(s))).is_file() for s in sources):
        return
    for source in sources:  # each written atomically: a peach doing the same meanwhile is fine
        with contextlib.suppress(OSError, py_compile.PyCompileError):
            py_compile.compile(str(source), doraise=True)
