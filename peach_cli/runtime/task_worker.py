"""One task run: ``python -m peach_cli.runtime.task_worker --fd N``.

The scheduler (``simulator.tasks.scheduler``) starts this through ``simulator.spawn``, in the task's
py_env, with the project folder as working directory and one end of a socketpair as file
descriptor ``N``. The worker puts itself in a process group of its own — so that a run
past its timeout is killed with every process it started, and a Ctrl-C in the terminal
reaches peach, which decides — then waits for one message, ``RunTask`` (the ``TaskSpec``,
the project folder, the payload as JSON text, the run id).

It runs the task (``peach_cli.runtime.task``: the extracted notebook code in a fresh module,
``init`` if any, the function with the payload as first positional argument when it takes
one) and answers with one message before exiting: ``TaskReturned`` (the JSON of the return
value, the seconds it took) or ``TaskFailed`` (``TypeName: text``, the traceback with
notebook cells and lines). Messages and framing are ``peach_cli.runtime.protocol``'s.

What the task prints goes to stdout, which the scheduler reads line by line. This module
stays small and standard-library only because it runs in every user environment and its
import time is part of every run.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--fd":
        sys.exit("usage: python -m peach_cli.runtime.task_worker --fd N")
    try:
        os.setpgid(0, 0)  # its own group: the scheduler kills the whole tree at once
    except OSError:
        pass
    from peach_cli.runtime.linux import become_subreaper
    from peach_cli.runtime.tree import kill_descendants

    parent = os.getppid()
    become_subreaper()  # what the task starts stays in this tree, even a daemon
    from peach_cli.runtime.protocol import (
        ProtocolError,
        RunTask,
        die_with_parent,
        receive_message,
        send_message,
    )

    die_with_parent()
    from peach_cli.runtime.task import run_outcome  # a spare imports it before its job
    from peach_cli.runtime.triggers import install_task_helpers

    install_task_helpers()
    sock = socket.socket(fileno=int(args[1]))
    sock.set_inheritable(False)  # not held open by what the task starts
    try:
        job = receive_message(sock)
    except (EOFError, OSError):
        os._exit(0)  # a spare nobody used
    except ProtocolError as error:
        print(f"peach: the task process received {error}", file=sys.stderr, flush=True)
        os._exit(1)
    if not isinstance(job, RunTask):
        print(f"peach: a task process does not take {type(job).__name__}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    _die_with_tree(sock, parent)
    os.environ.update(job.env)  # its env_vars and secrets (SPEC §10)
    payload = json.loads(job.payload) if job.payload is not None else None
    outcome = run_outcome(job.spec, job.root, payload)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        send_message(sock, outcome)
    except OSError:
        pass
    kill_descendants()  # what the task left running ends with its run
    os._exit(0)  # threads the task left running must not keep the run alive


def _die_with_tree(sock: socket.socket, parent: int) -> None:
    """From now on, when peach dies (its socket closes, or Linux's parent-death signal
    arrives), kill every process the task started, then exit: nothing outlives peach."""
    import signal
    import threading

    from peach_cli.runtime.linux import set_parent_death_signal
    from peach_cli.runtime.tree import kill_descendants

    def end(*_: object) -> None:
        kill_descendants()
        os._exit(1)

    signal.signal(signal.SIGTERM, end)
    set_parent_death_signal(signal.SIGTERM)  # replaces the SIGKILL of a waiting spare
    if os.getppid() != parent:  # peach died before this was set
        end()

    def watch() -> None:  # also when the task's code holds the main thread in C
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except OSError:
            data = b""
        if not data:
            end()

    threading.Thread(target=watch, name="peach-parent-watch", daemon=True).start()


if __name__ == "__main__":
    main()
