"""`peach profile`'s cost and start, and the profilers it could have used (SPEC §12).

1. **Cost**: `peach dev` on ``tests/projects/profile``; for each endpoint (``/hot``, a 2 ms
   loop; ``/hot?n=300``, a short call; ``/waits``, an ``async def`` awaiting 20 ms),
   `peach bench --concurrency 8` without the profiler and with it (``/_peach/profile/start``
   at the default rate, 100 samples a second), alternately (``--rounds``), then without
   again; medians. Two figures: the throughput, and — what a shared machine's other work
   does not blur — the replica's own CPU time per answered request (its capacity).
   Target: ≥ 0.95× (under 5 % cost).
2. **Start**: the time ``/_peach/profile/start`` takes to answer, and that a profile
   stopped 0.3 s later holds samples. Target: under 1 s.
3. **The alternatives**, on the same ``/hot`` load: py-spy attached from outside to the
   replica (``py-spy record --rate 100``, blocking and ``--nonblocking``), its throughput
   against plain runs in the same round, and what its output names (the notebook position,
   or the extracted module's line; a coroutine awaiting I/O or not). pyinstrument cannot
   be measured inside a replica: a replica's environment holds only what the conf declares
   (SPEC §4), so it would have to be installed in every user's env; its cost is measured
   on the same functions in one process (``uv run --with pyinstrument``, when uv can fetch
   it), against the same loop unprofiled and under peach's sampler.

4. **--cpu against py-spy**: ``/spin`` (pure CPU on two lines, 3:1), ``/hot`` and
   ``/short`` (``/spin`` in 3 ms calls that measure their own CPU) at -c 1 and -c 8,
   profiled by peach (--cpu) and recorded by py-spy (its on-CPU samples: no ``--idle``;
   the leaves where a thread waits are left out, as py-spy counts a thread it has just
   let go as running on a busy machine) under the same load, then again with py-spy's
   ``--gil`` (the thread holding the GIL only): the shares (the method's, and its first
   loop line's share of its two loop lines — ``busy``'s ``for`` line and body, both always
   compared), ``/short``'s share as its calls measured it, and the CPU seconds peach's
   profile holds against the replica's CPU time (psutil). Targets: within 10 points;
   within 10 %.
5. **Idle**: the replica's CPU with a profile session open and no request, against the
   same without, in % of a core (docs/load.md quotes it).
6. **Wall-clock against py-spy** (``--idle``: its wall-clock samples): ``/yields`` (a loop
   calling ``time.sleep(0)``) and ``/hot`` at -c 1 and -c 8, the sleep line's (the ``for``
   line's) share of the function's samples, and the lean peach's output reports. The
   sampler looks when a thread lets go of the GIL, so where a loop lets go of it at
   ``time.sleep(0)`` it finds the thread there: that lean is said, not fixed (fixing it
   would take a shorter GIL switch interval, some 5 % of a busy replica's CPU).

Usage::

    python benchmarks/profile.py              # about three minutes
    python benchmarks/profile.py --cpu-only   # section 4 alone
    python benchmarks/profile.py --idle-only  # section 5 alone
    python benchmarks/profile.py --wall-only  # section 6 alone
    python benchmarks/profile.py --seconds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway import REPO, Server  # noqa: E402

PROJECT = REPO / "tests" / "projects" / "profile"
ENDPOINTS = ("/hot", "/hot?n=300", "/waits")


def start_dev(folder: Path) -> Server:
    command = [sys.executable, "-m", "peach_cli.cli", "dev", str(PROJECT), "--port", "0",
               "--no-reload"]  # fmt: skip
    server = Server("peach dev", command, REPO, folder / "dev.log")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{server.url}/_peach/health", timeout=5).json().get("ready"):
                return server
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    server.stop()
    raise SystemExit("peach dev never got ready")


def bench(url: str, seconds: float, pid: int | None = None) -> tuple[float, float]:
    """Requests answered per second, and the replica's CPU seconds per answered request."""
    import psutil

    process = psutil.Process(pid) if pid is not None else None
    before = sum(process.cpu_times()[:2]) if process is not None else 0.0
    out = subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", "bench", url, "--duration", str(seconds),
         "--concurrency", "8", "--format", "json"],
        capture_output=True, text=True, cwd=REPO, check=True,
    ).stdout  # fmt: skip
    figures = json.loads(out)
    used = sum(process.cpu_times()[:2]) - before if process is not None else 0.0
    answered = max(1, figures["requests"]["answered"])
    return float(figures["throughput"]), used / answered


def action(base: str, name: str, body: dict) -> dict:
    from peach_cli.devtoken import token_headers  # a profile action needs the dev token

    headers = token_headers(base)
    answer = httpx.post(f"{base}/_peach/profile/{name}", json=body, headers=headers, timeout=30)
    answer.raise_for_status()
    return answer.json()["result"]


def replica_pid(base: str, endpoint: str) -> int:
    health = httpx.get(f"{base}/_peach/health", timeout=5).json()
    for component in health["components"]:
        if component["component"].startswith(endpoint.strip("/").split("?")[0] + "/"):
            return int(component["replicas"][0]["pid"])
    raise SystemExit(f"no replica of {endpoint}")


def cost(base: str, seconds: float, rounds: int) -> list[tuple[str, float, float]]:
    """Per endpoint: profiled/plain throughput and plain/profiled CPU per request (the
    replica's own CPU: what a shared machine's other work does not blur), rounds
    alternating plain and profiled, medians."""
    rows = []
    for endpoint in ENDPOINTS:
        url = base + endpoint
        pid = replica_pid(base, endpoint)
        plain, profiled = [], []
        own = []
        for _ in range(rounds):
            plain.append(bench(url, seconds, pid))
            session = action(base, "start", {"url": endpoint.split("?")[0]})["session"]
            try:
                profiled.append(bench(url, seconds, pid))
            finally:
                (stopped,) = action(base, "stop", {"session": session})["profiles"]
                own.append(stopped["cost_s"] / stopped["duration_s"])
        plain.append(bench(url, seconds, pid))
        rate_plain = statistics.median(r for r, _ in plain)
        rate_profiled = statistics.median(r for r, _ in profiled)
        cpu_plain = statistics.median(c for _, c in plain)
        cpu_profiled = statistics.median(c for _, c in profiled)
        capacity = cpu_plain / cpu_profiled
        added = (cpu_profiled - cpu_plain) * rate_profiled * 1000
        rows.append((endpoint, rate_profiled / rate_plain, capacity))
        print(f"  {endpoint:12} throughput plain {rate_plain:7.1f}/s, profiled "
              f"{rate_profiled:7.1f}/s ({rate_profiled / rate_plain:.3f}×) · replica CPU per "
              f"request {cpu_plain * 1e3:.3f} ms, profiled {cpu_profiled * 1e3:.3f} ms "
              f"(capacity {capacity:.3f}×; the replica's CPU grew {added:.0f} ms a second, the "
              f"sampling thread's own: {statistics.median(own) * 1000:.0f} ms a second)",
              flush=True)  # fmt: skip
    return rows


def start_time(base: str) -> tuple[float, int]:
    began = time.perf_counter()
    session = action(base, "start", {"url": "/hot"})["session"]
    took = time.perf_counter() - began
    with httpx.Client(timeout=10) as client:
        deadline = time.perf_counter() + 0.3
        while time.perf_counter() < deadline:
            client.get(f"{base}/hot")
    profiles = action(base, "stop", {"session": session})["profiles"]
    return took, sum(p["samples"] for p in profiles)


def py_spy(base: str, seconds: float, folder: Path) -> list[tuple[str, float, float, str]]:
    spy = shutil.which("py-spy")
    if spy is None:
        print("  py-spy is not on PATH: skipped")
        return []
    rows: list[tuple[str, float, float, str]] = []
    for mode in ("blocking", "--nonblocking"):
        for endpoint in ("/hot", "/waits"):
            pid = replica_pid(base, endpoint)
            out = folder / f"spy-{mode.strip('-')}-{endpoint.strip('/')}.txt"
            plain, cpu_plain = bench(base + endpoint, seconds, pid)
            command = [spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
                       "-o", str(out), "--duration", str(int(seconds) + 2)]  # fmt: skip
            if mode != "blocking":
                command.append(mode)
            recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)  # py-spy attaches
            profiled, cpu_profiled = bench(base + endpoint, seconds, pid)
            _, err = recorder.communicate(timeout=seconds + 30)
            ratio = profiled / plain
            text = out.read_text() if out.exists() else err.decode(errors="replace")[-200:]
            names = "pause" if "pause (" in text else "no pause"
            module_line = "Hot.ipynb>:" in text
            print(f"  py-spy {mode:14} {endpoint:7} plain {plain:7.1f}/s · profiled "
                  f"{profiled:7.1f}/s ({ratio:.3f}×) · capacity {cpu_plain / cpu_profiled:.3f}× · "
                  f"frames name the extracted module's line: {module_line} · {names} · "
                  f"{err.decode(errors='replace').strip().splitlines()[-2:]}", flush=True)  # fmt: skip
            rows.append((f"{mode} {endpoint}", plain, profiled, names))
    return rows


_WAITS = ("EpollSelector.select", "_worker (concurrent/futures/thread.py:81)", "Condition.wait",
          "Event.wait", "SimpleQueue.get")  # fmt: skip
"""Leaves where a thread waits (for I/O, for work, for its next sample): py-spy counts a
thread there as on a CPU when it reads it runnable — as a thread it has just paused and let
go is, on a busy machine — so they are left out of its samples here."""


def _py_spy_shares(raw: str, function: str) -> dict[str, float]:
    """py-spy's ``--format raw`` samples (on-CPU threads only: no ``--idle``; waits left
    out, see ``_WAITS``) as ``_shares``: ``function``'s share of the CPU samples, and its
    first line's (in line order) share of the function's."""
    by_line: dict[int, int] = {}
    other = 0
    for row in raw.splitlines():
        stack, _, count = row.rpartition(" ")
        if not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        if leaf.startswith(_WAITS):
            continue
        name, _, where = leaf.partition(" (")
        line = where.rstrip(")").rpartition(":")[2]
        if name == function and line.isdigit():
            by_line[int(line)] = by_line.get(int(line), 0) + int(count)
        else:
            other += int(count)
    # the two lines of the function's loops (spin: two one-line loops; busy: a `for` line
    # and its body); the lines around them are next to nothing
    two = sorted(sorted(by_line, key=by_line.__getitem__)[-2:]) or [0]
    counted = {n: float(count) for n, count in by_line.items()}
    return _shares(counted, sum(counted.values()) + other, two)


def _shares(by_line: dict[int, float], whole: float, two: list[int]) -> dict[str, float]:
    """The function's share of the whole (all its lines), and its first loop line's share of
    its two loop lines (``two``: both always compared, a line without samples at 0)."""
    loop = sum(by_line.get(n, 0.0) for n in two)
    return {
        "function": sum(by_line.values()) / max(whole, 1e-9),
        "first line": by_line.get(two[0], 0.0) / max(loop, 1e-9),
    }


LOOP_LINES = {"spin": [3, 5], "busy": [3, 4], "short": [10, 12]}
"""The cell lines of each function's two loop lines (tests/projects/profile's Hot.ipynb)."""


def _peach_shares(profile: dict, function: str) -> dict[str, float]:
    """The same shares from peach's profile (by self time). A thread running Python is seen
    from inside the process only where it lets go of the GIL: in ``busy``'s loop, at the
    jump back at the end of its body; peach shares such samples among the loop's lines by
    their bytecode (``loops`` in the profile, printed beside)."""
    from peach_cli.profile.model import Profile

    by_line: dict[int, float] = {}
    whole = 0.0
    for line in Profile.merge([profile]).hottest("self"):
        whole += line.share
        if line.function == function:
            number = int(line.position.rpartition(" ")[2])
            by_line[number] = by_line.get(number, 0.0) + line.share
    return _shares(by_line, whole, LOOP_LINES[function])


def idle_cost(base: str, seconds: float, rounds: int) -> tuple[float, float]:
    """The sampler's cost in an idle replica (``/hot``'s, no load), in % of a core: the
    replica's CPU time (``/proc/PID/stat``, through psutil) over ``seconds`` with a profile
    session running (wall-clock, then --cpu) minus the same without, rounds alternating;
    medians. A profile session is only open while `peach profile` runs, but that is what it
    costs a replica that gets no request meanwhile."""
    import psutil

    process = psutil.Process(replica_pid(base, "/hot"))

    def used_over(session: dict | None) -> float:
        started = sum(process.cpu_times()[:2])
        began = time.perf_counter()
        if session is not None:
            name = action(base, "start", session)["session"]
        time.sleep(seconds)
        if session is not None:
            action(base, "stop", {"session": name})
        return (sum(process.cpu_times()[:2]) - started) / (time.perf_counter() - began)

    plain, wall, cpu = [], [], []
    for _ in range(rounds):
        plain.append(used_over(None))
        wall.append(used_over({"url": "/hot"}))
        cpu.append(used_over({"url": "/hot", "cpu": True}))
    base_use = statistics.median(plain)
    return (statistics.median(wall) - base_use) * 100, (statistics.median(cpu) - base_use) * 100


def cpu_against_py_spy(base: str, seconds: float, folder: Path) -> tuple[float, float, float]:
    """`--cpu` against py-spy's on-CPU samples of the same replica under the same load
    (``/spin``: pure CPU on two lines, 3:1; ``/hot``: a 2 ms loop; ``/short``: ``/spin`` in
    3 ms calls that measure their own CPU), at -c 1 and -c 8; and the CPU seconds peach's
    profile holds against the replica's CPU time (psutil), all in one run. Each is run
    twice, py-spy recording its on-CPU samples (every thread it reads as running) the first
    time and with ``--gil`` (the thread that holds the GIL: the one running Python) the
    second. For ``/short``, the method's share is also given as its calls measured it (the
    CPU their threads used over the replica's). Returns the largest differences: against
    py-spy's on-CPU samples, against its ``--gil`` ones, and ``/short``'s share against its
    measured one."""
    import psutil

    worst = {"on-CPU": 0.0, "--gil": 0.0, "measured": 0.0}
    for endpoint, function in (("/spin", "spin"), ("/hot", "busy"), ("/short", "short")):
        pid = replica_pid(base, endpoint)
        process = psutil.Process(pid)
        for concurrency in ("1", "8"):
            for gil in (False, True):
                out = folder / f"cpu-{function}-{concurrency}{'-gil' if gil else ''}.txt"
                before, spent = sum(process.cpu_times()[:2]), _spent(base, endpoint)
                profile, spied = _both_under_load(
                    base, endpoint, concurrency, seconds, out, cpu=True, gil=gil
                )
                used = sum(process.cpu_times()[:2]) - before
                exported = sum(weight for _, weight in profile["stacks"])
                ours = _peach_shares(profile, function)
                figures = " ".join(f"{k} {v:.2f}" for k, v in sorted(ours.items()))
                estimated = profile.get("loops", 0.0) / max(exported, 1e-9)
                figures += f" (estimated at a loop's jump: {estimated:.2f})"
                if spent is not None:
                    measured = ((_spent(base, endpoint) or 0.0) - spent) / max(used, 1e-9)
                    figures += f" · measured function {measured:.2f}"
                    off = abs(ours["function"] - measured)
                    worst["measured"] = max(worst["measured"], off)
                which = "py-spy --gil" if gil else "py-spy"
                line = (f"  {endpoint:6} -c {concurrency}: CPU s in the profile {exported:.2f}, "
                        f"the replica used {used:.2f} ({exported / max(used, 1e-9):.3f}×) · "
                        f"peach {figures}")  # fmt: skip
                if spied is not None:
                    theirs = _py_spy_shares(spied, function)
                    gap = max(abs(ours[k] - theirs[k]) for k in ("function", "first line"))
                    key = "--gil" if gil else "on-CPU"
                    worst[key] = max(worst[key], gap)
                    line += (
                        f" · {which} "
                        + " ".join(f"{k} {v:.2f}" for k, v in sorted(theirs.items()))
                        + f" · largest gap {gap * 100:.1f} points"
                    )
                print(line, flush=True)
    return worst["on-CPU"], worst["--gil"], worst["measured"]


def _spent(base: str, endpoint: str) -> float | None:
    """The CPU seconds ``/short``'s calls have measured (their threads' clocks) so far."""
    if endpoint != "/short":
        return None
    answer = httpx.get(f"{base}/short", params={"n": "0"}, timeout=10)
    return float(answer.json()["result"]["cpu_s"])


def _both_under_load(
    base: str,
    endpoint: str,
    concurrency: str,
    seconds: float,
    out: Path,
    *,
    cpu: bool,
    gil: bool = False,
) -> tuple[dict, str | None]:
    """Profile ``endpoint``'s replica with peach (``cpu`` or wall-clock) and record it with
    py-spy (its on-CPU samples — only the GIL holder's with ``gil`` — or with ``--idle``
    its wall-clock ones) under the same `peach bench` load: peach's profile, and py-spy's
    raw samples (None: no py-spy)."""
    spy = shutil.which("py-spy")
    recorder = None
    if spy is not None:  # until the load ends (SIGINT below)
        command = [spy, "record", "--pid", str(replica_pid(base, endpoint)), "--rate", "100",
                   "--format", "raw", "-o", str(out)] + ([] if cpu else ["--idle"])  # fmt: skip
        command += ["--gil"] if gil else []
        recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    session = action(base, "start", {"url": endpoint, "cpu": cpu})["session"]
    try:
        subprocess.run(
            [sys.executable, "-m", "peach_cli.cli", "bench", base + endpoint,
             "--duration", str(seconds), "--concurrency", concurrency],
            capture_output=True, cwd=REPO, check=True,
        )  # fmt: skip
    finally:
        (profile,) = action(base, "stop", {"session": session})["profiles"]
    if recorder is None:
        return profile, None
    recorder.send_signal(signal.SIGINT)
    recorder.communicate(timeout=60)
    return profile, out.read_text() if out.exists() else ""


def wall_against_py_spy(base: str, seconds: float, folder: Path) -> list[str]:
    """Wall-clock mode against py-spy's wall-clock samples (``--idle``: every thread, running
    or not) of the same replica under the same load: ``/yields`` (a loop that calls
    ``time.sleep(0)`` every 2,000 turns, cell 7, line 9) and ``/hot`` (a loop that never
    lets go of the GIL), at -c 1 and -c 8: the sleep line's share of ``yields``' samples
    (``/hot``: the ``for`` line's share of ``busy``'s loop), and whether peach's output says
    that its samples lean toward where threads let go of the GIL (the share it reports)."""
    from peach_cli.profile.model import Profile

    found = []
    for endpoint, function, line in (("/yields", "yields", 9), ("/hot", "busy", 3)):
        for concurrency in ("1", "8"):
            out = folder / f"wall-{function}-{concurrency}.txt"
            profile, spied = _both_under_load(base, endpoint, concurrency, seconds, out, cpu=False)
            merged = Profile.merge([profile])
            mine = {
                int(row.position.rpartition(" ")[2]): row.share
                for row in merged.hottest("self")
                if row.function == function
            }
            ours = mine.get(line, 0.0) / max(sum(mine.values()), 1e-9)
            lean = merged.lean()[0] if hasattr(merged, "lean") else float("nan")  # older code
            text = (f"  {endpoint:7} -c {concurrency}: peach: line {line} {ours:.2f} of "
                    f"{function}'s samples, said to lean {lean:.2f}")  # fmt: skip
            if spied is not None:
                theirs = _py_spy_line(spied, function, line)
                text += (
                    f" · py-spy --idle: {theirs:.2f} · gap {abs(ours - theirs) * 100:.1f} points"
                )
            print(text, flush=True)
            found.append(text)
    return found


def _py_spy_line(raw: str, function: str, line: int) -> float:
    """The share of ``function``'s samples (as the innermost frame of the user's code:
    ``time.sleep`` is C, so it is ``yields`` itself) on its cell line ``line``. py-spy names
    the lines of the module peach extracts from the notebook for the component (only the
    cells it needs): they are turned into cell lines with the project's own line map."""
    from peach_cli.runtime.contract.results import cell_line
    from peach_cli.testing.host import FoundProject

    plan = FoundProject.at(PROJECT, need_conf=True).built()
    assert plan is not None
    (spec,) = [
        spec for spec in plan.components() if spec.method == {"busy": "hot"}.get(function, function)
    ]
    by_line: dict[int, int] = {}
    for row in raw.splitlines():
        stack, _, count = row.rpartition(" ")
        frames = [f for f in stack.split(";") if f.startswith(function + " (")]
        if not count.isdigit() or not frames:
            continue
        number = frames[-1].rstrip(")").rpartition(":")[2]
        if number.isdigit():
            at = cell_line(spec, int(number))[1]
            by_line[at] = by_line.get(at, 0) + int(count)
    return by_line.get(line, 0) / max(sum(by_line.values()), 1)


IN_PROCESS = r"""
import asyncio, sys, threading, time
sys.path.insert(0, {repo!r})

def busy(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def rate(work, seconds):
    # calls per CPU second of the whole process (the sampler's thread included): what
    # other work on a shared machine does not blur
    done, end, cpu = 0, time.perf_counter() + seconds, time.process_time()
    while time.perf_counter() < end:
        work()
        done += 1
    return done / (time.process_time() - cpu)

def measure(profiler, seconds):
    results = {{}}
    for name, work in (("loop", lambda: busy(20000)), ("calls", lambda: fib(14))):
        plain, profiled = [], []
        for _ in range(3):
            plain.append(rate(work, seconds / 3))
            stop = profiler()
            profiled.append(rate(work, seconds / 3))
            stop()
        results[name] = round(sorted(profiled)[1] / sorted(plain)[1], 3)
    return results

def none():
    return lambda: None

def peach():
    from peach_cli.runtime.sampler import Sampler
    sampler = Sampler(0.01)
    sampler.start()
    return sampler.stop

def pyinstrument():
    from pyinstrument import Profiler
    profiler = Profiler(interval=0.01)
    profiler.start()
    return profiler.stop

print(measure({which}, {seconds}))
"""


def in_process(seconds: float) -> dict[str, dict[str, float] | str]:
    results: dict[str, dict[str, float] | str] = {}
    for which in ("none", "peach"):
        code = IN_PROCESS.format(repo=str(REPO), which=which, seconds=seconds)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        results[which] = eval(out.stdout) if out.returncode == 0 else out.stderr[-300:]  # noqa: S307
    uv = shutil.which("uv")
    if uv is None:
        results["pyinstrument"] = "uv is not on PATH: not measured"
        return results
    code = IN_PROCESS.format(repo=str(REPO), which="pyinstrument", seconds=seconds)
    out = subprocess.run(
        [uv, "run", "--no-project", "--with", "pyinstrument", "python", "-c", code],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    results["pyinstrument"] = eval(out.stdout) if out.returncode == 0 else out.stderr[-300:]  # noqa: S307
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-alternatives", action="store_true")
    parser.add_argument("--cpu-only", action="store_true", help="only 4. (--cpu against py-spy)")
    parser.add_argument("--idle-only", action="store_true", help="only 5. (the idle cost)")
    parser.add_argument("--wall-only", action="store_true", help="only 6. (wall-clock, py-spy)")
    parser.add_argument("--keep", help="a folder to keep py-spy's samples in (with --cpu-only)")
    options = parser.parse_args()
    if options.idle_only:
        with tempfile.TemporaryDirectory() as scratch:
            server = start_dev(Path(scratch))
            try:
                wall, cpu = idle_cost(server.url, options.seconds, options.rounds)
            finally:
                server.stop()
        print(
            f"5. idle: the sampler costs {wall:.2f} % of a core (wall-clock), {cpu:.2f} % (--cpu)"
        )
        return
    if options.wall_only:
        with tempfile.TemporaryDirectory() as scratch:
            server = start_dev(Path(scratch))
            try:
                wall_against_py_spy(server.url, options.seconds, Path(options.keep or scratch))
            finally:
                server.stop()
        return
    if options.cpu_only:
        with tempfile.TemporaryDirectory() as scratch:
            server = start_dev(Path(scratch))
            try:
                gaps = cpu_against_py_spy(
                    server.url, options.seconds, Path(options.keep or scratch)
                )
            finally:
                server.stop()
        print(_gaps(gaps))
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        server = start_dev(folder)
        try:
            print("1. the sampler's cost at 100 samples/s (profiled against plain, same run)")
            rows = cost(server.url, options.seconds, options.rounds)
            print("2. start")
            took, samples = start_time(server.url)
            print(f"  /_peach/profile/start answered in {took * 1000:.0f} ms; "
                  f"{samples} samples 0.3 s later")  # fmt: skip
            print("4. --cpu against py-spy's on-CPU samples, the same load (target ≤ 10 points; "
                  "CPU seconds within 10 %)")  # fmt: skip
            gaps = cpu_against_py_spy(server.url, options.seconds, folder)
            print("6. wall-clock against py-spy --idle: a time.sleep(0) loop, a loop that "
                  "never lets go of the GIL")  # fmt: skip
            wall_against_py_spy(server.url, options.seconds, folder)
            wall, cpu = idle_cost(server.url, options.seconds, options.rounds)
            print(f"5. idle: the sampler costs {wall:.2f} % of a core in a replica without "
                  f"requests (wall-clock), {cpu:.2f} % (--cpu)")  # fmt: skip
            if not options.skip_alternatives:
                print("3. py-spy from outside, on the same replica")
                py_spy(server.url, options.seconds, folder)
        finally:
            server.stop()
    if not options.skip_alternatives:
        print("3b. in one process: rate profiled / unprofiled (a 2 ms loop; fib(14), calls)")
        for which, result in in_process(options.seconds).items():
            print(f"  {which:13} {result}")
    # the capacity counts where the replica's CPU bounds its throughput (/hot, /hot?n=300);
    # /waits waits 20 ms a call: its throughput is bounded by the waiting, not the CPU
    worst = min(
        min(rate, capacity if "waits" not in name else rate) for name, rate, capacity in rows
    )
    print(f"worst profiled/plain: {worst:.3f}× (target ≥ 0.95×); start {took * 1000:.0f} ms "
          f"(target < 1000 ms); {_gaps(gaps)}")  # fmt: skip


def _gaps(gaps: tuple[float, float, float]) -> str:
    on_cpu, gil, measured = (gap * 100 for gap in gaps)
    return (f"--cpu against py-spy: {on_cpu:.1f} points against its on-CPU samples, {gil:.1f} "
            f"against --gil; /short's share against its measured CPU: {measured:.1f} points "
            "(target ≤ 10)")  # fmt: skip


if __name__ == "__main__":
    main()
