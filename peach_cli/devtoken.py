"""The session token of a running ``peach dev`` (SPEC §6): what its state-changing
``/_peach/*`` actions (profiling, re-init) need besides a loopback peer.

A page of another origin cannot send a header a browser does not let it, but a script in a
page of the *same* origin — an endpoint that answers HTML — can send anything, and can read
every read-only ``/_peach/*`` route. What it cannot do is read a file: ``peach dev`` writes
its token to a file only its user can read, in the user's runtime folder, named after its
port; peach's own tools (``peach profile``) read it there and send it as ``x-peach-token``.

    token = DevToken.new()
    path = token.write(8000)           # $XDG_RUNTIME_DIR/peach/dev-8000.token, mode 0600
    read_token(8000) == token.value    # True (another process of the same user)
    token.remove()                     # at exit, if the file is still ours

The runtime folder is ``$XDG_RUNTIME_DIR/peach`` (Linux sessions have one, private to the
user); without it, ``peach-UID`` in the system's temporary folder, created ``0700`` and
checked to be the user's own and private (as tmux and ssh-agent do).
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from peach_cli.addresses import is_loopback

TOKEN_HEADER = "x-peach-token"


class TokenFolderError(OSError):
    """The runtime folder exists but is not the user's own private folder."""


def runtime_folder() -> Path:
    """The user's folder for ``peach dev``'s token files (not created here)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_absolute() and Path(base).is_dir():
        return Path(base) / "peach"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"peach-{uid}"


def token_file(port: int) -> Path:
    """Where the token of the ``peach dev`` listening on ``port`` is."""
    return runtime_folder() / f"dev-{port}.token"


def _private_folder() -> Path:
    """The runtime folder, created ``0700`` if missing; ``TokenFolderError`` when it is
    not the user's own, or others may enter it."""
    folder = runtime_folder()
    try:
        folder.mkdir(mode=0o700, parents=False, exist_ok=True)
    except FileNotFoundError:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise TokenFolderError(f"{folder} is not a folder")
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o077):
        raise TokenFolderError(f"{folder} is not a private folder of this user")
    return folder


class DevToken:
    """One server's token, and the file it is written to."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.path: Path | None = None
        """The file written by ``write`` (None before)."""

    @classmethod
    def new(cls) -> DevToken:
        return cls(secrets.token_urlsafe(32))

    def accepts(self, sent: str | None) -> bool:
        """Whether ``sent`` (the request's ``x-peach-token``) is this token."""
        return sent is not None and hmac.compare_digest(sent.encode(), self.value.encode())

    def write(self, port: int) -> Path:
        """Write the token to ``token_file(port)``, readable by this user only (``0600``,
        replaced whole: a reader never sees half of it). ``OSError`` when it cannot."""
        path = _private_folder() / f"dev-{port}.token"
        part = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, self.value.encode())
        finally:
            os.close(fd)
        os.replace(part, path)
        self.path = path
        return path

    def remove(self) -> None:
        """Remove the file ``write`` wrote, unless another server has replaced it since."""
        if self.path is not None and read_file(self.path) == self.value:
            try:
                self.path.unlink()
            except OSError:
                pass
        self.path = None


def read_file(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def read_token(port: int) -> str | None:
    """The token of the ``peach dev`` on ``port`` of this machine, or None."""
    return read_file(token_file(port))


def token_headers(origin: str) -> dict[str, str]:
    """The header carrying the token of the ``peach dev`` at ``origin`` — only for a
    loopback origin (a token never leaves the machine); empty when there is none.

    >>> token_headers("http://10.0.0.5:8000")
    {}
    """
    try:
        parts = urlsplit(origin)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return {}
    if not is_loopback(parts.hostname):
        return {}
    token = read_token(port)
    return {TOKEN_HEADER: token} if token else {}
