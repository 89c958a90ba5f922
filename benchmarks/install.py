"""How long the README's first command takes to install peach, and how much it installs,
against the install with the ``[ray]`` extra — side by side, in one run.

For each of ``pip install -e .`` and ``pip install -e .[ray]``: a fresh virtual environment
(``python -m venv``) and an empty pip cache (a new temporary ``PIP_CACHE_DIR``), so every
package is downloaded and built as on a new machine; the wall time of the install and the
bytes it added to the environment (the environment's size after, minus the empty one's).
It prints both, the ratio light / ``[ray]`` for time and size, and whether each is within
the target (≤ 25 %: Ray is an extra because only the cluster side imports it). With
``--rounds N`` each install is measured N times, the order alternating between rounds (a
busy machine or a cold disk then weighs on both alike), and the medians are compared.

Needs the package index (PyPI, or what pip is configured to use). Everything it creates is
in a temporary folder, removed at the end.

Usage::

    python benchmarks/install.py
    python benchmarks/install.py --json
    python benchmarks/install.py --rounds 3       # medians of 3, the order alternating
    python benchmarks/install.py --only light     # just the README's install
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.25
VARIANTS = {"light": str(ROOT), "ray": f"{ROOT}[ray]"}


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            file = Path(folder, name)
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def measure(name: str, requirement: str, work: Path) -> dict:
    """One fresh venv, one empty pip cache, one ``pip install -e REQUIREMENT``."""
    venv = work / f"venv-{name}"
    cache = work / f"pip-cache-{name}"
    cache.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    empty = folder_bytes(venv)
    env = {
        **os.environ,
        "PIP_CACHE_DIR": str(cache),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONPATH": "",
    }
    env.pop("PIP_NO_CACHE_DIR", None)
    started = time.perf_counter()
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-e", requirement],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"pip install -e {requirement} failed:\n{result.stderr[-3000:]}")
    check = subprocess.run(
        [
            str(python),
            "-c",
            "import peach_cli.cli, importlib.util as u; print(bool(u.find_spec('ray')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return {
        "variant": name,
        "command": f"pip install -e {'.' if name == 'light' else '.[ray]'}",
        "seconds": round(elapsed, 2),
        "bytes": folder_bytes(venv) - empty,
        "ray_installed": check.stdout.strip() == "True",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--only", choices=sorted(VARIANTS), help="measure one install only")
    parser.add_argument("--rounds", type=int, default=1, help="measurements of each install")
    args = parser.parse_args()
    names = [args.only] if args.only else ["light", "ray"]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="peach-install-bench-") as folder:
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                work = Path(folder, f"round-{round_}")
                work.mkdir(exist_ok=True)
                runs[name].append(measure(name, VARIANTS[name], work))
    results = {
        name: {
            **rows[0],
            "seconds": round(statistics.median(row["seconds"] for row in rows), 2),
            "bytes": int(statistics.median(row["bytes"] for row in rows)),
            "runs": [row["seconds"] for row in rows],
        }
        for name, rows in runs.items()
    }
    report: dict = {"results": list(results.values()), "target_ratio": TARGET_RATIO}
    if len(results) == 2:
        light, ray = results["light"], results["ray"]
        report["time_ratio"] = round(light["seconds"] / ray["seconds"], 3)
        report["size_ratio"] = round(light["bytes"] / ray["bytes"], 3)
    if args.json:
        print(json.dumps(report, indent=2))
        over = [k for k in ("time_ratio", "size_ratio") if report.get(k, 0) > TARGET_RATIO]
        raise SystemExit(1 if over else 0)
    for row in report["results"]:
        print(
            f"{row['command']:<22} {row['seconds']:8.1f} s  {row['bytes'] / 2**20:8.1f} MiB"
            f"  ray importable: {'yes' if row['ray_installed'] else 'no'}"
            f"  (runs: {', '.join(f'{s:.1f}' for s in row['runs'])} s)"
        )
    missed = []
    if "time_ratio" in report:
        for what in ("time", "size"):
            ratio = report[f"{what}_ratio"]
            verdict = "ok" if ratio <= TARGET_RATIO else "over the target"
            print(f"{what}: light / [ray] = {ratio:.0%} (target ≤ {TARGET_RATIO:.0%}): {verdict}")
            if ratio > TARGET_RATIO:
                missed.append(f"{what} {ratio:.0%} > {TARGET_RATIO:.0%}")
        print(f"TARGETS MISSED: {'; '.join(missed)}" if missed else "targets met")
    if missed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
