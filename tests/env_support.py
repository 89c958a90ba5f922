"""Helpers for the environment tests: the session's env cache and builds in real processes.

The whole session shares one ``PEACH_ENV_CACHE`` (envs and uv's package cache), set by the
autouse ``env_cache`` fixture of ``conftest.py``, so each distinct env is built once per
session and the user's own cache is never touched. Keep the number of distinct
requirement sets small: ``SMALL`` is the one most tests use.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SMALL = ("tomli-w", "websocket-client")
"""Two tiny pure-Python distributions that the machine's Python does not have; the module
of the second (``websocket``) is not its distribution's name, which PC308 must read from
the built env's metadata."""

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def use_env_cache(path: Path) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PEACH_ENV_CACHE", str(path))
        yield path


BUILD_SCRIPT = """
import json, sys, time
from pathlib import Path
from peach_cli.envs import EnvSpec, ensure_env
go = Path(sys.argv[1])
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
phases = []
env = ensure_env(EnvSpec("base", tuple(sys.argv[2:])), progress=lambda p: phases.append(p.phase))
print(json.dumps({"path": str(env.path), "phases": phases}))
"""


def start_build(go_file: Path, *requirements: str) -> subprocess.Popen[str]:
    """A real `python` process that builds ``requirements`` once ``go_file`` exists."""
    return subprocess.Popen(
        [sys.executable, "-c", BUILD_SCRIPT, str(go_file), *requirements],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )


def run_peach(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`peach ARGS` as a user runs it (not a terminal), with the session's env cache."""
    return subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
        timeout=120,
    )


LIVE_SCRIPT = """
import sys
from peach_cli.envs import EnvSpec, ensure_env
def show(step):
    print(step.phase, flush=True)
ensure_env(EnvSpec("base", tuple(sys.argv[1:])), progress=show)
print("built", flush=True)
"""


def start_live_build(*requirements: str) -> subprocess.Popen[str]:
    """A real process building ``requirements`` that prints each phase as it starts."""
    return subprocess.Popen(
        [sys.executable, "-c", LIVE_SCRIPT, *requirements],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )
