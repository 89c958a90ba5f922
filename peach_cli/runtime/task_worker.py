"""One task run: ``python -m peach_cli.runtime.task_worker --fd N``.

The scheduler (``simulator.tasks.scheduler``) starts this through ``simulator.spawn``, in the task's
py_env, with the project folder as working directory and one end of a socketpair as file
descriptor ``N``. The worker puts itself in a process group of its own — so that a run
past its timeout is killed with every process it started, and a Ctrl-C in the terminal
reaches peach, which decides — then waits for one frame::

    ("run", 0, {"spec": TaskSpec fields, "payload": JSON text, "run_id": str,
                "env": {name: value}})      its env_vars and secrets, set before it runs

It runs the task (``peach_cli.runtime.task``: the extracted notebook code in a fresh module,
``init`` if any, the function with the payload as first positional argument when it takes
one) and answers with one frame before exiting::

    ("done", 0, {"result": repr of the return value, "seconds": float})
    ("failed", 0, {"message": "TypeName: text", "traceback": "... cell 2, line 3 ..."})

What the task prints goes to stdout, which the scheduler reads line by line. The frame
format is ``peach_cli.runtime.protocol``'s (a 4-byte length, a pickled tuple); this module stays
small and standard-library only because it runs in every user environment and its import
time is part of every run.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import sys
from typing import Any


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (best effort elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(0)


def _read_frame(sock: socket.socket) -> Any:
    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    return pickle.loads(exactly(int.from_bytes(exactly(4), "big")))


def _send_frame(sock: socket.socket, kind: str, payload: Any) -> None:
    body = pickle.dumps((kind, 0, payload), protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(len(body).to_bytes(4, "big") + body)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--fd":
        sys.exit("usage: python -m peach_cli.runtime.task_worker --fd N")
    try:
        os.setpgid(0, 0)  # its own group: the scheduler kills the whole tree at once
    except OSError:
        pass
    _die_with_parent()
    from peach_cli.runtime.task import run_outcome  # a spare imports it before its job
    from peach_cli.runtime.triggers import install_task_helpers

    install_task_helpers()
    sock = socket.socket(fileno=int(args[1]))
    try:
        kind, _, job = _read_frame(sock)
    except (EOFError, OSError):
        os._exit(0)  # a spare nobody used
    if kind != "run":
        os._exit(0)
    os.environ.update(job.get("env") or {})  # its env_vars and secrets (SPEC §10)
    payload = json.loads(job["payload"]) if job.get("payload") is not None else None
    kind, answer = run_outcome(job["spec"], job["root"], payload)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _send_frame(sock, kind, answer)
    except OSError:
        pass
    os._exit(0)  # threads the task left running must not keep the run alive


if __name__ == "__main__":
    main()
