"""The options of the commands that send requests to a host: `peach ask`, `test`, `fuzz`,
`replay`, `bench` and `profile`, each command's in one ``Options`` class
(``peach_cli.commands.options``), written once: ``peach_cli/cli.py`` hands it whole to the
command's ``run_*`` function."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from peach_cli.commands.completion import complete_target
from peach_cli.commands.options import (
    ANSWER_TIMEOUT_HELP,
    ENDPOINT_TARGET_HELP,
    AddressOption,
    ConcurrencyOption,
    FormatOption,
    HeaderOption,
    LoadItemsArg,
    Options,
    RequestTimeoutOption,
    UrlOption,
    duration_option,
    format_option,
    project_option,
    rate_option,
    stream_option,
    timeout_option,
    url_option,
    value_option,
)


class AskOptions(Options):
    """`peach ask`."""

    target: Annotated[
        str,
        typer.Argument(
            help="An endpoint path like /assistant (joined to --url), or a full URL.",
            show_default=False,
            autocompletion=complete_target,
        ),
    ]
    items: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Parameters: KEY=VALUE is sent as the query string ?KEY=VALUE would be, so"
            " n=3 reaches `n: int` as 3 (a value too long for a 2 KiB URL goes in the JSON"
            " body, as a string); KEY:=JSON is a raw JSON body field; KEY==VALUE always goes"
            " in the query string; Name:Value is a header; KEY=@FILE and KEY:=@FILE read the"
            " value from a file. Split as httpie splits items; \\ escapes a separator.",
            show_default=False,
        ),
    ] = None
    stream: Annotated[bool, stream_option("Ask for a stream (sends stream=true).")] = False
    url: UrlOption = None
    raw: Annotated[
        bool, typer.Option("--raw", help="Print the response body exactly as received.")
    ] = False
    get: Annotated[
        bool,
        typer.Option(
            "--get", help="Send every parameter, KEY:=JSON too, as the query string (GET)."
        ),
    ] = False
    json_body: Annotated[
        Optional[str],
        value_option(
            "--json", help="A JSON object body, or @file (@- for stdin); items are merged into it."
        ),
    ] = None
    headers: HeaderOption = None
    timeout_s: Annotated[
        float,
        timeout_option(
            "Seconds to wait for the connection, the answer, and between stream chunks."
        ),
    ] = 60.0
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown",
            "-m",
            help="Render text as Markdown: a stream live, a text result at once (terminal only).",
        ),
    ] = False


class TestOptions(Options):
    """`peach test`."""

    __test__ = False  # not a pytest test class

    paths: Annotated[
        Optional[list[Path]],
        typer.Argument(
            help="PROJECT (default: the current folder), then case files (default: every "
            "*.peach-test.yaml of the project).",
            show_default=False,
        ),
    ] = None
    url: Annotated[
        Optional[str],
        url_option(
            "Run against this host (a peach dev, or a deployed app with its route prefix) "
            "instead of starting the project's simulator."
        ),
    ] = None
    keyword: Annotated[
        Optional[str],
        typer.Option("-k", help="Only the cases whose name contains TEXT.", show_default=False),
    ] = None
    output_format: Annotated[str, format_option("text, json or junit")] = "text"
    timeout_s: Annotated[float, timeout_option(ANSWER_TIMEOUT_HELP)] = 60.0


class FuzzOptions(Options):
    """`peach fuzz`."""

    project: Annotated[
        Optional[str],
        typer.Argument(
            help="The project folder (default: the current folder; a first word that is no "
            "folder is a target).",
            show_default=False,
        ),
    ] = None
    targets: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="The endpoints to fuzz, by name (greet) or url (/greet) (default: every one).",
            show_default=False,
        ),
    ] = None
    url: Annotated[
        Optional[str],
        url_option(
            "Fuzz this host (a peach dev, or a deployed app with its route prefix) "
            "instead of starting the project's simulator."
        ),
    ] = None
    examples: Annotated[
        int, typer.Option("--examples", help="Generated requests per endpoint.")
    ] = 50
    seed: Annotated[
        Optional[int],
        value_option("--seed", help="Makes the run repeatable (default: a random one, shown)."),
    ] = None
    output_format: FormatOption = "text"


class ReplayOptions(Options):
    """`peach replay`."""

    file: Annotated[
        Path,
        typer.Argument(help="A recording: what peach dev --record FILE wrote.", show_default=False),
    ]
    url: Annotated[
        Optional[str],
        url_option(
            "Where to send the requests. Default: env PEACH_URL, else http://127.0.0.1:8000."
        ),
    ] = None
    against: Annotated[
        Optional[str],
        value_option(
            "--against",
            help="Compare with this host's answers to the same requests instead of the recorded ones.",
        ),
    ] = None
    ignore: Annotated[
        Optional[list[str]],
        typer.Option(
            "--ignore",
            metavar="JSONPATH",
            help="Leave this out of the comparison, like $.result.generated_at (repeatable).",
            show_default=False,
        ),
    ] = None
    output_format: FormatOption = "text"
    timeout_s: Annotated[float, timeout_option(ANSWER_TIMEOUT_HELP)] = 60.0
    project: Annotated[
        Optional[Path],
        project_option(
            "The project whose secret values are masked in what is shown (default: here)."
        ),
    ] = None


EndpointTargetArg = Annotated[
    str, typer.Argument(help=ENDPOINT_TARGET_HELP, autocompletion=complete_target)
]
"""``TARGET`` of the commands that load one endpoint."""


class BenchOptions(Options):
    """`peach bench`."""

    target: Annotated[
        Optional[str],
        typer.Argument(
            help=ENDPOINT_TARGET_HELP, show_default=False, autocompletion=complete_target
        ),
    ] = None
    items: LoadItemsArg = None
    url: UrlOption = None
    rate: Annotated[
        Optional[float],
        rate_option(
            "Open loop: start this many requests a second, whatever the answers;"
            " latency counts from each request's scheduled start."
        ),
    ] = None
    concurrency: ConcurrencyOption = None
    duration_s: Annotated[
        Optional[float],
        duration_option("Seconds to load, after the warm-up (default 10, unless --requests)."),
    ] = None
    requests: Annotated[
        Optional[int],
        value_option("--requests", "-n", help="Stop after this many requests."),
    ] = None
    warmup_s: Annotated[
        float,
        typer.Option("--warmup", help="Seconds of load sent first and not measured."),
    ] = 0.0
    stream: Annotated[bool, stream_option("Ask for streams and measure their chunks.")] = False
    record_file: Annotated[
        Optional[Path],
        value_option("--from", help="Send the requests of a `peach dev --record` file, in turn."),
    ] = None
    headers: HeaderOption = None
    timeout_s: RequestTimeoutOption = 60.0
    output_format: FormatOption = "text"
    compare_file: Annotated[
        Optional[Path],
        value_option(
            "--compare", help="An earlier `--format json` output: show each figure against it."
        ),
    ] = None


ProfileOutputOption = Annotated[
    Optional[Path],
    value_option(
        "--output", "-o", help="Write FILE.svg (a flame graph) or FILE.json (a speedscope file)."
    ),
]


class ProfileOptions(Options):
    """`peach profile`."""

    target: EndpointTargetArg
    items: LoadItemsArg = None
    url: UrlOption = None
    project: Annotated[
        Optional[Path],
        project_option(
            "The project to start the simulator of, without --url; with --url of a "
            "deployed app, the project whose cells name the lines (default: here)."
        ),
    ] = None
    rate: Annotated[
        Optional[float], rate_option("Open loop: start this many requests a second.")
    ] = None
    concurrency: ConcurrencyOption = None
    duration_s: Annotated[Optional[float], duration_option("Seconds to load (default 10).")] = None
    init: Annotated[
        bool,
        typer.Option(
            "--init",
            help="Profile the components' init instead: their replicas"
            " restart with the profiler on; no load is sent.",
        ),
    ] = False
    cpu: Annotated[
        bool, typer.Option("--cpu", help="Sample CPU time instead of wall-clock time.")
    ] = False
    output_file: ProfileOutputOption = None
    headers: HeaderOption = None
    timeout_s: RequestTimeoutOption = 60.0
    output_format: FormatOption = "text"
    address: AddressOption = None
