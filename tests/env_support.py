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
from dataclasses import dataclass
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


SLOW_BACKEND = """\
import os
import time

STARTED = {started!r}


def _wait():
    with open(STARTED, "w") as marker:
        marker.write(str(os.getpid()))
    time.sleep(600)  # a build that takes long: only being stopped ends it


def get_requires_for_build_wheel(config_settings=None):
    _wait()
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _wait()
"""


def serve_sdist(folder: Path, name: str, files: dict[str, str]) -> str:
    """Serve an sdist of ``name`` 0.1 built by its own in-tree backend (``backend.py`` in
    ``files``) over HTTP on loopback, from a daemon thread that lives as long as the test
    process: a conf may not name a local path or ``file:`` url (SPEC §1). Its URL."""
    import functools
    import io
    import tarfile
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    folder.mkdir(parents=True)
    stem = name.replace("-", "_")
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        f'backend-path = ["."]\n\n[project]\nname = "{name}"\nversion = "0.1"\n',
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        **files,
    }
    sdist = folder / f"{stem}-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{stem}-0.1/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/{sdist.name}"


@dataclass(frozen=True)
class SlowPackage:
    """A package whose build never ends on its own: uv downloads its sdist and runs its build
    backend, which writes its pid to ``started`` and sleeps. For tests that stop a build
    under way. The sdist is served over HTTP on loopback (a conf may not name a local path
    or ``file:`` url, SPEC §1) by a daemon thread that lives as long as the test process."""

    requirement: str
    started: Path

    @classmethod
    def write(cls, folder: Path) -> SlowPackage:
        started = folder / "backend-started"
        url = serve_sdist(
            folder / "peach-slow-pkg-index",
            "peach-slow-pkg",
            {"backend.py": SLOW_BACKEND.format(started=str(started))},
        )
        return cls(f"peach-slow-pkg @ {url}", started)

    def wait_building(self) -> int:
        """The backend's pid, once uv runs it."""
        from waiting import poll

        poll(self.started.exists, "uv running the package's build backend", 120, tolerate=())
        return int(poll(self.started.read_text, "the backend's pid", 10, tolerate=()))
