"""Running `peach` in tests as a user runs it, and reading what it shows.

    result = run_peach("validate", str(project))          # CompletedProcess[str]
    result = run_peach("doctor", cwd=tmp_path, env={"RAY_AUTH_TOKEN": "t"})
    result = run_peach_process("task", "run", "hang", str(project), timeout=60)

``run_peach`` runs the command in this process (``peach_cli.cli.main`` with ``sys.argv``,
the streams, the environment and the folder swapped for the call, then put back): the
same exit code, standard output and standard error a `peach` in a pipe gives, for a few
milliseconds instead of a Python start. ``run_peach_process`` starts a real process, for a
test where the process is the point (a signal, its children, what it imports at start,
a timeout); ``on_a_terminal`` starts one on a pseudo-terminal. All three build the
environment with ``peach_env``: no colour, no terminal, and the cluster address and token a
developer's shell may export never leak in: a test that wants them passes them in ``env``.
``HOME`` and the XDG dirs are the session's temporary ones (``conftest.isolated_home``), so
``~/.ray/auth_token`` on the machine is never read.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER_ENV = ("PEACH_RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")
"""The cluster address and token of a developer's shell (peach reads the first three; Ray's
own ``RAY_ADDRESS`` would reach what a command starts): never a test's unless it says so."""
PEACH = [sys.executable, "-m", "peach_cli.cli"]
"""The command line of a `peach` a test starts (the code of this checkout, whatever
``peach`` script is on the PATH)."""


Env = dict[str, str | None]
"""Variables set for a `peach` on top of this process's environment (None: unset)."""


def peach_env(env: Env | None, columns: int) -> dict[str, str]:
    """This process's environment for a `peach` a test starts: no colour, ``columns`` wide,
    no cluster address or token of the developer's shell; ``env`` on top (a None value
    unsets the variable)."""
    full = {**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns)}
    for name in CLUSTER_ENV:
        full.pop(name, None)
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return full


def run_peach(
    *args: str,
    cwd: Path | None = REPO,
    env: Env | None = None,
    columns: int = 200,
    stdin: str = "",
) -> subprocess.CompletedProcess[str]:
    """`peach ARGS` in ``cwd``, run in this process, with ``peach_env(env, columns)`` as its
    whole environment and ``stdin`` as its input; what a pipe would have read of its
    output (UTF-8, newlines translated as ``subprocess.run(text=True)`` does)."""
    from peach_cli import cli

    out, err = _Pipe("strict"), _Pipe("backslashreplace")
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = (sys.argv, sys.stdin, sys.stdout, sys.stderr)
    saved_signals = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    saved_logging = (root.handlers[:], root.level)
    code: int = 0
    environment = peach_env(env, columns)
    os.environ.clear()
    os.environ.update(environment)
    try:
        os.chdir(cwd or saved_cwd)
        sys.argv = ["peach", *args]
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
        sys.stdout, sys.stderr = out, err
        with warnings.catch_warnings():
            _as_a_new_process(err)
            try:
                cli.main()
            except SystemExit as exit:
                code = _exit_code(exit.code, err)
    finally:
        out.flush()
        err.flush()
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for number, handler in saved_signals.items():
            signal.signal(number, handler)
        root.handlers[:], root.level = saved_logging
    return subprocess.CompletedProcess(["peach", *args], code, out.text(), err.text())


def _as_a_new_process(err: io.TextIOBase) -> None:
    """Python's warning filters as a process without ``-W`` starts with (not pytest's),
    a warning shown on ``err``."""
    warnings.resetwarnings()
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category, append=True)

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


class _Pipe(io.TextIOWrapper):
    """What a `peach` writing into a pipe sees: UTF-8, not a terminal, no file number."""

    def __init__(self, errors: str) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)

    def text(self) -> str:
        data = self.buffer.getvalue()  # type: ignore[attr-defined]
        return data.decode("utf-8", "strict").replace("\r\n", "\n").replace("\r", "\n")


def _exit_code(code: object, err: io.TextIOBase) -> int:
    """The status ``sys.exit(code)`` gives a process (a message goes to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    err.write(f"{code}\n")
    return 1


def run_peach_process(
    *args: str,
    cwd: Path | None = REPO,
    env: Env | None = None,
    timeout: float = 120.0,
    columns: int = 200,
) -> subprocess.CompletedProcess[str]:
    """`peach ARGS` as a real process in ``cwd`` (killed past ``timeout``); ``env`` on top
    of this process's environment. For the tests where the process is the point: the
    others use ``run_peach``."""
    return subprocess.run(
        [*PEACH, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=peach_env(env, columns),
        timeout=timeout,
    )


def start_peach(
    *args: str,
    cwd: Path | None = REPO,
    env: Env | None = None,
    columns: int = 200,
    **popen: object,
) -> subprocess.Popen[str]:
    """`peach ARGS` started as a real process (output piped, text) for a test that talks to
    it, signals it or waits on it; ``popen`` overrides ``subprocess.Popen``'s arguments."""
    options: dict = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    options.update(popen)
    return subprocess.Popen([*PEACH, *args], cwd=cwd, env=peach_env(env, columns), **options)


def on_a_terminal(
    *args: str,
    cwd: Path | None = None,
    env: Env | None = None,
    columns: int = 100,
    timeout: float = 100.0,
) -> tuple[int, str]:
    """`peach ARGS` on a pseudo-terminal ``columns`` wide (no colour): its exit code and
    everything it showed, as the bytes came (carriage returns and escapes kept). Killed
    when it runs past ``timeout``."""
    import pty
    import select

    leader, follower = pty.openpty()
    full = {**peach_env(env, columns), "LINES": "24"}
    process = subprocess.Popen(
        [*PEACH, *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env=full,
        close_fds=True,
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([leader], [], [], 1.0)[0]:
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
    return process.returncode, b"".join(chunks).decode(errors="replace")
