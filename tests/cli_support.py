"""Running `peach` in tests as a user runs it: a real process, not a terminal, no colour.

    result = run_peach("validate", str(project))          # CompletedProcess[str]
    result = run_peach("doctor", cwd=tmp_path, env={"RAY_AUTH_TOKEN": "t"}, timeout=90)

The cluster address and token a developer's shell may export never leak in: a test that
wants them passes them in ``env``. ``HOME`` and the XDG dirs are the session's temporary
ones (``conftest.isolated_home``), so ``~/.ray/auth_token`` on the machine is never read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER_ENV = ("PEACH_RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def peach_env(env: dict[str, str] | None, columns: int) -> dict[str, str]:
    """This process's environment for a `peach` a test starts: no colour, ``columns`` wide,
    no cluster address or token of the developer's shell; ``env`` on top."""
    full = {**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns)}
    for name in CLUSTER_ENV:
        full.pop(name, None)
    return {**full, **(env or {})}


def run_peach(
    *args: str,
    cwd: Path | None = REPO,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
    columns: int = 200,
) -> subprocess.CompletedProcess[str]:
    """`peach ARGS` in ``cwd``; ``env`` on top of this process's environment."""
    full = peach_env(env, columns)
    return subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full,
        timeout=timeout,
    )


def on_a_terminal(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
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
        [sys.executable, "-m", "peach_cli.cli", *args],
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
