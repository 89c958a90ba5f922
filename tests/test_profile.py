"""`peach profile` (SPEC §12): a planted hot loop, a slow init and an awaiting coroutine, named
by their notebook cell and line; the flame graph, the speedscope file, the 80-column text,
the loopback-only actions and the refusal of a host peach cannot profile.

The project (tests/projects/profile) plants the hot loop at notebooks/Hot.ipynb cell 3,
line 4 (in ``busy``), a 0.5 s busy init at cell 2, line 7 (``slow_init``) and an
``async def`` that awaits ``asyncio.sleep`` (cell 4).
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from cli_support import REPO, run_peach

PROJECT = REPO / "tests" / "projects" / "profile"
HOT = {"position": "notebooks/Hot.ipynb, cell 3, line 4", "function": "busy"}
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> object:
    """`peach dev` on the profile project, every replica started."""
    from tests.conftest import start_peach_dev

    started = start_peach_dev(PROJECT, tmp_path_factory.mktemp("profile-dev") / "dev.log")
    request.addfinalizer(started.stop)
    started.wait_ready()
    return started


def profile(*args: str, columns: int = 200) -> tuple[int, str, str]:
    done = run_peach("profile", *args, cwd=PROJECT, columns=columns)
    return done.returncode, done.stdout, done.stderr


def profile_to(written: Path, dev, *args: str, columns: int = 200, path: str = "/hot") -> str:
    """`peach profile PATH --url DEV -o WRITTEN ARGS`: its standard output (it succeeded)."""
    code, out, err = profile(path, "--url", dev.url, "-o", str(written), *args, columns=columns)
    assert code == 0, out + err
    return out


def without_share(line: dict) -> dict:
    return {key: value for key, value in line.items() if key != "share"}


@pytest.mark.slow
def test_the_planted_hot_loop_comes_first_by_self_time() -> None:
    """Without --url: peach profile starts the project's simulator, loads /hot, stops it."""
    code, out, err = profile("/hot", "--duration", "2", "--format", "json")
    assert code == 0, out + err
    found = json.loads(out)
    assert sorted(found) == ["duration_s", "samples", "self", "total"]
    assert found["samples"] > 20 and found["duration_s"] >= 2
    assert without_share(found["self"][0]) == HOT, found["self"][:3]
    assert found["self"][0]["share"] > 0.5
    totals = [without_share(line) for line in found["total"]]
    caller = {"position": "notebooks/Hot.ipynb, cell 3, line 13", "function": "hot"}
    assert caller in totals and {"position": "peach", "function": "peach"} in totals
    shares = [line["share"] for line in found["self"]]
    assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 1) < 0.01


@pytest.mark.slow
def test_the_text_fits_80_columns_and_the_flame_graph_names_the_function(
    dev, tmp_path: Path
) -> None:
    picture = tmp_path / "hot.svg"
    out = profile_to(picture, dev, "n=30000", "--duration", "2", columns=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    first = lines[lines.index("by self time (the line itself)") + 1]
    assert first.endswith("notebooks/Hot.ipynb, cell 3, line 4 · busy"), out
    assert "flame graph: …" in out and out.rstrip().endswith("/hot.svg")

    root = ElementTree.parse(picture).getroot()  # well-formed XML, an SVG
    assert root.tag == f"{SVG}svg"
    assert root.find(f".//{SVG}script") is None  # nothing runs, nothing is fetched
    assert "http" not in picture.read_text().replace("http://www.w3.org/2000/svg", "")
    hovers = [title.text or "" for title in root.iter(f"{SVG}title")]
    busy = [h for h in hovers if h.startswith("busy · notebooks/Hot.ipynb, cell 3, line 4")]
    assert busy and "% of the time" in busy[0], hovers
    labels = [text.text or "" for text in root.iter(f"{SVG}text")]
    assert any(label.startswith("busy · notebooks/Hot.ipynb") for label in labels), labels


SPEEDSCOPE_SCHEMA = {
    # speedscope's file format (https://www.speedscope.app/file-format-schema.json), the
    # parts a sampled profile uses: a file, its shared frames, its profiles.
    "type": "object",
    "required": ["$schema", "shared", "profiles"],
    "properties": {
        "$schema": {"const": "https://www.speedscope.app/file-format-schema.json"},
        "shared": {
            "type": "object",
            "required": ["frames"],
            "properties": {
                "frames": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "file": {"type": "string"},
                            "line": {"type": "number"},
                            "col": {"type": "number"},
                        },
                    },
                }
            },
        },
        "profiles": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": [
                    "type",
                    "name",
                    "unit",
                    "startValue",
                    "endValue",
                    "samples",
                    "weights",
                ],
                "properties": {
                    "type": {"const": "sampled"},
                    "name": {"type": "string"},
                    "unit": {
                        "enum": [
                            "none",
                            "nanoseconds",
                            "microseconds",
                            "milliseconds",
                            "seconds",
                            "bytes",
                        ]  # fmt: skip
                    },
                    "startValue": {"type": "number"},
                    "endValue": {"type": "number"},
                    "samples": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}},
                    },  # fmt: skip
                    "weights": {"type": "array", "items": {"type": "number"}},
                },
            },
        },
        "name": {"type": "string"},
        "activeProfileIndex": {"type": "number"},
        "exporter": {"type": "string"},
    },
}


@pytest.mark.slow
def test_the_speedscope_file_follows_its_schema_and_cpu_time_finds_the_loop(
    dev, tmp_path: Path
) -> None:
    import jsonschema

    written = tmp_path / "hot.json"
    out = profile_to(written, dev, "n=200000", "--cpu", "--duration", "2", "--format", "json")
    assert without_share(json.loads(out)["self"][0]) == HOT  # CPU time: the loop too
    document = json.loads(written.read_text())
    jsonschema.validate(document, SPEEDSCOPE_SCHEMA)
    (sampled,) = document["profiles"]
    frames = document["shared"]["frames"]
    assert len(sampled["samples"]) == len(sampled["weights"]) > 0
    assert all(0 <= i < len(frames) for stack in sampled["samples"] for i in stack)
    names = [frame["name"] for frame in frames]
    assert "busy (notebooks/Hot.ipynb, cell 3, line 4)" in names, names


def replica_cpu_s(dev, component: str) -> Callable[[], float]:
    """The CPU seconds (user and system) the first replica of ``component`` has used, read
    from the kernel (``/proc``, through psutil): what the replica really used."""
    import httpx
    import psutil

    health = httpx.get(f"{dev.url}/_peach/health", timeout=5).json()
    (found,) = [c for c in health["components"] if c["component"] == component]
    process = psutil.Process(int(found["replicas"][0]["pid"]))
    return lambda: sum(process.cpu_times()[:2])


SPIN = "notebooks/Hot.ipynb, cell 6, line {}"


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", ["1", "8"])
def test_cpu_time_is_the_cpu_the_replica_used_on_each_line(
    dev, tmp_path: Path, concurrency: str
) -> None:
    """`spin` is pure CPU: line 3 three quarters of it, line 5 a quarter (the same loop, 3n
    and n times). With one call at a time and with 8 (threads that mostly wait for the
    GIL), --cpu gives each line its share of the CPU, and the CPU seconds the speedscope
    file holds are the replica's. (The rest of the CPU is peach's: the event loop.)"""
    used = replica_cpu_s(dev, "spin/main")
    written = tmp_path / "spin.json"
    before = used()
    out = profile_to(written, dev, "--cpu", "-c", concurrency, "--duration", "6",
                     "--format", "json", path="/spin")  # fmt: skip
    spent = used() - before
    shares = {line["position"]: line["share"] for line in json.loads(out)["self"]}
    first, second = shares.get(SPIN.format(3), 0.0), shares.get(SPIN.format(5), 0.0)
    assert first + second > 0.5, shares
    assert abs(first / (first + second) - 0.75) <= 0.1, shares
    (sampled,) = json.loads(written.read_text())["profiles"]
    exported = sum(sampled["weights"])
    assert abs(exported - spent) <= 0.1 * spent, (exported, spent)


SHORT = "notebooks/Hot.ipynb, cell 8, line {}"


@pytest.mark.slow
@pytest.mark.parametrize("concurrency", ["1", "8"])
def test_cpu_time_of_short_calls_is_on_their_lines_not_where_the_answer_is_handed_over(
    dev, concurrency: str
) -> None:
    """`short` is `spin` in calls of about 3 ms (cell 8: line 10 three quarters of the CPU,
    line 12 a quarter), each adding the CPU its thread used (its own clock) to a total
    that `n=0` reads. A worker thread hands each answer to the event loop through a socket
    write that lets go of the GIL, and the sampler gets the GIL there; the CPU the thread
    used since the last sample — the call's — went on that write (peach's): the method got
    0.43 of the replica's CPU where it used 0.75 (-c 1), 0.63 for 0.82 (-c 8). Its share in
    --cpu is now the share of the replica's CPU (``/proc``) its calls measured, and a few
    points over it: the CPU a worker spends around each call (woken for it, handing its
    answer over, more of it with eight calls contending for the GIL) is counted on the
    method's lines, and the calls' own clocks leave it out."""
    import httpx

    used = replica_cpu_s(dev, "short/main")

    def spent() -> float:
        answer = httpx.get(f"{dev.url}/short", params={"n": "0"}, timeout=10)
        return float(answer.json()["result"]["cpu_s"])

    began, before = used(), spent()
    code, out, err = profile("/short", "--url", dev.url, "--cpu", "-c", concurrency,
                             "--duration", "4", "--format", "json")  # fmt: skip
    measured = (spent() - before) / (used() - began)
    assert code == 0, out + err
    shares = {line["position"]: line["share"] for line in json.loads(out)["self"]}
    method = sum(share for at, share in shares.items() if at.startswith(SHORT[:-8]))
    assert -0.1 <= method - measured <= 0.15, (method, measured, shares)
    assert shares.get(SHORT.format(10), 0.0) > shares.get(SHORT.format(12), 0.0), shares


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--cpu", "wall-clock"])
def test_a_loop_seen_only_at_its_end_is_shared_among_its_lines(dev, mode: str) -> None:
    """`busy`'s loop (cell 3: line 3 `for i in range(n):`, line 4 its body) never lets go of
    the GIL, so the sampler sees it only at the jump back at the end of its body (line 4).
    Such a sample stands for the whole loop and is shared among its lines by their
    bytecode: the `for` line gets a part (py-spy, sampling from outside, gives it about a
    quarter; peach's weighed instructions 11 of 47) instead of nothing, and the text says
    that these shares are estimated."""
    extra = [mode] if mode == "--cpu" else []
    code, out, err = profile("/hot", "--url", dev.url, "--duration", "2", "--format", "json",
                             *extra)  # fmt: skip
    assert code == 0, out + err
    shares = {line["position"]: line["share"] for line in json.loads(out)["self"]}
    head, body = (shares.get(f"notebooks/Hot.ipynb, cell 3, line {n}", 0.0) for n in (3, 4))
    assert body > head > 0, shares
    assert 0.05 <= head / (head + body) <= 0.45, shares
    code, out, err = profile("/hot", "--url", dev.url, "--duration", "1.5", *extra, columns=80)
    assert code == 0, out + err
    said = " ".join(out.split())
    assert "estimated: " in said and "shared among the loop's lines by their bytecode" in said
    assert "biased:" not in said, out  # a loop that never lets go of the GIL does not lean


@pytest.mark.slow
def test_wall_clock_says_when_its_samples_lean_toward_where_threads_let_go_of_the_gil(
    dev,
) -> None:
    """`yields` runs a loop that calls `time.sleep(0)` every 2,000 turns (cell 7, line 9):
    the sampler, which can look only when a thread lets go of the GIL, finds the thread
    there nearly every time, though the loop's other lines do most of the work. The lean
    cannot be taken out at the default cost, so the output says so and names the line;
    `busy`'s loop, under the same load, has no such note (the test above)."""
    code, out, err = profile("/yields", "--url", dev.url, "-c", "1", "--duration", "2",
                             columns=80)  # fmt: skip
    assert code == 0, out + err
    said = " ".join(out.split())
    assert "biased: " in said, out
    assert "most at notebooks/Hot.ipynb, cell 7, line 9 · yields" in said, out
    assert "those lines show more than their share" in said, out
    assert all(len(line) <= 80 for line in out.splitlines()), out


@pytest.mark.slow
def test_a_method_too_short_to_sample_is_named_by_its_calls(tmp_path: Path) -> None:
    """The tour's `peach profile /greet name=Ada` on `peach init`'s project: greet takes a
    few microseconds and never lets go of the GIL, so no sample finds it; its calls, timed,
    still name its cell and line."""
    assert run_peach("init", "shop", cwd=tmp_path).returncode == 0
    done = run_peach("profile", "/greet", "name=Ada", "--duration", "2", cwd=tmp_path / "shop")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "calls (the method, timed)" in lines, done.stdout
    (greet,) = [line for line in lines if line.endswith(" · greet")]
    assert greet.endswith("notebooks/Endpoints.ipynb, cell 3, line 1 · greet"), greet
    calls = int(greet.split("×")[0].replace(",", ""))
    assert calls > 10 and " µs " in greet, greet


@pytest.mark.slow
def test_init_names_the_slow_init(dev) -> None:
    code, out, err = profile("/hot", "--url", dev.url, "--init", "--format", "json")
    assert code == 0, out + err
    found = json.loads(out)
    slow = {"position": "notebooks/Hot.ipynb, cell 2, line 7", "function": "slow_init"}
    assert without_share(found["self"][0]) == slow, found["self"][:3]
    assert found["duration_s"] >= 0.5
    dev.wait_for_output(r"re-ran init of hot/main")  # its replicas were restarted


@pytest.mark.slow
def test_an_async_method_is_attributed_to_its_coroutine(dev) -> None:
    code, out, err = profile("/waits", "--url", dev.url, "--duration", "1.5", "--format", "json")
    assert code == 0, out + err
    found = json.loads(out)
    totals = [without_share(line) for line in found["total"]]
    assert {"position": "notebooks/Hot.ipynb, cell 4, line 9", "function": "waits"} in totals
    assert {"position": "notebooks/Hot.ipynb, cell 4, line 5", "function": "pause"} in totals
    assert found["self"][0]["function"] == "sleep" and found["self"][0]["share"] > 0.8


@pytest.mark.slow
def test_profile_actions_refuse_clients_that_are_not_on_loopback(peach_dev) -> None:
    from netns_support import other_machine

    with other_machine() as link:
        dev = peach_dev(PROJECT, "--host", link.host_address)
        dev.wait_for_output(r"replicas? healthy")
        code = (
            "import httpx, json\n"
            f"answers = [httpx.post({dev.url!r} + '/_peach/profile/' + action,"
            " json={'url': '/hot'}, timeout=20) for action in ('start', 'init', 'stop')]\n"
            "print(json.dumps([[a.status_code, a.json()] for a in answers]))\n"
        )
        done = link.python(code)
    assert done.returncode == 0, done.stderr
    for status, body in json.loads(done.stdout):
        assert status == 403, body
        assert body["error"]["message"] == "/_peach/profile is for loopback clients"


class _NotPeach(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the handler's name
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "error", "error": {"code": "not_found", "message": "no"}}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_a_host_that_is_neither_a_peach_dev_nor_a_profilable_app_is_refused_plainly() -> None:
    """A host elsewhere is a deployed app, profiled through the Ray dashboard: with no
    dashboard to answer (here a loopback server that is not one), exit 2 with one line
    saying so; a loopback server that is no peach at all: exit 2 too."""
    server = HTTPServer(("127.0.0.1", 0), _NotPeach)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    elsewhere = f"http://127.0.0.1:{server.server_port}"
    try:
        code, out, err = profile("/hot", "--url", "http://10.0.0.1:8000", "--address", elsewhere)
        code_2, out_2, err_2 = profile("/hot", "--url", elsewhere)
    finally:
        server.shutdown()
    assert code == 2 and out == "", out + err
    assert "cannot profile http://10.0.0.1:8000: no Ray dashboard to profile its replicas" in err
    assert "not a Ray dashboard" in err or "HTTP 404" in err, err
    assert "Traceback" not in err
    assert code_2 == 2 and out_2 == "", out_2 + err_2
    assert "neither a `peach dev` nor a deployed peach app" in err_2, err_2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"output_file": Path("profile.txt")}, "give a file ending in .svg"),
        ({"rate": 5.0, "concurrency": 2}, "give one"),
        ({"init": True, "duration_s": 3.0}, "--init profiles init and sends no load"),
        ({"output_format": "yaml"}, "--format must be text or json"),
    ],
)
def test_usage_mistakes_are_refused_before_anything_starts(args: dict, says: str) -> None:
    from peach_cli.boundary import Output
    from peach_cli.commands.host_options import ProfileOptions
    from peach_cli.commands.profile import run_profile
    from peach_cli.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(says)) as refused:
        run_profile(Output(), ProfileOptions(target="/hot", url="http://127.0.0.1:9", **args))
    assert refused.value.exit_code == 2


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("a[b]=c", "'a[b]=c' uses a nested key"),
        ("n:=@missing.json", "'n:=@missing.json': cannot read missing.json"),
    ],
)
def test_a_mistaken_item_stops_the_command_before_the_simulator_starts(
    tmp_path: Path, item: str, says: str
) -> None:
    """TARGET and the items are read before any host is wired: a mistake in one is exit 2,
    and the project's replicas never start (its init would leave a mark)."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    mark = tmp_path / "started"
    notebook = project / "notebooks" / "Hot.ipynb"
    cells = json.loads(notebook.read_text())
    source = "".join(cells["cells"][1]["source"])
    started = f"def slow_init(seconds: float = 0.5):\n    open({str(mark)!r}, 'w').close()\n"
    cells["cells"][1]["source"] = source.replace("def slow_init(seconds: float = 0.5):\n", started)
    notebook.write_text(json.dumps(cells))
    code, out, err = profile("/hot", item, "-p", str(project), "--duration", "1")
    assert code == 2 and out == "", out + err
    assert err.startswith(f"error: {says}"), err
    assert not mark.exists(), "the simulator started before the item was read"
    assert "Traceback" not in err


def test_peach_frames_fold_into_one_entry_and_the_library_calls_stay() -> None:
    """The folding rule on a replica's raw profile: peach's frames and the standard library
    they call are one ``peach`` frame; what the user's code calls stays as it is."""
    from peach_cli.profile.model import Profile

    frames = [
        ["stdlib", "threading.py, line 1002", "Thread._bootstrap"],
        ["peach", "peach_cli/runtime/contract/runner.py, line 378", "_then_finish"],
        ["notebook", "notebooks/Hot.ipynb, cell 3, line 13", "hot"],
        ["stdlib", "json/__init__.py, line 231", "dumps"],
        ["notebook", "notebooks/Hot.ipynb, cell 3, line 4", "busy"],
    ]
    raw = {"samples": 4, "duration_s": 1.0, "frames": frames,
           "stacks": [[[0, 1, 2, 3], 1.0], [[0, 1, 2, 4], 3.0]]}  # fmt: skip
    merged = Profile.merge([raw, raw])
    assert merged.samples == 8
    assert set(merged.stacks) == {
        (("peach", "peach"), ("notebooks/Hot.ipynb, cell 3, line 13", "hot"),
         ("json/__init__.py, line 231", "dumps")),
        (("peach", "peach"), ("notebooks/Hot.ipynb, cell 3, line 13", "hot"),
         ("notebooks/Hot.ipynb, cell 3, line 4", "busy")),
    }  # fmt: skip
    assert [(line.function, line.share) for line in merged.hottest("self")] == [
        ("busy", 0.75),
        ("dumps", 0.25),
    ]


def test_a_long_position_is_shortened_from_its_start_to_fit() -> None:
    from peach_cli.profile.model import Line
    from peach_cli.views.profile import row

    line = Line("notebooks/" + "deep/" * 20 + "Hot.ipynb, cell 3, line 4", "busy_function", 0.5)
    shown = row(line)
    assert len(shown) <= 80 and shown.endswith("Hot.ipynb, cell 3, line 4 · busy_function")
    assert "…" in shown and shown.startswith("    50.0%  ")


def test_a_broken_project_is_shown_as_validate_shows_it_and_not_profiled(tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(PROJECT, broken)
    conf = broken / "peach.yaml"
    conf.write_text(conf.read_text().replace("method: hot\n", "method: hott\n", 1))
    code, out, err = profile("/hot", "-p", str(broken), "--duration", "1")
    assert code == 1, out + err
    assert "error PC204 method 'hott' is not defined" in out + err
    assert f"✗ 1 error in {broken}: not profiling" in out + err
