"""What the cache holds: built envs, their size and last use; pruning the stale ones.

    for env in built_envs(): print(env.path, env.size_bytes, env.last_used)
    pruned = prune(older_than_days=30)       # or prune(all_envs=True)
    pruned.removed, pruned.in_use            # what went, what a running peach still uses

An env is removed by renaming it into ``tmp/`` (under its key's lock, so never while a
``peach`` builds it, and under its ``InUse`` lock, so never while a ``peach`` runs workers
in it) and deleting it there: it disappears at once, whole. The replica runtime staged for
other versions of peach (``runtime-<hash>``) goes too once unused as long (its mtime is
its last use), unless a running peach marks it in use. The
lock files stay: they are empty, and removing one while a ``peach`` waits on it would let
two builds of one env in at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from peach_cli.envs.builder import LAST_USED, MARKER, in_use_file, lock_file
from peach_cli.envs.lock import EnvLock, InUse
from peach_cli.envs.paths import cache_root

PRUNE_AFTER_DAYS = 30
_STAGED = re.compile(r"runtime-[0-9a-f]{16}")
"""A staged runtime's folder (``runtime.stage_runtime``), not one being written."""


@dataclass(frozen=True)
class StoredEnv:
    """One built env in the cache."""

    key: str
    path: Path
    requirements: tuple[str, ...]
    pinned: tuple[str, ...]
    last_used: float
    """Epoch seconds of the last run that used it (its build time if none did)."""


def directory_size(path: Path) -> int:
    """Bytes under ``path``, each file counted once (hard links from uv's cache included)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def last_used(path: Path) -> float:
    try:
        return float((path / LAST_USED).read_text().strip())
    except (OSError, ValueError):
        try:
            return (path / MARKER).stat().st_mtime
        except OSError:
            return 0.0


def built_envs() -> Iterator[StoredEnv]:
    """Every complete env in the cache (half-built ones live in ``tmp/`` and are skipped)."""
    root = cache_root()
    if not root.is_dir():
        return
    for path in sorted(root.glob("env-*")):
        try:
            data = json.loads((path / MARKER).read_text())
        except (OSError, ValueError):
            continue
        yield StoredEnv(
            key=path.name.removeprefix("env-"),
            path=path,
            requirements=tuple(data.get("requirements") or ()),
            pinned=tuple(data.get("pinned") or ()),
            last_used=last_used(path),
        )


@dataclass
class Pruned:
    """What ``prune`` did."""

    removed: list[StoredEnv] = field(default_factory=list)
    in_use: list[StoredEnv] = field(default_factory=list)
    """Stale (or, with ``all_envs``, any) envs kept because a running ``peach`` uses them."""
    runtimes: list[Path] = field(default_factory=list)
    """Staged runtimes of other versions of peach that were removed."""


def in_use(key: str) -> bool:
    """Whether a running ``peach`` runs workers in the env of ``key`` now (it holds the
    env's ``InUse`` lock; always False where there are no shared locks, on Windows)."""
    lock = InUse.try_exclusive(in_use_file(key))
    if lock is None:
        return True
    lock.release()
    return False


Outcome = Literal["removed", "in use", "busy"]
"""What became of an env ``prune`` tried: ``busy``, a ``peach`` builds it right now."""


def remove_env(env: StoredEnv) -> Outcome:
    """Remove one env, unless a running ``peach`` uses it or one is building it."""
    lock = EnvLock(lock_file(env.key))
    if not lock.acquire(blocking=False):
        return "busy"
    try:
        moved = _move_unused(env.path, env.key)
    finally:
        lock.release()
    return _delete(moved)


def _move_unused(path: Path, name: str) -> Path | Outcome:
    """Move ``path`` into ``tmp/`` while nobody holds its ``InUse``: the folder it is in
    now. The locks are held only for the rename, so that a ``peach`` starting on the env
    never waits for a slow delete."""
    use = InUse.try_exclusive(in_use_file(name))
    if use is None:
        return "in use"
    try:
        trash = Path(tempfile.mkdtemp(prefix="prune-", dir=_tmp()))
        try:
            os.rename(path, trash / "env")
        except OSError:  # it went meanwhile
            shutil.rmtree(trash, ignore_errors=True)
            return "busy"
        return trash
    finally:
        use.release()


def _delete(moved: Path | Outcome) -> Outcome:
    if isinstance(moved, Path):
        shutil.rmtree(moved, ignore_errors=True)
        return "removed"
    return moved


def _tmp() -> Path:
    path = cache_root() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stale_envs(
    *, older_than_days: float = PRUNE_AFTER_DAYS, all_envs: bool = False, now: float | None = None
) -> list[StoredEnv]:
    """The envs ``prune`` would remove now."""
    cutoff = (time.time() if now is None else now) - older_than_days * 86400
    return [env for env in built_envs() if all_envs or env.last_used < cutoff]


def prune(
    *, older_than_days: float = PRUNE_AFTER_DAYS, all_envs: bool = False, now: float | None = None
) -> Pruned:
    """Remove envs unused for ``older_than_days`` (every env with ``all_envs``), except
    those a running ``peach`` uses, and the runtimes staged for other versions of peach as
    long ago (any, with ``all_envs``) that nothing uses.

    ``all_envs`` also forgets the cached resolutions, so the next build resolves afresh.
    What killed builds left is removed too, and other leftovers older than a day.
    """
    from peach_cli.envs.runtime import runtime_digest
    from peach_cli.envs.scratch import remove_stale

    now = time.time() if now is None else now
    pruned = Pruned()
    for env in stale_envs(older_than_days=older_than_days, all_envs=all_envs, now=now):
        outcome = remove_env(env)
        if outcome == "removed":
            pruned.removed.append(env)
        elif outcome == "in use":
            pruned.in_use.append(env)
    root = cache_root()
    current = f"runtime-{runtime_digest()}"
    cutoff = now - older_than_days * 86400
    for runtime in sorted(root.glob("runtime-*")) if root.is_dir() else ():
        if runtime.name == current or not _STAGED.fullmatch(runtime.name):
            continue
        try:  # a peach of another version may run from it without marking it in use
            stale = all_envs or runtime.stat().st_mtime < cutoff
        except OSError:
            continue
        if stale:
            if _delete(_move_unused(runtime, runtime.name)) == "removed":
                pruned.runtimes.append(runtime)
    if all_envs:
        shutil.rmtree(root / "resolved", ignore_errors=True)
    remove_stale(now=now)  # what killed builds left, whatever its age
    tmp = root / "tmp"
    if tmp.is_dir():
        for leftover in tmp.iterdir():
            try:
                stale = leftover.stat().st_mtime < now - 86400
            except OSError:
                continue
            if stale or all_envs and leftover.name.startswith("prune-"):
                shutil.rmtree(leftover, ignore_errors=True)
    return pruned
