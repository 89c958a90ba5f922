"""The code a cluster runs, as zips named by their content hash.

A deploy sends:

* **the project package** (``_ray_pkg_<sha1 of the zip>.zip``, named as Ray's own client
  names a package): the project's files (those ``uploads.select_files`` picks: no notebooks,
  conf, dot-files, ignored files, virtualenvs or caches). It is the ``working_dir`` of every
  component deployment and of every task's Ray job, so it is uploaded once whatever the
  component count, and every replica reads the very same files;
* **one small spec package per component** (``peach_component_<hash>.zip``) in its
  ``py_modules``: a ``_peach_spec`` folder holding the component's spec (its extracted
  notebook code, method, init, options). A task's job gets one too (``peach_task_<hash>.zip``: its spec, and ``__main__.py``, the
  job's entrypoint). The env's requirements are in the ``runtime_env`` itself (``uv``);
* the gateway's package (its ``working_dir``: the routing plan) and peach's runtime (the
  ``py_modules`` of every deployment and job).

What counts as a change for a component is what it runs: its own spec package, the project
package and its ``runtime_env``. A component whose notebook, spec and env did not change
keeps an identical deployment config, so Serve leaves its replicas running; a change to a
project file (a data file, a helper module) restarts every component, since each reads
those files. Zips are byte-for-byte reproducible (sorted entries, fixed timestamps), so an
unchanged project has the same names, and a deploy uploads only the packages the cluster
lacks (``GET /api/packages/gcs/<name>`` first, as Ray's client does): none at all.
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
"""The routing plan, in the gateway's own ``working_dir``."""
OPENAPI_FILE = f"{SPEC_DIR}/openapi.json"
"""The project's OpenAPI document, built by the CLI (the gateway reads no notebook)."""
SPEC_PACKAGE = "_peach_spec"
"""The folder of a deployment's or job's spec package: Ray puts it on ``sys.path``."""
COMPONENT_FILE = "component.json"
TASK_FILE = "task.json"
RAY_PACKAGE_PREFIX = "_ray_pkg_"

MAX_PACKAGE_BYTES = 500 * 1024 * 1024
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Package:
    """One zip to upload: its content-hashed name and its bytes."""

    name: str
    data: bytes
    kind: str = ""
    """``project``, ``component``, ``task``, ``gateway`` or ``runtime``."""
    about: str = ""
    """What it is for, in a few words (``--dry-run`` lists it)."""

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


def package(kind: str, entries: Iterable[tuple[str, bytes]], about: str = "") -> Package:
    """Zip ``entries`` into a package named ``peach_<kind>_<content hash>.zip``."""
    data = _checked_zip(kind, entries)
    digest = hashlib.sha256(data).hexdigest()[:20]
    return Package(f"peach_{kind}_{digest}.zip", data, kind, about)


def project_package(files: Iterable[tuple[str, bytes]]) -> Package:
    """The project's files, named as Ray names a package: ``_ray_pkg_<sha1 of the zip>.zip``."""
    data = _checked_zip("project", files)
    name = f"{RAY_PACKAGE_PREFIX}{hashlib.sha1(data).hexdigest()}.zip"
    return Package(name, data, "project", "the project's files, for every component and task")


_SPEC_INIT = b'"""What this deployment or job runs (written by peach deploy)."""\n'
_TASK_MAIN = (
    "from pathlib import Path\n\n"
    "from peach_cli.runtime.task import main\n\n"
    f"main([str(Path(__file__).with_name({TASK_FILE!r}))])\n"
).encode()
TASK_ENTRYPOINT = f"python -m {SPEC_PACKAGE}"
"""A task job's entrypoint: its spec package's ``__main__`` runs ``peach_cli.runtime.task``."""


def spec_package(kind: str, files: dict[str, bytes], about: str = "") -> Package:
    """A small package for ``py_modules``: ``files`` in the ``_peach_spec`` folder (a task's
    gets the ``__main__`` its job runs)."""
    entries = {f"{SPEC_PACKAGE}/__init__.py": _SPEC_INIT}
    if TASK_FILE in files:
        entries[f"{SPEC_PACKAGE}/__main__.py"] = _TASK_MAIN
    entries.update((f"{SPEC_PACKAGE}/{name}", data) for name, data in files.items())
    return package(kind, entries.items(), about)


def spec_file(name: str) -> Path | None:
    """On the cluster: the file ``name`` of this deployment's spec package (None: there is
    none, or it does not hold ``name``)."""
    import importlib.util

    found = importlib.util.find_spec(SPEC_PACKAGE)
    if found is None or not found.origin:
        return None
    path = Path(found.origin).with_name(name)
    return path if path.is_file() else None


def _checked_zip(kind: str, entries: Iterable[tuple[str, bytes]]) -> bytes:
    data = build_zip(entries)
    if len(data) > MAX_PACKAGE_BYTES:
        raise DeployError(
            f"the {kind} package is {len(data) // (1024 * 1024)} MiB, over the cluster's "
            f"limit of {MAX_PACKAGE_BYTES // (1024 * 1024)} MiB",
            hint="move large data out of the project folder and load it in init",
        )
    return data


def project_files(root: Path, excluded: Iterable[str] = ()) -> list[tuple[str, bytes]]:
    """The project's files to upload as ``(posix path, bytes)`` (see ``uploads``).

    ``excluded`` are relative posix paths left out too (the conf files). Raises
    ``DeployError`` before reading anything when they are over Ray's package limit.
    """
    from peach_cli.deploy.uploads import check_size, read_files, select_files

    selection = select_files(root, excluded)
    check_size(selection)
    return read_files(selection)


SERVE_APP_MODULES = (
    "peach_cli/boundary.py",
    "peach_cli/printable.py",
    "peach_cli/errors.py",
    "peach_cli/internal.py",
    "peach_cli/deploy/__init__.py",
    "peach_cli/deploy/app.py",
    "peach_cli/deploy/config.py",
    "peach_cli/deploy/packaging.py",
    "peach_cli/deploy/progress.py",
    "peach_cli/deploy/reports.py",
    "peach_cli/deploy/runs.py",
    "peach_cli/deploy/scheduler_app.py",
    "peach_cli/deploy/start_priority.py",
    "peach_cli/deploy/variables.py",
)
"""The Ray Serve application around the replica runtime (the gateway, component and task
scheduler deployments); ``tests/test_structure.py`` checks it holds everything ``deploy/app.py`` imports."""


def runtime_modules() -> tuple[str, ...]:
    """What Ray's replicas import of peach: the replica runtime (the ``peach_cli.runtime``
    package, notebooks' ``from peach_cli import endpoint`` included) and the Serve app around
    it. A change anywhere else in the tool does not restart replicas."""
    from peach_cli.envs.runtime import runtime_files

    return (*runtime_files(), *SERVE_APP_MODULES)


SITECUSTOMIZE = ("sitecustomize.py", "peach_cli/deploy/start_priority.py")
"""The runtime package's top-level ``sitecustomize``: ``start_priority`` again, which
lowers a replica's process before it imports Ray (see there)."""


def runtime_package() -> Package:
    """The runtime part of ``peach_cli``, for ``py_modules``: the cluster needs only Ray."""
    from peach_cli.envs.runtime import SOURCE_ROOT

    entries = [(name, (SOURCE_ROOT / name).read_bytes()) for name in runtime_modules()]
    name, source = SITECUSTOMIZE
    entries.append((name, (SOURCE_ROOT / source).read_bytes()))
    return package("runtime", entries, "peach's runtime")


def json_bytes(data: Any) -> bytes:
    """Canonical JSON (sorted keys), so equal data hashes equally."""
    return json.dumps(data, sort_keys=True, indent=1, default=str).encode()
