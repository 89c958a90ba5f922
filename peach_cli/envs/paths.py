"""Where environments are cached: the user cache folder, or ``PEACH_ENV_CACHE``.

cache_root()     # ~/.cache/peach/envs on Linux, ~/Library/Caches/peach/envs on macOS
uv_cache_dir()   # beside the envs, on the same filesystem, so installs are links
user_cache_home()  # ~/.cache (what else peach caches goes in its peach/ folder)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CACHE_ENV_VAR = "PEACH_ENV_CACHE"
"""Overrides where environments are cached (the tests always set it)."""


def user_cache_home() -> Path:
    """The user's cache folder (``~/.cache``, ``XDG_CACHE_HOME``, the platform's own)."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else Path.home() / ".cache"


def cache_root() -> Path:
    """The folder that holds every built environment (not created here)."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser().resolve()
    return (user_cache_home() / "peach" / "envs").resolve()


def uv_cache_dir() -> Path:
    """uv's package cache, kept next to the envs so that uv can hard-link from it."""
    return cache_root() / "uv-cache"
