"""The cache's ``tmp/`` folder: where builds work, and what a killed build left there.

Every build step works in a folder of its own under ``tmp/`` (``scratch``) and holds a lock
file in it for as long as it works; the kernel drops the lock when its holder dies. A folder
whose lock nobody holds is what a killed ``peach`` left (``kill -9``, a crash, a power cut):
the next build and ``peach env prune`` remove it (``remove_stale``).

    with scratch("env-1f2e-") as work:     # tmp/env-1f2e-xxxx, removed afterwards
        ...
    remove_stale()                          # the folders of builds that died
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from peach_cli.envs.lock import EnvLock
from peach_cli.envs.paths import cache_root

OWNER = ".peach-working"
"""The lock file a working build holds in its folder."""
UNOWNED_AFTER_S = 86400.0
"""A folder without a lock file (an older peach's) is stale after a day."""


def tmp_root() -> Path:
    path = cache_root() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A new folder under ``tmp/``, held as working until the block ends, then removed."""
    remove_stale()
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root()))
    owner = EnvLock(work / OWNER)
    owner.acquire()
    try:
        yield work
    finally:
        owner.release()
        shutil.rmtree(work, ignore_errors=True)


def remove_stale(*, now: float | None = None) -> list[Path]:
    """Remove the build folders under ``tmp/`` whose build died; the folders removed.

    Folders of ``peach env prune`` (``prune-*``) are prune's to judge."""
    root = cache_root() / "tmp"
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for leftover in sorted(root.iterdir()):
        if leftover.name.startswith("prune-") or not leftover.is_dir():
            continue
        if not _abandoned(leftover, now):
            continue
        shutil.rmtree(leftover, ignore_errors=True)
        removed.append(leftover)
    return removed


def _abandoned(folder: Path, now: float) -> bool:
    owner = folder / OWNER
    if not owner.exists():
        try:
            return folder.stat().st_mtime < now - UNOWNED_AFTER_S
        except OSError:
            return False
    lock = EnvLock(owner)
    try:
        if not lock.acquire(blocking=False):
            return False  # a build is working in it
    except OSError:
        return False
    lock.release()
    return True


__all__ = ["OWNER", "remove_stale", "scratch", "tmp_root"]
