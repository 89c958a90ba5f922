"""peach's replica runtime, staged as a folder that an isolated env puts on its path.

A replica in an isolated env may import nothing of peach's own dependencies, yet it runs
peach's code: the worker, the request contract, ``from peach_cli import endpoint``. Those
modules use the standard library only, so they are copied — nothing is installed in the
env — into a folder of the cache named by a hash of their contents, and the replica gets
that folder (and only it) on ``PYTHONPATH``::

    folder = stage_runtime()        # <cache>/runtime-<hash>/{peach_cli,simulator}/...

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

REPLICA_RUNTIME = (
    "peach_cli/__init__.py",
    "peach_cli/decorator.py",
    "peach_cli/plan.py",
    "peach_cli/contract/__init__.py",
    "peach_cli/contract/ab.py",
    "peach_cli/contract/answers.py",
    "peach_cli/contract/binding.py",
    "peach_cli/contract/errors.py",
    "peach_cli/contract/flow.py",
    "peach_cli/contract/request.py",
    "peach_cli/contract/results.py",
    "peach_cli/contract/runner.py",
    "peach_cli/contract/transport.py",
    "peach_cli/task_runtime.py",
    "peach_cli/triggers.py",
    "simulator/__init__.py",
    "simulator/aio.py",
    "simulator/protocol.py",
    "simulator/task_worker.py",
    "simulator/worker.py",
)
"""What a replica or a task imports of peach (standard library only; ``tests/test_structure.py``)."""

_staged: dict[Path, Path] = {}


def runtime_digest() -> str:
    """A hash of the runtime's files: a new version of peach stages a new folder."""
    digest = hashlib.sha256()
    for name in REPLICA_RUNTIME:
        digest.update(name.encode() + b"\0" + (SOURCE_ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stage_runtime() -> Path:
    """The folder holding the replica runtime (written now if this version is new)."""
    root = cache_root()
    known = _staged.get(root)
    if known is not None and known.is_dir():
        return known
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
    with contextlib.suppress(OSError):  # when it was last used: `peach env prune` reads it
        os.utime(folder)
    _staged[root] = folder
    return folder
