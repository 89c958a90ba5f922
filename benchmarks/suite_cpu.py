"""What each test of the suite costs the machine: CPU-seconds (every process's, from
``/proc/stat``) and wall seconds per test, as a pytest plugin; then a table by file.

Run the suite one test at a time on an otherwise quiet machine (the counters are the whole
machine's, so tests running side by side would be charged for each other)::

    python -m pytest -n 0 -p benchmarks.suite_cpu -p no:randomly     # writes the JSONL
    python benchmarks/suite_cpu.py benchmarks/out/suite_cpu.jsonl [TOP]        # the table

``SUITE_CPU_OUT`` names the JSONL (default ``benchmarks/out/suite_cpu.jsonl``, appended to).
A session fixture's set-up is charged to the first test that uses it, and what a cluster or
server burns while idle to the tests that run meanwhile. Linux only.

By kind of process instead (peach subprocesses, ``peach dev`` servers and their replicas,
Ray, the pytest processes): only the processes under the run are counted, so a shared
machine's other work is not; ``--before REV`` first runs the same tests on ``REV``'s tree
(extracted with ``git archive``) and prints the ratios::

    python benchmarks/suite_cpu.py kinds [--before 554a833] -- tests/test_replay.py -n 2

The run's processes are sampled every ``--every`` seconds from ``/proc`` (this script is
their child subreaper, so Ray's daemonised processes stay in the tree); the CPU of a
process that ended between two samples is read from its parent's reaped-children counters
and given to the kinds of the children that parent was seen to lose. The total is exact
(``RUSAGE_CHILDREN``); "unattributed" is what the samples could not place.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("SUITE_CPU_OUT", Path(__file__).parent / "out" / "suite_cpu.jsonl"))


def machine_cpu_s() -> float:
    """user + nice + system + irq + softirq + steal of every CPU, in seconds."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


_out: Any = None

try:
    import pytest
except ImportError:  # the table alone needs no pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
        global _out
        if _out is None:
            OUT.parent.mkdir(parents=True, exist_ok=True)
            _out = OUT.open("a", buffering=1)
        cpu, wall = machine_cpu_s(), time.monotonic()
        yield
        cpu, wall = machine_cpu_s() - cpu, time.monotonic() - wall
        _out.write(json.dumps({"id": item.nodeid, "cpu": round(cpu, 2), "wall": round(wall, 2)}))
        _out.write("\n")


def table(path: Path, top: int) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        entry = files[row["id"].partition("::")[0]]
        entry[0] += row["cpu"]
        entry[1] += row["wall"]
        entry[2] += 1
    cpu = sum(r["cpu"] for r in rows)
    wall = sum(r["wall"] for r in rows)
    lines = [f"{len(rows)} tests: {cpu:.0f} CPU-s, {wall:.0f} s", "   CPU-s   wall-s  tests  file"]
    for name, (c, w, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{c:8.1f} {w:8.1f} {n:6d}  {name}")
    return "\n".join(lines)


# -- by kind of process ----------------------------------------------------------------------

KINDS = ("pytest", "peach", "peach dev", "ray", "other")
_TICK = os.sysconf("SC_CLK_TCK")


def kind_of(argv: list[str], parent: str | None) -> str | None:
    """The kind a command line makes a process, or None when it is its parent's."""
    joined = " ".join(argv)
    if not argv:
        return None
    if argv[0].startswith("ray::") or any(
        word in joined for word in ("/ray/", "raylet", "gcs_server", " ray start", "/bin/ray ")
    ):
        return "ray"
    for at, word in enumerate(argv):
        if word == "peach_cli.cli" or word.endswith("/bin/peach") or word == "peach":
            rest = [w for w in argv[at + 1 :] if not w.startswith("-")]
            return "peach dev" if rest[:1] == ["dev"] else "peach"
    if any(w == "pytest" or w.endswith("/pytest") for w in argv) or (
        parent == "pytest" and "exec(eval(sys.stdin" in joined  # an xdist worker
    ):
        return "pytest"
    return None


class Proc:
    __slots__ = ("pid", "ppid", "kind", "own", "reaped", "argv", "classified", "lost")

    def __init__(self, pid: int) -> None:
        self.pid, self.ppid, self.kind = pid, 0, "other"
        self.own = self.reaped = 0.0
        self.argv: list[str] = []
        self.classified = False  # by its own command line (a run of its kind)
        self.lost: list[Proc] = []  # children seen to end


def _stat(pid: int) -> tuple[int, float, float] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
    own = (int(fields[11]) + int(fields[12])) / _TICK
    return int(fields[1]), own, (int(fields[13]) + int(fields[14])) / _TICK


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return []


def measure(command: list[str], cwd: Path, env: dict[str, str], every: float) -> dict[str, Any]:
    """Run ``command`` and what it starts; CPU-seconds and process counts by kind."""
    import ctypes
    import resource
    import subprocess

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    me = os.getpid()
    root = Proc(me)
    root.kind = "pytest"
    tree: dict[int, Proc] = {me: root}
    gone: list[Proc] = []
    outside: set[int] = set()
    start, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    child = subprocess.Popen(command, cwd=cwd, env=env)
    status: int | None = None
    quiet_since: float | None = None
    while True:
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        outside &= pids
        for pid in sorted(pids - tree.keys() - outside):
            stat = _stat(pid)
            if stat is None or stat[0] not in tree:
                outside.add(pid)
                continue
            tree[pid] = Proc(pid)
        for pid, proc in list(tree.items()):
            stat = _stat(pid) if pid in pids else None
            if stat is None:
                del tree[pid]
                gone.append(proc)
                if proc.ppid in tree:
                    tree[proc.ppid].lost.append(proc)
                continue
            proc.ppid, proc.own, proc.reaped = stat
            if pid != me and (not proc.classified or proc.own < 1.0):  # until exec'd
                argv = _argv(pid)
                if argv and argv != proc.argv:
                    proc.argv = argv
                    parent = tree.get(proc.ppid)
                    own_kind = kind_of(argv, parent.kind if parent else None)
                    proc.classified = own_kind is not None
                    proc.kind = own_kind or (parent.kind if parent else "other")
        while True:  # reap the run and whatever was left to this subreaper
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == child.pid:
                status = os.waitstatus_to_exitcode(code)
                child.returncode = status
        if status is not None:
            if len(tree) == 1:
                break
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 30:  # left running: counted as sampled
                break
        time.sleep(every)
    wall = time.monotonic() - wall
    end = resource.getrusage(resource.RUSAGE_CHILDREN)
    root.reaped = (end.ru_utime + end.ru_stime) - (start.ru_utime + start.ru_stime)
    cpu = dict.fromkeys(KINDS, 0.0)
    runs = dict.fromkeys(KINDS, 0)
    processes = dict.fromkeys(KINDS, 0)
    everyone = [*gone, *tree.values()]
    for proc in everyone:
        if proc is root:
            continue
        cpu[proc.kind] += proc.own
        processes[proc.kind] += 1
        runs[proc.kind] += proc.classified
    unattributed = 0.0
    for proc in everyone:
        # what this process reaped beyond what its children were last seen to have used
        seen = sum(c.own + c.reaped for c in proc.lost)
        excess = proc.reaped - seen
        if excess <= 0:
            continue
        if proc.lost:
            for lost in proc.lost:
                cpu[lost.kind] += excess / len(proc.lost)
        else:
            unattributed += excess
    sampled = sum(cpu.values())
    return {
        "exit": status,
        "wall": wall,
        "total": root.reaped,
        "cpu": cpu,
        "runs": runs,
        "processes": processes,
        "unattributed": max(0.0, root.reaped - sampled),
        "sampler": sum(os.times()[:2]),
    }


def show(label: str, result: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    lines = [
        f"{label}: exit {result['exit']}, {result['wall']:.0f} s wall, "
        f"{result['total']:.0f} CPU-s under the run (sampler {result['sampler']:.1f} CPU-s)"
        + (
            f"  [x{result['total'] / base['total']:.2f} CPU, "
            f"x{result['wall'] / base['wall']:.2f} wall]"
            if base and base["total"]
            else ""
        ),
        "    CPU-s  processes  runs  kind",
    ]
    for kind in (*KINDS, "unattributed"):
        c = result["cpu"].get(kind, result["unattributed"] if kind == "unattributed" else 0.0)
        n, r = result["processes"].get(kind, 0), result["runs"].get(kind, 0)
        ratio = ""
        if base is not None:
            b = base["cpu"].get(kind, base["unattributed"] if kind == "unattributed" else 0.0)
            ratio = f"  (before {b:7.1f}{f', x{c / b:.2f}' if b >= 0.5 else ''})"
        lines.append(f"  {c:7.1f}  {n:9d}  {r:4d}  {kind}{ratio}")
    return "\n".join(lines)


def kinds_main(argv: list[str]) -> int:
    import argparse
    import subprocess
    import tempfile

    parser = argparse.ArgumentParser(prog="suite_cpu.py kinds")
    parser.add_argument("--before", help="a commit to run the same tests on first")
    parser.add_argument("--every", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("pytest_args", nargs="+", help="after --: pytest's arguments")
    options = parser.parse_args(argv)
    here = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "pytest", *options.pytest_args]

    def run(tree: Path) -> dict[str, Any]:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        return measure(command, tree, env, options.every)

    before = None
    if options.before:
        with tempfile.TemporaryDirectory(prefix="suite-cpu-") as folder:
            archive = subprocess.run(
                ["git", "archive", options.before], cwd=here, capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
            before = run(Path(folder))
        print(show(f"before ({options.before})", before), flush=True)
    after = run(here)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True
    ).stdout.strip()
    print(show(f"after ({head}, worktree)", after, before))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["kinds"]:
        sys.exit(kinds_main(sys.argv[2:]))
    print(
        table(
            Path(sys.argv[1]) if len(sys.argv) > 1 else OUT,
            int(sys.argv[2]) if len(sys.argv) > 2 else 30,
        )
    )
