"""The code a cluster runs, as zips named by their content hash.

Each deployment gets its own ``working_dir`` zip: the gateway's holds the routing plan, a
component's holds the project's files (those ``uploads.select_files`` picks: no notebooks,
conf, dot-files, ignored files, virtualenvs or caches) plus its spec. The tool's own
package goes in one more zip, for ``py_modules``. Zips are byte-for-byte reproducible (sorted entries, fixed
timestamps), so an unchanged component keeps the same ``gcs://`` URI, its deployment's
options do not change, and a redeploy leaves its replicas running.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peach_cli.errors import DeployError

SPEC_DIR = ".peach"
GATEWAY_FILE = f"{SPEC_DIR}/gateway.json"
COMPONENT_FILE = f"{SPEC_DIR}/component.json"
TASKS_FILE = f"{SPEC_DIR}/tasks.json"
"""The project's tasks as Ray job requests, for ``trigger_task_with_event`` in a replica."""

MAX_PACKAGE_BYTES = 500 * 1024 * 1024
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Package:
    """One zip to upload: its content-hashed name and its bytes."""

    name: str
    data: bytes

    @property
    def uri(self) -> str:
        """How a ``runtime_env`` refers to it once uploaded."""
        return f"gcs://{self.name}"


def build_zip(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """A reproducible zip of ``(posix path, bytes)`` entries (same input, same bytes).

    >>> build_zip([("b", b"2"), ("a", b"1")]) == build_zip([("a", b"1"), ("b", b"2")])
    True
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def package(kind: str, entries: Iterable[tuple[str, bytes]]) -> Package:
    """Zip ``entries`` into a package named ``peach_<kind>_<content hash>.zip``."""
    data = build_zip(entries)
    if len(data) > MAX_PACKAGE_BYTES:
        raise DeployError(
            f"the {kind} package is {len(data) // (1024 * 1024)} MiB, over the cluster's "
            f"limit of {MAX_PACKAGE_BYTES // (1024 * 1024)} MiB",
            hint="move large data out of the project folder and load it in init",
        )
    digest = hashlib.sha256(data).hexdigest()[:20]
    return Package(f"peach_{kind}_{digest}.zip", data)


def project_files(root: Path, excluded: Iterable[str] = ()) -> list[tuple[str, bytes]]:
    """The project's files to upload as ``(posix path, bytes)`` (see ``uploads``).

    ``excluded`` are relative posix paths left out too (the conf files). Raises
    ``DeployError`` before reading anything when they are over Ray's package limit.
    """
    from peach_cli.deploy.uploads import check_size, read_files, select_files

    selection = select_files(root, excluded)
    check_size(selection)
    return read_files(selection)


RUNTIME_MODULES = (
    "__init__.py",
    "decorator.py",
    "errors.py",
    "plan.py",
    "task_runtime.py",
    "triggers.py",
    "contract/__init__.py",
    "contract/ab.py",
    "contract/answers.py",
    "contract/binding.py",
    "contract/errors.py",
    "contract/flow.py",
    "contract/request.py",
    "contract/results.py",
    "contract/runner.py",
    "contract/transport.py",
    "deploy/__init__.py",
    "deploy/app.py",
    "deploy/config.py",
    "deploy/packaging.py",
    "deploy/progress.py",
    "deploy/reports.py",
)
"""The part of ``peach_cli`` that replicas import (notebooks' ``from peach_cli import
endpoint`` included): a change anywhere else in the tool does not restart replicas."""


def runtime_package() -> Package:
    """The runtime part of ``peach_cli``, for ``py_modules``: the cluster needs only Ray."""
    import peach_cli

    source = Path(peach_cli.__file__).parent
    entries = [
        (f"peach_cli/{module}", (source / module).read_bytes()) for module in RUNTIME_MODULES
    ]
    return package("runtime", entries)


def json_bytes(data: Any) -> bytes:
    """Canonical JSON (sorted keys), so equal data hashes equally."""
    return json.dumps(data, sort_keys=True, indent=1, default=str).encode()
