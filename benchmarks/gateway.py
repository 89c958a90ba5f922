"""How much `peach dev` adds over a bare Starlette app on uvicorn, measured in the same run.

Both servers serve the same trivial function, as ``def`` and as ``async def``, each the way
its host runs it: a ``def`` runs in a thread (peach dev: the replica's thread pool, as on the
platform; bare: a sync Starlette endpoint, which Starlette runs in its thread pool), an
``async def`` on the event loop. The row "bare calling it inline" compares peach dev's ``def``
with the bare app calling the function directly on its loop (no thread: the strictest
baseline). Both serve the same stream; each runs alone while it
is measured, on the same uvicorn settings (httptools, uvloop when installed):

* latency: sequential requests on one keep-alive connection, median and p99;
* throughput: 16 concurrent keep-alive clients for a few seconds;
* streaming: the delay between the generator yielding a chunk (it sends its own clock) and
  the client receiving it, and whether two yields ever arrived merged.

Usage::

    python benchmarks/gateway.py                 # prints a table and the ratios
    python benchmarks/gateway.py --requests 1000 --seconds 2   # quicker
    python benchmarks/gateway.py --json          # the figures, ratios and checks as JSON
    python benchmarks/gateway.py --repo /tmp/before   # peach dev from another checkout
    python benchmarks/gateway.py --no-fast-lane  # every request on the general path

From Python (``benchmarks/scale.py``)::

    from gateway import run
    ratios = run(requests=1000, seconds=2)   # {"def_median": 1.1, "async_rps": 0.95, ...}

A third server, "the floor", is bare Starlette forwarding each call to one standard-library
worker process over a Unix socket (length-prefixed JSON, one connection, calls multiplexed
by id; ``def`` in the worker's thread pool, ``async def`` on its loop): the least any
gateway → replica design pays. ``--previous DIR`` adds the ``peach dev`` of another checkout
(an earlier commit) to the same run.

Targets (issue 3): median ≤ 2× bare; ≥ 1,000 req/s with 16 clients; first chunk ≤ 5 ms
after the yield; no merged yields. Issue 28: median ≤ 1.25× bare and throughput ≥ 0.9×
bare, for ``def`` (its ``async def`` median target is replaced by issue 36's). Issue 36:
``async def`` median ≤ 1.0× the floor, ``async def`` throughput ≥ 1.1× bare, and with
``--previous`` ``def`` throughput ≥ 0.95× the earlier checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHUNKS = 20
SYNC_PATH = "/hello?name=bench"
ASYNC_PATH = "/hello-async?name=bench"
INLINE_PATH = "/hello-inline?name=bench"
CHUNK_GAP_S = 0.02

TRIVIAL_SOURCE = """\
def hello(name: str = "world"):
    return {"hello": name}


async def hello_async(name: str = "world"):
    return {"hello": name}
"""
STREAM_SOURCE = """\
import asyncio
import time


async def ticks(count: int = 20, gap: float = 0.02):
    for index in range(count):
        await asyncio.sleep(gap)
        yield f"{index} {time.time():.6f}\\n"
"""

BARE_APP = f"""\
import asyncio, time
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

{TRIVIAL_SOURCE}
{STREAM_SOURCE}

def hello_route(request):  # a sync endpoint: Starlette runs it in its thread pool
    name = request.query_params.get("name", "world")
    return JSONResponse({{"result": hello(name), "status": "ok"}})


async def hello_inline_route(request):  # the def called on the loop: no thread at all
    name = request.query_params.get("name", "world")
    return JSONResponse({{"result": hello(name), "status": "ok"}})


async def hello_async_route(request):
    name = request.query_params.get("name", "world")
    return JSONResponse({{"result": await hello_async(name), "status": "ok"}})


async def stream_route(request):
    count = int(request.query_params.get("count", "20"))
    gap = float(request.query_params.get("gap", "0.02"))
    return StreamingResponse(ticks(count, gap), media_type="text/plain; charset=utf-8")


app = Starlette(
    routes=[
        Route("/hello", hello_route),
        Route("/hello-async", hello_async_route),
        Route("/hello-inline", hello_inline_route),
        Route("/ticks", stream_route),
    ]
)
"""

FLOOR_WORKER = f"""\
import asyncio, json, struct, sys
from concurrent.futures import ThreadPoolExecutor

{TRIVIAL_SOURCE}

HEAD = struct.Struct("!II")
pool = ThreadPoolExecutor()


async def serve(reader, writer):
    loop = asyncio.get_running_loop()

    async def call(ident, request):
        if request["kind"] == "async":
            result = await hello_async(request["name"])
        else:
            result = await loop.run_in_executor(pool, hello, request["name"])
        body = json.dumps({{"result": result, "status": "ok"}}).encode()
        writer.write(HEAD.pack(ident, len(body)) + body)

    while True:
        try:
            ident, size = HEAD.unpack(await reader.readexactly(HEAD.size))
            request = json.loads(await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            return
        loop.create_task(call(ident, request))


async def main():
    server = await asyncio.start_unix_server(serve, sys.argv[1])
    print("ready", flush=True)
    await server.serve_forever()


asyncio.run(main())
"""

FLOOR_APP = """\
import asyncio, itertools, json, os, struct, subprocess, sys
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

HEAD = struct.Struct("!II")
SOCKET = os.path.abspath("floor.sock")
worker = subprocess.Popen(
    [sys.executable, "-I", "-S", "floor_worker.py", SOCKET], stdout=subprocess.PIPE
)
assert worker.stdout.readline() == b"ready\\n"


class Channel:
    \"\"\"One connection to the worker; calls multiplexed by id.\"\"\"

    def __init__(self):
        self.writer = None
        self.waiting = {}
        self.ids = itertools.count()

    async def call(self, kind, name):
        if self.writer is None:
            reader, self.writer = await asyncio.open_unix_connection(SOCKET)
            asyncio.get_running_loop().create_task(self.read(reader))
        ident = next(self.ids) & 0xFFFFFFFF
        answer = asyncio.get_running_loop().create_future()
        self.waiting[ident] = answer
        body = json.dumps({"kind": kind, "name": name}).encode()
        self.writer.write(HEAD.pack(ident, len(body)) + body)
        return await answer

    async def read(self, reader):
        while True:
            ident, size = HEAD.unpack(await reader.readexactly(HEAD.size))
            self.waiting.pop(ident).set_result(await reader.readexactly(size))


channel = Channel()


async def hello_route(request):
    body = await channel.call("def", request.query_params.get("name", "world"))
    return Response(body, media_type="application/json")


async def hello_async_route(request):
    body = await channel.call("async", request.query_params.get("name", "world"))
    return Response(body, media_type="application/json")


app = Starlette(routes=[Route("/hello", hello_route), Route("/hello-async", hello_async_route)])
"""

CONF = """\
codops: bench
endpoints:
  hello:
    url: /hello
    components:
      main: {notebook: Bench.ipynb, method: hello}
  hello_async:
    url: /hello-async
    components:
      main: {notebook: Bench.ipynb, method: hello_async}
  ticks:
    url: /ticks
    components:
      main: {notebook: Bench.ipynb, method: ticks}
"""


def notebook(*sources: str) -> str:
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": source.splitlines(True),
        }
        for source in sources
    ]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


# -- servers ------------------------------------------------------------------------------


class Server:
    def __init__(
        self, name: str, command: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log = log
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, NO_COLOR="1", PYTHONUNBUFFERED="1", **(env or {})),
            start_new_session=True,
        )
        self.url = self._wait_url()
        self.host, port = self.url.removeprefix("http://").split(":")
        self.port = int(port)

    def _wait_url(self, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        pattern = re.compile(r"(?:serving on|running on) (http://[\d.]+:\d+)")
        while time.monotonic() < deadline:
            match = pattern.search(self.log.read_text(errors="replace"))
            if match:
                return match.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise SystemExit(f"{self.name} did not start:\n{self.log.read_text(errors='replace')}")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                connection = http.client.HTTPConnection(self.host, self.port, timeout=5)
                connection.request("GET", "/hello")
                if connection.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"{self.name} never answered /hello")

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            except ProcessLookupError:
                pass


def _uvicorn_runner(module: str) -> str:
    return (
        "import socket, uvicorn\n"
        "sock = socket.socket(); sock.bind(('127.0.0.1', 0)); sock.listen(2048)\n"
        f"from {module} import app\n"
        "print('running on http://127.0.0.1:%d' % sock.getsockname()[1], flush=True)\n"
        "uvicorn.Server(uvicorn.Config(app, http='httptools', lifespan='off', log_level='warning',"
        " access_log=False, proxy_headers=False)).run(sockets=[sock])\n"
    )


def start_bare(folder: Path) -> Server:
    (folder / "bare_app.py").write_text(BARE_APP)
    runner = _uvicorn_runner("bare_app")
    return Server("bare", [sys.executable, "-c", runner], folder, folder / "bare.log")


def start_floor(folder: Path) -> Server:
    """Bare Starlette over one standard-library worker process on a Unix socket."""
    floor = folder / "floor"
    floor.mkdir()
    (floor / "floor_worker.py").write_text(FLOOR_WORKER)
    (floor / "floor_app.py").write_text(FLOOR_APP)
    runner = _uvicorn_runner("floor_app")
    return Server("floor", [sys.executable, "-c", runner], floor, folder / "floor.log")


def start_peach(
    folder: Path, *extra: str, repo: Path = REPO, env: dict[str, str] | None = None
) -> Server:
    project = folder / f"project-{len(list(folder.glob('project-*')))}"
    project.mkdir()
    (project / "peach.yaml").write_text(CONF)
    (project / "Bench.ipynb").write_text(notebook(TRIVIAL_SOURCE, STREAM_SOURCE))
    command = [
        sys.executable,
        "-m",
        "peach_cli.cli",
        "dev",
        str(project),
        "--port",
        "0",
        "--no-reload",
        *extra,
    ]
    env = {**(env or {}), "PYTHONPATH": str(repo)}  # that checkout's peach, whatever is installed
    return Server("peach dev", command, repo, folder / f"{project.name}.log", env)


# -- measurements -------------------------------------------------------------------------


def measure_latency(server: Server, requests: int, path: str) -> list[float]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    for _ in range(min(200, requests)):
        connection.request("GET", path)
        connection.getresponse().read()
    samples = []
    for _ in range(requests):
        began = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        samples.append(time.perf_counter() - began)
        assert response.status == 200
    connection.close()
    return samples


async def _client(host: str, port: int, path: str, stop_at: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    done = 0
    try:
        while time.perf_counter() < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
            assert match and head.startswith(b"HTTP/1.1 200"), head
            await reader.readexactly(int(match.group(1)))
            done += 1
    finally:
        counts.append(done)
        writer.close()


def measure_throughput(server: Server, clients: int, seconds: float, path: str) -> float:
    async def run() -> float:
        counts: list[int] = []
        began = time.perf_counter()
        await asyncio.gather(
            *(
                _client(server.host, server.port, path, began + seconds, counts)
                for _ in range(clients)
            )
        )
        return sum(counts) / (time.perf_counter() - began)

    try:
        import uvloop

        return uvloop.run(run())  # type: ignore[no-any-return]
    except ImportError:
        return asyncio.run(run())


def measure_stream(server: Server, rounds: int) -> tuple[list[float], int, int]:
    """Yield-to-receive delays of every chunk, chunks received, reads that held >1 chunk."""
    delays: list[float] = []
    received = merged = 0
    for _ in range(rounds):
        connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
        connection.request("GET", f"/ticks?stream=true&count={CHUNKS}&gap={CHUNK_GAP_S}")
        response = connection.getresponse()
        assert response.status == 200, response.read()
        while True:
            data = response.read1(65536)
            now = time.time()
            if not data:
                break
            lines = data.decode().splitlines()
            received += len(lines)
            merged += len(lines) > 1
            for line in lines:
                delays.append(now - float(line.split()[1]))
        connection.close()
    return delays, received, merged


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run_all(options: argparse.Namespace) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="peach-bench-") as tmp:
        folder = Path(tmp)
        peach_args = ("--shared-env",) if options.shared_env else ()
        peach_env = {"PEACH_NO_FAST_LANE": "1"} if options.no_fast_lane else {}
        repo = Path(options.repo).resolve()

        def start_peach_dev(folder: Path, repo: Path = repo) -> Server:
            return start_peach(folder, *peach_args, repo=repo, env=peach_env)

        starters = [("bare", start_bare), ("floor", start_floor), ("peach dev", start_peach_dev)]
        if options.previous:
            previous = Path(options.previous).resolve()
            starters.append(("previous", lambda folder: start_peach_dev(folder, previous)))
        for name, start in starters:
            server = start(folder)
            try:
                server.wait_ready()
                results[name] = _measure(server, options, streams=name != "floor")
                if name != "bare":
                    results[name]["inline_median_ms"] = results[name]["median_ms"]
            finally:
                server.stop()
    return results


def _measure(server: Server, options: argparse.Namespace, *, streams: bool) -> dict[str, float]:
    """Every figure of one server (the streams' ``nan`` where it serves none)."""
    sync = measure_latency(server, options.requests, SYNC_PATH)
    asynchronous = measure_latency(server, options.requests, ASYNC_PATH)
    inline = measure_latency(server, options.requests, INLINE_PATH) if server.name == "bare" else []
    throughput = measure_throughput(server, options.clients, options.seconds, SYNC_PATH)
    async_throughput = measure_throughput(server, options.clients, options.seconds, ASYNC_PATH)
    delays, received, merged = [float("nan")], 0, 0
    if streams:
        measure_stream(server, 1)  # warm-up: first-use imports and code paths
        delays, received, merged = measure_stream(server, options.stream_rounds)
    return {
        "median_ms": statistics.median(sync) * 1000,
        "p99_ms": percentile(sync, 0.99) * 1000,
        "rps": throughput,
        "inline_median_ms": statistics.median(inline or sync) * 1000,
        "async_median_ms": statistics.median(asynchronous) * 1000,
        "async_p99_ms": percentile(asynchronous, 0.99) * 1000,
        "async_rps": async_throughput,
        "chunk_median_ms": statistics.median(delays) * 1000,
        "chunk_p99_ms": percentile(delays, 0.99) * 1000,
        "chunks": received,
        "merged": merged,
    }


ROWS = [
    # label, figure, unit, ratio name
    ("def: median latency", "median_ms", "ms", "def_median"),
    ("def: p99 latency", "p99_ms", "ms", "def_p99"),
    ("def: throughput ({clients} clients)", "rps", "req/s", "def_rps"),
    ("def: median, bare calling it inline", "inline_median_ms", "ms", "def_inline_median"),
    ("async def: median latency", "async_median_ms", "ms", "async_median"),
    ("async def: p99 latency", "async_p99_ms", "ms", "async_p99"),
    ("async def: throughput ({clients} clients)", "async_rps", "req/s", "async_rps"),
    ("chunk yield→receive median", "chunk_median_ms", "ms", "chunk_median"),
    ("chunk yield→receive p99", "chunk_p99_ms", "ms", "chunk_p99"),
]


def ratios_of(results: dict[str, dict[str, float]], against: str = "bare") -> dict[str, float]:
    """peach dev / bare (or / ``against``: ``floor``, ``previous``) for every row
    (``def_median``, ``async_rps``, …)."""
    base, peach = results[against], results["peach dev"]
    return {name: peach[key] / base[key] if base[key] else float("inf") for _, key, _, name in ROWS}


def checks_of(results: dict[str, dict[str, float]], clients: int) -> dict[str, bool]:
    """Every target, by what it says: met or not."""
    peach = results["peach dev"]
    ratios = ratios_of(results)
    floor = ratios_of(results, "floor")
    checks = {
        "def: median ≤ 2× bare": ratios["def_median"] <= 2,
        "async def: median ≤ 2× bare": ratios["async_median"] <= 2,
        f"def: ≥ 1,000 req/s with {clients} clients": peach["rps"] >= 1000,
        "first chunk ≤ 5 ms after the yield (median)": peach["chunk_median_ms"] <= 5,
        "no two yields merged": peach["merged"] == 0,
        "def: median ≤ 1.25× bare": ratios["def_median"] <= 1.25,
        f"def: throughput ≥ 0.9× bare ({clients} clients)": ratios["def_rps"] >= 0.9,
        "async def: median ≤ 1.0× the floor": floor["async_median"] <= 1.0,
        f"async def: throughput ≥ 1.1× bare ({clients} clients)": ratios["async_rps"] >= 1.1,
    }
    if "previous" in results:
        previous = ratios_of(results, "previous")
        checks["def: throughput ≥ 0.95× the previous checkout's"] = previous["def_rps"] >= 0.95
    return checks


def report(results: dict[str, dict[str, float]], clients: int) -> bool:
    bare, peach = results["bare"], results["peach dev"]
    others = [name for name in ("floor", "previous") if name in results]
    ratios = {name: ratios_of(results, name) for name in ("bare", *others)}
    print(
        f"{'':38} {'bare':>16}"
        + "".join(f" {name:>16}" for name in others)
        + f" {'peach dev':>16} {'÷ bare':>8}"
        + "".join(f" {'÷ ' + name:>10}" for name in others)
    )
    for label, key, unit, name in ROWS:
        label = label.format(clients=clients)
        print(
            f"{label:38} {bare[key]:>10.2f} {unit:<5}"
            + "".join(f" {results[o][key]:>10.2f} {unit:<5}" for o in others)
            + f" {peach[key]:>10.2f} {unit:<5} {ratios['bare'][name]:>7.2f}×"
            + "".join(f" {ratios[o][name]:>9.2f}×" for o in others)
        )
    print(
        f"{'chunks received / reads merged':38} {bare['chunks']:>6.0f}/{bare['merged']:<5.0f}"
        f" {peach['chunks']:>6.0f}/{peach['merged']:<5.0f}"
    )
    checks = checks_of(results, clients)
    print()
    for label, passed in checks.items():
        print(f"{'PASS' if passed else 'FAIL'}  {label}")
    missed = [label for label, passed in checks.items() if not passed]
    print("targets met" if not missed else "TARGETS MISSED: " + "; ".join(missed))
    return not missed


def _options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput duration")
    parser.add_argument("--stream-rounds", type=int, default=5, help="streams of 20 chunks")
    parser.add_argument(
        "--json", action="store_true", help="print the figures, ratios and checks as JSON only"
    )
    parser.add_argument(
        "--repo",
        default=str(REPO),
        help="the checkout whose peach dev is measured (default: the one holding this script)",
    )
    parser.add_argument(
        "--previous",
        default=None,
        metavar="DIR",
        help="also measure the peach dev of this checkout (an earlier commit), in the same run",
    )
    parser.add_argument(
        "--no-fast-lane",
        action="store_true",
        help="PEACH_NO_FAST_LANE=1: every request on the gateway's general path (ASGI cycle)",
    )
    parser.add_argument(
        "--shared-env",
        action="store_true",
        help="peach dev --shared-env: replicas in peach's own interpreter (uvloop when installed)"
        " instead of the project's isolated env (asyncio's loop: the runtime is stdlib only)",
    )
    return parser.parse_args(argv)


def run(
    requests: int = 1000,
    seconds: float = 2.0,
    *,
    clients: int = 16,
    stream_rounds: int = 3,
    shared_env: bool = False,
    no_fast_lane: bool = False,
    repo: Path = REPO,
) -> dict[str, float]:
    """One run of both servers; peach dev / bare for every row (``def_median``,
    ``def_rps``, ``async_median``, ``async_rps``, ``chunk_median``, …)."""
    options = _options(
        [
            f"--requests={requests}",
            f"--seconds={seconds}",
            f"--clients={clients}",
            f"--stream-rounds={stream_rounds}",
            f"--repo={repo}",
            *(["--shared-env"] if shared_env else []),
            *(["--no-fast-lane"] if no_fast_lane else []),
        ]
    )
    return ratios_of(run_all(options))


def main() -> int:
    options = _options()
    results = run_all(options)
    if options.json:
        checks = checks_of(results, options.clients)
        print(
            json.dumps(
                {
                    **results,
                    "ratios": ratios_of(results),
                    "ratios_to_floor": ratios_of(results, "floor"),
                    "checks": checks,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0 if all(checks.values()) else 1
    return 0 if report(results, options.clients) else 1  # a missed target fails the run


if __name__ == "__main__":
    sys.exit(main())
