"""Checks of the machine: the Python running peach, uv, and the port `peach dev` will bind.

Example::

    check_python()                      # Python 3.11.7 against peach's requires-python
    check_uv(locate_uv())               # uv found, and the version it reports
    check_port("127.0.0.1", 8000)       # free, or held by another process
"""

from __future__ import annotations

import errno
import re
import shutil
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from peach_cli.doctor import Check

if TYPE_CHECKING:
    from peach_cli.runtime.linux import Feature

DISTRIBUTION = "peach-cli"
UV_VERSION_TIMEOUT_S = 10.0

_CLAUSE = re.compile(r"^(~=|===|==|!=|<=|>=|<|>)\s*(\d+(?:\.\d+)*)(\.\*)?$")


def requires_python() -> str | None:
    """peach's own ``requires-python`` (from its installed metadata), if known."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        values = metadata(DISTRIBUTION).get_all("Requires-Python") or []
    except PackageNotFoundError:
        return None
    return str(values[0]) if values else None


def satisfies(version: tuple[int, ...], specifier: str) -> bool:
    """Whether ``version`` meets a ``requires-python`` specifier (numeric clauses only).

    Raises ``ValueError`` for a clause it cannot read.

    >>> satisfies((3, 11, 7), ">=3.11"), satisfies((3, 10, 2), ">=3.11, <4")
    (True, False)
    >>> satisfies((3, 12, 1), "==3.12.*"), satisfies((3, 12, 1), "~=3.11")
    (True, True)
    """
    for clause in filter(None, (part.strip() for part in specifier.split(","))):
        match = _CLAUSE.match(clause)
        if match is None:
            raise ValueError(f"cannot read the clause {clause!r}")
        operator, text, wildcard = match.groups()
        target = tuple(int(part) for part in text.split("."))
        if wildcard:
            if operator not in ("==", "!="):
                raise ValueError(f"cannot read the clause {clause!r}")
            same = version[: len(target)] == target
            if same != (operator == "=="):
                return False
            continue
        width = max(len(version), len(target))
        mine = version + (0,) * (width - len(version))
        theirs = target + (0,) * (width - len(target))
        if operator == "~=":
            prefix = target[:-1] if len(target) > 1 else target
            if not (mine >= theirs and version[: len(prefix)] == prefix):
                return False
        elif not {
            "==": mine == theirs,
            "===": mine == theirs,
            "!=": mine != theirs,
            "<=": mine <= theirs,
            ">=": mine >= theirs,
            "<": mine < theirs,
            ">": mine > theirs,
        }[operator]:
            return False
    return True


def check_python(version: tuple[int, ...] | None = None, specifier: str | None = None) -> Check:
    """The running Python against ``requires-python`` (peach's own, by default)."""
    version = tuple(version or sys.version_info[:3])
    specifier = specifier if specifier is not None else requires_python()
    shown = ".".join(str(part) for part in version)
    details = {"version": shown, "requires_python": specifier, "executable": sys.executable}
    if not specifier:
        return Check(
            "python",
            "warn",
            f"Python {shown}; peach's requires-python is unknown (is peach installed?)",
            advice="install peach with `python -m pip install -e .` from its source folder",
            details=details,
        )
    try:
        good = satisfies(version, specifier)
    except ValueError as error:
        return Check(
            "python",
            "warn",
            f"Python {shown}; requires-python {specifier!r}: {error}",
            None,
            details,
        )
    if good:
        return Check("python", "ok", f"Python {shown} (peach needs {specifier})", details=details)
    return Check(
        "python",
        "fail",
        f"Python {shown} is too old or too new: peach needs {specifier}",
        advice=f"install a Python that matches {specifier} (`uv python install` does) and "
        "reinstall peach with it",
        details=details,
    )


def locate_uv() -> str | None:
    """The uv binary environments are built with: the ``uv`` package's, else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def check_uv(path: str | None) -> Check:
    """uv at ``path`` runs and reports its version."""
    advice = "install it: `python -m pip install uv` (peach builds every py_environment with uv)"
    if path is None:
        return Check("uv", "fail", "uv not found", advice=advice)
    try:
        result = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=UV_VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        problem = f"did not answer --version in {UV_VERSION_TIMEOUT_S:g} s"
    except OSError as error:
        problem = f"cannot run: {error.strerror or error}"
    else:
        words = result.stdout.split()
        if result.returncode == 0 and len(words) >= 2 and words[0] == "uv":
            return Check(
                "uv", "ok", f"uv {words[1]} ({path})", details={"version": words[1], "path": path}
            )
        output = (result.stderr or result.stdout).strip().splitlines()
        problem = f"--version failed (exit {result.returncode})" + (
            f": {output[0][:200]}" if output else ""
        )
    return Check(
        "uv",
        "fail",
        f"uv at {path} {problem}",
        advice="reinstall it: `python -m pip install --force-reinstall uv`",
        details={"path": path},
    )


def check_port(host: str, port: int) -> Check:
    """Whether `peach dev` could listen on ``host:port`` now (bound as it binds, then freed)."""
    where = f"{host}:{port}"
    details = {"host": host, "port": port}
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as `peach dev` binds
        sock.bind((host, port))
        sock.listen(1)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            holder = port_holder(port)
            summary = f"port {port} is in use on {host}" + (f" (by {holder})" if holder else "")
            advice = (
                f"stop what listens on {where}, or run `peach dev --port N` (0 picks a free port)"
            )
        else:
            summary = f"cannot listen on {where}: {error.strerror or error}"
            advice = "run `peach dev --port N` with another port (0 picks a free one)"
        return Check("port", "fail", summary, advice=advice, details=details)
    finally:
        sock.close()
    return Check("port", "ok", f"port {port} is free on {host} (for peach dev)", details=details)


def check_processes(lacking: list[Feature] | None = None) -> Check:
    """Whether what peach starts is sure to die with it (SPEC §6), and what of Linux's this
    system lacks (default: ``peach_cli.runtime.linux.missing()``): each with what peach does
    without it."""
    from peach_cli.runtime.linux import missing

    lacking = missing() if lacking is None else lacking
    details: dict[str, Any] = {
        "keeper": all(f.name != "subreaper" for f in lacking),
        "lacking": {f.name: f.lost for f in lacking},
    }
    if not lacking:
        return Check(
            "processes",
            "ok",
            "what replicas and tasks start dies with them and with peach, even a killed peach",
            details=details,
        )
    summary = "this system lacks " + "; ".join(f"{f.label}: {f.lost}" for f in lacking)
    if details["keeper"]:
        advice = "nothing to do: peach works without them"
    else:
        advice = "stop peach with Ctrl-C rather than kill -9; check for leftover processes"
    return Check("processes", "warn", summary, advice=advice, details=details)


def port_holder(port: int) -> str | None:
    """``name (pid N)`` of the process listening on ``port``, when this user may know it."""
    import psutil

    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for connection in connections:
        listening = connection.status == psutil.CONN_LISTEN
        if listening and connection.laddr and connection.laddr.port == port and connection.pid:
            try:
                return f"{psutil.Process(connection.pid).name()} (pid {connection.pid})"
            except psutil.Error:
                return f"pid {connection.pid}"
    return None
