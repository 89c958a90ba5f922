"""How fast peach builds and uses a py_environment, against the standard tools, same run.

- **cold build** of a small env (three pure-Python requirements), with an empty env cache
  and an empty uv cache (everything downloaded): ``ensure_env`` against
  ``python -m venv`` + ``pip install --no-cache-dir`` of the same requirements, ``--runs``
  times each, alternating. Targets: ≤ 5 s, and ≥ 5× faster than venv + pip.
- **rebuild from uv's cache** (the env removed, the downloads kept): what a second project
  with the same packages, or ``peach env prune`` then a run, costs.
- **cached env, replica start**: finding the built env (``ensure_env``, no network) plus
  starting its interpreter (``ENV/bin/python -c pass``) against starting the interpreter
  that runs peach, ``--starts`` times each, alternating. Target: ≤ 0.1 s added.

Usage::

    python benchmarks/envs.py                 # 3 cold runs, 30 starts
    python benchmarks/envs.py --runs 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REQUIREMENTS = ("tomli-w", "pyjokes", "websocket-client")


def _pip_environment() -> dict[str, str]:
    """pip with its defaults (PyPI, no config file), as a user would run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def venv_and_pip(folder: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir", "-q",
         *REQUIREMENTS],
        check=True,
        env=_pip_environment(),
    )  # fmt: skip
    return time.perf_counter() - started


def peach_build(cache: Path) -> float:
    """A cold ensure_env in a fresh process (nothing imported or cached beforehand)."""
    code = (
        "import sys, time\n"
        "from peach_cli.envs import EnvSpec, ensure_env\n"
        "started = time.perf_counter()\n"
        f"ensure_env(EnvSpec('base', {REQUIREMENTS!r}))\n"
        "print(time.perf_counter() - started)\n"
    )
    env = dict(os.environ, PEACH_ENV_CACHE=str(cache), PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    )
    return float(out.stdout.strip())


def start_seconds(python: str) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="peach-envs-bench-"))
    try:
        peach_cold, pip_cold = [], []
        for run in range(options.runs):
            peach_cold.append(peach_build(scratch / f"cache-{run}"))
            pip_cold.append(venv_and_pip(scratch / f"venv-{run}"))
        # rebuild from uv's cache: remove the env, keep the downloads
        os.environ["PEACH_ENV_CACHE"] = str(scratch / "cache-0")
        from peach_cli.envs import EnvSpec, ensure_env
        from peach_cli.envs.store import built_envs, remove_env

        for stored in list(built_envs()):
            remove_env(stored)
        rebuild = peach_build(scratch / "cache-0")
        spec = EnvSpec("base", REQUIREMENTS)
        env_python = str(ensure_env(spec).python)
        shared, isolated = [], []
        for _ in range(options.starts):
            shared.append(start_seconds(sys.executable))
            started = time.perf_counter()
            python = str(ensure_env(spec).python)  # what a host does before each replica
            find = time.perf_counter() - started
            isolated.append(find + start_seconds(python))
        assert python == env_python
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    cold, baseline = statistics.median(peach_cold), statistics.median(pip_cold)
    start_shared, start_env = statistics.median(shared), statistics.median(isolated)
    result = {
        "requirements": list(REQUIREMENTS),
        "cold_build_s": round(cold, 2),
        "venv_pip_s": round(baseline, 2),
        "speedup": round(baseline / cold, 1),
        "rebuild_from_uv_cache_s": round(rebuild, 3),
        "start_shared_s": round(start_shared, 4),
        "start_env_s": round(start_env, 4),
        "start_overhead_s": round(start_env - start_shared, 4),
        "targets_met": cold <= 5 and baseline / cold >= 5 and start_env - start_shared <= 0.1,
    }
    if options.json:
        print(json.dumps(result, indent=2))
        return 0 if result["targets_met"] else 1
    print(f"cold build of {', '.join(REQUIREMENTS)} (median of {options.runs}):")
    print(f"  peach (uv)        {cold:6.2f} s   ({', '.join(f'{t:.2f}' for t in peach_cold)})")
    print(f"  venv + pip        {baseline:6.2f} s   ({', '.join(f'{t:.2f}' for t in pip_cold)})")
    print(f"  speed-up          {baseline / cold:6.1f} x   (target: <= 5 s and >= 5 x)")
    print(f"rebuild from uv's cache  {rebuild:.3f} s")
    print(f"replica start, median of {options.starts}:")
    print(f"  shared interpreter      {start_shared * 1000:6.1f} ms")
    print(f"  cached env (find+start) {start_env * 1000:6.1f} ms")
    print(
        f"  added                   {(start_env - start_shared) * 1000:6.1f} ms (target <= 100 ms)"
    )
    print("targets met" if result["targets_met"] else "TARGETS MISSED")
    return 0 if result["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
