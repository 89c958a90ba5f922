"""The environment a worker process starts with: the minimal one of SPEC §10.

Replicas, spares and tasks get what a process needs to run — ``PATH``, ``HOME``, ``USER``,
the locale, ``TZ``, the temporary folder, the proxy and CA-bundle variables, the system
variables Windows needs — and nothing else of the user's shell: no ``RAY_AUTH_TOKEN``, no
unrelated key. A component's ``env_vars`` and secrets are added by the worker itself when
it takes its component (``Replica`` sends them with the component), so a spare started
before it knows its component carries nobody's secrets.

``--inherit-env`` (``inherit=True``) passes the whole environment instead.

    minimal_environment(os.environ)   # {'PATH': ..., 'HOME': ..., 'LANG': ...}
"""

from __future__ import annotations

from collections.abc import Mapping

from peach_cli.runtime.linux import WITHOUT_ENV

KEPT = frozenset(
    {
        # the process and its user
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        # locale and time
        "LANG",
        "LANGUAGE",
        "TZ",
        # temporary files
        "TMPDIR",
        "TEMP",
        "TMP",
        # the network: proxies and certificate bundles
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        # what Python and uv need to run (never an index URL: it may hold a password)
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "LD_LIBRARY_PATH",
        "DYLD_LIBRARY_PATH",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_RUNTIME_DIR",
        "UV_CACHE_DIR",
        "UV_PYTHON_INSTALL_DIR",
        # Windows
        "SYSTEMROOT",
        "SYSTEMDRIVE",
        "WINDIR",
        "COMSPEC",
        "PATHEXT",
        "USERPROFILE",
        "APPDATA",
        "LOCALAPPDATA",
        "PROGRAMDATA",
        "USERNAME",
        # Linux's features a worker does without too, as peach does (peach_cli.runtime.linux)
        WITHOUT_ENV,
    }
)
"""The variables of peach's environment a worker keeps (``LC_*`` too)."""


def minimal_environment(environ: Mapping[str, str], *, inherit: bool = False) -> dict[str, str]:
    """The variables of ``environ`` a worker keeps (all of them with ``inherit``).

    >>> minimal_environment({"PATH": "/bin", "LC_ALL": "C", "RAY_AUTH_TOKEN": "t"})
    {'PATH': '/bin', 'LC_ALL': 'C'}
    """
    if inherit:
        return dict(environ)
    return {k: v for k, v in environ.items() if k in KEPT or k.startswith("LC_")}
