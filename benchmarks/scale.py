"""What grows with a project's shape: start-up of many endpoints, upload bytes, the hop.

Three sections, each measured against a baseline in the same run:

* ``startup``: `peach dev` of a generated project of 1, 10, 40 and 100 endpoints (one
  replica each, with an ``init``, in the default isolated env): the seconds from starting
  `peach dev` to every replica healthy (polling ``/_peach/health``), and the memory per
  replica as PSS (shared pages counted once). Each count is run with replicas forked from a
  warm template (the default) and with each replica spawned as its own interpreter
  (``PEACH_NO_TEMPLATE=1``, the fallback, in the same run). Targets: 100 endpoints healthy
  in ≤ 5 s; ≤ 20 MiB PSS per replica.
* ``upload``: ``benchmarks/upload_bytes.py``'s ``measure(n)`` (deploy upload bytes against
  component count), skipped with a note while that file is absent.
* ``gateway``: ``benchmarks/gateway.py --requests 1000 --seconds 2``, its ratios printed.

The env is built once, before measuring, in a temporary cache (``PEACH_ENV_CACHE``) unless
one is set.

Exits 1 when a section misses a target (``gateway.py`` exits 1 on its own targets).

    python benchmarks/scale.py                       # every section
    python benchmarks/scale.py --only startup --counts 1,10,40,100 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "tests"))
URL_LINE = re.compile(r"peach dev serving on (http://\S+)")
START_DEADLINE_S = 180.0
TARGET_100_S = 5.0
TARGET_PSS_MIB = 20.0
MODES = {"template": {}, "spawn (baseline)": {"PEACH_NO_TEMPLATE": "1"}}
"""How replicas start: forked from a warm template, or each spawned (the fallback)."""

CELL = (
    "import os\n\nINITS = []\n\n\n"
    "def load():\n    INITS.append(os.getpid())\n    return {'pid': os.getpid()}\n\n\n"
    "def answer(model):\n    return {**model, 'inits': len(INITS)}\n"
)


def write_scale_project(root: Path, count: int) -> Path:
    """A project of ``count`` endpoints, each one component with an init (the default env)."""
    from projectkit import many_endpoints_conf, write_project

    conf = many_endpoints_conf(count, "{notebook: nb.ipynb, init: load, method: answer}", "scale")
    return write_project(root, conf, {"nb.ipynb": [CELL]})


def pss(pid: int) -> int | None:
    """The PSS of ``pid`` in bytes (its RSS where PSS is not known)."""
    try:
        process = psutil.Process(pid)
        try:
            return int(process.memory_full_info().pss)
        except (AttributeError, psutil.AccessDenied):
            return int(process.memory_info().rss)
    except psutil.Error:
        return None


def start_up(root: Path, env: dict[str, str]) -> tuple[float, list[int], int]:
    """Start `peach dev` of ``root``; seconds to every replica healthy, the replicas' PSS in
    bytes, and the PSS of peach's other processes (templates) besides the gateway."""
    log = tempfile.NamedTemporaryFile(prefix="peach-scale-", suffix=".log", delete=False)
    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "peach_cli.cli", "dev", str(root), "--port", "0", "--no-reload"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, **env, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    log.close()
    output = Path(log.name)
    try:
        url = _poll(lambda: _url(output, process), "a URL", output)
        health = _poll(lambda: _healthy(url), "every replica healthy", output)
        seconds = time.perf_counter() - began
        pids = [r["pid"] for c in health["components"] for r in c["replicas"]]
        sizes = [size for size in map(pss, pids) if size is not None]
        others = [
            p.pid for p in psutil.Process(process.pid).children(recursive=True) if p.pid not in pids
        ]
        extra = sum(size for size in map(pss, others) if size is not None)
        return seconds, sizes, extra
    finally:
        _stop(process)
        output.unlink(missing_ok=True)


def _poll(check: Callable[[], object], what: str, output: Path) -> object:
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} in {START_DEADLINE_S:g} s:\n{output.read_text()}")
        time.sleep(0.02)


def _url(output: Path, process: subprocess.Popen[bytes]) -> str | None:
    if process.poll() is not None:
        raise SystemExit(f"peach dev exited:\n{output.read_text()}")
    match = URL_LINE.search(output.read_text(errors="replace"))
    return match.group(1) if match else None


def _healthy(url: str) -> dict | None:
    try:
        health = httpx.get(f"{url}/_peach/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None
    replicas = [r for c in health["components"] for r in c["replicas"]]
    return health if replicas and all(r["state"] == "healthy" for r in replicas) else None


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


def startup_section(options: argparse.Namespace) -> bool:
    """The start-up curve, both modes interleaved; whether both targets hold."""
    counts, rounds = sorted({int(n) for n in options.counts.split(",")}), options.rounds
    print("## start-up: `peach dev` to every replica healthy (one replica per endpoint)\n")
    with tempfile.TemporaryDirectory(prefix="peach-scale-") as folder:
        projects = {n: write_scale_project(Path(folder) / f"p{n}", n) for n in counts}
        start_up(projects[counts[0]], {})  # builds the env (not measured)
        results: dict[tuple[str, int], list[tuple[float, list[int], int]]] = {}
        for _ in range(rounds):
            for n in counts:
                for mode, env in MODES.items():
                    results.setdefault((mode, n), []).append(start_up(projects[n], env))
    print(f"{'endpoints':>9}  {'mode':<17} {'healthy s':>9} {'PSS/replica':>12} {'others':>8}")
    figures: dict[tuple[str, int], tuple[float, float]] = {}
    for n in counts:
        for mode in MODES:
            runs = results[(mode, n)]
            seconds = statistics.median(r[0] for r in runs)
            sizes = [size for r in runs for size in r[1]]
            per_replica = statistics.mean(sizes) / 2**20 if sizes else float("nan")
            others = statistics.median(r[2] for r in runs) / 2**20
            figures[(mode, n)] = (seconds, per_replica)
            print(f"{n:>9}  {mode:<17} {seconds:>9.2f} {per_replica:>8.1f} MiB {others:>4.0f} MiB")
        base, ours = figures[("spawn (baseline)", n)][0], figures[("template", n)][0]
        print(f"{'':>9}  template / spawn: {ours / base:.2f}x the time")
    ok = True
    if 100 in counts:
        seconds = figures[("template", 100)][0]
        passed = seconds <= TARGET_100_S
        ok &= passed
        print(
            f"\n{'PASS' if passed else 'FAIL'}  100 endpoints healthy in {seconds:.2f} s "
            f"(target ≤ {TARGET_100_S:g} s)"
        )
    largest = max(counts)
    per_replica = figures[("template", largest)][1]
    passed = per_replica <= TARGET_PSS_MIB
    ok &= passed
    print(
        f"{'PASS' if passed else 'FAIL'}  {per_replica:.1f} MiB PSS per replica at {largest} "
        f"endpoints (target ≤ {TARGET_PSS_MIB:g} MiB)\n"
    )
    return ok


def upload_section(_options: argparse.Namespace) -> bool:
    """``benchmarks/upload_bytes.py``: deploy bytes for 1, 10 and 30 components."""
    print("## upload: `benchmarks/upload_bytes.py` (deploy bytes against component count)\n")
    return _run_script("upload_bytes.py")


def gateway_section(_options: argparse.Namespace) -> bool:
    """``benchmarks/gateway.py --requests 1000 --seconds 2``: its ratios."""
    print("## gateway: `benchmarks/gateway.py --requests 1000 --seconds 2`\n")
    return _run_script("gateway.py", "--requests", "1000", "--seconds", "2")


def _run_script(name: str, *args: str) -> bool:
    """Run another benchmark of this folder, print what it printed; True if it passed."""
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    print(run.stdout)
    if run.returncode:
        print(run.stderr)
    return run.returncode == 0


SECTIONS = {"startup": startup_section, "upload": upload_section, "gateway": gateway_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=sorted(SECTIONS), help="run one section")
    parser.add_argument("--counts", default="1,10,40,100", help="endpoint counts (start-up)")
    parser.add_argument("--rounds", type=int, default=1, help="start-ups per count and mode")
    options = parser.parse_args()
    cache = None
    if "PEACH_ENV_CACHE" not in os.environ:
        cache = tempfile.TemporaryDirectory(prefix="peach-scale-envs-")
        os.environ["PEACH_ENV_CACHE"] = cache.name
    ok = True
    try:
        for name, section in SECTIONS.items():
            if options.only in (None, name):
                ok &= section(options)
    finally:
        if cache is not None:
            cache.cleanup()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
