"""Releases (SPEC §6): what runs, what a deploy would change, going back.

* **What runs** — ``current_release`` describes the project a deploy sends: its git commit
  (short hash, ``+dirty`` when the project's files have uncommitted changes), or outside git
  a hash of its content; the time, who deploys (git's ``user.name``, else the login name),
  peach's version. ``stamp`` writes it in the application, as the gateway's ``user_config``
  (a change there reconfigures the gateway in place: no replica restarts for it);
  ``release_of`` reads it back from what Serve reports.
* **What a deploy would change** — ``plan_changes`` compares the deployments a deploy would
  send with those running, with the fields Serve itself compares to decide whether a
  replica restarts (``DeploymentVersion.requires_actor_restart``: the application's code
  version, then each deployment's ``ray_actor_options`` — its ``runtime_env`` split into the
  code, ``working_dir`` and ``py_modules``, and the environment, the rest). A task is not a
  deployment: its job request is fingerprinted the same way and recorded with the release.
* **Going back** — ``export_revision`` writes the project as committed at a revision into
  a temporary folder (``git archive``): the working tree is not touched.

Nothing here prints; errors are raised (``UsageError``).
"""

from __future__ import annotations

import getpass
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.deploy.progress import RELEASE_KEY, recorded_release
from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.deploy.config import Bundle
    from peach_cli.runtime.plan import ProjectPlan

GIT_TIMEOUT_S = 30
SCHEDULER = "tasks"
"""The task scheduler's deployment, in applications that run one."""

NEW, REMOVED, UNCHANGED = "new", "removed", "unchanged"
RESTARTS_CODE, RESTARTS_CONFIG, RESTARTS_ENV = (
    "restarts (code)",
    "restarts (config)",
    "restarts (env)",
)
_CODE_KEYS = ("working_dir", "py_modules")
_APP_CODE_KEYS = (
    "import_path",
    "runtime_env",
    "args",
    "autoscaling_policy",
)
"""The application fields Serve hashes into its code version (``get_app_code_version``):
when one changes, Serve builds the application again and every deployment restarts."""


# -- what runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """A deploy's version: ``abc1234``, ``abc1234+dirty`` or ``content:<hash>``."""

    version: str
    deployed_at: str
    """UTC, ``2026-12-07T15:02:11Z``."""
    deployed_by: str
    peach_version: str
    commit: str | None = None
    """The full commit hash (None outside git)."""
    ref: str | None = None
    """The revision ``--ref`` named, as the user wrote it."""
    tasks: Mapping[str, Mapping[str, str]] | None = None
    """Task name → its fingerprint (``Fingerprint.to_dict``), for ``--diff``."""
    components: Mapping[str, Mapping[str, str]] | None = None
    """Deployment name → its component's ``spec_parts``, for ``--diff``."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "commit": self.commit,
            "ref": self.ref,
            "deployed_at": self.deployed_at,
            "deployed_by": self.deployed_by,
            "peach_version": self.peach_version,
        }
        if self.tasks is not None:
            data["tasks"] = {name: dict(parts) for name, parts in self.tasks.items()}
        if self.components is not None:
            data["components"] = {name: dict(parts) for name, parts in self.components.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Release:
        tasks, components = data.get("tasks"), data.get("components")
        return cls(
            version=str(data.get("version") or "?"),
            deployed_at=str(data.get("deployed_at") or "?"),
            deployed_by=str(data.get("deployed_by") or "?"),
            peach_version=str(data.get("peach_version") or "?"),
            commit=data.get("commit"),
            ref=data.get("ref"),
            tasks=tasks if isinstance(tasks, dict) else None,
            components=components if isinstance(components, dict) else None,
        )


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    """``git -C folder ARGS`` (None when git is not installed or does not answer)."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        return subprocess.run(
            [git, "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def git_root(folder: Path) -> Path | None:
    """The root of the git repository holding ``folder`` (None: none, or no git)."""
    done = _git(folder, "rev-parse", "--show-toplevel")
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None
    return Path(done.stdout.strip())


def deployer_name(folder: Path) -> str:
    """Who deploys: git's ``user.name``, else the login name."""
    done = _git(folder, "config", "user.name")
    if done is not None and done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip()
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in this environment
        return "unknown"


def content_version(bundle: Bundle) -> str:
    """A project outside git: a hash of what it deploys (its packages are named by their
    content; peach's runtime left out, its version is recorded beside)."""
    names = sorted(p.name for p in bundle.packages if p.kind != "runtime")
    return "content:" + hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def current_release(
    plan: ProjectPlan, bundle: Bundle, *, source: Path | None = None, ref: str | None = None
) -> Release:
    """The release a deploy of ``plan`` records. ``source`` is the project folder in its
    repository when ``plan`` was read from an export of it (``--ref``): then the commit is
    ``ref``'s and the tree is clean by definition."""
    import peach_cli

    folder = source or plan.root
    tasks = task_fingerprints(plan, bundle)
    common = {
        "components": component_parts(plan),
        "deployed_at": _now(),
        "deployed_by": deployer_name(folder),
        "peach_version": peach_cli.__version__,
        "ref": ref,
        "tasks": tasks,
    }
    if ref is not None:
        commit = resolve_revision(folder, ref)
        return Release(version=_short(folder, commit), commit=commit, **common)  # type: ignore[arg-type]
    if git_root(folder) is None:
        return Release(version=content_version(bundle), **common)  # type: ignore[arg-type]
    head = _git(folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head is None or head.returncode != 0:  # a repository without a commit yet
        return Release(version=content_version(bundle), **common)  # type: ignore[arg-type]
    commit = head.stdout.strip()
    # the project's own files only (what a deploy reads), untracked ones included
    status = _git(folder, "status", "--porcelain", "--untracked-files=normal", "--", ".")
    dirty = bool(status is not None and status.returncode == 0 and status.stdout.strip())
    version = _short(folder, commit) + ("+dirty" if dirty else "")
    return Release(version=version, commit=commit, **common)  # type: ignore[arg-type]


def _short(folder: Path, commit: str) -> str:
    done = _git(folder, "rev-parse", "--short", commit)
    if done is not None and done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip()
    return commit[:7]


def stamp(bundle: Bundle, release: Release) -> None:
    """Record ``release`` in the application ``bundle`` sends: the gateway's ``user_config``."""
    from peach_cli.deploy.config import GATEWAY

    for deployment in bundle.application["deployments"]:
        if deployment["name"] == GATEWAY:
            deployment["user_config"] = {RELEASE_KEY: release.to_dict()}


def release_of(app: dict[str, Any]) -> Release | None:
    """The release recorded in an application as Serve reports it (None: deployed by an
    older peach, or not by peach)."""
    record = recorded_release(app)
    return None if record is None else Release.from_dict(record)


def _deployments(application: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [d for d in application.get("deployments") or () if isinstance(d, dict)]


# -- what a deploy would change ------------------------------------------------------------

_SPEC_ENV = frozenset({"py_env", "dependencies", "env_vars", "secrets"})
_SPEC_CONFIG = frozenset({"args", "replicas", "memory", "cpus", "timeout_s"})
_OWN_SPEC = ("peach_component_", "peach_task_")
"""The spec package among a deployment's or job's ``py_modules``: its parts are recorded
(``spec_parts``), so that a change says which part changed."""


@dataclass(frozen=True)
class Fingerprint:
    """What decides whether a replica (or a task's next run) restarts, and why.

    ``restart`` is what Serve compares (``requires_actor_restart``): when it is equal,
    nothing restarts. ``code``, ``env`` and ``config`` say which part changed: the code
    (notebook code, project files, peach's runtime, the application rebuilt), the
    environment (requirements, ``env_vars``, secrets), the options (``args``, CPUs, memory,
    replicas, a task's timeout, the gateway's routes)."""

    restart: str
    code: str
    env: str
    config: str

    def to_dict(self) -> dict[str, str]:
        return {"restart": self.restart, "code": self.code, "env": self.env, "config": self.config}


def _digest(value: Any) -> str:
    text = json.dumps(_normal(value), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _normal(value: Any) -> Any:
    """``value`` as Serve holds it: a whole float is the int it equals (its schema reads
    ``num_cpus: 1`` and ``memory: 67108864`` as floats, and reports them so).

    >>> _normal({"memory": 67108864.0, "num_cpus": [1.0, 0.5]})
    {'memory': 67108864, 'num_cpus': [1, 0.5]}
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _normal(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(item) for item in value]
    return value


def spec_parts(spec: Any) -> dict[str, str]:
    """A component's or task's spec (a dataclass) split as ``Fingerprint`` splits a change.

    >>> from peach_cli.runtime.plan import TaskSpec
    >>> a, b = TaskSpec("t", "T.ipynb", "x = 1", "T", "t"), TaskSpec("t", "T.ipynb", "x = 1", "T", "t", timeout_s=5)
    >>> [key for key in ("code", "env", "config") if spec_parts(a)[key] != spec_parts(b)[key]]
    ['config']
    """
    import dataclasses

    data = dataclasses.asdict(spec)
    env = {key: data.pop(key) for key in sorted(_SPEC_ENV & set(data))}
    config = {key: data.pop(key) for key in sorted(_SPEC_CONFIG & set(data))}
    return {"code": _digest(data), "env": _digest(env), "config": _digest(config)}


def fingerprint(
    options: Mapping[str, Any],
    inherited: Mapping[str, Any] | None = None,
    *,
    app_code: str = "",
    spec: Mapping[str, str] | None = None,
    routes: bool = False,
) -> Fingerprint:
    """The fingerprint of a deployment's ``ray_actor_options`` (or a job request: its
    ``runtime_env`` and the rest), over the application's ``runtime_env`` ``inherited`` as
    Serve merges them (the deployment's fields win). ``app_code``: the application's code
    version, part of every deployment's (Serve's ``code_version``); ``spec``: the parts of
    its spec package (``spec_parts``; without them, a new spec package counts as code);
    ``routes``: its ``working_dir`` holds routes (the gateway's), not code.

    >>> a = fingerprint({"num_cpus": 1, "runtime_env": {"working_dir": "gcs://a.zip"}})
    >>> b = fingerprint({"num_cpus": 2, "runtime_env": {"working_dir": "gcs://a.zip"}})
    >>> a.restart == b.restart, a.code == b.code, a.config == b.config
    (False, True, False)
    """
    runtime_env = {**(inherited or {}), **(options.get("runtime_env") or {})}
    rest = {key: value for key, value in options.items() if key != "runtime_env"}
    restart = _digest([app_code, rest, runtime_env])
    modules = [m for m in runtime_env.get("py_modules") or () if not _is_spec(m) or not spec]
    working_dir = runtime_env.get("working_dir")
    code: list[Any] = [app_code, modules, None if routes else working_dir]
    env: list[Any] = [{k: v for k, v in runtime_env.items() if k not in _CODE_KEYS}]
    config: list[Any] = [rest, working_dir if routes else None]
    if spec:
        code.append(spec.get("code"))
        env.append(spec.get("env"))
        config.append(spec.get("config"))
    return Fingerprint(restart, _digest(code), _digest(env), _digest(config))


def _is_spec(module: Any) -> bool:
    return isinstance(module, str) and any(marker in module for marker in _OWN_SPEC)


def change(before: Fingerprint | None, after: Fingerprint | None) -> str:
    """What a deploy does to one deployment or task, from its fingerprint running
    (``before``) and in the project (``after``).

    >>> same = Fingerprint("r", "c", "e", "o")
    >>> change(None, same), change(same, None), change(same, same)
    ('new', 'removed', 'unchanged')
    >>> change(same, Fingerprint("r2", "c2", "e2", "o")), change(same, Fingerprint("r2", "c", "e", "o2"))
    ('restarts (code)', 'restarts (config)')
    """
    if before is None:
        return NEW
    if after is None:
        return REMOVED
    if before.restart == after.restart:
        return UNCHANGED
    if before.code != after.code:
        return RESTARTS_CODE
    if before.env != after.env:
        return RESTARTS_ENV
    if before.config != after.config:
        return RESTARTS_CONFIG
    return RESTARTS_CODE  # a change no recorded part names: the code it runs


def app_code_version(application: Mapping[str, Any]) -> str:
    """The fields of an application Serve hashes into the code version of all of its
    deployments (see ``_APP_CODE_KEYS``)."""
    return _digest({key: application.get(key) for key in _APP_CODE_KEYS})


def deployment_fingerprints(
    application: Mapping[str, Any], specs: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, Fingerprint]:
    """Deployment name → fingerprint, for an application config (sent or deployed);
    ``specs``: deployment name → ``spec_parts`` of its component."""
    from peach_cli.deploy.config import GATEWAY

    inherited = application.get("runtime_env") or {}
    app_code = app_code_version(application)
    return {
        d["name"]: fingerprint(
            d.get("ray_actor_options") or {},
            inherited,
            app_code=app_code,
            spec=(specs or {}).get(d["name"]),
            routes=d["name"] == GATEWAY,
        )
        for d in _deployments(application)
        if "name" in d
    }


def component_parts(plan: ProjectPlan) -> dict[str, dict[str, str]]:
    """Deployment name → ``spec_parts`` of its component, for every component of ``plan``."""
    from peach_cli.deploy.config import deployment_name

    return {deployment_name(spec): spec_parts(spec) for spec in plan.components()}


def task_fingerprints(plan: ProjectPlan, bundle: Bundle) -> dict[str, dict[str, str]]:
    """Task name → the fingerprint of its job request (as a deploy of ``plan`` sends it)."""
    if not plan.tasks:
        return {}
    from peach_cli.deploy.jobs import job_template

    project = next(p for p in bundle.packages if p.kind == "project")
    result = {}
    for name, spec in plan.tasks.items():
        body = dict(job_template(plan, spec, project).body)
        options = {"runtime_env": body.pop("runtime_env", {}), **body}
        result[name] = fingerprint(options, spec=spec_parts(spec)).to_dict()
    return result


@dataclass(frozen=True)
class Change:
    """One line of ``peach deploy --diff``."""

    kind: str
    """``gateway``, ``component``, ``task`` or ``scheduler``."""
    name: str
    what: str
    """``new``, ``removed``, ``restarts (code|config|env)`` or ``unchanged``."""
    replicas: tuple[int | None, int | None] = (None, None)
    """The replica count running and asked for (a change alone restarts nothing)."""

    @property
    def restarts(self) -> bool:
        return self.what.startswith("restarts")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "change": self.what}


@dataclass(frozen=True)
class Changes:
    """What a deploy of the project would do to the application ``app``."""

    app: str
    running: Release | None
    """The release running (None: none recorded, or nothing deployed)."""
    deployed: bool
    """Whether the application runs on the cluster at all."""
    lines: tuple[Change, ...]


def _kind(name: str) -> str:
    from peach_cli.deploy.config import GATEWAY

    if name == GATEWAY:
        return "gateway"
    if name == SCHEDULER:
        return "scheduler"
    return "component"


def _replicas(application: Mapping[str, Any]) -> dict[str, int | None]:
    return {
        d["name"]: d.get("num_replicas") if isinstance(d.get("num_replicas"), int) else None
        for d in _deployments(application)
        if "name" in d
    }


def plan_changes(
    bundle: Bundle,
    details: Mapping[str, Any],
    components: Mapping[str, Mapping[str, str]],
    tasks: Mapping[str, Mapping[str, str]],
) -> Changes:
    """What deploying ``bundle`` would change on the cluster Serve's ``details`` describe.

    Deployments are compared as Serve compares them (``deployment_fingerprints``: the
    config the deploy sends against the one running), the reason told by the parts of the
    components' specs (``components``: the project's, against those the running release
    recorded); tasks by their fingerprints (``tasks``: the project's) against the recorded.
    """
    app = bundle.app_name
    current = dict((details.get("applications") or {}).get(app) or {})
    deployed = current.get("deployed_app_config") or {}
    if current.get("status") == "DELETING":
        deployed = {}
    running = release_of(current) if deployed else None
    recorded_specs = running.components if running is not None else None
    before = deployment_fingerprints(deployed, recorded_specs)
    after = deployment_fingerprints(bundle.application, components if recorded_specs else None)
    counts_before, counts_after = _replicas(deployed), _replicas(bundle.application)
    lines = []
    order = [*after, *(name for name in before if name not in after)]
    for name in sorted(order, key=lambda n: (_kind(n) != "gateway", _kind(n) == "scheduler", n)):
        what = change(before.get(name), after.get(name))
        counts = (counts_before.get(name), counts_after.get(name))
        lines.append(Change(_kind(name), name, what, counts))
    recorded = (running.tasks if running is not None else None) or {}
    for name in sorted({*tasks, *recorded}):
        what = change(_recorded(recorded.get(name)), _recorded(tasks.get(name)))
        lines.append(Change("task", name, what))
    return Changes(app, running, bool(deployed), tuple(lines))


def _recorded(parts: Mapping[str, str] | None) -> Fingerprint | None:
    """A task's fingerprint as a release recorded it (an unreadable one: a changed task)."""
    if parts is None:
        return None
    return Fingerprint(*(str(parts.get(key, "?")) for key in ("restart", "code", "env", "config")))


# -- going back ----------------------------------------------------------------------------


def resolve_revision(folder: Path, ref: str) -> str:
    """The full commit hash ``ref`` names in the repository holding ``folder``; a
    ``UsageError`` outside git or for a revision that does not exist."""
    if git_root(folder) is None:
        raise UsageError(
            f"--ref {ref}: the project {folder} is not in a git repository",
            hint="deploy the working tree with `peach deploy` (no --ref)",
        )
    if not ref.strip() or ref.startswith("-"):
        raise UsageError(f"--ref {ref!r} is not a git revision")
    done = _git(folder, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if done is None or done.returncode != 0 or not done.stdout.strip():
        raise UsageError(
            f"--ref {ref}: no such revision in the repository of {folder}",
            hint="name a commit, a tag or a branch (`git log --oneline` lists the commits)",
        )
    return done.stdout.strip()


@contextmanager
def export_revision(project: Path, ref: str) -> Iterator[Path]:
    """The project folder as committed at ``ref``, in a temporary folder removed on exit.

    ``git archive`` of the project's path writes the committed files only (the working
    tree and the index are not touched); the export is a repository of its own so that
    the same ``.gitignore`` rules apply to what is uploaded (the parent folders'
    ``.gitignore`` files as committed too). The project's ``.env`` (never committed, never
    uploaded) is copied so that the secrets a deploy needs are found as in the project.
    """
    project = project.resolve()
    commit = resolve_revision(project, ref)
    root = git_root(project)
    assert root is not None
    relative = project.relative_to(root.resolve()).as_posix()
    paths = [relative] if relative != "." else []
    parents = Path(relative).parents if relative != "." else ()
    for parent in parents:  # the ignore rules above the project, as committed
        ignore = ".gitignore" if str(parent) == "." else f"{parent.as_posix()}/.gitignore"
        listed = _git(root, "ls-tree", "--name-only", commit, "--", ignore)
        if listed is not None and listed.stdout.strip():
            paths.append(ignore)
    git = shutil.which("git")
    assert git is not None  # resolve_revision found the repository with it
    archive = subprocess.run(
        [git, "-C", str(root), "archive", "--format=tar", commit, "--", *paths],
        capture_output=True,
        timeout=GIT_TIMEOUT_S * 4,
        check=False,
    )
    if archive.returncode != 0:
        raise UsageError(f"--ref {ref}: the project {project} is not in that commit")
    with tempfile.TemporaryDirectory(prefix="peach-ref-") as temporary:
        where = Path(temporary)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(where, filter="data")
        _git(where, "init", "--quiet")
        exclude = root / ".git" / "info" / "exclude"
        if exclude.is_file():
            (where / ".git" / "info").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(exclude, where / ".git" / "info" / "exclude")
        exported = where / relative if relative != "." else where
        if not exported.is_dir():
            raise UsageError(f"--ref {ref}: the project {project} is not in that commit")
        from peach_cli.project.filenames import DOTENV

        dotenv = project / DOTENV
        if dotenv.is_file():
            shutil.copyfile(dotenv, exported / DOTENV)
        yield exported
