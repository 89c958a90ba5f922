"""`peach env list|build|prune`: the project's envs, built ahead of time, and the cache pruned.

Exit codes: 0 ok; 1 a build failed (the others are still built) or the conf has errors;
2 the command line is wrong.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from peach_cli import wording
from peach_cli.commands.loading import load_conf
from peach_cli.errors import UsageError
from peach_cli.wording import human_size

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.project_options import EnvBuildOptions, EnvListOptions, EnvPruneOptions
    from peach_cli.project.conf import PeachConf

FORMATS = ("text", "json")


def env_rows(conf: PeachConf) -> list[dict[str, Any]]:
    """One row per env of the project: what ``peach env list`` shows."""
    from peach_cli.envs import find_built, project_envs
    from peach_cli.envs.spec import env_users
    from peach_cli.envs.store import directory_size, in_use

    users = env_users(conf)
    rows = []
    for name, spec in project_envs(conf).items():
        built = find_built(spec)
        rows.append(
            {
                "name": name,
                "requirements": list(spec.requirements),
                "used_by": users.get(name, []),
                "built": built is not None,
                "in_use": in_use(built.key) if built else False,
                "pinned": list(built.pinned) if built else None,
                "size_bytes": directory_size(built.path) if built else None,
                "path": str(built.path) if built else None,
            }
        )
    return rows


def run_env_list(output: Output, options: EnvListOptions) -> int:
    project, output_format = options.project, options.output_format
    if output_format not in FORMATS:
        raise UsageError(
            f"unknown --format {output_format!r}", hint=f"use one of: {', '.join(FORMATS)}"
        )
    from peach_cli.envs import cache_root
    from peach_cli.views import console

    conf = load_conf(output, project)
    rows = env_rows(conf)
    if output_format == "json":
        console.print_json(output, {"cache": str(cache_root()), "envs": rows})
    else:
        console.print_env_list(output, rows, cache=str(cache_root()))
    return 0


def run_env_build(output: Output, options: EnvBuildOptions) -> int:
    project, offline, refresh = options.project, options.offline, options.refresh
    from peach_cli.envs import EnvBuildError, ensure_env, project_envs
    from peach_cli.runtime.linux import become_subreaper
    from peach_cli.views import console

    conf = load_conf(output, project)
    become_subreaper()  # what uv orphans is adopted here, not by init
    failed: list[EnvBuildError] = []
    specs = project_envs(conf)
    with _interrupted_by_termination():
        for spec in specs.values():
            with console.env_progress(output) as progress:
                try:
                    env = ensure_env(spec, offline=offline, refresh=refresh, progress=progress)
                except OSError as error:  # the cache folder is not writable, the disk is full
                    failure = EnvBuildError(
                        spec.name,
                        f"cannot write the env cache: {error}",
                        hint="make it writable, or set PEACH_ENV_CACHE to a folder that is",
                    )
                    failed.append(failure)
                    console.print_error(output, failure)
                    continue
                except EnvBuildError as error:
                    failed.append(error)
                    console.print_error(output, error)
                    continue
            console.print_env_built(output, spec.name, str(env.path), len(env.pinned))
    built = len(specs) - len(failed)
    console.print_summary(
        output, f"{built} of {wording.count(len(specs), 'env')} built", ok=not failed
    )
    return 1 if failed else 0


def run_env_prune(output: Output, options: EnvPruneOptions) -> int:
    all_envs, older_than_days = options.all_envs, options.older_than_days
    if older_than_days < 0:
        raise UsageError(f"--days must be 0 or more, not {older_than_days:g}")
    from peach_cli.envs import cache_root
    from peach_cli.envs.store import directory_size, prune, stale_envs
    from peach_cli.views import console

    sizes = {
        env.key: directory_size(env.path)
        for env in stale_envs(older_than_days=older_than_days, all_envs=all_envs)
    }
    pruned = prune(older_than_days=older_than_days, all_envs=all_envs)
    for env in pruned.removed:
        console.print_env_removed(output, str(env.path), env.requirements, sizes.get(env.key, 0))
    for env in pruned.in_use:
        console.print_env_removed(
            output,
            str(env.path),
            env.requirements,
            sizes.get(env.key, 0),
            kept="in use by a running peach",
        )
    removed = pruned.removed
    freed = sum(sizes.get(env.key, 0) for env in removed)
    what = "every env" if all_envs else f"envs unused for {older_than_days:g} days"
    kept = f"; {len(pruned.in_use)} in use kept" if pruned.in_use else ""
    count = len(pruned.runtimes)
    older = f"; {wording.count(count, 'runtime')} of other peach versions" if count else ""
    console.print_summary(
        output,
        f"removed {wording.count(len(removed), 'env')} "
        f"({human_size(freed)}): {what}, from {cache_root()}{kept}{older}",
        ok=True,
    )
    return 0


@contextlib.contextmanager
def _interrupted_by_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, ``kill``, ``timeout``) stop a build as Ctrl-C
    does: uv runs in its own process group, so only peach's own cleanup stops it, and a
    second signal (``timeout`` signals the process, then its group) must not cut that."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGHUP"):
        yield
        return

    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def interrupt(number: int, frame: object) -> None:
        for other in numbers:  # once: a second signal must not cut the cleanup that stops uv
            signal.signal(other, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {n: signal.signal(n, interrupt) for n in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
