"""`peach profile`: where an endpoint spends its time, as notebook positions (SPEC §12).

The host is wired once (``peach_cli.testing.host.Host``: without ``--url`` the project's
simulator, started here as `peach test` does), and profiled by ``peach_cli.profile.run``:
the endpoint loaded with `peach bench`'s load generator while every replica of its
components samples itself, or (``--init``) the components' init. The profiles are merged and folded (``peach_cli.profile.model``) and shown as the hottest
lines (``peach_cli.views.profile``), or as JSON; ``-o FILE.svg`` writes a flame graph,
``-o FILE.json`` a speedscope file. ``--url`` of a deployed app (its gateway's health
declares ``host: "ray"``): its replicas are profiled by the Ray dashboard while the same
load runs, and shown the same way.

Exit codes: 0 profiled · 2 bad command line, or a host peach cannot profile (a dashboard
that cannot, ``--init`` on a deployed app) · 3 no request got an answer · 130 Ctrl-C.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peach_cli.commands.bench import check_load_options
from peach_cli.errors import UsageError

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.host_options import ProfileOptions
    from peach_cli.profile.run import Profiled

EXIT_NO_ANSWER = 3
EXIT_INTERRUPTED = 130
DEFAULT_DURATION_S = 10.0
OUTPUT_SUFFIXES = (".svg", ".json")


def run_profile(out: Output, options: ProfileOptions) -> int:
    """Run `peach profile`; return the exit code (usage mistakes raise ``UsageError``)."""
    _check_options(options)
    from peach_cli.client.items import base_url, prepare_request
    from peach_cli.profile.load import Load
    from peach_cli.profile.run import profile_host
    from peach_cli.testing.host import Host

    load = Load(
        options.rate,
        options.concurrency,
        options.duration_s or DEFAULT_DURATION_S,
        options.timeout_s,
    )
    # read before any host starts: a mistake in --url, TARGET or an item stops the command here
    url = base_url(options.url)
    request = prepare_request(
        options.target,
        options.items or (),
        headers=options.headers or (),
        timeout_s=load.timeout_s,
        tool="profile",
    )
    shown = Shown(out, options.cpu, options.init, options.output_file, options.output_format)
    # its conf found and read once: with --url, for the secrets to mask and the lines to name
    project = options.project or Path.cwd()
    with Host(
        project,
        url,
        doing="profiling",
        tool="profile",
        usage_errors=False,
        secrets=out.secrets,
    ) as host:
        profiled = profile_host(
            host,
            request,
            load,
            cpu=options.cpu,
            init=options.init,
            address=options.address,
            named=options.project is not None,
        )
    return _report(profiled, shown)


def _check_options(options: ProfileOptions) -> None:
    check_load_options(options.output_format, options.rate, options.concurrency, options.duration_s)
    output_file = options.output_file
    if output_file is not None and output_file.suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"-o {output_file}: give a file ending in .svg (a flame graph) or .json (speedscope)"
        )
    load_given = (options.rate, options.concurrency, options.duration_s) != (None, None, None)
    if options.init and load_given:
        raise UsageError("--init profiles init and sends no load: leave out --rate, "
                         "--concurrency and --duration")  # fmt: skip


@dataclass(frozen=True)
class Shown:
    """What is profiled (``cpu``: CPU time, ``init``: the components' init) and how the
    profile is shown: on ``out``, as ``output`` (text or json), and the file ``-o`` writes."""

    out: Output
    cpu: bool
    init: bool
    output_file: Path | None
    output: str


def _report(profiled: Profiled, shown: Shown) -> int:
    from peach_cli.profile.model import Profile

    init, cpu, output_file, output = shown.init, shown.cpu, shown.output_file, shown.output
    figures, path = profiled.figures, profiled.path

    profile = Profile.merge(profiled.profiles, duration_s=profiled.duration_s)
    what = f"init of {path}" if init else f"{profiled.method} {path}"
    title = f"peach profile: {what} ({'CPU time' if cpu else 'wall-clock'})"
    if output_file is not None:
        _write(shown.out, output_file, profile, title)
    if output == "json":
        from peach_cli.views.console import print_json

        print_json(shown.out, profile.to_json(), channel="profile")
    else:
        from peach_cli.views.profile import render_profile

        render_profile(shown.out, profile, what, figures, output_file)
    if profiled.interrupted:
        return EXIT_INTERRUPTED
    if figures is not None and figures["requests"]["answered"] == 0:
        return EXIT_NO_ANSWER
    return 0


def _write(out: Output, path: Path, profile: Any, title: str) -> None:
    import json

    if path.suffix.lower() == ".svg":
        from peach_cli.profile.flame import flame_graph

        text = flame_graph(profile, title, out.secrets)
    else:
        from peach_cli.profile.model import speedscope

        text = out.secrets.json_text(speedscope(profile, title), indent=None)
        json.loads(text)  # what speedscope reads
    try:
        out.write_file(path, text, channel="profile")
    except OSError as error:
        raise UsageError(f"-o {path}: cannot write it ({error.strerror})") from None


__all__ = ["run_profile"]
