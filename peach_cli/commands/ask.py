"""`peach ask`: send one request; ``peach_cli.views.ask`` renders the answer or the stream.

On a terminal the answer is pretty-printed and a stream is rendered from its framing;
piped, stdout receives the payload only. Status lines and the summary go to stderr.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from peach_cli.client.items import build_request
from peach_cli.views.ask import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    detach_stdout,
    render_answer,
    render_stream,
)

if TYPE_CHECKING:
    from peach_cli.boundary import Output
    from peach_cli.commands.host_options import AskOptions


def run_ask(output: Output, options: AskOptions) -> int:
    """Run `peach ask`; return the exit code (errors are raised as ClientError/UsageError)."""
    request = build_request(
        options.target,
        options.items or (),
        base=options.url,
        stream=options.stream,
        get=options.get,
        json_body=options.json_body,
        headers=options.headers or (),
        timeout_s=options.timeout_s,
    )
    raw, markdown = options.raw, options.markdown
    _skip_unused_imports()
    from peach_cli.client.send import Client

    tty = sys.stdout.isatty()
    try:
        with Client.for_request(request) as client:
            if not request.stream:
                answer = client.send(request)
                return render_answer(
                    output, answer, client, request.url, tty=tty, raw=raw, md=markdown
                )
            with client.stream(request) as response:
                if response.status >= 300 or not response.is_stream:
                    answer = response.read_all()
                    return render_answer(
                        output, answer, client, request.url, tty=tty, raw=raw, md=markdown
                    )
                return render_stream(output, response, tty=tty, raw=raw, markdown=markdown)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        detach_stdout()
        return EXIT_BROKEN_PIPE


def _skip_unused_imports() -> None:
    """Keep `peach ask` quick to start: skip two costly imports this process never uses.

    ``import httpx`` loads httpx's own command line (click, pygments, rich) when it can, and
    httpcore loads trio when it is installed (for trio's async locks). Both treat a missing
    module as optional; marking them missing saves ~0.1 s or more of start-up.
    """
    for name in ("httpx._main", "trio"):
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]
