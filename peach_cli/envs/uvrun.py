"""Running uv: one subprocess per step, its stderr read line by line as it prints.

    run_uv(["pip", "compile", "reqs.in", "-o", "reqs.txt"], on_line=print, cancel=event)

uv's binary comes from the ``uv`` package (``uv.find_uv_bin()``); its package cache is
``uv_cache_dir()``, beside the envs, so that installs are hard links. A step that fails
raises ``UvFailed`` with uv's own message (its ``error:`` line and every ``cause:``), which
the builder turns into an ``EnvBuildError`` naming the env and the requirement.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache

from peach_cli.envs.paths import uv_cache_dir


class UvFailed(Exception):
    """A uv step exited non-zero; ``reason`` is what uv said, as one line."""

    def __init__(self, reason: str, lines: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.lines = lines


class UvCancelled(Exception):
    """The caller's ``cancel`` event was set while uv ran; uv was stopped."""


@lru_cache(maxsize=1)
def uv_binary() -> str:
    """The uv executable shipped by the ``uv`` package (a dependency of peach)."""
    import uv

    return uv.find_uv_bin()


_NOT_FOR_UV = frozenset({"VIRTUAL_ENV", "CONDA_PREFIX", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"})


def uv_environment(*, offline: bool) -> dict[str, str]:
    """The environment uv runs with: peach's cache, never a Python download, no active venv,
    and not the Ray dashboard's token (the build backends uv runs are packages' code)."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_FOR_UV}
    env["UV_CACHE_DIR"] = str(uv_cache_dir())
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    env["NO_COLOR"] = "1"
    env.pop("UV_SYSTEM_PYTHON", None)
    if offline:
        env["UV_OFFLINE"] = "1"
    return env


def reason_of(lines: list[str]) -> str:
    """uv's failure as one line: ``error: X`` and ``cause: Y`` lines joined with ``: ``.

    >>> reason_of(["error: No solution found", "  cause: Because x was not found"])
    'No solution found: Because x was not found'
    """
    parts: list[str] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        for prefix in ("error:", "Error:", "cause:", "Caused by:", "×", "╰─▶", "hint:"):
            if line.startswith(prefix):
                line = line[len(prefix) :].strip()
                break
        else:
            if parts:  # a continuation of the previous sentence
                parts[-1] = f"{parts[-1]} {line}"
                continue
        if line and line not in parts:
            parts.append(line)
    return ": ".join(p.rstrip(".:") for p in parts) or "uv failed without a message"


def run_uv(
    args: Sequence[str],
    *,
    offline: bool,
    on_line: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> None:
    """Run ``uv ARGS``; call ``on_line`` for every line it prints; raise ``UvFailed``.

    uv leads its own process group, so that stopping it stops what it started too (a
    package's build backend, which would otherwise go on compiling after uv is gone)."""
    process = subprocess.Popen(
        [*_guarded(), uv_binary(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=uv_environment(offline=offline),
        text=True,
        errors="replace",
        start_new_session=os.name == "posix",
    )
    done = threading.Event()
    if cancel is not None:

        def watch() -> None:
            while not done.wait(0.05):
                if cancel.is_set():
                    _kill(process)
                    return

        threading.Thread(target=watch, name="peach-uv-cancel", daemon=True).start()
    lines: list[str] = []
    finished = False
    try:
        assert process.stderr is not None
        for line in process.stderr:
            line = line.rstrip("\n")
            lines.append(line)
            if on_line is not None:
                on_line(line)
        code = process.wait()
        finished = True
    finally:
        done.set()
        if not finished:  # interrupted: uv, and what it started, go (uv may be gone already)
            _kill(process)
            process.wait()
    if cancel is not None and cancel.is_set():
        _kill(process)  # what uv started may outlive it: a build backend it was waiting for
        raise UvCancelled
    if code != 0:
        failure = [line for line in lines if not line.startswith(("Using ", "Resolved "))]
        raise UvFailed(reason_of(failure), lines)


GUARD = """\
import os, signal, sys
def end(*_):
    os.killpg(0, signal.SIGKILL)  # uv, what uv runs, and this guard: one group
signal.signal(signal.SIGTERM, end)
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    end()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
"""uv's guard on Linux: when peach dies — even by ``kill -9`` — the kernel tells the guard
(a parent-death signal), and it kills uv's whole process group, the build backend uv runs
included. (A signal set up for uv itself in a ``preexec_fn`` would spare the backend, and
``preexec_fn`` is not safe in a threaded process.)"""


def _guarded() -> list[str]:
    """The command that runs uv under ``GUARD`` (Linux), or nothing: uv runs bare, and
    its process group is killed when it is cancelled (``peach_cli.runtime.linux``)."""
    import sys

    from peach_cli.runtime.linux import offers

    if not offers("parent-death"):
        return []
    return [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid())]


def _kill(process: subprocess.Popen[str]) -> None:
    """Kill uv and every process of its group (on POSIX; elsewhere, uv alone)."""
    if os.name != "posix":
        process.kill()
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has exited already
