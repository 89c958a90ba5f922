"""A warm template of replicas: ``python -m peach_cli.runtime.template --fd N``.

``peach dev`` starts one per environment (``simulator.template``) instead of one fresh
interpreter per replica: the template imports peach's runtime and lists the folders of the
env's ``sys.path`` once, then forks one child per replica on request. Each child is an
ordinary replica (``replica_worker.main``): its own process, its own ``init``, its own
socket to the gateway.

File descriptor ``N`` is a ``SOCK_SEQPACKET`` Unix socket to peach. One packet each::

    template → peach   b"R"                      warmed, ready to fork
    peach → template   b"F <token>" + 2 fds      fork a replica: its socket, its output pipe
    template → peach   b"P <token> <pid>"        the child started
    template → peach   b"X <pid> <exit code>"    a child ended (negative: killed by a signal)

The template stays single-threaded (forking a process that has threads is unsafe) and
never starts an event loop. It exits when peach closes the socket, once its children have
ended; on Linux it also dies with peach, and each child dies with the template.

Standard library only: this module runs in the user's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import select
import signal
import socket
import sys

from peach_cli.runtime import replica_worker, triggers  # noqa: F401 - what a replica loads
from peach_cli.runtime.protocol import die_with_parent

PACKET_BYTES = 64


def warm() -> None:
    """What every replica would do first, done once: list each folder on ``sys.path`` (the
    import system's caches), then freeze what is loaded so children share its pages."""
    import importlib.util

    with contextlib.suppress(ImportError, ValueError):
        importlib.util.find_spec("peach_template_warm_up")  # a name no folder holds
    gc.collect()
    gc.freeze()  # the collector never writes to these objects: their pages stay shared


def serve(control: socket.socket) -> None:
    """Fork a replica per request until peach closes ``control``; report each exit."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
    signal.set_wakeup_fd(wake_write)
    children: set[int] = set()
    open_ = True
    control.send(b"R")
    while open_ or children:
        watched: list[int | socket.socket] = [wake_read, control] if open_ else [wake_read]
        with contextlib.suppress(InterruptedError):
            readable, _, _ = select.select(watched, [], [], None if open_ else 1.0)
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 512)
        _reap(control if open_ else None, children)
        if open_ and control in readable:
            try:
                data, fds, _, _ = socket.recv_fds(control, PACKET_BYTES, 2)
            except OSError:
                data, fds = b"", []
            if not data:
                open_ = False  # peach is done: wait for the children, then leave
                continue
            _fork(control, data, fds, children, (wake_read, wake_write))
    os._exit(0)


def _fork(
    control: socket.socket,
    data: bytes,
    fds: list[int],
    children: set[int],
    wake: tuple[int, int],
) -> None:
    token = data.split()[1] if data.startswith(b"F ") and len(data.split()) == 2 else b"0"
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        control.send(b"P " + token + b" 0")
        return
    channel, output = fds
    sys.stdout.flush()
    sys.stderr.flush()
    template = os.getpid()
    pid = os.fork()
    if pid == 0:  # the replica
        try:
            die_with_parent()
            if os.getppid() != template:  # the template died before the line above
                os._exit(0)
            _become_replica(control, channel, output, wake)
        finally:
            os._exit(1)
    os.close(channel)
    os.close(output)
    children.add(pid)
    control.send(b"P %s %d" % (token, pid))


def _become_replica(
    control: socket.socket, channel: int, output: int, wake: tuple[int, int]
) -> None:
    """In the child: drop the template's state, take the replica's fds, run the worker."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    control.close()
    for fd in wake:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    sys.argv = [replica_worker.__file__, "--fd", str(channel)]
    replica_worker.run_replica(channel)  # pdeathsig, signals, serve; never returns


def _reap(control: socket.socket | None, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        if control is not None:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                control.send(b"X %d %d" % (pid, code))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m peach_cli.runtime.template")
    parser.add_argument("--fd", type=int, required=True, help="the socket to peach")
    options = parser.parse_args(argv)
    replica_worker.ignore_stop_signals()  # as a replica does (handled, not SIG_IGN)
    die_with_parent()
    control = socket.socket(fileno=options.fd)
    control.set_inheritable(False)
    control.setblocking(True)
    warm()
    serve(control)


if __name__ == "__main__":
    main()
