"""The keeper: ``python -m peach_cli.runtime.keeper --fd N`` (Linux).

Every worker process one peach runs (replicas, spares, templates, tasks) is started by this
process, not by peach itself, so that all of them and everything they start live under it.
The keeper is their *child subreaper* (``peach_cli.runtime.linux``): a process that loses its
parent — a daemon made with ``setsid`` and a double fork, the children of a replica that was
killed — is adopted here instead of by init. The keeper outlives peach only to clean up:
when peach is gone (its socket closes: it exited, or was killed with SIGKILL), the keeper
kills every process below it and exits.

File descriptor ``N`` is a ``SOCK_SEQPACKET`` Unix socket to peach. One packet per worker::

    peach → keeper   JSON {"argv", "env", "cwd", "targets"} + fds: a status pipe, then one
                     fd per target (the numbers the worker gets them as: 0, 1, 2, its socket)

and on that worker's status pipe, one line each::

    keeper → peach   b"P <pid>"                 started
    keeper → peach   b"E <errno>"               could not be started (then the pipe closes)
    keeper → peach   b"X <exit code>"           ended (negative: killed by a signal)

What the keeper adopts while peach runs belonged to a worker that died without killing it
(every worker is the subreaper of what its code starts, and kills it when it exits): a
killed or crashed replica's children. The keeper kills them within ``SWEEP_EVERY_S``.

A worker starts with every signal at its default disposition, whatever peach's were (a
background shell starts peach with SIGINT ignored, and an ignored signal stays ignored
across exec). The keeper itself only *handles* SIGINT, SIGTERM and SIGHUP (a Ctrl-C reaches
the whole process group; peach decides when its workers stop), so nothing it starts
inherits them ignored.

Standard library only, single-threaded, and small: it forks.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import signal
import socket

from peach_cli.runtime.linux import become_subreaper, children
from peach_cli.runtime.tree import kill_descendants

REQUEST_BYTES = 1 << 20
"""The largest request (an environment copied whole with ``--inherit-env`` fits)."""
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SWEEP_EVERY_S = 0.5
"""How often the keeper kills what it adopted (what a killed replica left running)."""


def serve(control: socket.socket) -> None:
    """Start a worker per request until peach is gone; then kill everything below."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so the wake-up fd is written
    signal.set_wakeup_fd(wake_write)
    statuses: dict[int, int] = {}
    watched: list[int | socket.socket] = [wake_read, control]
    while True:
        readable: list[int | socket.socket] = []
        with contextlib.suppress(InterruptedError):
            readable, _, _ = select.select(watched, [], [], SWEEP_EVERY_S)
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 512)
        _reap(statuses)
        _sweep(statuses)
        if control in readable:
            try:
                data, fds, _, _ = socket.recv_fds(control, REQUEST_BYTES, 8)
            except OSError:
                data, fds = b"", []
            if not data:
                break  # peach is gone
            for fd in fds:  # none may leak into another worker
                os.set_inheritable(fd, False)
            _start(data, fds, statuses)
    kill_descendants()
    os._exit(0)


def _sweep(statuses: dict[int, int]) -> None:
    """Kill every child of the keeper it did not start. Workers are subreapers of what
    their code starts, so a process reaches the keeper only when the worker it belonged
    to died without killing it (a replica killed, or crashed): it must not live on."""
    for pid in children() - statuses.keys():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # reaped at its SIGCHLD; its children come next


def _start(data: bytes, fds: list[int], statuses: dict[int, int]) -> None:
    if not fds:
        return
    status, given = fds[0], fds[1:]
    try:
        request = json.loads(data)
        argv, env, cwd = request["argv"], request["env"], request["cwd"]
        targets = [int(t) for t in request["targets"]]
        if len(targets) != len(given):
            raise ValueError("one fd per target")
    except (ValueError, KeyError, TypeError):
        _tell(status, b"E 22")  # EINVAL
        _close([status, *given])
        return
    error_read, error_write = os.pipe()
    try:
        pid = os.fork()
    except OSError as error:  # too many processes: peach reports it, the keeper lives on
        _close([error_read, error_write, *given])
        _tell(status, b"E %d" % (error.errno or 11))
        os.close(status)
        return
    if pid == 0:  # the worker
        try:
            _exec(argv, env, cwd, dict(zip(targets, given, strict=True)), error_write)
        finally:
            os._exit(127)
    os.close(error_write)
    _close(given)
    errno = _read_all(error_read)
    if errno:  # exec failed: the child wrote its errno and exited
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        _tell(status, b"E " + errno)
        os.close(status)
        return
    statuses[pid] = status
    _tell(status, b"P %d" % pid)


def _exec(argv: list[str], env: dict[str, str], cwd: str, fds: dict[int, int], error: int) -> None:
    """In the child: default signals, the fds at their numbers, the folder; exec."""
    signal.set_wakeup_fd(-1)
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    above = max(fds, default=2) + 1  # out of the way of every target first
    moved = {target: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for target, fd in fds.items()}
    for target, fd in moved.items():
        os.dup2(fd, target)  # inheritable: the worker gets it
    _close_all_but(*fds, error)  # the worker gets its own fds, and nothing of the keeper's
    try:
        os.chdir(cwd)
        os.execvpe(argv[0], argv, env)
    except OSError as failure:
        os.write(error, b"%d" % (failure.errno or 1))


def _close_all_but(*kept: int) -> None:
    """Close every file descriptor of this process but ``kept``."""
    low = 0
    for fd in sorted(set(kept)):
        if low < fd:  # (an empty range is not empty to os.closerange: it closes all)
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(low + 1, os.sysconf("SC_OPEN_MAX")))


def _reap(statuses: dict[int, int]) -> None:
    """Collect every child that ended (adopted ones too); tell peach about its workers."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status = statuses.pop(pid, None)
        if status is not None:
            _tell(status, b"X %d" % os.waitstatus_to_exitcode(code))
            os.close(status)


def _tell(fd: int, line: bytes) -> None:
    with contextlib.suppress(OSError):  # peach stopped listening: nothing to tell
        os.write(fd, line + b"\n")


def _read_all(fd: int) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 64):
            data += chunk
    os.close(fd)
    return data


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _ignore(*_: object) -> None:
    """A handler that does nothing: unlike SIG_IGN, exec resets it to the default."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m peach_cli.runtime.keeper")
    parser.add_argument("--fd", type=int, required=True, help="the socket to peach")
    options = parser.parse_args(argv)
    for number in HANDLED:
        signal.signal(number, _ignore)
    become_subreaper()
    _close_all_but(0, 1, 2, options.fd)  # what peach's event loop let through (uvloop)
    control = socket.socket(fileno=options.fd)
    control.set_inheritable(False)  # none of the workers may hold the keeper's socket
    control.setblocking(True)
    serve(control)


if __name__ == "__main__":
    main()
